"""The poison suite: whatever app A sends, app B's jobs run and call back in time.

One stack takes every poison at once (``test_every_poison_of_one_app_settles_alone``):
app A's input the API refuses (a 422 naming the field, nothing written), its input the
API takes and that misbehaves later (handlers, receivers, schedules, pauses, manual
triggers), and rows only an older Kairos could have stored (written in MySQL). App B's
ordinary jobs are due at the same instant as A's, so they share claims, fires and
dispatch packs; each must run and call back within ``BOUND``, each of A's ends with a
clear message, and the books add up. Cases that need a stack of their own follow.
"""

from __future__ import annotations

import json
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.e2e.harness import (
    CallbackReceiver,
    Processes,
    StallingReceiver,
    free_port,
    wait_healthy,
    wait_until,
)
from tests.e2e.poison_kit import (
    BOUND,
    POISON_HANDLERS,
    REPO,
    Tenant,
    assert_refused,
    books_of_a,
    books_of_b,
    cancel,
    deliveries,
    executions,
    job_count,
    job_status,
    settle,
    shown_whole,
    stored_job,
    tenant,
)

PARAMS_LIMIT = 65_536
SPRING_FORWARD_MS = 1_774_746_000_000  # 2026-03-29T01:00:00Z: Paris goes 02:00 -> 03:00
FAR = "2100-01-01T00:00:00Z"


def nested(levels: int) -> dict[str, Any]:
    """An object ``levels`` deep, itself counting as one."""
    document: dict[str, Any] = {"leaf": 1}
    for _ in range(levels - 1):
        document = {"k": document}
    return document


def start_two_tenants(
    processes: Processes, engine: Engine, **env: str
) -> tuple[Tenant, Tenant, str]:
    """``kairos up`` with the poison handlers; apps A and B; the API's base URL."""
    port = free_port()
    processes.start(
        "up",
        *("up", "--port", str(port), "--workers", "2", "--handlers", POISON_HANDLERS),
        PYTHONPATH=str(REPO),
        **env,
    )
    base = wait_healthy(port)
    a, b = tenant(processes, engine, base, "a"), tenant(processes, engine, base, "b")
    probe = {"jobName": "probe", "jobHandler": "poison.deep", "triggerAt": FAR}
    wait_until(lambda: a.api.post_job(probe).status_code == 202, 30, what="the workers")
    return a, b, base


# ---- input the API refuses ---------------------------------------------------------

REFUSED: list[tuple[str, dict[str, Any]]] = [
    ("triggerAt", {"triggerAt": -100_000_000_000_000}),
    ("triggerAt", {"triggerAt": 10**17}),
    ("triggerAt", {"triggerAt": 2**64}),
    ("triggerAt", {"triggerAt": True}),
    ("triggerAt", {"triggerAt": 1.5}),
    ("triggerAt", {"triggerAt": "-100000000000000"}),
    ("params", {"params": {"p": "x" * (PARAMS_LIMIT - len('{"p":""}') + 1)}}),
    ("params", {"params": nested(33)}),
    ("params", {"params": nested(250)}),
    ("cronExpr", {"cronExpr": "R * * * *"}),
    ("cronExpr", {"cronExpr": "0 0 30 2 *"}),
    ("callbackUrl", {"callbackUrl": "http://[::1"}),
    ("callbackUrl", {"callbackUrl": "http://example.com:abc/"}),
    ("callbackUrl", {"callbackUrl": "file:///etc/passwd"}),
    ("timezone", {"timezone": "Nowhere/Atlantis", "cronExpr": "* * * * *"}),
    ("timezone", {"timezone": "../../../../etc/passwd", "cronExpr": "* * * * *"}),
    ("jobHandler", {"jobHandler": "no.such.handler"}),
    ("maxRetries", {"maxRetries": 10**30}),
    ("fixedRateSeconds", {"fixedRateSeconds": 0}),
]

