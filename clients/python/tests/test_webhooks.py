"""``verify_webhook``: Standard Webhooks signatures, several secrets, timestamps."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest

from kairos_client import (
    EXECUTION_FINISHED,
    CallbackEvent,
    ExecutionStatus,
    WebhookVerificationError,
    sign_webhook,
    verify_webhook,
)

# The reference vector of the Standard Webhooks libraries (and Svix's docs).
VECTOR_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
VECTOR_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
VECTOR_TIME = 1614265330
VECTOR_BODY = '{"test": 2432232314}'
VECTOR_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

SECRET = "whsec_" + base64.b64encode(b"kairos-test-secret-0123456789abc").decode()
OLD_SECRET = "whsec_" + base64.b64encode(b"kairos-old-secret-0123456789abcd").decode()
NOW = 1_790_000_000
DATA = {
    "jobId": 7,
    "jobName": "report",
    "clientRequestId": "k-1",
    "executionId": "0b6f7c3e-8f7d-4a35-9a53-5c0d2b1f7e10",
    "attempt": 1,
    "status": "SUCCEEDED",
    "message": None,
    "result": {"rows": 3},
    "triggerTime": "2026-09-21T10:13:19.000Z",
    "startedAt": "2026-09-21T10:13:19.100Z",
    "endedAt": "2026-09-21T10:13:19.900Z",
}
ENVELOPE = {"type": "execution.finished", "timestamp": "2026-09-21T10:13:20.000Z", "data": DATA}


def signed(body: bytes, secrets: list[str], at: int = NOW, msg: str = "msg_1") -> dict[str, str]:
    signatures = " ".join(sign_webhook(s, msg, at, body) for s in secrets)
    return {"webhook-id": msg, "webhook-timestamp": str(at), "webhook-signature": signatures}


def vector_headers(signature: str = VECTOR_SIGNATURE) -> dict[str, str]:
    return {
        "webhook-id": VECTOR_ID,
        "webhook-timestamp": str(VECTOR_TIME),
        "webhook-signature": signature,
    }


def verify_vector(secret: Any, headers: dict[str, str], body: Any = VECTOR_BODY) -> None:
    assert verify_webhook(secret, headers, body, now=VECTOR_TIME) == {"test": 2432232314}


def test_the_reference_vector_is_signed_and_verified() -> None:
    assert sign_webhook(VECTOR_SECRET, VECTOR_ID, VECTOR_TIME, VECTOR_BODY) == VECTOR_SIGNATURE
    verify_vector(VECTOR_SECRET, vector_headers())
    verify_vector(VECTOR_SECRET.removeprefix("whsec_"), vector_headers())
    verify_vector(base64.b64decode(VECTOR_SECRET.removeprefix("whsec_")), vector_headers())
    verify_vector(VECTOR_SECRET, vector_headers(), VECTOR_BODY.encode())


def test_a_signature_one_bit_off_is_refused() -> None:
    off = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA="
    with pytest.raises(WebhookVerificationError, match="no webhook-signature matches"):
        verify_webhook(VECTOR_SECRET, vector_headers(off), VECTOR_BODY, now=VECTOR_TIME)


def test_any_v1_signature_among_several_verifies_and_others_are_skipped() -> None:
    noise = [
        "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=",
        "v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=",
        "v1a,whatever",
        "v1,not*base64",
        "no-comma",
    ]
    verify_vector(VECTOR_SECRET, vector_headers(" ".join([*noise, VECTOR_SIGNATURE])))


def test_a_callback_verifies_and_reads_as_an_event() -> None:
    body = json.dumps(ENVELOPE).encode()
    payload = verify_webhook(SECRET, signed(body, [SECRET]), body, now=NOW)
    assert payload == ENVELOPE
    event = CallbackEvent.from_json(payload)
    assert event.type == EXECUTION_FINISHED and event.job_id == 7
    assert event.status is ExecutionStatus.SUCCEEDED and event.result == {"rows": 3}
    assert event.client_request_id == "k-1" and event.attempt == 1
    assert event.timestamp is not None and event.ended_at is not None


def test_a_flat_body_of_an_older_server_reads_as_the_same_event() -> None:
    flat = {k: v for k, v in DATA.items() if k not in ("jobName", "clientRequestId")}
    body = json.dumps(flat).encode()
    event = CallbackEvent.from_json(verify_webhook(SECRET, signed(body, [SECRET]), body, now=NOW))
    assert event.type == EXECUTION_FINISHED and event.timestamp is None
    assert event.execution_id == DATA["executionId"] and event.job_name is None


def test_during_a_rotation_either_secret_verifies_both_signatures() -> None:
    body = json.dumps(ENVELOPE).encode()
    headers = signed(body, [SECRET, OLD_SECRET])
    assert verify_webhook(SECRET, headers, body, now=NOW) == ENVELOPE
    assert verify_webhook(OLD_SECRET, headers, body, now=NOW) == ENVELOPE
    only_old = signed(body, [OLD_SECRET])
    assert verify_webhook([SECRET, OLD_SECRET], only_old, body, now=NOW) == ENVELOPE
    with pytest.raises(WebhookVerificationError):
        verify_webhook(SECRET, only_old, body, now=NOW)


@pytest.mark.parametrize(("offset", "word"), [(-301, "old"), (301, "in the future")])
def test_a_timestamp_past_the_tolerance_either_way_is_refused(offset: int, word: str) -> None:
    body = json.dumps(ENVELOPE).encode()
    headers = signed(body, [SECRET], at=NOW + offset)
    with pytest.raises(WebhookVerificationError, match=word):
        verify_webhook(SECRET, headers, body, now=NOW)
    assert verify_webhook(SECRET, headers, body, tolerance_seconds=301, now=NOW) == ENVELOPE


@pytest.mark.parametrize("offset", [-300, 300])
def test_a_timestamp_at_the_tolerance_either_way_is_accepted(offset: int) -> None:
    # The same bound as the server's own services.notifier.signing.verify (300 s).
    body = json.dumps(ENVELOPE).encode()
    headers = signed(body, [SECRET], at=NOW + offset)
    assert verify_webhook(SECRET, headers, body, now=NOW) == ENVELOPE


def test_by_default_the_tolerance_is_five_minutes_of_this_hosts_clock() -> None:
    body = json.dumps(ENVELOPE).encode()
    now = int(time.time())
    assert verify_webhook(SECRET, signed(body, [SECRET], at=now - 240), body) == ENVELOPE
    for far in (now - 400, now + 400):
        with pytest.raises(WebhookVerificationError, match="tolerance"):
            verify_webhook(SECRET, signed(body, [SECRET], at=far), body)


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_a_missing_header_is_named(missing: str) -> None:
    body = json.dumps(ENVELOPE).encode()
    headers = signed(body, [SECRET])
    del headers[missing]
    with pytest.raises(WebhookVerificationError, match=f"{missing} header is missing"):
        verify_webhook(SECRET, headers, body, now=NOW)


@pytest.mark.parametrize("stamp", ["hello", "1614265330.5", "-5", ""])
def test_a_timestamp_that_is_not_whole_seconds_is_refused(stamp: str) -> None:
    body = json.dumps(ENVELOPE).encode()
    headers = signed(body, [SECRET]) | {"webhook-timestamp": stamp}
    with pytest.raises(WebhookVerificationError, match="whole Unix seconds"):
        verify_webhook(SECRET, headers, body, now=NOW)


def test_headers_are_found_whatever_their_case_and_the_body_is_the_bytes_signed() -> None:
    body = json.dumps(ENVELOPE, ensure_ascii=False).encode() + "é".encode()[:1]
    headers = {k.title(): v for k, v in signed(body, [SECRET]).items()}
    with pytest.raises(WebhookVerificationError, match="signed but is not JSON"):
        verify_webhook(SECRET, headers, body, now=NOW)  # the signature covers raw bytes
    reparsed = json.dumps(json.loads(json.dumps(ENVELOPE)), indent=2).encode()
    with pytest.raises(WebhookVerificationError, match="no webhook-signature"):
        verify_webhook(SECRET, signed(json.dumps(ENVELOPE).encode(), [SECRET]), reparsed, now=NOW)


def test_secrets_that_cannot_be_used_are_a_programming_error() -> None:
    body = json.dumps(ENVELOPE).encode()
    bad: list[str] | str
    for bad in ([], "whsec_", "whsec_%%%"):
        with pytest.raises(ValueError):
            verify_webhook(bad, signed(body, [SECRET]), body, now=NOW)
    with pytest.raises(ValueError, match="tolerance"):
        verify_webhook(SECRET, signed(body, [SECRET]), body, tolerance_seconds=-1, now=NOW)
