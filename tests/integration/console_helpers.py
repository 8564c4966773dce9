"""Signing a test client in to the console, and reading the forms of its pages."""

from __future__ import annotations

import re
from collections.abc import Collection

from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.db.operators import create_operator
from common.operator_roles import Role

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')
_SIGN_IN = re.compile(r'name="sign_in" value="([^"]+)"')


def make_operator(
    engine: Engine,
    name: str = "alice",
    role: Role = Role.ADMIN,
    app_pks: Collection[int] | None = None,
) -> str:
    """Create an operator (an admin of every app unless told); its token."""
    with engine.begin() as conn:
        return create_operator(conn, name, 0, role, app_pks)


def sign_in(client: TestClient, token: str, next_path: str = "/console/") -> str:
    """Sign in through the form as a browser would; the page's CSRF token."""
    form = client.get("/console/login")
    found = _SIGN_IN.search(form.text)
    assert found, form.text
    answer = client.post(
        "/console/login",
        data={"token": token, "sign_in": found.group(1), "next": next_path},
        follow_redirects=False,
    )
    assert answer.status_code == 303, answer.text
    return csrf_of(client.get("/console/").text)


def csrf_of(html: str) -> str:
    """The CSRF token the page's forms carry."""
    found = _CSRF.search(html)
    assert found, "the page has a form with a CSRF token"
    return found.group(1)