# Bodies ``json=`` cannot send: lone surrogates, NaN, a document too deep to parse.
REFUSED_RAW: list[tuple[str, str]] = [
    ("params", '{"jobName":"r","jobHandler":"demo.echo","params":{"s":"\\ud800"}}'),
    ("params", '{"jobName":"r","jobHandler":"demo.echo","params":{"\\udfff":1}}'),
    ("jobName", '{"jobName":"a\\ud800","jobHandler":"demo.echo"}'),
    ("params", '{"jobName":"r","jobHandler":"demo.echo","params":{"n":NaN}}'),
    (
        "body",
        '{"jobName":"r","jobHandler":"demo.echo","params":{"a":' + "[" * 5000 + "]" * 5000 + "}}",
    ),
    ("body", '{"jobName":"r","jobHandler":"demo.echo","triggerAt":' + "9" * 5000 + "}"),
]


def refused_poisons(engine: Engine, a: Tenant) -> None:
    """Every refusal is a 422 naming the field, and not one row is written."""
    before = job_count(engine, a)
    for field, fields in REFUSED:
        assert_refused(a.api.post_job({"jobName": "x", "jobHandler": "demo.echo", **fields}), field)
    for field, raw in REFUSED_RAW:
        assert_refused(a.post_raw(raw), field)
    good = {"jobName": "x", "jobHandler": "demo.echo"}
    for field, fields in REFUSED[:6]:
        response = a.post("/openapi/jobs/batch", json={"jobs": [good, {**good, **fields}]})
        assert_refused(response, f"jobs[1].{field}")
    assert job_count(engine, a) == before, "a refused request wrote a row"


def refused_patches(engine: Engine, a: Tenant, job_id: int) -> None:
    """A PATCH the API cannot take is a 422 naming the field, and changes nothing."""
    definition = sa.text(
        "SELECT params, cron_expr, callback_url, timezone, max_retries, updated_at "
        "FROM jobs WHERE id = :j"
    )
    with engine.connect() as conn:
        before = conn.execute(definition, {"j": job_id}).one()
    for field, value in (
        ("cronExpr", "R * * * *"),
        ("params", nested(40)),
        ("callbackUrl", "http://[::1"),
        ("timezone", "Nowhere/Atlantis"),
        ("maxRetries", True),
    ):
        response = httpx.patch(
            f"{a.api.base}/openapi/jobs/{job_id}",
            json={field: value},
            headers={"Authorization": f"Bearer {a.api.api_key}"},
            timeout=30,
        )
        assert_refused(response, field)
    with engine.connect() as conn:
        after = conn.execute(definition, {"j": job_id}).one()
    assert after[:5] == before[:5]


# ---- input the API takes, that misbehaves later ---------------------------------------


def limit_params() -> dict[str, Any]:
    """Params of exactly the documented limit, in bytes of the JSON stored."""
    params = {"p": "é" * 10_000}
    padding = PARAMS_LIMIT - len(json.dumps(params, separators=(",", ":")))
    return {"p": "é" * 10_000, "q": "x" * (padding - len(',"q":""'))}


# name -> (request fields, job status, text the last execution's message holds)
TAKEN: dict[str, tuple[dict[str, Any], str, str | None]] = {
    "params at the limit": (
        {"jobHandler": "demo.echo", "params": limit_params()},
        "SUCCEEDED",
        None,
    ),
    "params 32 deep": ({"jobHandler": "demo.echo", "params": nested(32)}, "SUCCEEDED", None),
    "deep result": ({"jobHandler": "poison.deep"}, "SUCCEEDED", "stored as text"),
    "huge result": ({"jobHandler": "poison.huge"}, "SUCCEEDED", "larger than 64 KiB"),
    "lone surrogates in the result": ({"jobHandler": "poison.surrogates"}, "SUCCEEDED", "U+FFFD"),
    "async handler": ({"jobHandler": "poison.async"}, "SUCCEEDED", None),
    "unprintable error": (
        {"jobHandler": "poison.unprintable_error"},
        "FAILED",
        "UnprintableError: (its text cannot be read",
    ),
    "overrun": (
        {"jobHandler": "poison.overrun", "params": {"seconds": 8}, "timeoutSeconds": 1},
        "FAILED",
        "cannot be stopped and runs on",
    ),
    "async overrun": (
        {"jobHandler": "poison.async_overrun", "timeoutSeconds": 1},
        "FAILED",
        "the coroutine was cancelled",
    ),
    "unprintable result": (
        {"jobHandler": "poison.unprintable_result"},
        "SUCCEEDED",
        "the result is stored as text",
    ),
    "SystemExit": ({"jobHandler": "poison.system_exit"}, "FAILED", "SystemExit: 3"),
    "blocking coroutine": (
        {"jobHandler": "poison.blocking_coroutine", "timeoutSeconds": 1},
        "FAILED",
        "cancelled but has not ended",
    ),
    "a NUL in its name \x00 and an emoji 😀": ({"jobHandler": "demo.noop"}, "SUCCEEDED", None),
    "sleep 9e9": (
        {"jobHandler": "demo.sleep", "params": {"seconds": 9e9}},
        "FAILED",
        "demo.sleep sleeps between 0 and 60",
    ),
}


