"""Signing a test client in to the console, and reading the forms of its pages."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.db.operators import create_operator

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')
_SIGN_IN = re.compile(r'name="sign_in" value="([^"]+)"')


def make_operator(engine: Engine, name: str = "alice") -> str:
    """Create an operator; its token."""
    with engine.begin() as conn:
        return create_operator(conn, name, 0)


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
