"""Roles allow what the roles below them allow; an app scope reaches its apps or all."""

from __future__ import annotations

from common.db.operators import Operator
from common.operator_roles import EVERY_APP, AppScope, Role, RoleRequiredError


def test_each_role_allows_what_the_roles_below_it_allow_and_no_more() -> None:
    order = [Role.VIEWER, Role.OPERATOR, Role.ADMIN]
    for i, have in enumerate(order):
        for j, needed in enumerate(order):
            assert have.allows(needed) is (i >= j)


def test_a_scope_reaches_its_apps_and_every_app_scope_reaches_all() -> None:
    scope = AppScope.of([3, 5])
    assert scope.includes(3) and not scope.includes(4) and not scope.every_app
    assert EVERY_APP.includes(4) and EVERY_APP.every_app
    assert AppScope.of(None) == EVERY_APP


def test_an_operator_is_a_viewer_of_every_app_unless_told_and_refusals_say_what_to_do() -> None:
    operator = Operator(1, "vera")
    assert operator.may("viewer") and not operator.may(Role.OPERATOR) and operator.every_app
    refused = RoleRequiredError("vera", Role.VIEWER, Role.OPERATOR, "pausing a job")
    assert "kairos operator set vera --role operator" in str(refused)
