"""``kairos alerts add|list|remove`` on a real database, with -o json and the audit trail."""

from __future__ import annotations

import json
from collections.abc import Callable

from sqlalchemy.engine import Engine
from standardwebhooks import Webhook

from tests.integration.helpers import make_app

Cli = Callable[..., tuple[int, str, str]]


def audit_rows(engine: Engine) -> list[tuple[str, str, str]]:
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT actor, action, object_id FROM audit_events "
            "WHERE object_type = 'alert_rule' ORDER BY id"
        ).all()
    return [(str(a), str(b), str(c)) for a, b, c in rows]


def test_rules_are_added_listed_and_removed_with_json_and_an_audit_row_each(
    engine: Engine, cli: Cli
) -> None:
    billing = make_app(engine, "billing").app_id
    status, out, err = cli(
        "alerts", "add", "--webhook", "https://hooks.example/a", "--on", "failed,lost",
        "--app", billing, "--streak", "3", "--every", "60", "-o", "json",
    )  # fmt: skip
    assert status == 0, err
    added = json.loads(out)
    assert added["app"] == billing
    assert (added["on"], added["streak"], added["everySeconds"]) == ("FAILED,LOST", 3, 60)
    Webhook(added["signingSecret"])  # a Standard Webhooks secret
    assert "shown only now" in err
    status, out, _ = cli("alerts", "add", "--webhook", "https://hooks.example/b", "--on",
                         "WORKER_GONE,DEAD_CALLBACK")  # fmt: skip
    assert status == 0
    assert "signing secret: whsec_" in out
    status, out, _ = cli("alerts", "list", "-o", "json")
    listed = json.loads(out)
    assert listed[0]["ruleId"] == added["ruleId"]
    assert listed[1]["app"] is None and listed[1]["on"] == "DEAD_CALLBACK,WORKER_GONE"
    assert all("signingSecret" not in r for r in listed)
    status, out, _ = cli("alerts", "list")
    assert added["ruleId"] in out and "(every app)" in out
    status, out, _ = cli("alerts", "remove", added["ruleId"], "-o", "json")
    assert status == 0 and json.loads(out)["removed"] is True
    assert [r["ruleId"] for r in json.loads(cli("alerts", "list", "-o", "json")[1])] == [
        listed[1]["ruleId"]
    ]
    actions = [
        (actor.startswith("cli:"), action, rule) for actor, action, rule in audit_rows(engine)
    ]
    assert actions == [
        (True, "alert.add", added["ruleId"]),
        (True, "alert.add", listed[1]["ruleId"]),
        (True, "alert.remove", added["ruleId"]),
    ]


def test_a_rule_that_cannot_work_is_refused_and_nothing_is_written(
    engine: Engine, cli: Cli
) -> None:
    cases = [
        (("--on", "FAILED,NOPE"), "unknown alert kind NOPE"),
        (("--on", "FAILED", "--app", "app_missing"), "no app app_missing"),
        (("--on", "WORKER_GONE", "--app", "app_missing"), "without --app"),
        # The notifier would refuse to reach it: refused now, not at the first alert.
        (("--on", "FAILED", "--webhook", "http://10.1.2.3/hook"), "10.1.2.3"),
        (("--on", "FAILED", "--webhook", "https://user:pw@h.example/"), "user:password"),
    ]
    for extra, said in cases:
        status, _, err = cli("alerts", "add", "--webhook", "https://h.example", *extra)
        assert status == 2, err
        assert status == 2
        assert said in err
    status, _, err = cli("alerts", "remove", "alr_nope")
    assert status == 2 and "no alert rule alr_nope" in err
    assert json.loads(cli("alerts", "list", "-o", "json")[1]) == []
    assert audit_rows(engine) == []
    assert "no alert rule yet" in cli("alerts", "list")[1]
