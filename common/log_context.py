"""Fields that every log line written while serving one request carries, without each
call passing them: the request id, held in a context variable.

A context variable follows the request into the threads its handlers run in (Starlette
copies the context there), and is empty everywhere else.
"""

from __future__ import annotations

from contextvars import ContextVar, Token

REQUEST_ID: ContextVar[str | None] = ContextVar("kairos_request_id", default=None)


def bind_request_id(request_id: str) -> Token[str | None]:
    """Name the request being served; ``release_request_id`` with the token ends it."""
    return REQUEST_ID.set(request_id)


def release_request_id(token: Token[str | None]) -> None:
    """The request is answered: its id leaves the context."""
    REQUEST_ID.reset(token)


def current_request_id() -> str | None:
    """The id of the request being served, or None outside a request."""
    return REQUEST_ID.get()
