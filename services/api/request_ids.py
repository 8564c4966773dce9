"""Every request gets an id: sent back in ``Request-Id``, named in every problem's
``instance`` and carried by every log line written while the request is served
(``common.log_context``), so a client's report finds the server's lines.

The middleware is the outermost layer, so every answer carries the header (a 413 from
the body limit, a 500 too). An error nothing else handled becomes a 500 problem here,
its text logged with the id and never shown to the client.
"""

from __future__ import annotations

import logging
import re
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from common.log_context import bind_request_id, release_request_id
from services.api.problem_types import ProblemType
from services.api.problems import problem

log = logging.getLogger(__name__)

HEADER = "Request-Id"
# A request id a client sends is kept when it is short and plain; otherwise one is made.
_CLIENT_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def request_id(scope: Scope) -> str:
    """The id of the request ``scope`` belongs to (set by ``RequestIds``)."""
    state = scope.get("state") or {}
    return str(state.get("request_id", ""))


def given_request_id(scope: Scope) -> str | None:
    """The request id the client sent in ``Request-Id``, when it is short and plain."""
    for name, value in scope.get("headers", ()):
        if name == b"request-id":
            text = value.decode("latin-1")
            return text if _CLIENT_ID.fullmatch(text) else None
    return None


class RequestIds:
    """ASGI middleware: a request id on every response, and a 500 problem for a crash."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Name the request, add ``Request-Id`` to its answer, answer 500 for a crash."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = given_request_id(scope) or uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = rid
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = [(k, v) for k, v in message.get("headers", []) if k != b"request-id"]
                message = {**message, "headers": [*headers, (b"request-id", rid.encode())]}
            await send(message)

        token = bind_request_id(rid)
        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            log.exception("request %s failed", rid, extra={"request_id": rid})
            if started:
                raise
            crashed = problem(
                ProblemType.INTERNAL_ERROR,
                "the API met an error it did not expect (logged with this request's id); "
                f"retry, and report request id {rid} if it happens again",
                rid,
            )
            await crashed(scope, receive, send_with_id)
        finally:
            release_request_id(token)
