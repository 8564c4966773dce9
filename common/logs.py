"""Logging set-up shared by every service: one line per event, key fields included.

Times are ISO 8601 in UTC with milliseconds (``2026-12-01T14:11:23.123Z``) whatever the
host's zone, so lines from several hosts sort and compare as they are. A JSON line
names its service; a line written while the API serves a request carries its id
(``request_id``, the ``Request-Id`` the client got).
"""

from __future__ import annotations

import json
import logging
import sys
from types import MappingProxyType
from typing import Any

from common.log_context import current_request_id
from common.timefmt import iso_ms

_FIELDS = ("job_id", "execution_id", "worker_id", "delivery_id", "request_id")


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    found = {f: getattr(record, f) for f in _FIELDS if hasattr(record, f)}
    request_id = current_request_id()
    if request_id is not None:
        found.setdefault("request_id", request_id)
    return found


def utc_time(record: logging.LogRecord) -> str:
    """The record's time as ISO 8601 UTC with milliseconds."""
    return iso_ms(int(record.created * 1000)) or ""


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ts, level, service, logger, msg, the key fields, exc."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        entry = {
            "ts": utc_time(record),
            "level": record.levelname,
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """``TIME LEVEL SERVICE LOGGER: MESSAGE key=value ...`` with the time in UTC."""

    def __init__(self, service: str) -> None:
        super().__init__(f"%(levelname)s {service} %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of text (a traceback follows on its own lines)."""
        line = f"{utc_time(record)} {super().format(record)}"
        extras = " ".join(f"{k}={v}" for k, v in _fields(record).items())
        return f"{line} {extras}" if extras else line


# pika reports one failed connection attempt as six ERROR lines and a traceback, every
# attempt of a broker outage; Kairos reports it once, with its cause, and says what it
# does next (see ``common.broker.connect`` and the services' reconnect loops).
_CONNECT_NOISE = MappingProxyType(
    {
        "pika.adapters.utils.connection_workflow": ("",),
        "pika.adapters.utils.io_services_utils": ("Socket failed to connect",),
        "pika.adapters.blocking_connection": (
            "Connection workflow failed",
            "Error in _create_connection",
        ),
    }
)


class _WithoutConnectNoise(logging.Filter):
    """Drops pika's own ERROR records of a failed connection attempt; the rest passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        starts = _CONNECT_NOISE.get(record.name)
        if starts is None or record.levelno != logging.ERROR:
            return True
        return not str(record.msg).startswith(starts)


def setup_logging(service: str, level: str = "INFO", as_json: bool = False) -> None:
    """Send logs to stderr, as JSON lines or as text with key=value fields."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service) if as_json else TextFormatter(service))
    handler.addFilter(_WithoutConnectNoise())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("pika").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
