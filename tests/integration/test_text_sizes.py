"""Text columns hold what Kairos promises, counted in bytes of UTF-8, not characters."""

from __future__ import annotations

import json

import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.db.jobs import NewJob, insert_job
from common.jsontext import MAX_STORED_TEXT_BYTES
from common.messages import ExecutionResult
from common.states import ExecutionStatus
from services.dispatcher.outcomes.recording import record_results
from tests.integration.helpers import make_app
from tests.integration.test_results import running_job

PARAMS_LIMIT = 64 * 1024  # the API's documented limit, in bytes of the stored JSON


def params_of_bytes(size: int) -> dict[str, str]:
    """Params whose stored JSON (compact, as insert_job writes it) is ``size`` bytes."""
    overhead = len(json.dumps({"p": ""}, separators=(",", ":")))
    return {"p": "x" * (size - overhead)}


def text_of_bytes(size: int) -> str:
    """Mostly three-byte characters, ``size`` bytes of UTF-8 in all."""
    return "€" * (size // 3) + "x" * (size % 3)


def test_params_of_exactly_the_documented_limit_are_stored(engine: Engine) -> None:
    make_app(engine)
    params = params_of_bytes(PARAMS_LIMIT)
    job = NewJob(1, "big", "demo.noop", params, None, 0, None, None, None)
    with engine.begin() as conn:
        job_id = insert_job(conn, job, 0)
    with engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT params FROM jobs WHERE id = :id"), {"id": job_id})
        text = stored.scalar_one()
    assert len(text.encode()) == PARAMS_LIMIT
    assert json.loads(text) == params


def test_the_longest_message_and_result_a_worker_sends_are_stored_with_their_callback(
    engine: Engine, redis_client: redis.Redis
) -> None:
    running_job(engine, callback="http://127.0.0.1:9/hook")
    # Three bytes of UTF-8 per character: TEXT holds only 65,535 bytes.
    longest = text_of_bytes(MAX_STORED_TEXT_BYTES)
    quoted = json.dumps(text_of_bytes(MAX_STORED_TEXT_BYTES - 2), ensure_ascii=False)
    outcome = ExecutionResult(
        execution_id="e-1",
        job_id=1,
        worker_id="w1",
        status=ExecutionStatus.FAILED,
        message=longest,
        result=quoted,
        started_at=2_100,
        ended_at=2_200,
    )
    record_results(engine, ClusterClock(redis_client), [outcome])
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT message, result FROM executions")).one()
        payload = conn.execute(sa.text("SELECT payload FROM callback_deliveries")).scalar_one()
    assert row.message == longest
    assert row.result == quoted
    assert json.loads(payload)["data"]["message"] == longest
