"""Request bodies larger than a setting are answered 413 before they are read.

This runs outside routing, authentication and body parsing, so a large body costs the
API no more memory than the limit, whoever sends it. A body that says its length is
refused on the header alone, unread. One sent in chunks without a length is read up to
the limit before anything else runs (the only copy of it the API ever holds), then
handed on; past the limit it is refused and the rest is never stored. The 413 closes
the connection, so the server stops reading what the client still sends.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.api.problem_types import ProblemType
from services.api.problems import problem, request_id


class BodyTooLarge(Exception):
    """Raised inside the middleware when a chunked body grows past the limit."""


class BodyLimit:
    """ASGI middleware: answer 413 for a body over ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse on the Content-Length header; read a body without one up to the limit."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None:
            if declared > self.max_bytes:
                await self._refuse(scope, receive, send, declared)
                return
            await self.app(scope, receive, send)
            return
        try:
            messages = await self._read_limited(receive)
        except BodyTooLarge:
            await self._refuse(scope, receive, send, None)
            return
        await self.app(scope, _replay(messages, receive), send)

    async def _read_limited(self, receive: Receive) -> list[Message]:
        """Every message of the body, raising ``BodyTooLarge`` past the limit."""
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                return messages
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                raise BodyTooLarge
            if not message.get("more_body", False):
                return messages

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, size: int | None) -> None:
        said = f"says it is {size} bytes" if size is not None else "grew past the limit"
        response = problem(
            ProblemType.BODY_TOO_LARGE,
            f"the request body {said}; the API takes at most {self.max_bytes} bytes "
            "(KAIROS_MAX_BODY_BYTES): split a batch into smaller ones",
            request_id(scope),
            {"Connection": "close"},
        )
        await response(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    """The declared body length; None without one (chunked). A malformed value counts
    as too large, so it never reaches a reader that would trust it."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() and len(text) < 19 else 2**63
    return None


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A receive that hands out ``messages`` first, then whatever ``receive`` gives."""
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed
