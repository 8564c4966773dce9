"""Service logging: what reaches stderr."""

from __future__ import annotations

import json
import logging

import pika
import pytest
from pika.exceptions import AMQPConnectionError

from common.logs import setup_logging


def test_a_failed_broker_connection_is_not_logged_by_pika_itself(
    capsys: pytest.CaptureFixture[str],
) -> None:
    setup_logging("test")
    try:
        with pytest.raises(AMQPConnectionError):
            pika.BlockingConnection(
                pika.URLParameters("amqp://guest:guest@127.0.0.1:1/%2F?connection_attempts=1")
            )
        logging.getLogger("pika.adapters.blocking_connection").error("Unexpected close")
        logging.getLogger("kairos.test").warning("lost the broker connection")
    finally:
        logging.getLogger().handlers.clear()
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(": ", 1)[1] for line in lines] == [
        "Unexpected close",
        "lost the broker connection",
    ]


def test_pika_records_other_than_a_failed_connect_still_pass(
    capsys: pytest.CaptureFixture[str],
) -> None:
    setup_logging("test", level="DEBUG")
    try:
        logging.getLogger("pika").setLevel(logging.DEBUG)
        io_log = logging.getLogger("pika.adapters.utils.io_services_utils")
        io_log.error("Socket failed to connect: refused")
        io_log.error("Socket EOF; connection lost")
        io_log.debug("Socket failed to connect: traced at DEBUG")
    finally:
        logging.getLogger().handlers.clear()
        logging.getLogger("pika").setLevel(logging.WARNING)
        logging.getLogger().setLevel(logging.WARNING)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(": ", 1)[1] for line in lines] == [
        "Socket EOF; connection lost",
        "Socket failed to connect: traced at DEBUG",
    ]


def test_json_lines_carry_iso_utc_times_the_service_and_key_fields() -> None:
    from common.log_context import bind_request_id, release_request_id
    from common.logs import JsonFormatter, TextFormatter

    record = logging.LogRecord("kairos.x", logging.INFO, __file__, 1, "job %s ran", (7,), None)
    record.created = 1_764_590_400.25  # 2025-12-01T12:00:00.250Z
    record.job_id = 7
    entry = json.loads(JsonFormatter("worker").format(record))
    assert entry == {
        "ts": "2025-12-01T12:00:00.250Z",
        "level": "INFO",
        "service": "worker",
        "logger": "kairos.x",
        "msg": "job 7 ran",
        "job_id": 7,
    }
    token = bind_request_id("r-1")
    try:
        assert json.loads(JsonFormatter("api").format(record))["request_id"] == "r-1"
        text = TextFormatter("api").format(record)
    finally:
        release_request_id(token)
    assert text == "2025-12-01T12:00:00.250Z INFO api kairos.x: job 7 ran job_id=7 request_id=r-1"
    assert "request_id" not in JsonFormatter("api").format(record)
