"""Standard Webhooks signatures: HMAC-SHA256 over ``id.timestamp.body``."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from functools import cache, lru_cache
from importlib.metadata import PackageNotFoundError, version

SECRET_PREFIX = "whsec_"
# How far a callback's timestamp may be from the receiver's clock (the client's too).
DEFAULT_TOLERANCE_SECONDS = 300


# Bounded: an app has one or two secrets at a time, and decoding one for every callback
# cost more than its HMAC.
@lru_cache(maxsize=1024)
def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def sign(secret: str, message_id: str, timestamp: int, body: str) -> str:
    """The ``webhook-signature`` header value: ``v1,<base64 HMAC-SHA256>``."""
    signed = f"{message_id}.{timestamp}.{body}".encode()
    digest = hmac.digest(_key(secret), signed, hashlib.sha256)
    return "v1," + base64.b64encode(digest).decode()


def verify(
    secret: str,
    message_id: str,
    timestamp: int,
    body: str,
    header: str,
    tolerance_seconds: float = DEFAULT_TOLERANCE_SECONDS,
    *,
    now: float | None = None,
) -> bool:
    """True when any ``v1,`` signature in the header matches and ``timestamp`` lies
    within ``tolerance_seconds`` of ``now`` (this host's clock) either way, as the
    client's ``verify_webhook`` checks: a captured callback cannot be replayed later."""
    if abs((time.time() if now is None else now) - timestamp) > tolerance_seconds:
        return False
    expected = sign(secret, message_id, timestamp, body)
    wanted = expected.encode()
    return any(hmac.compare_digest(wanted, part.encode()) for part in header.split())


@cache
def user_agent() -> str:
    """``Kairos-Webhooks/<version>``: receivers can tell Kairos's requests by it."""
    try:
        found = version("kairos")
    except PackageNotFoundError:
        found = "0"
    return f"Kairos-Webhooks/{found}"


def webhook_headers(
    secrets: list[str], message_id: str, timestamp: int, body: str
) -> dict[str, str]:
    """The three Standard Webhooks headers plus the JSON content type and Kairos's
    User-Agent.

    One signature per secret, space-separated, as the standard allows: while an app's
    secret is being rotated, receivers holding either secret can verify.
    """
    return {
        "content-type": "application/json",
        "user-agent": user_agent(),
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(sign(s, message_id, timestamp, body) for s in secrets),
    }
