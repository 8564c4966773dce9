"""Who may do what in the console: every page needs a session (a viewer reads); every
action needs the operator role; an action that reaches every app (a worker serves them
all) needs an operator with no app list. Checked on the server, whatever a page shows."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request

from common.db.operators import Operator, OperatorSession
from common.operator_roles import EveryAppRequiredError, Role, RoleRequiredError
from services.api.console.session import current_session


def check_role(operator: Operator, needed: Role, what: str) -> None:
    """Refuse (``RoleRequiredError``, a 403 page) what ``operator``'s role does not allow."""
    if not operator.may(needed):
        raise RoleRequiredError(operator.name, operator.role, needed, what)


def check_every_app(operator: Operator, what: str) -> None:
    """Refuse (``EveryAppRequiredError``, a 403 page) to an operator limited to some apps
    what reaches every app."""
    if not operator.every_app:
        raise EveryAppRequiredError(operator.name, what)


def _requiring(needed: Role) -> Callable[[Request], Awaitable[OperatorSession]]:
    async def signed_in_as(request: Request) -> OperatorSession:
        session = await current_session(request)
        check_role(session.operator, needed, f"{request.method} {request.url.path}")
        return session

    return signed_in_as


ActingSessionDep = Annotated[OperatorSession, Depends(_requiring(Role.OPERATOR))]
"""A session whose operator may act (pause, trigger, fail, drain, replay...)."""
