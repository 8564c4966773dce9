"""Service logging: what reaches stderr."""

from __future__ import annotations

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
