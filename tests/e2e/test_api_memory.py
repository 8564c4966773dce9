"""A real ``kairos api`` process meets 50 MiB request bodies without growing by them."""

from __future__ import annotations

import select
import socket
from collections.abc import Iterator

import psutil
import pytest

from tests.e2e.harness import Processes, free_port, wait_healthy

BIG = 50 * 1024 * 1024
PIECE = 64 * 1024
# The API may allocate a little while it answers; a body it read would cost 50 MiB+.
MAX_GROWTH = 20 * 1024 * 1024


def _pieces(total: int, chunked: bool) -> Iterator[bytes]:
    for _ in range(total // PIECE):
        yield (b"%x\r\n" % PIECE + b" " * PIECE + b"\r\n") if chunked else b" " * PIECE
    if chunked:
        yield b"0\r\n\r\n"


def _read_answer(sock: socket.socket) -> bytes:
    """The response's head (status line and headers), read until the blank line."""
    answer = b""
    while b"\r\n\r\n" not in answer:
        data = sock.recv(65536)
        if not data:
            break
        answer += data
    return answer


def send_until_answered(port: int, head: bytes, body: Iterator[bytes]) -> bytes:
    """Send ``head``, then ``body`` piece by piece until the server answers; the answer.

    A server that answers early (without reading) is heard before the next piece goes.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(head)
        for piece in body:
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                break
            try:
                sock.sendall(piece)
            except (BrokenPipeError, ConnectionResetError):
                break
        return _read_answer(sock)


def _head(port: int, length_header: bytes) -> bytes:
    return (
        b"POST /openapi/jobs HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
        b"Content-Type: application/json\r\n%s\r\n\r\n" % (port, length_header)
    )


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_50_mib_unauthenticated_body_is_413_and_never_held(
    processes: Processes, chunked: bool
) -> None:
    port = free_port()
    api = processes.start("api", "api", "--port", str(port))
    wait_healthy(port)
    small = send_until_answered(port, _head(port, b"Content-Length: 2"), iter([b"{}"]))
    assert small.startswith(b"HTTP/1.1 401"), small
    before = psutil.Process(api.pid).memory_info().rss
    length = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % BIG
    answer = send_until_answered(port, _head(port, length), _pieces(BIG, chunked))
    grown = psutil.Process(api.pid).memory_info().rss - before
    assert answer.startswith(b"HTTP/1.1 413"), answer
    assert b"application/problem+json" in answer
    assert grown < MAX_GROWTH, f"the API grew by {grown / 2**20:.1f} MiB"
    assert send_until_answered(port, _head(port, b"Content-Length: 2"), iter([b"{}"])).startswith(
        b"HTTP/1.1 401"
    )
