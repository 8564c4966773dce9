"""HTTP/1.1 on one connection, as a callback needs it: a POST written as bytes, and its
answer read with httptools' parser, bounded.

Only what a callback uses is here: one request at a time on a connection, no request
body streaming, no redirects, no content codings (none is asked for). The answer's
head may be at most ``MAX_HEAD_BYTES``; of its body at most the caller's bound is kept,
and reading stops there. An answer framed by neither ``content-length`` nor chunked
coding runs until the receiver closes the connection.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping

import httptools

from common.errors import CallbackAnswerError, CallbackRequestError

# An answer's status line and headers; past this the receiver is not answering HTTP.
MAX_HEAD_BYTES = 64 * 1024
READ_BYTES = 64 * 1024
# What would end a header line early, or smuggle one in.
_BREAKS_A_LINE = re.compile("[\r\n\0]")
# Set by the connection itself, never taken from the caller.
_OWN_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})


def request_bytes(target: str, host: str, headers: Mapping[str, str], body: bytes) -> bytes:
    """A POST of ``body`` to ``target`` (path and query) on ``host`` (the ``Host``
    header: host, and port unless the scheme's default), with ``headers`` as given and
    ``content-type: application/json`` unless they name one. Raises
    ``CallbackRequestError`` for a header that would break the request's framing."""
    lines = [f"POST {target} HTTP/1.1\r\nhost: {host}\r\n"]
    typed = False
    for name, value in headers.items():
        if _BREAKS_A_LINE.search(value) or _BREAKS_A_LINE.search(name) or ":" in name:
            raise CallbackRequestError(
                f"header {name[:40]!r} holds a line break, a NUL or (in its name) a colon"
            )
        lowered = name.lower()
        if lowered in _OWN_HEADERS:
            continue
        typed = typed or lowered == "content-type"
        lines.append(f"{name}: {value}\r\n")
    if not typed:
        lines.append("content-type: application/json\r\n")
    lines.append(f"content-length: {len(body)}\r\n\r\n")
    return "".join(lines).encode("latin-1") + body


class Answer:
    """One answer as httptools' parser reports it: status, Retry-After, how it is
    framed, the start of its body, and whether it is complete."""

    __slots__ = (
        "body",
        "closed",
        "complete",
        "framed",
        "head_done",
        "keep_alive",
        "retry_after",
        "status",
    )

    def __init__(self) -> None:
        self.status = 0
        self.retry_after: str | None = None
        self.framed = False
        self.keep_alive = False
        self.head_done = False
        self.complete = False
        # Complete because the receiver closed the connection (an unframed body).
        self.closed = False
        self.body = bytearray()


class AnswerReader:
    """Reads the answers to the requests written on one connection, one at a time."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader
        self._parser = httptools.HttpResponseParser(self)
        self._answer = Answer()
        self._keep = 0

    # httptools' callbacks, in the order it calls them.

    def on_header(self, name: bytes, value: bytes) -> None:
        """Keep Retry-After; note framing by length or chunks."""
        lowered = name.lower()
        if lowered == b"retry-after":
            self._answer.retry_after = value.decode("latin-1")
        elif lowered in (b"content-length", b"transfer-encoding"):
            self._answer.framed = True

    def on_headers_complete(self) -> None:
        """The head is read (an interim 1xx answer is skipped)."""
        status = self._parser.get_status_code()
        if status >= 200:
            self._answer.status = status
            self._answer.keep_alive = self._parser.should_keep_alive()
            self._answer.head_done = True

    def on_body(self, body: bytes) -> None:
        """Keep the body up to the bound."""
        room = self._keep - len(self._answer.body)
        if room > 0:
            self._answer.body += body[:room]

    def on_message_complete(self) -> None:
        """The answer is complete (an interim 1xx one starts the next)."""
        if self._answer.head_done:
            self._answer.complete = True
        else:
            self._answer = Answer()

    async def head(self, keep_bytes: int) -> Answer:
        """Read the next answer's head; its body will be kept up to ``keep_bytes``.
        Raises ``CallbackAnswerError`` if the connection closes first or what comes is
        not HTTP/1.x."""
        self._answer, self._keep = Answer(), keep_bytes
        taken = 0
        while not self._answer.head_done:
            try:
                data = await self._reader.read(READ_BYTES)
            except OSError as e:  # reset, or a TLS record that does not read
                raise CallbackAnswerError(f"the connection failed: {e}", taken == 0) from e
            if not data:
                raise CallbackAnswerError("the connection closed before an answer", taken == 0)
            taken += len(data)
            self._feed(data)
            if not self._answer.head_done and taken > MAX_HEAD_BYTES:
                raise CallbackAnswerError(f"no end of the answer's head in {MAX_HEAD_BYTES} B")
        return self._answer

    async def body(self) -> bool:
        """Read the current answer's body until it is complete or its kept part full;
        whether it is complete. An unframed body is complete when the connection
        closes; a framed one cut short raises ``CallbackAnswerError``."""
        answer = self._answer
        while not answer.complete and len(answer.body) < self._keep:
            try:
                data = await self._reader.read(READ_BYTES)
            except OSError as e:
                raise CallbackAnswerError(f"the connection failed inside the body: {e}") from e
            if not data:
                if answer.framed:
                    raise CallbackAnswerError("the connection closed inside the answer's body")
                answer.complete = answer.closed = True
                break
            self._feed(data)
        return answer.complete

    def reusable(self) -> bool:
        """Whether the connection may carry another request: the answer was read to
        its end without the connection closing, and did not ask to close."""
        answer = self._answer
        return answer.complete and not answer.closed and answer.keep_alive

    def _feed(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade as e:
            raise CallbackAnswerError("the receiver switched protocols") from e
        except httptools.HttpParserError as e:
            raise CallbackAnswerError(f"the answer is not HTTP/1.1 ({e})") from e
