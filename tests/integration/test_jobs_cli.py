"""kairos jobs: list by app, status and handler; show; executions; pause, resume,
trigger, cancel by the rules the app's own calls follow; JSON on every read."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.db.apps import AppCredentials
from services.cli import main
from tests.integration.helpers import make_app


def submit(client: TestClient, **body: Any) -> int:
    answer = client.post("/openapi/jobs", json={"jobHandler": "demo.noop", **body})
    assert answer.status_code == 202, answer.text
    return int(answer.json()["jobId"])


def listed(cli: Any, *filters: str) -> list[dict[str, Any]]:
    status, out, _ = cli("jobs", "list", "-o", "json", *filters)
    assert status == 0
    jobs: list[dict[str, Any]] = json.loads(out)["jobs"]
    return jobs


def test_jobs_list_filters_by_app_status_handler_and_name(
    cli: Any, client: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    nightly = submit(client, jobName="nightly", cronExpr="30 2 * * *")
    once = submit(client, jobName="once", jobHandler="demo.echo", triggerAt="2099-01-01T00:00:00Z")
    other = make_app(engine, "billing")
    # The same client (one event loop for the app's async stores), the other app's key.
    own_key = client.headers["Authorization"]
    client.headers["Authorization"] = f"Bearer {other.api_key}"
    theirs = submit(client, jobName="invoice", cronExpr="0 * * * *")
    client.headers["Authorization"] = own_key
    assert client.post(f"/openapi/jobs/{once}/pause").status_code == 200

    assert [j["jobId"] for j in listed(cli)] == [theirs, once, nightly]
    assert [j["jobId"] for j in listed(cli, "--app", "billing")] == [theirs]
    assert [j["jobId"] for j in listed(cli, "--app", app_credentials.app_id)] == [once, nightly]
    assert [j["jobId"] for j in listed(cli, "--status", "PAUSED")] == [once]
    assert [j["jobId"] for j in listed(cli, "--handler", "demo.echo")] == [once]
    assert [j["jobId"] for j in listed(cli, "--name", "nig")] == [nightly]
    first = listed(cli, "--app", "billing")[0]
    assert (first["appId"], first["appName"], first["cronExpr"]) == (
        other.app_id,
        "billing",
        "0 * * * *",
    )

    status, out, _ = cli("jobs", "list")
    assert status == 0
    header, *rows = [line for line in out.splitlines() if line.strip() and "─" not in line]
    assert header.split()[:5] == ["JOB", "APP", "NAME", "HANDLER", "STATUS"]
    assert [row.split()[0] for row in rows] == [str(theirs), str(once), str(nightly)]

    status, _, err = cli("jobs", "list", "--app", "nobody")
    assert status == 2 and "no app 'nobody'" in err


def test_jobs_list_pages_with_before(cli: Any, client: TestClient) -> None:
    ids = [submit(client, jobName=f"j{n}", cronExpr="0 0 * * *") for n in range(3)]
    _, out, _ = cli("jobs", "list", "--limit", "2", "-o", "json")
    page = json.loads(out)
    assert [j["jobId"] for j in page["jobs"]] == [ids[2], ids[1]]
    assert page["nextBefore"] == ids[1]
    assert [j["jobId"] for j in listed(cli, "--before", str(ids[1]))] == [ids[0]]
    _, out, _ = cli("jobs", "list", "--limit", "2")
    assert f"more: --before {ids[1]}" in out


def test_jobs_show_says_when_it_runs_next_in_words(cli: Any, client: TestClient) -> None:
    job = submit(client, jobName="weekday", cronExpr="0 9 * * MON-FRI", timezone="Europe/Paris")
    status, out, _ = cli("jobs", "show", str(job), "-o", "json")
    assert status == 0
    shown = json.loads(out)
    assert shown["jobId"] == job and shown["status"] == "WAITING"
    assert shown["schedule"] == "at 09:00, Monday through Friday (Europe/Paris time)"
    assert len(shown["nextTriggerTimes"]) == 5
    assert shown["actions"] == ["pause", "trigger", "cancel"]
    assert shown["executions"] == [] and shown["callbacks"] == []

    status, out, _ = cli("jobs", "show", str(job))
    assert status == 0
    assert "at 09:00, Monday through Friday (Europe/Paris time)" in out
    assert "executions (newest first" in out and "the job has no callback URL" in out

    status, _, err = cli("jobs", "show", "999999")
    assert status == 2 and err.strip() == "kairos: job 999999 does not exist"


def test_pause_resume_trigger_cancel_follow_the_apps_rules(cli: Any, client: TestClient) -> None:
    job = submit(client, jobName="hourly", cronExpr="0 * * * *")
    assert cli("jobs", "pause", str(job))[:2] == (0, f"Job {job} paused.\n")
    assert listed(cli, "--status", "PAUSED")[0]["jobId"] == job
    assert cli("jobs", "resume", str(job))[:2] == (0, f"Job {job} resumed.\n")
    status, out, _ = cli("jobs", "trigger", str(job))
    assert status == 0 and out.startswith(f"Job {job} triggered: execution ")
    manual = out.strip().rsplit(" ", 1)[1].rstrip(".")

    status, out, _ = cli("jobs", "executions", str(job), "-o", "json")
    runs = json.loads(out)["executions"]
    assert [r["executionId"] for r in runs] == [manual]
    assert runs[0]["status"] == "SCHEDULED"
    status, out, _ = cli("jobs", "executions", str(job), "--status", "SUCCEEDED", "-o", "json")
    assert json.loads(out)["executions"] == []
    status, out, _ = cli("jobs", "executions", str(job))
    assert manual in out and "SCHEDULED" in out

    assert cli("jobs", "cancel", str(job))[:2] == (0, f"Job {job} cancelled.\n")
    status, _, err = cli("jobs", "resume", str(job))
    assert status == 2
    assert err.strip() == f"kairos: job {job} is CANCELLED; only a PAUSED job can be resumed"
    assert client.get(f"/openapi/jobs/{job}").json()["status"] == "CANCELLED"


@pytest.mark.parametrize("bad", ["0", "-1", "x", "1.5"])
def test_a_job_id_that_is_not_one_is_refused_before_any_store_is_touched(
    cli: Any, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["jobs", "show", bad])
    assert exited.value.code == 2
    assert "is not a job id" in capsys.readouterr().err


def test_jobs_show_lists_each_callbacks_attempts(
    cli: Any, client: TestClient, engine: Engine
) -> None:
    from tests.integration.test_callback_reads import add_delivery, attempt

    job = submit(client, jobName="hooked", triggerAt="2100-01-01T00:00:00Z")
    delivery_id = add_delivery(engine, job)
    attempt(engine, delivery_id, 1, status_code=503, error="HTTP 503")
    attempt(engine, delivery_id, 2, status_code=None, error="no complete answer within 15 s")
    status, out, _ = cli("jobs", "show", str(job), "-o", "json")
    assert status == 0
    (shown,) = json.loads(out)["callbacks"]
    assert shown["deliveryId"] == delivery_id and shown["state"] == "RETRYING"
    assert [(a["attempt"], a["statusCode"], a["error"]) for a in shown["attempts"]] == [
        (1, 503, "HTTP 503"),
        (2, None, "no complete answer within 15 s"),
    ]
    assert shown["url"] == "https://x/h"


def test_jobs_show_says_when_a_retrying_callback_is_tried_next(
    cli: Any, client: TestClient, engine: Engine
) -> None:
    from tests.integration.test_callback_reads import BASE_MS, add_delivery, attempt

    job = submit(client, jobName="hooked", triggerAt="2100-01-01T00:00:00Z")
    delivery_id = add_delivery(engine, job)
    attempt(engine, delivery_id, 1, status_code=503, error="HTTP 503", next_attempt_at=BASE_MS)
    status, out, _ = cli("jobs", "show", str(job))
    assert status == 0
    header = next(
        line for line in out.splitlines() if line.startswith("EXECUTION") and "NEXT" in line
    )
    row = out.splitlines()[out.splitlines().index(header) + 1]
    assert "RETRYING" in row and "2027-01-15T08:00:00Z (" in row, out


def test_jobs_list_and_show_show_the_priority(cli: Any, client: TestClient) -> None:
    urgent = submit(client, jobName="urgent", cronExpr="0 0 * * *", priority=8)
    plain = submit(client, jobName="plain", cronExpr="0 0 * * *")
    assert {j["jobId"]: j["priority"] for j in listed(cli)} == {urgent: 8, plain: 5}

    status, out, _ = cli("jobs", "list")
    assert status == 0
    header, *rows = [line for line in out.splitlines() if line.strip() and "─" not in line]
    at = header.split().index("PRI")
    assert {row.split()[0]: row.split()[at] for row in rows} == {str(urgent): "8", str(plain): "5"}

    status, out, _ = cli("jobs", "show", str(urgent), "-o", "json")
    assert status == 0 and json.loads(out)["priority"] == 8
    status, out, _ = cli("jobs", "show", str(urgent))
    assert status == 0
    assert any(line.split()[:2] == ["priority", "8"] for line in out.splitlines()), out


def test_a_disabled_apps_job_is_not_triggered_or_resumed_by_an_operator(
    cli: Any, client: TestClient, engine: Engine
) -> None:
    """A disabled app runs nothing new, whoever asks: the CLI and the console (which act
    through the same call) refuse to trigger or resume its jobs, and may still pause or
    cancel them."""
    import sqlalchemy as sa

    from common.db.schema import apps, executions

    job = submit(client, jobName="hourly", cronExpr="0 * * * *")
    with engine.begin() as conn:
        conn.execute(apps.update().values(disabled_at=1))
    status, _, err = cli("jobs", "trigger", str(job))
    assert status == 2 and "is disabled" in err and "kairos app enable" in err
    assert cli("jobs", "pause", str(job))[0] == 0
    status, _, err = cli("jobs", "resume", str(job))
    assert status == 2 and "is disabled" in err
    assert cli("jobs", "cancel", str(job))[0] == 0
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(executions)).scalar() == 0


def test_trigger_with_params_gives_that_run_its_own_params(cli: Any, client: TestClient) -> None:
    job = submit(client, jobName="hourly", cronExpr="0 * * * *", params={"job": 1})
    status, out, _ = cli("jobs", "trigger", str(job), "--params", '{"day": "2026-12-01"}')
    assert status == 0 and out.startswith(f"Job {job} triggered with its own params: execution ")
    manual = out.strip().rsplit(" ", 1)[1].rstrip(".")
    status, out, _ = cli("jobs", "executions", str(job), "-o", "json")
    [run] = json.loads(out)["executions"]
    assert (run["executionId"], run["params"]) == (manual, {"day": "2026-12-01"})
    assert client.get(f"/openapi/jobs/{job}").json()["params"] == {"job": 1}


@pytest.mark.parametrize(
    ("params", "says"),
    [("[1]", "must be a JSON object"), ("{x", "is not JSON"), ("1", "must be a JSON object")],
)
def test_trigger_params_that_are_no_json_object_are_refused_before_anything_runs(
    cli: Any, client: TestClient, capsys: pytest.CaptureFixture[str], params: str, says: str
) -> None:
    job = submit(client, jobName="hourly", cronExpr="0 * * * *")
    with pytest.raises(SystemExit) as exited:
        main(["jobs", "trigger", str(job), "--params", params])
    assert exited.value.code == 2
    assert says in capsys.readouterr().err
    assert client.get(f"/openapi/jobs/{job}/executions").json()["executions"] == []


def test_trigger_params_over_the_limit_are_refused_by_the_apps_rules(
    cli: Any, client: TestClient
) -> None:
    job = submit(client, jobName="hourly", cronExpr="0 * * * *")
    status, _, err = cli("jobs", "trigger", str(job), "--params", json.dumps({"x": "y" * 70_000}))
    assert status == 2 and "the limit is 65536 bytes" in err
    assert client.get(f"/openapi/jobs/{job}/executions").json()["executions"] == []


def test_jobs_show_shows_the_jitter_and_when_each_trigger_fires(
    cli: Any, client: TestClient
) -> None:
    job = submit(client, jobName="spread", cronExpr="0 * * * *", jitterSeconds=900)
    status, out, _ = cli("jobs", "show", str(job), "-o", "json")
    assert status == 0
    shown = json.loads(out)
    assert shown["policies"]["jitterSeconds"] == 900
    assert len(shown["nextFireTimes"]) == len(shown["nextTriggerTimes"]) == 5
    assert shown["nextFireTimes"] != shown["nextTriggerTimes"]
    status, out, _ = cli("jobs", "show", str(job))
    assert status == 0 and "up to 900s" in out and "(fires " in out


def test_jobs_show_and_executions_give_the_traceparent(cli: Any, client: TestClient) -> None:
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    body = {"jobName": "traced", "jobHandler": "demo.noop", "triggerAt": "2100-01-01T00:00:00Z"}
    answer = client.post("/openapi/jobs", json=body, headers={"traceparent": traceparent})
    job = int(answer.json()["jobId"])
    assert client.post(f"/openapi/jobs/{job}/trigger").status_code == 202
    _, out, _ = cli("jobs", "show", str(job))
    assert traceparent in out
    _, out, _ = cli("jobs", "show", str(job), "-o", "json")
    assert json.loads(out)["traceparent"] == traceparent
    _, out, _ = cli("jobs", "executions", str(job), "-o", "json")
    (run,) = json.loads(out)["executions"]
    assert run["traceparent"].split("-")[1] == traceparent.split("-")[1]
    untraced = submit(client, jobName="plain", triggerAt="2100-01-01T00:00:00Z")
    _, out, _ = cli("jobs", "show", str(untraced), "-o", "json")
    assert json.loads(out)["traceparent"] is None


def test_jobs_backfill_runs_past_times_once_and_says_so_in_table_and_json(
    cli: Any, client: TestClient
) -> None:
    job = submit(client, jobName="daily", cronExpr="0 3 * * *", timezone="Europe/Paris")
    status, out, err = cli(
        "jobs", "backfill", str(job), "--from", "2026-11-01T00:00:00", "--to", "2026-11-04"
    )
    assert status == 0, err
    assert out == (
        f"Job {job} backfilled from 2026-10-31T23:00:00.000Z to 2026-11-03T23:00:00.000Z: "
        "3 runs created, 0 times had run already.\n"
    )
    status, out, _ = cli(
        "jobs", "backfill", str(job), "--from", "1793487600000", "--to", "2026-11-05", "-o", "json"
    )
    assert status == 0
    answer = json.loads(out)
    assert (answer["jobId"], answer["from"], answer["created"], answer["existing"]) == (
        job,
        "2026-10-31T23:00:00.000Z",
        1,
        3,
    )
    status, out, _ = cli("jobs", "executions", str(job), "-o", "json")
    runs = json.loads(out)["executions"]
    assert len(runs) == 4 and all(r["backfill"] and r["manual"] for r in runs)
    status, out, _ = cli("jobs", "executions", str(job))
    assert out.count("backfill") == 4


def test_jobs_backfill_refusals_name_what_to_fix(cli: Any, client: TestClient) -> None:
    once = submit(client, jobName="once", triggerAt="2100-01-01T00:00:00Z")
    status, _, err = cli("jobs", "backfill", str(once), "--from", "0", "--to", "60000")
    assert status == 2 and "one-shot job" in err
    hourly = submit(client, jobName="hourly", cronExpr="0 * * * *")
    status, _, err = cli("jobs", "backfill", str(hourly), "--from", "0", "--to", "2026-01-01")
    assert status == 2 and "KAIROS_BACKFILL_MAX_RUNS" in err
    cli("jobs", "pause", str(hourly))
    status, _, err = cli("jobs", "backfill", str(hourly), "--from", "0", "--to", "3600000")
    assert status == 2
    assert err.strip() == (
        f"kairos: job {hourly} is PAUSED; only a WAITING or RUNNING job can be backfilled"
    )
    assert client.get(f"/openapi/jobs/{hourly}/executions").json()["executions"] == []
