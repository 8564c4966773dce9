"""The notifier's own HTTP/1.1 client against real receivers on this machine: what it
sends, how it reads every kind of answer (framed by length, chunked, unframed, cut
short, slow, huge), when it keeps a connection and when it lets it go, and its bounds."""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import struct
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from common.callback_urls import CallbackUrlPolicy, TableResolver, parse_networks
from services.notifier.http_wire import MAX_HEAD_BYTES
from services.notifier.posting import MAX_RESPONSE_BYTES, CallbackPoster
from tests.integration.http_receivers import (
    Answering,
    Request,
    ScriptedReceiver,
    answer_with,
    ok,
)

LOCAL = CallbackUrlPolicy.from_settings("127.0.0.0/8", False)
TOTAL_SECONDS = 2.0
HOST = "hooks.example.com"


@pytest.fixture
def poster() -> Iterator[CallbackPoster]:
    started = CallbackPoster(TOTAL_SECONDS, policy=LOCAL)
    started.start()
    yield started
    started.close()


@pytest.fixture
def receivers() -> Iterator[list[ScriptedReceiver]]:
    made: list[ScriptedReceiver] = []
    yield made
    for receiver in made:
        receiver.close()


def serve(receivers: list[ScriptedReceiver], answer: Answering) -> ScriptedReceiver:
    receiver = ScriptedReceiver(answer)
    receivers.append(receiver)
    return receiver


def test_a_post_carries_the_headers_as_given_with_host_type_and_length(
    poster: CallbackPoster, receivers: list[ScriptedReceiver]
) -> None:
    receiver = serve(receivers, ok())
    headers = {"webhook-id": "msg_1", "webhook-signature": "v1,abc", "user-agent": "Kairos"}
    outcome = poster.post(receiver.url("/hook?x=1"), '{"a": "é"}', headers)
    assert outcome.delivered and outcome.status_code == 200 and outcome.error is None
    [request] = receiver.requests
    assert request.head.startswith(b"POST /hook?x=1 HTTP/1.1\r\n")
    assert request.header("host") == [f"127.0.0.1:{receiver.port}"]
    assert request.header("webhook-id") == ["msg_1"]
    assert request.header("webhook-signature") == ["v1,abc"]
    assert request.header("user-agent") == ["Kairos"]
    assert request.header("content-type") == ["application/json"]
    assert request.body == '{"a": "é"}'.encode()
    assert request.header("content-length") == [str(len(request.body))]


def test_a_content_type_given_is_sent_once_and_a_host_given_is_not(
    poster: CallbackPoster, receivers: list[ScriptedReceiver]
) -> None:
    receiver = serve(receivers, ok())
    headers = {"Content-Type": "text/plain", "host": "elsewhere.example"}
    assert poster.post(receiver.url(), "x", headers).delivered
    [request] = receiver.requests
    assert request.header("content-type") == ["text/plain"]
    assert request.header("host") == [f"127.0.0.1:{receiver.port}"]


@pytest.mark.parametrize(
    "headers",
    [{"webhook-id": "a\r\nx-evil: 1"}, {"x-a\nb": "1"}, {"x-a": "b\0"}, {"x:y": "1"}],
)
def test_a_header_with_a_line_break_fails_the_attempt_and_sends_nothing(
    poster: CallbackPoster, receivers: list[ScriptedReceiver], headers: dict[str, str]
) -> None:
    receiver = serve(receivers, ok())
    outcome = poster.post(receiver.url(), "{}", headers)
    assert not outcome.delivered and outcome.status_code is None
    assert outcome.error is not None and "line break" in outcome.error
    assert receiver.requests == []