def taken_poisons(a: Tenant, at_ms: int, urls: list[str]) -> dict[str, int]:
    """A's jobs the API accepts, due at ``at_ms``, calling back to A's bad receivers."""
    ids = {}
    for n, (name, (fields, _, _)) in enumerate(TAKEN.items()):
        body = {"jobName": name, "triggerAt": at_ms, "callbackUrl": urls[n % len(urls)]}
        ids[name] = a.create({**body, **fields})
    return ids


# ---- rows only an older Kairos could have stored --------------------------------------

# name -> (columns as stored, job status, text the last execution's message holds)
STORED: dict[str, tuple[dict[str, Any], str, str | None]] = {
    "cron no longer accepted": (
        {"cron_expr": "R * * * *"},
        "FAILED",
        "cannot compute this job's schedule",
    ),
    "zone no longer accepted": (
        {"cron_expr": "* * * * *", "timezone": "Nowhere/Atlantis"},
        "FAILED",
        "cannot compute this job's schedule",
    ),
    "params nested 300 deep": (
        {"params": json.dumps(nested(300))},
        "FAILED",
        "cannot read its dispatch",
    ),
    "params with a lone surrogate": ({"params": '{"s":"\\ud800"}'}, "FAILED", "dispatch"),
    "params with NaN": ({"params": '{"n":NaN}'}, "SUCCEEDED", "not JSON"),
    "params that are a list": ({"params": "[1,2]"}, "FAILED", "cannot read its dispatch"),
    "callback URL the HTTP client cannot use": (
        {"callback_url": "http://example.com:abc/"},
        "SUCCEEDED",
        None,
    ),
}


def stored_poisons(engine: Engine, a: Tenant, at_ms: int, url: str) -> dict[str, int]:
    """A's rows as an older version stored them, due at ``at_ms``."""
    return {
        name: stored_job(engine, a, name, at_ms, **{"callback_url": url, **columns})
        for name, (columns, _, _) in STORED.items()
    }


def check_endings(
    engine: Engine, ids: dict[str, int], cases: dict[str, tuple[Any, str, str | None]]
) -> None:
    """Each job ended as its case says, its last message saying why."""
    for name, job_id in ids.items():
        _, status, text = cases[name]
        last = settle(engine, job_id)
        assert job_status(engine, job_id) == status, (name, last)
        if text is not None:
            assert text in (last["message"] or ""), (name, last)


def check_bad_receivers(engine: Engine, job_ids: list[int], good: str, bad: list[str]) -> None:
    """Each callback to a receiver that hangs, trickles, answers 410 or 500, or sits at
    a URL the HTTP client cannot use ended DEAD, saying why (after every attempt; the
    410 at once, as the receiver asked; the URL at once, as the callback URL policy
    refuses it and a retry would not heal it); the rest of A's callbacks were delivered."""
    hang, trickle, gone, broken, _ = bad
    expected = {
        hang: (None, "no complete answer"),
        trickle: (None, "no complete answer"),
        gone: (410, None),
        broken: (500, None),
        "http://example.com:abc/": (None, "cannot be read as a URL"),
    }
    attempts = {"http://example.com:abc/": 1, gone: 1}
    found = deliveries(engine, job_ids)
    assert {d["url"] for d in found} == {*expected, good}
    for delivery in found:
        if delivery["url"] == good:
            assert delivery["status"] == "DELIVERED", delivery
            continue
        code, error = expected[delivery["url"]]
        dead = ("DEAD", attempts.get(delivery["url"], 3))
        assert (delivery["status"], delivery["attempts"]) == dead, delivery
        assert delivery["last_status_code"] == code, delivery
        assert error is None or error in (delivery["last_error"] or ""), delivery


