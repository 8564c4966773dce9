"""Verifying Kairos callbacks as Standard Webhooks defines them.

Each callback carries ``webhook-id``, ``webhook-timestamp`` (Unix seconds) and
``webhook-signature``: one or more space-separated ``v1,<base64 HMAC-SHA256>`` of
``"<id>.<timestamp>.<body>"``, keyed with the base64-decoded part of the app's
``whsec_...`` secret. While an app's secret is rotated, callbacks carry one signature
per secret, and a receiver may hold several secrets itself: any match verifies.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import time
from collections.abc import Iterable
from typing import Any, Protocol

from kairos_client.errors import WebhookVerificationError

SECRET_PREFIX = "whsec_"
DEFAULT_TOLERANCE_SECONDS = 300
_TIMESTAMP = re.compile(r"[0-9]{1,12}")

Secret = str | bytes
"""A signing secret: ``whsec_<base64>`` as ``kairos app create`` prints it (the prefix
may be left out), or the key's raw bytes."""


class HeaderSource(Protocol):
    """Anything with ``items()`` of header names and values: a dict, a framework's
    headers object, ``http.server``'s ``self.headers``."""

    def items(self) -> Iterable[tuple[str, Any]]: ...


def secret_key(secret: Secret) -> bytes:
    """The HMAC key of a secret; ValueError when the secret is empty or not base64."""
    if isinstance(secret, bytes):
        key = secret
    else:
        encoded = secret.removeprefix(SECRET_PREFIX)
        try:
            key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        except binascii.Error as e:
            raise ValueError("a signing secret is whsec_ followed by base64") from e
    if not key:
        raise ValueError("the signing secret is empty")
    return key


def _keys(secret_or_secrets: Secret | Iterable[Secret]) -> list[bytes]:
    if isinstance(secret_or_secrets, str | bytes):
        return [secret_key(secret_or_secrets)]
    keys = [secret_key(s) for s in secret_or_secrets]
    if not keys:
        raise ValueError("no signing secret given")
    return keys


def _digest(key: bytes, message_id: str, timestamp: str, body: bytes) -> bytes:
    signed = message_id.encode() + b"." + timestamp.encode() + b"." + body
    return hmac.new(key, signed, hashlib.sha256).digest()


def sign_webhook(secret: Secret, message_id: str, timestamp: int, body: bytes | str) -> str:
    """A ``webhook-signature`` value for a body, as Kairos signs: for testing receivers."""
    raw = body.encode() if isinstance(body, str) else body
    digest = _digest(secret_key(secret), message_id, str(timestamp), raw)
    return "v1," + base64.b64encode(digest).decode()


def _header(headers: HeaderSource, name: str) -> str:
    for key, value in headers.items():
        if key.lower() == name:
            return str(value).strip()
    raise WebhookVerificationError(f"the {name} header is missing")


def _signatures(header: str) -> list[bytes]:
    """The ``v1`` signatures of a header; other versions and malformed entries are skipped."""
    found = []
    for entry in header.split():
        version, _, encoded = entry.partition(",")
        if version != "v1":
            continue
        try:
            found.append(base64.b64decode(encoded, validate=True))
        except binascii.Error:
            continue
    return found


def _check_time(timestamp: str, tolerance_seconds: float, now: float | None) -> None:
    if not _TIMESTAMP.fullmatch(timestamp):
        raise WebhookVerificationError("webhook-timestamp is not whole Unix seconds")
    skew = (time.time() if now is None else now) - int(timestamp)
    if skew > tolerance_seconds:
        raise WebhookVerificationError(
            f"webhook-timestamp is {skew:.0f} s old, past the {tolerance_seconds} s tolerance "
            "(a replay, or this host's clock is off)"
        )
    if -skew > tolerance_seconds:
        raise WebhookVerificationError(
            f"webhook-timestamp is {-skew:.0f} s in the future, past the {tolerance_seconds} s "
            "tolerance (check this host's clock)"
        )


def verify_webhook(
    secret_or_secrets: Secret | Iterable[Secret],
    headers: HeaderSource,
    body: bytes | str,
    tolerance_seconds: float = DEFAULT_TOLERANCE_SECONDS,
    *,
    now: float | None = None,
) -> Any:
    """Check a callback and return its body's JSON; ``WebhookVerificationError`` if it
    fails. ``CallbackEvent.from_json`` reads the result as a typed event.

    ``body`` is the request body exactly as received (bytes, before any JSON parsing).
    Any ``v1`` signature matching any of the secrets verifies; the timestamp must lie
    within ``tolerance_seconds`` of ``now`` (this host's clock) either way, so a
    captured callback cannot be replayed later. Answer a failure 4xx: Kairos retries.
    """
    if tolerance_seconds < 0:
        raise ValueError("tolerance_seconds must be 0 or more")
    keys = _keys(secret_or_secrets)
    message_id = _header(headers, "webhook-id")
    timestamp = _header(headers, "webhook-timestamp")
    offered = _signatures(_header(headers, "webhook-signature"))
    _check_time(timestamp, tolerance_seconds, now)
    raw = body.encode() if isinstance(body, str) else body
    expected = [_digest(key, message_id, timestamp, raw) for key in keys]
    if not any(hmac.compare_digest(e, o) for e in expected for o in offered):
        raise WebhookVerificationError("no webhook-signature matches the signing secret(s)")
    try:
        return json.loads(raw)
    except ValueError as e:
        raise WebhookVerificationError(f"the body is signed but is not JSON: {e}") from e
