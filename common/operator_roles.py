"""What a console operator may do: a role (viewer, operator, admin, each allowing what the
one before it does and more) and the apps it reaches (every app, or those listed).

The console checks both on the server for every page and action; the CLI, run by whoever
holds the cluster's settings, is not limited by them.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from enum import StrEnum

from common.errors import KairosError


class Role(StrEnum):
    """An operator's role: viewers read; operators also act on jobs, executions, workers
    and dead callbacks; admins also manage apps, keys, operators, limits and alerts."""

    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        """The role's place in viewer < operator < admin."""
        return _RANKS[self]

    def allows(self, needed: Role) -> bool:
        """Whether this role may do what ``needed`` may."""
        return self.rank >= needed.rank


_RANKS = {Role.VIEWER: 0, Role.OPERATOR: 1, Role.ADMIN: 2}


@dataclass(frozen=True)
class AppScope:
    """The apps an operator reaches: every app (``app_pks`` None), or those listed by
    row id. Another app's object is, to that operator, an object that does not exist."""

    app_pks: frozenset[int] | None = None

    @classmethod
    def of(cls, app_pks: Collection[int] | None) -> AppScope:
        """The scope of ``app_pks`` (None: every app)."""
        return cls(None if app_pks is None else frozenset(app_pks))

    @property
    def every_app(self) -> bool:
        """Whether the scope reaches every app, present and future."""
        return self.app_pks is None

    def includes(self, app_pk: int | None) -> bool:
        """Whether the app with row id ``app_pk`` is in the scope; what is no app's
        (``None``: an alert) only in a scope of every app."""
        return self.app_pks is None or (app_pk is not None and app_pk in self.app_pks)


EVERY_APP = AppScope()


class RoleRequiredError(KairosError):
    """A signed-in operator asked for something its role or app list does not allow."""

    def __init__(self, operator: str, have: Role, needed: Role, what: str) -> None:
        super().__init__(
            f"{what} needs the {needed.value} role; operator {operator!r} is a {have.value}. "
            f"An admin can change that: kairos operator set {operator} --role {needed.value}"
        )
        self.needed = needed
        self.have = have


class EveryAppRequiredError(KairosError):
    """An operator limited to some apps asked for something that reaches every app (a
    worker serves all of them)."""

    def __init__(self, operator: str, what: str) -> None:
        super().__init__(
            f"{what} reaches every app; operator {operator!r} is limited to some apps. An "
            f"admin can lift that: kairos operator set {operator} --every-app"
        )
