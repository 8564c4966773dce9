"""kairos stats --app: every app's weight, cap, runs waiting for a slot and going; one
app's with the start lag of its runs; JSON for both; an unknown app refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.config import StoreSettings
from common.db.executions import NewExecution, insert_executions, mark_queued, primary_keys
from common.db.jobs import NewJob, insert_job
from common.db.schema import apps, executions
from services.cli import main
from tests.integration.helpers import make_app


@pytest.fixture
def cli(
    monkeypatch: pytest.MonkeyPatch, namespace: StoreSettings, capsys: pytest.CaptureFixture[str]
) -> Any:
    monkeypatch.setenv("KAIROS_NAMESPACE", namespace.namespace)

    def run(*args: str) -> tuple[int, str, str]:
        status = main(list(args))
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run


def test_stats_app_shows_each_apps_share_and_one_apps_start_lag(cli: Any, engine: Engine) -> None:
    flood, quiet = make_app(engine, "flood"), make_app(engine, "quiet")
    now = 10**13  # far ahead of the cluster clock: inside the lag window, due
    with engine.begin() as conn:
        conn.execute(
            apps.update().where(apps.c.app_id == flood.app_id).values(weight=3, max_running=50)
        )
        job = insert_job(conn, NewJob(1, "j", "demo.noop", {}, None, 0, None, None, None), 0)
        insert_executions(conn, [NewExecution(f"e{n}", job, 1, n, n) for n in range(5)], 0)
        mark_queued(conn, dict.fromkeys(primary_keys(conn, ["e0", "e1"]), "w1"), 10)
        conn.execute(
            executions.update()
            .where(executions.c.execution_id == "e0")
            .values(started_at=sa.literal(now - 9_000), trigger_time=now - 10_000)
        )
    status, out, err = cli("stats", "--app", "-o", "json")
    assert (status, err) == (0, "")
    shown = {a["name"]: a for a in json.loads(out)["apps"]}
    assert (shown["flood"]["weight"], shown["flood"]["maxRunning"]) == (3, 50)
    assert (shown["flood"]["waiting"], shown["flood"]["going"]) == (3, 2)
    assert (shown["quiet"]["waiting"], shown["quiet"]["going"]) == (0, 0)
    assert quiet.app_id in out

    status, out, _ = cli("stats", "--app")
    assert status == 0 and "WAITING" in out and "flood" in out

    status, out, _ = cli("stats", "--app", flood.app_id, "-o", "json")
    [one] = json.loads(out)["apps"]
    # e0 started 1 s after its trigger; the others never started.
    assert (one["started"], one["startLagSeconds"]["p50"], one["maxStartLagSeconds"]) == (1, 1, 1)

    status, out, _ = cli("stats", "--app", flood.app_id)
    assert status == 0 and "waiting for a slot" in out

    status, _, err = cli("stats", "--app", "app_nope")
    assert status == 1 and "no app 'app_nope'" in err