@pytest.mark.parametrize(
    "answer",
    [
        ok(),
        ok(b'{"ok": true}'),
        answer_with(b"HTTP/1.1 204 No Content"),
        answer_with(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked", b"5\r\nhello\r\n0\r\n\r\n"),
        answer_with(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 202 Accepted\r\ncontent-length: 0"),
    ],
    ids=["empty", "json", "204", "chunked", "after-100"],
)
def test_answers_read_to_their_end_keep_one_connection(
    poster: CallbackPoster, receivers: list[ScriptedReceiver], answer: Answering
) -> None:
    receiver = serve(receivers, answer)
    outcomes = [poster.post(receiver.url(), "{}", {}) for _ in range(10)]
    assert all(o.delivered for o in outcomes), outcomes[0]
    assert len(receiver.requests) == 10
    assert receiver.connections == 1


def test_a_failed_answer_gives_the_start_of_its_body_and_retry_after(
    poster: CallbackPoster, receivers: list[ScriptedReceiver]
) -> None:
    body = b"slow down"
    head = b"HTTP/1.1 429 Too Many\r\nRetry-After: 120\r\ncontent-length: %d" % len(body)
    receiver = serve(receivers, answer_with(head, body))
    outcomes = [poster.post(receiver.url(), "{}", {}) for _ in range(3)]
    assert outcomes[0].status_code == 429 and not outcomes[0].delivered
    assert outcomes[0].error == "slow down" and outcomes[0].retry_after == "120"
    assert receiver.connections == 1, "a failed answer read to its end keeps its connection"


def test_a_chunked_failed_answer_is_read_as_its_body(
    poster: CallbackPoster, receivers: list[ScriptedReceiver]
) -> None:
    chunks = b"3\r\nbad\r\n6\r\n input\r\n0\r\n\r\n"
    head = b"HTTP/1.1 400 Bad Request\r\ntransfer-encoding: chunked"
    receiver = serve(receivers, answer_with(head, chunks))
    outcome = poster.post(receiver.url(), "{}", {})
    assert outcome.status_code == 400 and outcome.error == "bad input"
    assert outcome.retry_after is None


def test_a_failed_answer_without_a_body_names_its_status(
    poster: CallbackPoster, receivers: list[ScriptedReceiver]
) -> None:
    receiver = serve(receivers, answer_with(b"HTTP/1.1 503 Unavailable\r\ncontent-length: 0"))
    outcome = poster.post(receiver.url(), "{}", {})
    assert outcome.status_code == 503 and outcome.error == "HTTP 503"


def test_no_redirect_is_followed(poster: CallbackPoster, receivers: list[ScriptedReceiver]) -> None:
    target = serve(receivers, ok())
    head = b"HTTP/1.1 307 Temporary Redirect\r\nlocation: %s\r\ncontent-length: 0"
    receiver = serve(receivers, answer_with(head % target.url().encode()))
    outcome = poster.post(receiver.url(), "{}", {})
    assert outcome.status_code == 307 and not outcome.delivered
    assert target.requests == [] and len(receiver.requests) == 1


def test_connection_close_is_honoured(
    poster: CallbackPoster, receivers: list[ScriptedReceiver]
) -> None:
    # The receiver asks to close but leaves the connection open: the client closes it.
    head = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2"
    receiver = serve(receivers, answer_with(head, b"ok"))
    assert all(poster.post(receiver.url(), "{}", {}).delivered for _ in range(3))
    assert receiver.connections == 3
    assert [r.connection for r in receiver.requests] == [1, 2, 3]


@pytest.mark.parametrize("status", [200, 500])
def test_an_answer_framed_by_neither_length_nor_chunks_runs_until_close(
    poster: CallbackPoster, receivers: list[ScriptedReceiver], status: int
) -> None:
    head = b"HTTP/1.1 %d Whatever" % status
    receiver = serve(receivers, answer_with(head, b"until the end", keep_open=False))
    outcomes = [poster.post(receiver.url(), "{}", {}) for _ in range(2)]
    assert [o.status_code for o in outcomes] == [status, status]
    if status == 500:
        assert outcomes[0].error == "until the end"
    assert receiver.connections == 2, "a connection that ended its answer is not reused"


def test_a_kept_connection_the_receiver_closed_is_replaced(
    poster: CallbackPoster, receivers: list[ScriptedReceiver]
) -> None:
    # Answers framed and kept alive, then the receiver closes each connection at once
    # (a keep-alive time of nothing): no callback may fail for it.
    receiver = serve(receivers, answer_with(b"HTTP/1.1 200 OK\r\ncontent-length: 0", b"", False))
    for _ in range(5):
        assert poster.post(receiver.url(), "{}", {}).delivered
        time.sleep(0.05)
    assert receiver.connections == 5


def test_a_kept_connection_closed_as_the_request_went_is_replaced_once(
    poster: CallbackPoster, receivers: list[ScriptedReceiver]
) -> None:
    # The receiver answers the first request on a connection and closes on reading the
    # second without a byte back (its keep-alive time ran out as the request came).
    async def first_only(request: Request, writer: asyncio.StreamWriter) -> bool:
        if sum(r.connection == request.connection for r in receiver.requests) > 1:
            return False
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
        return True

    receiver = serve(receivers, first_only)
    outcomes = [poster.post(receiver.url(), "{}", {}) for _ in range(3)]
    assert all(o.delivered for o in outcomes), outcomes
    assert receiver.connections == 3


def test_a_fresh_connection_closed_without_an_answer_is_a_failure(
    poster: CallbackPoster, receivers: list[ScriptedReceiver]
) -> None:
    async def hang_up(request: Request, writer: asyncio.StreamWriter) -> bool:
        return False

    receiver = serve(receivers, hang_up)
    outcome = poster.post(receiver.url(), "{}", {})
    assert outcome.status_code is None and not outcome.delivered
    assert outcome.error is not None and "closed before an answer" in outcome.error
    assert len(receiver.requests) == 1, "not sent again"


def test_an_answer_cut_inside_its_head_is_a_failure(
    poster: CallbackPoster, receivers: list[ScriptedReceiver]
) -> None:
    async def cut(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-")
        return False

    receiver = serve(receivers, cut)
    outcome = poster.post(receiver.url(), "{}", {})
    assert outcome.status_code is None and outcome.error is not None


def test_a_failed_answer_cut_inside_its_body_keeps_its_status_and_start(
    poster: CallbackPoster, receivers: list[ScriptedReceiver]
) -> None:
    head = b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 1000"
    receiver = serve(receivers, answer_with(head, b"upstream gone", keep_open=False))
    outcome = poster.post(receiver.url(), "{}", {})
    assert outcome.status_code == 502 and outcome.error == "upstream gone"


def test_a_failed_answer_reset_inside_its_body_keeps_its_status_and_start(
    poster: CallbackPoster, receivers: list[ScriptedReceiver]
) -> None:
    async def reset(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 500 Oops\r\ncontent-length: 1000\r\n\r\nbroken")
        await writer.drain()
        await asyncio.sleep(0.1)
        linger_at_once = struct.pack("ii", 1, 0)  # close with an RST, not a FIN
        writer.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, linger_at_once
        )
        writer.transport.abort()
        return False

    receiver = serve(receivers, reset)
    outcome = poster.post(receiver.url(), "{}", {})
    assert outcome.status_code == 500 and outcome.error == "broken"


def test_a_delivered_answer_cut_inside_its_body_is_delivered_and_let_go(
    poster: CallbackPoster, receivers: list[ScriptedReceiver]
) -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 1000"
    receiver = serve(receivers, answer_with(head, b"partial", keep_open=False))
    assert poster.post(receiver.url(), "{}", {}).delivered
    assert poster.post(receiver.url(), "{}", {}).delivered
    assert receiver.connections == 2


def test_what_is_not_http_is_a_failure(
    poster: CallbackPoster, receivers: list[ScriptedReceiver]
) -> None:
    receiver = serve(receivers, answer_with(b"SSH-2.0-OpenSSH_9.2", b"", False))
    outcome = poster.post(receiver.url(), "{}", {})
    assert outcome.status_code is None and outcome.error is not None
    assert "not HTTP" in outcome.error


def test_a_head_that_never_ends_is_bounded(
    poster: CallbackPoster, receivers: list[ScriptedReceiver]
) -> None:
    async def endless_head(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\n")
        for n in range(MAX_HEAD_BYTES // 16 + 100):
            writer.write(b"x-pad-%06d: y\r\n" % n)
            await writer.drain()
        await asyncio.sleep(30)
        return False

    receiver = serve(receivers, endless_head)
    began = time.monotonic()
    outcome = poster.post(receiver.url(), "{}", {})
    assert outcome.status_code is None and outcome.error is not None
    assert "head" in outcome.error
    assert time.monotonic() - began < TOTAL_SECONDS, "stopped by the bound, not the deadline"


@pytest.mark.parametrize("status", [200, 500])
def test_a_huge_body_is_read_only_to_the_bound(
    poster: CallbackPoster, receivers: list[ScriptedReceiver], status: int
) -> None:
    body = b"z" * 20_000_000
    head = b"HTTP/1.1 %d Big\r\ncontent-length: %d" % (status, len(body))
    receiver = serve(receivers, answer_with(head, body))
    began = time.monotonic()
    outcome = poster.post(receiver.url(), "{}", {})
    assert time.monotonic() - began < TOTAL_SECONDS
    assert outcome.status_code == status
    if status == 500:
        assert outcome.error == "z" * MAX_RESPONSE_BYTES
    assert poster.post(receiver.url(), "{}", {}).status_code == status
    assert receiver.connections == 2, "a connection with its answer unread is closed"


def test_an_answer_that_never_comes_ends_at_the_deadline(
    poster: CallbackPoster, receivers: list[ScriptedReceiver]
) -> None:
    async def silent(request: Request, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(30)
        return False

    receiver = serve(receivers, silent)
    began = time.monotonic()
    outcome = poster.post(receiver.url(), "{}", {})
    took = time.monotonic() - began
    assert outcome.status_code is None and outcome.error == "no complete answer within 2 s"
    assert TOTAL_SECONDS - 0.1 < took < TOTAL_SECONDS + 1


def test_a_trickled_failed_answer_ends_at_the_deadline(
    poster: CallbackPoster, receivers: list[ScriptedReceiver]
) -> None:
    async def trickle(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 500 Oops\r\ncontent-length: 1000\r\n\r\n")
        for _ in range(300):
            writer.write(b"x")
            await writer.drain()
            await asyncio.sleep(0.05)
        return False

    receiver = serve(receivers, trickle)
    began = time.monotonic()
    outcome = poster.post(receiver.url(), "{}", {})
    assert time.monotonic() - began < TOTAL_SECONDS + 1
    assert outcome.error == "no complete answer within 2 s"


def test_a_trickled_delivered_answer_is_delivered_and_its_connection_let_go(
    poster: CallbackPoster, receivers: list[ScriptedReceiver]
) -> None:
    async def trickle(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n")
        for _ in range(1000):
            writer.write(b"x")
            await writer.drain()
            await asyncio.sleep(0.01)
        return True

    receiver = serve(receivers, trickle)
    began = time.monotonic()
    assert poster.post(receiver.url(), "{}", {}).delivered
    assert time.monotonic() - began < 1.5, "drained for half a second at most"
    assert poster.post(receiver.url(), "{}", {}).delivered
    assert receiver.connections == 2


def test_a_delivered_answer_whose_body_lags_past_the_deadline_is_delivered(
    receivers: list[ScriptedReceiver],
) -> None:
    # The attempt's deadline is shorter than the drain: the drain yields to it, and the
    # 2xx that came stays a delivery (a failure would send the callback again).
    receiver = serve(receivers, answer_with(b"HTTP/1.1 200 OK\r\ncontent-length: 10"))
    poster = CallbackPoster(0.3, policy=LOCAL)
    poster.start()
    try:
        began = time.monotonic()
        outcome = poster.post(receiver.url(), "{}", {})
        took = time.monotonic() - began
    finally:
        poster.close()
    assert outcome.delivered, outcome.error
    assert took < 0.3 + 0.2


def test_callbacks_at_once_share_a_bounded_set_of_connections(
    poster: CallbackPoster, receivers: list[ScriptedReceiver]
) -> None:
    async def slowish(request: Request, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(0.05)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
        return True

    receiver = serve(receivers, slowish)
    with ThreadPoolExecutor(40) as pool:
        outcomes = list(pool.map(lambda _: poster.post(receiver.url(), "{}", {}), range(200)))
    assert all(o.delivered for o in outcomes)
    # 40 at once, 32 connections at most to one host and policy; kept and reused.
    assert receiver.most_open <= 32
    assert receiver.connections <= 32


def test_an_apps_networks_get_connections_of_their_own(
    receivers: list[ScriptedReceiver],
) -> None:
    receiver = serve(receivers, ok())
    poster = CallbackPoster(TOTAL_SECONDS, policy=LOCAL)
    poster.start()
    try:
        for _ in range(3):
            assert poster.post(receiver.url(), "{}", {}).delivered
            assert poster.post(receiver.url(), "{}", {}, parse_networks("127.0.0.1/32")).delivered
    finally:
        poster.close()
    # One connection per policy, each reused: never one shared between them.
    assert receiver.connections == 2
    by_connection = [r.connection for r in receiver.requests]
    assert by_connection[0::2] == [by_connection[0]] * 3
    assert by_connection[1::2] == [by_connection[1]] * 3
    assert by_connection[0] != by_connection[1]


def _certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for HOST, as the receiver's and the CA."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: no certificate to serve TLS with")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    request = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    names = ["-subj", f"/CN={HOST}", "-addext", f"subjectAltName=DNS:{HOST}"]
    subprocess.run(
        [*request, "-keyout", str(key), "-out", str(cert), *names],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_https_sends_sni_checks_the_name_and_keeps_its_connection(
    tmp_path: Path, receivers: list[ScriptedReceiver]
) -> None:
    cert, key = _certificate(tmp_path)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    names: list[str | None] = []

    def remember_name(_: ssl.SSLObject, name: str | None, __: ssl.SSLContext) -> None:
        names.append(name)

    server_tls.sni_callback = remember_name
    receiver = ScriptedReceiver(ok(b"fine"), server_tls)
    receivers.append(receiver)
    trusted = ssl.create_default_context(cafile=str(cert))
    resolver = TableResolver({HOST: ["127.0.0.1"], "other.example.com": ["127.0.0.1"]})
    poster = CallbackPoster(TOTAL_SECONDS, policy=LOCAL, resolver=resolver, ssl_context=trusted)
    poster.start()
    try:
        outcomes = [poster.post(receiver.url(host=HOST), "{}", {}) for _ in range(3)]
        wrong_name = poster.post(receiver.url(host="other.example.com"), "{}", {})
        untrusted = CallbackPoster(TOTAL_SECONDS, policy=LOCAL, resolver=resolver)
        untrusted.start()
        try:
            unknown_ca = untrusted.post(receiver.url(host=HOST), "{}", {})
        finally:
            untrusted.close()
    finally:
        poster.close()
    assert all(o.delivered for o in outcomes), outcomes[0].error
    assert names[0] == HOST
    assert receiver.requests[0].header("host") == [f"{HOST}:{receiver.port}"]
    assert len({r.connection for r in receiver.requests}) == 1, "one TLS connection, reused"
    assert not wrong_name.delivered and "certificate" in str(wrong_name.error).lower()
    assert not unknown_ca.delivered and "certificate" in str(unknown_ca.error).lower()