# ---- app B ---------------------------------------------------------------------------


def ordinary_jobs(b: Tenant, count: int, url: str, at_ms: int | None) -> list[int]:
    """B's jobs: half created one by one, half in one batch; each echoes its params."""

    def body(n: int) -> dict[str, Any]:
        fields = {"jobName": f"b{n}", "jobHandler": "demo.echo", "params": {"n": n}}
        return {**fields, "callbackUrl": url, **({} if at_ms is None else {"triggerAt": at_ms})}

    singles = [b.create(body(n)) for n in range(count // 2)]
    batch = b.post(
        "/openapi/jobs/batch", json={"jobs": [body(n) for n in range(count // 2, count)]}
    )
    assert batch.status_code == 202, batch.text
    return singles + [int(j["jobId"]) for j in batch.json()["jobs"]]


def called_back(receiver: CallbackReceiver, job_ids: list[int]) -> set[int]:
    """The jobs among ``job_ids`` whose SUCCEEDED callback reached the receiver."""
    seen = {json.loads(r.body)["data"]["jobId"] for r in list(receiver.received)}
    return {j for j in job_ids if j in seen}


def wait_for_callbacks(receiver: CallbackReceiver, job_ids: list[int], what: str) -> None:
    """Every job's callback arrives within ``BOUND``."""
    wait_until(
        lambda: called_back(receiver, job_ids) == set(job_ids),
        BOUND,
        interval=0.2,
        what=f"{what}: {len(job_ids)} callbacks of app B",
    )


# ---- schedules, pauses, manual triggers, work no live worker runs ---------------------


def now_ms() -> int:
    """The wall clock in epoch ms (the stack's cluster clock is this host's Redis)."""
    return int(time.time() * 1000)


def orphaned_work(processes: Processes, engine: Engine, a: Tenant) -> list[int]:
    """A's jobs whose handler only a worker that then stops runs: one with executions
    due (five manual triggers, and 1,200 rows as a firer meets them after workers left),
    one due itself. Both must wait without holding anyone up."""
    processes.start(
        "orphan-worker",
        *("worker", "--id", "orphan", "--handlers", "tests.e2e.orphan_handler"),
        PYTHONPATH=str(REPO),
    )
    body = {"jobName": "orphan", "jobHandler": "poison.orphan", "triggerAt": FAR}
    response = wait_until(
        lambda: (r := a.api.post_job(body)).status_code == 202 and r, 30, what="orphan worker"
    )
    held = int(response.json()["jobId"])
    processes.signal("orphan-worker", signal.SIGTERM)
    assert processes.running["orphan-worker"].wait(timeout=60) == 0
    for _ in range(5):
        assert a.post(f"/openapi/jobs/{held}/trigger").status_code == 202
    now = now_ms()
    rows = [
        {"e": f"00000000-0000-4000-8000-{n:012d}", "j": held, "t": now - 10_000 - n, "s": now}
        for n in range(1_200)
    ]
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO executions (execution_id, job_id, attempt, trigger_time, status, "
                "created_at, scheduled_at, manual) VALUES (:e, :j, 1, :t, 'SCHEDULED', :s, :s, 1)"
            ),
            rows,
        )
    waiting = a.create({"jobName": "orphan due", "jobHandler": "poison.orphan"})
    return [held, waiting]


def check_orphaned_work(engine: Engine, held: int, waiting: int) -> None:
    """The executions wait, each saying why; the due job waits unclaimed, or (claimed in
    the moment before the dispatcher saw its worker go) with its execution held too."""
    reason = "waiting: no live worker runs handler 'poison.orphan'"

    def all_held(job_id: int) -> bool:
        rows = executions(engine, job_id)
        return all(r["status"] == "SCHEDULED" and r["message"] == reason for r in rows)

    wait_until(lambda: all_held(held) and all_held(waiting), BOUND, what="held executions")
    assert len(executions(engine, held)) == 1_205
    assert job_status(engine, waiting) in {"WAITING", "RUNNING"}


def dst_crons(engine: Engine, a: Tenant) -> list[int]:
    """An every-second cron in Europe/Paris whose stored next trigger is the second before
    a spring-forward, and a paused one whose preview crosses it."""
    body = {"jobHandler": "demo.noop", "cronExpr": "* * * * * *", "timezone": "Europe/Paris"}
    # ALLOW: the late trigger runs even while the run of the trigger claimed at create goes.
    running = a.create({"jobName": "dst", "overlapPolicy": "ALLOW", **body})
    previewed = a.create({"jobName": "dst2", **body})
    assert a.post(f"/openapi/jobs/{previewed}/pause").status_code == 200
    with engine.begin() as conn:
        for job_id, at in (
            (running, SPRING_FORWARD_MS - 1_000),
            (previewed, SPRING_FORWARD_MS - 2_000),
        ):
            conn.execute(
                sa.text("UPDATE jobs SET next_trigger_time = :t WHERE id = :j"),
                {"t": at, "j": job_id},
            )
    shown = a.get(f"/openapi/jobs/{previewed}?preview=4").json()["nextTriggerTimes"]
    assert shown == [
        "2026-03-29T00:59:58.000Z",
        "2026-03-29T00:59:59.000Z",
        "2026-03-29T01:00:00.000Z",  # 01:59:59 CET, then 03:00:00 CEST
        "2026-03-29T01:00:01.000Z",
    ]
    return [running, previewed]


def check_dst_cron(engine: Engine, job_id: int) -> None:
    """The late spring-forward trigger ran, and the cron went on every second after it."""
    rows = wait_until(
        lambda: (found := executions(engine, job_id))[4:] and found, BOUND, what="DST cron runs"
    )
    late = [r for r in rows if r["trigger_time"] == SPRING_FORWARD_MS - 1_000]
    assert [r["status"] for r in late] == ["SUCCEEDED"], rows
    assert not [r for r in rows if r["status"] in {"FAILED", "LOST", "TIMED_OUT"}], rows


def pause_a_retry(engine: Engine, a: Tenant, job_id: int) -> None:
    """Pause the job between its failed first attempt and its retry, which must wait."""
    wait_until(lambda: len(executions(engine, job_id)) == 2, BOUND, what="the retry")
    assert a.post(f"/openapi/jobs/{job_id}/pause").status_code == 200
    assert executions(engine, job_id)[1]["status"] == "SCHEDULED", "the retry ran before pause"


def check_paused_retry(engine: Engine, a: Tenant, job_id: int) -> None:
    """The retry waited, saying why; a manual run went at once; after resume all ended."""
    wait_until(
        lambda: (executions(engine, job_id)[1]["message"] or "").startswith(
            "waiting: the job is paused"
        ),
        BOUND,
        what="the paused retry to wait",
    )
    manual = a.post(f"/openapi/jobs/{job_id}/trigger").json()["executionId"]
    wait_until(
        lambda: any(
            r["execution_id"] == manual and r["status"] == "FAILED"
            for r in executions(engine, job_id)
        ),
        BOUND,
        what="the manual run of a paused job",
    )
    assert job_status(engine, job_id) == "PAUSED"
    assert a.post(f"/openapi/jobs/{job_id}/resume").status_code == 200
    assert settle(engine, job_id)["attempt"] == 2


def pause_a_cron(engine: Engine, a: Tenant, job_id: int) -> None:
    """Pause an every-second cron: what it had claimed is skipped, nothing more runs."""
    wait_until(lambda: len(executions(engine, job_id)) >= 2, BOUND, what="cron runs")
    paused_at = now_ms()
    assert a.post(f"/openapi/jobs/{job_id}/pause").status_code == 200
    time.sleep(2.5)
    later = [r for r in executions(engine, job_id) if r["trigger_time"] > paused_at + 1_000]
    assert all(r["status"] == "SKIPPED" for r in later), later


def manual_storm(a: Tenant, job_id: int, count: int = 40) -> list[str]:
    """Many manual triggers of one job at once: each is 202 (or a 409 to retry)."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda _: a.post(f"/openapi/jobs/{job_id}/trigger"), range(count)))
    assert {r.status_code for r in answers} <= {202, 409}, [r.text for r in answers][:3]
    started = [r.json()["executionId"] for r in answers if r.status_code == 202]
    assert len(started) >= count // 2
    return started


def succeeded(engine: Engine, job_id: int) -> set[str]:
    """The ids of the job's executions that succeeded."""
    return {r["execution_id"] for r in executions(engine, job_id) if r["status"] == "SUCCEEDED"}


def sleep_until(at_ms: int) -> None:
    """Wait for a wall-clock time."""
    time.sleep(max(0.0, (at_ms - now_ms()) / 1000))


def test_every_poison_of_one_app_settles_alone(processes: Processes, engine: Engine) -> None:
    hook_b, hook_a = CallbackReceiver(), CallbackReceiver()
    hang, trickle = StallingReceiver(), StallingReceiver(trickle=True)
    gone, broken = CallbackReceiver([410] * 1_000), CallbackReceiver([500] * 1_000)
    receivers: list[Any] = [hook_b, hook_a, hang, trickle, gone, broken]
    try:
        a, b, _ = start_two_tenants(processes, engine, KAIROS_REQUEST_TIMEOUT_SECONDS="2")
        refused_poisons(engine, a)
        held, waiting = orphaned_work(processes, engine, a)
        dst, dst_paused = dst_crons(engine, a)
        cron = a.create({"jobName": "cron", "jobHandler": "demo.noop", "cronExpr": "* * * * * *"})
        refused_patches(engine, a, cron)
        stormed = a.create({"jobName": "storm", "jobHandler": "demo.noop", "triggerAt": FAR})
        at = now_ms() + 6_000
        bad_urls = [hang.url, trickle.url, gone.url, broken.url, hook_a.url]
        taken = taken_poisons(a, at, bad_urls)
        stored = stored_poisons(engine, a, at, hook_a.url)
        retried = a.create(
            {
                "jobName": "retried",
                "jobHandler": "demo.fail",
                "triggerAt": at,
                "maxRetries": 1,
                "retryBackoffSeconds": 10,
                "callbackUrl": hook_a.url,
            }
        )
        first = ordinary_jobs(b, 40, hook_b.url, at)
        sleep_until(at - 200)
        too_early = stored_job(engine, a, "-1e14", -100_000_000_000_000, callback_url=hook_a.url)
        too_late = stored_job(engine, a, "2**62", 2**62)

        pause_a_retry(engine, a, retried)
        storm = manual_storm(a, stormed)
        wait_for_callbacks(hook_b, first, "due with A's poisons")
        pause_a_cron(engine, a, cron)
        second = ordinary_jobs(b, 20, hook_b.url, None)
        wait_for_callbacks(hook_b, second, "submitted while A's poisons settle")

        check_endings(engine, taken, TAKEN)
        check_endings(engine, stored, STORED)
        check_orphaned_work(engine, held, waiting)
        check_dst_cron(engine, dst)
        check_paused_retry(engine, a, retried)
        assert settle(engine, too_early)["status"] == "SUCCEEDED"
        early = [json.loads(r.body)["data"] for r in hook_a.received]
        assert [p["triggerTime"] for p in early if p["jobId"] == too_early] == [None]
        wait_until(lambda: set(storm) <= succeeded(engine, stormed), BOUND, what="every manual run")
        a_jobs = [*taken.values(), *stored.values(), held, waiting, dst, dst_paused, cron]
        a_jobs += [stormed, retried, too_early, too_late]
        shown_whole(a, a_jobs)
        cancel(a, [held, waiting, dst, dst_paused, cron, stormed, too_late])
        books_of_b(engine, first + second)
        books_of_a(engine, a_jobs)
        check_bad_receivers(engine, [*taken.values(), *stored.values()], hook_a.url, bad_urls)
    finally:
        for receiver in receivers:
            receiver.close()


def test_one_app_flooding_the_door_leaves_another_app_its_requests(
    processes: Processes, engine: Engine
) -> None:
    port = free_port()
    # Low enough that A's flood passes it however slowly this machine answers, while B,
    # asking at less than the rate, never does.
    limits = {"KAIROS_RATE_LIMIT_PER_SECOND": "2", "KAIROS_RATE_LIMIT_BURST": "5"}
    processes.start("api", "api", "--port", str(port), **limits)
    base = wait_healthy(port)
    a, b = tenant(processes, engine, base, "a"), tenant(processes, engine, base, "b")
    too_big = b"{" + b" " * (2 * 1024 * 1024) + b"}"
    for headers in ({}, {"Authorization": f"Bearer {a.api.api_key}"}):
        response = httpx.post(f"{base}/openapi/jobs", content=too_big, headers=headers)
        assert response.status_code == 413, response.text

    def flood(_: int) -> list[httpx.Response]:
        return [a.get("/openapi/jobs") for _ in range(40)]

    with ThreadPoolExecutor(max_workers=6) as pool:
        flooding = pool.map(flood, range(6))
        # B asks at its own pace, inside its rate, while A floods.
        answered = []
        for _ in range(8):
            answered.append(b.get("/openapi/jobs").status_code)
            time.sleep(0.6)
        a_answers = [response for responses in flooding for response in responses]
    assert answered == [200] * 8
    limited = [r for r in a_answers if r.status_code != 200]
    assert {r.status_code for r in limited} == {429}, "A was never limited"
    assert all(int(r.headers["Retry-After"]) >= 1 for r in limited)


def test_an_app_whose_receiver_hangs_leaves_the_notifier_to_the_others(
    processes: Processes, engine: Engine
) -> None:
    hang, hook_b = StallingReceiver(), CallbackReceiver()
    try:
        # Four attempts at once, each allowed far longer than this test waits for B.
        notifier = {"KAIROS_CONCURRENCY": "4", "KAIROS_REQUEST_TIMEOUT_SECONDS": "300"}
        a, b, _ = start_two_tenants(processes, engine, **notifier)
        body = {"jobName": "a", "jobHandler": "demo.noop", "callbackUrl": hang.url}
        a_jobs = [a.create(body) for _ in range(12)]
        wait_until(lambda: hang.arrived >= 3, BOUND, what="A's attempts to hang")
        b_jobs = ordinary_jobs(b, 6, hook_b.url, None)
        wait_for_callbacks(hook_b, b_jobs, "while A's receiver hangs")
        assert not hang.released.is_set()
        hang.release()
        books_of_b(engine, b_jobs)
        books_of_a(engine, a_jobs)
    finally:
        hang.close()
        hook_b.close()


def test_an_app_catching_up_a_backlog_leaves_the_claims_to_on_time_triggers(
    processes: Processes, engine: Engine
) -> None:
    hook_b = CallbackReceiver()
    try:
        # More jobs than one claim takes, each with an hour of every-second triggers to
        # catch up: always due, always the oldest.
        a, b, _ = start_two_tenants(processes, engine, KAIROS_BATCH_SIZE="25")
        backlog = {
            "jobHandler": "demo.noop",
            "cronExpr": "* * * * * *",
            "misfirePolicy": "FIRE_ALL",
            "triggerAt": now_ms() - 3_000_000,
        }
        items = [{"jobName": f"catch-up {n}", **backlog} for n in range(200)]
        response = a.post("/openapi/jobs/batch", json={"jobs": items})
        assert response.status_code == 202, response.text
        a_jobs = [int(j["jobId"]) for j in response.json()["jobs"]]
        wait_until(lambda: len(executions(engine, a_jobs[-1])) >= 3, BOUND, what="A's catch-up")
        b_jobs = ordinary_jobs(b, 10, hook_b.url, None)
        wait_for_callbacks(hook_b, b_jobs, "while A catches up")
        cancel(a, a_jobs)
        books_of_b(engine, b_jobs)
        books_of_a(engine, a_jobs)
    finally:
        hook_b.close()
