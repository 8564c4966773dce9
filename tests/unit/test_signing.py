"""Standard Webhooks signatures: HMAC-SHA256 over ``id.timestamp.body``, base64, ``v1,``."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from importlib.metadata import version

import pytest
from kairos_client.webhooks import DEFAULT_TOLERANCE_SECONDS as CLIENT_TOLERANCE_SECONDS

from services.notifier.signing import DEFAULT_TOLERANCE_SECONDS, sign, verify, webhook_headers

KEY = bytes(range(32))
SECRET = "whsec_" + base64.b64encode(KEY).decode()
OTHER_SECRET = "whsec_" + base64.b64encode(b"another key of thirty-two bytes!").decode()
MESSAGE_ID = "msg_2mN6Qe0hWfQ1"
TIMESTAMP = 1_767_225_600
BODY = '{"jobId":42,"status":"SUCCEEDED","message":"caf\u00e9"}'


def _independent_signature(key: bytes, message_id: str, timestamp: int, body: str) -> str:
    signed = f"{message_id}.{timestamp}.{body}".encode()
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def test_signature_matches_an_independent_hmac_sha256() -> None:
    expected = _independent_signature(KEY, MESSAGE_ID, TIMESTAMP, BODY)
    assert sign(SECRET, MESSAGE_ID, TIMESTAMP, BODY) == expected


def test_signature_matches_the_standard_webhooks_reference_vector() -> None:
    signature = sign(
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        1614265330,
        '{"test": 2432232314}',
    )
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_secret_without_prefix_signs_the_same() -> None:
    bare = SECRET.removeprefix("whsec_")
    assert sign(bare, MESSAGE_ID, TIMESTAMP, BODY) == sign(SECRET, MESSAGE_ID, TIMESTAMP, BODY)


def test_verify_accepts_its_own_signature() -> None:
    header = sign(SECRET, MESSAGE_ID, TIMESTAMP, BODY)
    assert verify(SECRET, MESSAGE_ID, TIMESTAMP, BODY, header, now=TIMESTAMP)


def test_verify_rejects_a_tampered_body() -> None:
    header = sign(SECRET, MESSAGE_ID, TIMESTAMP, BODY)
    tampered = BODY.replace("SUCCEEDED", "FAILED")
    assert not verify(SECRET, MESSAGE_ID, TIMESTAMP, tampered, header, now=TIMESTAMP)


def test_verify_rejects_another_message_id_or_timestamp() -> None:
    header = sign(SECRET, MESSAGE_ID, TIMESTAMP, BODY)
    assert not verify(SECRET, "msg_other", TIMESTAMP, BODY, header, now=TIMESTAMP)
    assert not verify(SECRET, MESSAGE_ID, TIMESTAMP + 1, BODY, header, now=TIMESTAMP)


def test_verify_rejects_a_signature_made_with_another_secret() -> None:
    header = sign(OTHER_SECRET, MESSAGE_ID, TIMESTAMP, BODY)
    assert not verify(SECRET, MESSAGE_ID, TIMESTAMP, BODY, header, now=TIMESTAMP)


@pytest.mark.parametrize("offset", [-301, 301, -10_000, 10_000])
def test_verify_refuses_a_timestamp_past_the_tolerance_either_way(offset: int) -> None:
    header = sign(SECRET, MESSAGE_ID, TIMESTAMP, BODY)
    assert not verify(SECRET, MESSAGE_ID, TIMESTAMP, BODY, header, now=TIMESTAMP + offset)
    assert verify(
        SECRET,
        MESSAGE_ID,
        TIMESTAMP,
        BODY,
        header,
        tolerance_seconds=abs(offset),
        now=TIMESTAMP + offset,
    )


@pytest.mark.parametrize("offset", [-300, 0, 300])
def test_verify_accepts_a_timestamp_within_five_minutes_as_the_client_does(offset: int) -> None:
    header = sign(SECRET, MESSAGE_ID, TIMESTAMP, BODY)
    assert verify(SECRET, MESSAGE_ID, TIMESTAMP, BODY, header, now=TIMESTAMP + offset)
    assert DEFAULT_TOLERANCE_SECONDS == CLIENT_TOLERANCE_SECONDS == 300


def test_by_default_verify_reads_this_hosts_clock() -> None:
    now = int(time.time())
    stale = sign(SECRET, MESSAGE_ID, now - 400, BODY)
    fresh = sign(SECRET, MESSAGE_ID, now - 240, BODY)
    assert not verify(SECRET, MESSAGE_ID, now - 400, BODY, stale)
    assert verify(SECRET, MESSAGE_ID, now - 240, BODY, fresh)


@pytest.mark.parametrize("good_first", [True, False])
def test_verify_accepts_one_match_among_several_signatures(good_first: bool) -> None:
    good = sign(SECRET, MESSAGE_ID, TIMESTAMP, BODY)
    other = sign(OTHER_SECRET, MESSAGE_ID, TIMESTAMP, BODY)
    parts = [good, other, "v2,c29tZXRoaW5nIGVsc2U="]
    header = " ".join(parts if good_first else parts[::-1])
    assert verify(SECRET, MESSAGE_ID, TIMESTAMP, BODY, header, now=TIMESTAMP)


def test_verify_rejects_several_signatures_that_all_differ() -> None:
    header = " ".join(
        [sign(OTHER_SECRET, MESSAGE_ID, TIMESTAMP, BODY), sign(SECRET, "x", TIMESTAMP, BODY)]
    )
    assert not verify(SECRET, MESSAGE_ID, TIMESTAMP, BODY, header, now=TIMESTAMP)


@pytest.mark.parametrize("header", ["", " ", "v1,", "v1,AAAA"])
def test_verify_rejects_empty_or_junk_headers(header: str) -> None:
    assert not verify(SECRET, MESSAGE_ID, TIMESTAMP, BODY, header, now=TIMESTAMP)


def test_verify_rejects_the_digest_without_its_version_prefix() -> None:
    header = sign(SECRET, MESSAGE_ID, TIMESTAMP, BODY).removeprefix("v1,")
    assert not verify(SECRET, MESSAGE_ID, TIMESTAMP, BODY, header, now=TIMESTAMP)


def test_verify_rejects_a_header_with_non_ascii_characters() -> None:
    assert not verify(SECRET, MESSAGE_ID, TIMESTAMP, BODY, "v1,\u00e9t\u00e9", now=TIMESTAMP)


def test_webhook_headers_carry_id_timestamp_signature_and_content_type() -> None:
    assert webhook_headers([SECRET], MESSAGE_ID, TIMESTAMP, BODY) == {
        "content-type": "application/json",
        "user-agent": f"Kairos-Webhooks/{version('kairos')}",
        "webhook-id": MESSAGE_ID,
        "webhook-timestamp": str(TIMESTAMP),
        "webhook-signature": _independent_signature(KEY, MESSAGE_ID, TIMESTAMP, BODY),
    }


def test_while_a_secret_rotates_callbacks_carry_a_signature_for_each_secret() -> None:
    old = "whsec_" + base64.b64encode(b"o" * 32).decode()
    header = webhook_headers([SECRET, old], MESSAGE_ID, TIMESTAMP, BODY)["webhook-signature"]
    assert header == " ".join(
        [
            _independent_signature(KEY, MESSAGE_ID, TIMESTAMP, BODY),
            _independent_signature(b"o" * 32, MESSAGE_ID, TIMESTAMP, BODY),
        ]
    )
    assert verify(SECRET, MESSAGE_ID, TIMESTAMP, BODY, header, now=TIMESTAMP)
    assert verify(old, MESSAGE_ID, TIMESTAMP, BODY, header, now=TIMESTAMP)
