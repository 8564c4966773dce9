"""The pieces of the fair-share scenario (issue 21): apps made through the CLI, a flood
of sleeping runs sent in batches, a trickle of one-shot jobs, and what the API and the
database say of when each run started.

``tests/e2e/test_fair_share.py`` and ``bench/fair_share.py`` both drive it, so the test
and the figures measure the same thing. It needs nothing that only the test runner has.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.db.schema import executions
from common.timefmt import parse_instant
from tests.e2e.harness import Api, wait_until

# How long each run of the scenario sleeps: one slot turnover.
RUN_SECONDS = 0.5
SLEEP_HANDLER = "demo.sleep"
BATCH_SIZE = 500
FAR_FUTURE = "2100-01-01T00:00:00Z"
IN_CHUNK = 1_000

Cli = Callable[..., str]
"""Runs ``kairos ARGS...`` on the scenario's namespace and returns its standard output;
raises ``subprocess.CalledProcessError`` when the command fails."""


@dataclass(frozen=True)
class Tenant:
    """One app of the scenario, as its own submitter sees it."""

    name: str
    app_id: str
    api: Api

    def headers(self) -> dict[str, str]:
        """The app's bearer header."""
        return {"Authorization": f"Bearer {self.api.api_key}"}


@dataclass(frozen=True)
class Run:
    """One execution as the database holds it (cluster-clock epoch ms)."""

    job_id: int
    status: str
    trigger_time: int
    started_at: int | None
    ended_at: int | None


@dataclass(frozen=True)
class Start:
    """When a job was due and when its run started, as the API shows them."""

    job_id: int
    trigger_ms: int
    started_ms: int

    @property
    def lag_ms(self) -> int:
        """Start lag: from the trigger time to the start of the run."""
        return self.started_ms - self.trigger_ms


def create_tenant(cli: Cli, base: str, name: str) -> Tenant:
    """Create an app with the CLI and let it name the demo handlers, as an operator would."""
    created = json.loads(cli("app", "create", name))
    cli("app", "handlers", created["appId"], "--allow", "demo.*")
    api = Api(base, created["apiKey"], created["signingSecret"])
    return Tenant(name, created["appId"], api)


def app_limits_exist(cli: Cli) -> bool:
    """True when this Kairos has ``kairos app limits`` (weights and caps per app)."""
    try:
        cli("app", "limits", "--help")
    except subprocess.CalledProcessError:
        return False
    return True


def wait_handler_known(tenant: Tenant, timeout: float = 60) -> None:
    """Wait until the API accepts the sleep handler (a worker has registered it).

    The probe is due in 2100, so it never takes a slot.
    """
    probe = {"jobName": "probe", "jobHandler": SLEEP_HANDLER, "triggerAt": FAR_FUTURE}
    wait_until(
        lambda: tenant.api.post_job(probe).status_code == 202,
        timeout,
        interval=0.3,
        what=f"a worker to register {SLEEP_HANDLER}",
    )


def sleep_bodies(prefix: str, count: int, seconds: float = RUN_SECONDS) -> list[dict[str, Any]]:
    """``count`` one-shot jobs due now, each sleeping ``seconds``."""
    return [
        {"jobName": f"{prefix} {n}", "jobHandler": SLEEP_HANDLER, "params": {"seconds": seconds}}
        for n in range(count)
    ]


def noop_bodies(prefix: str, count: int) -> list[dict[str, Any]]:
    """``count`` one-shot ``demo.noop`` jobs due now."""
    return [{"jobName": f"{prefix} {n}", "jobHandler": "demo.noop"} for n in range(count)]


def submit_batches(tenant: Tenant, bodies: Sequence[dict[str, Any]]) -> list[int]:
    """POST the bodies through the batch API, ``BATCH_SIZE`` at a time; the job ids."""
    job_ids: list[int] = []
    with httpx.Client(base_url=tenant.api.base, headers=tenant.headers(), timeout=60) as http:
        for at in range(0, len(bodies), BATCH_SIZE):
            response = http.post(
                "/openapi/jobs/batch", json={"jobs": list(bodies[at:][:BATCH_SIZE])}
            )
            if response.status_code != 202:
                raise AssertionError(
                    f"batch of {tenant.name}: {response.status_code} {response.text}"
                )
            job_ids += [int(job["jobId"]) for job in response.json()["jobs"]]
    return job_ids


