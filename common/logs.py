"""Logging set-up shared by every service: one line per event, key fields included."""

from __future__ import annotations

import json
import logging
import sys

_FIELDS = ("job_id", "execution_id", "worker_id", "delivery_id")


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for field in _FIELDS:
            if hasattr(record, field):
                entry[field] = getattr(record, field)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = " ".join(f"{f}={getattr(record, f)}" for f in _FIELDS if hasattr(record, f))
        return f"{line} {extras}" if extras else line


# pika reports one failed connection attempt as six ERROR lines and a traceback, every
# attempt of a broker outage; Kairos reports it once, with its cause, and says what it
# does next (see ``common.broker.connect`` and the services' reconnect loops).
_CONNECT_NOISE = {
    "pika.adapters.utils.connection_workflow": ("",),
    "pika.adapters.utils.io_services_utils": ("Socket failed to connect",),
    "pika.adapters.blocking_connection": (
        "Connection workflow failed",
        "Error in _create_connection",
    ),
}


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
    if as_json:
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(
            _TextFormatter(f"%(asctime)s %(levelname)s {service} %(name)s: %(message)s")
        )
    handler.addFilter(_WithoutConnectNoise())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("pika").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