def trickle(
    tenant: Tenant, count: int, every_seconds: float, seconds: float = RUN_SECONDS
) -> list[int]:
    """Submit ``count`` one-shot jobs one at a time, one every ``every_seconds``.

    The pace is the scenario's (an ordinary app's steady submissions), not a wait for
    something to happen.
    """
    job_ids: list[int] = []
    began = time.monotonic()
    with httpx.Client(base_url=tenant.api.base, headers=tenant.headers(), timeout=30) as http:
        for n, body in enumerate(sleep_bodies(tenant.name, count, seconds)):
            time.sleep(max(0.0, began + n * every_seconds - time.monotonic()))
            response = http.post("/openapi/jobs", json=body)
            if response.status_code != 202:
                raise AssertionError(
                    f"job of {tenant.name}: {response.status_code} {response.text}"
                )
            job_ids.append(int(response.json()["jobId"]))
    return job_ids


def read_starts(tenant: Tenant, job_ids: Sequence[int]) -> list[Start]:
    """Each job's first run, read through the API: its trigger time and its start."""
    starts: list[Start] = []
    for job_id in job_ids:
        ran = [e for e in tenant.api.executions(job_id) if e["startedAt"] and not e["manual"]]
        if not ran:
            raise AssertionError(f"job {job_id} of {tenant.name} has no started run")
        first = min(ran, key=lambda e: int(e["attempt"]))
        starts.append(
            Start(job_id, parse_instant(first["triggerTime"]), parse_instant(first["startedAt"]))
        )
    return starts


def read_runs(engine: Engine, job_ids: Sequence[int]) -> list[Run]:
    """Every execution of these jobs."""
    columns = (
        executions.c.job_id,
        executions.c.status,
        executions.c.trigger_time,
        executions.c.started_at,
        executions.c.ended_at,
    )
    runs: list[Run] = []
    with engine.connect() as conn:
        for at in range(0, len(job_ids), IN_CHUNK):
            chunk = list(job_ids[at:][:IN_CHUNK])
            rows = conn.execute(sa.select(*columns).where(executions.c.job_id.in_(chunk)))
            runs += [Run(int(j), str(s), int(t), a, b) for j, s, t, a, b in rows]
    return runs


def started_count(engine: Engine, job_ids: Sequence[int]) -> int:
    """How many runs of these jobs are recorded as started."""
    return sum(r.started_at is not None for r in read_runs(engine, job_ids))


def wait_started(engine: Engine, job_ids: Sequence[int], count: int, timeout: float) -> None:
    """Wait until ``count`` runs of these jobs are recorded as started; on a timeout, say
    where the runs stand (no execution yet, SCHEDULED, QUEUED...)."""
    try:
        wait_until(
            lambda: started_count(engine, job_ids) >= count,
            timeout,
            interval=0.2,
            what=f"{count} runs to start",
        )
    except AssertionError as e:
        runs = read_runs(engine, job_ids)
        statuses = Counter(r.status for r in runs)
        missing = len(job_ids) - len({r.job_id for r in runs})
        raise AssertionError(
            f"{e}; runs by status {dict(statuses)}, jobs with none {missing}"
        ) from None


def started_after(runs: Collection[Run], instant_ms: int) -> int:
    """How many of the runs started after ``instant_ms``: work still waiting then."""
    return sum(r.started_at is not None and r.started_at > instant_ms for r in runs)


def starts_between(runs: Collection[Run], first_ms: int, last_ms: int) -> int:
    """How many of the runs started in ``[first_ms, last_ms]``."""
    return sum(r.started_at is not None and first_ms <= r.started_at <= last_ms for r in runs)


def most_at_once(runs: Collection[Run], skew_ms: int = 20) -> int:
    """The most runs going at one instant, from their recorded start and end.

    Each run counts from ``started_at + skew_ms`` to ``ended_at - skew_ms``: the workers'
    cluster clocks agree to a few ms, and a run that begins as another ends is not two
    at once. An end sorts before a start at the same instant.
    """
    edges: list[tuple[int, int]] = []
    for run in runs:
        if run.started_at is None or run.ended_at is None:
            continue
        begin, end = run.started_at + skew_ms, run.ended_at - skew_ms
        if end > begin:
            edges += [(begin, 1), (end, -1)]
    going = most = 0
    for _, step in sorted(edges):
        going += step
        most = max(most, going)
    return most


def nearest_rank(values: Sequence[int], fraction: float) -> int:
    """Nearest-rank percentile of ``values`` (need not be sorted)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]
