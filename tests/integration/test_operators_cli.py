"""kairos operator create, list, set, revoke: the token is printed once and stored hashed;
the role and apps are kept, listed and changed."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.config import StoreSettings
from common.db.operators import digest, operator_for_token
from services.cli import main
from tests.integration.helpers import make_app


def run(monkeypatch: pytest.MonkeyPatch, namespace: StoreSettings, *args: str) -> int:
    monkeypatch.setenv("KAIROS_NAMESPACE", namespace.namespace)
    return main(list(args))


def test_an_operator_token_is_printed_once_stored_hashed_and_revoked(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    namespace: StoreSettings,
    engine: Engine,
) -> None:
    assert run(monkeypatch, namespace, "operator", "create", "alice", "--role", "admin") == 0
    token = json.loads(capsys.readouterr().out)["token"]
    with engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT token_hash FROM operators")).scalar_one()
        assert stored == digest(token) and token not in stored
        assert operator_for_token(conn, token) is not None

    assert run(monkeypatch, namespace, "operator", "create", "alice", "--role", "viewer") == 2
    assert "exists already" in capsys.readouterr().err
    assert run(monkeypatch, namespace, "operator", "create", "no spaces", "--role", "admin") == 2
    assert "not an operator name" in capsys.readouterr().err

    assert run(monkeypatch, namespace, "operator", "list") == 0
    listed = capsys.readouterr().out
    assert "alice" in listed and token not in listed

    assert run(monkeypatch, namespace, "operator", "revoke", "alice") == 0
    assert run(monkeypatch, namespace, "operator", "revoke", "alice") == 2
    assert "no operator 'alice'" in capsys.readouterr().err
    with engine.connect() as conn:
        assert operator_for_token(conn, token) is None


def test_roles_and_app_lists_are_created_listed_and_changed(
    cli: Callable[..., tuple[int, str, str]], engine: Engine
) -> None:
    billing = make_app(engine, "billing").app_id
    reports = make_app(engine, "reports").app_id
    assert cli("operator", "create", "vera", "--role", "viewer")[0] == 0
    status, out, _ = cli("operator", "create", "otto", "--role", "operator", "--app", billing)
    assert status == 0 and json.loads(out.splitlines()[0])["apps"] == [billing]
    status, _, err = cli("operator", "create", "nope", "--role", "operator", "--app", "app_x")
    assert status == 2 and "no app 'app_x'" in err

    def listed() -> dict[str, dict[str, object]]:
        status, out, _ = cli("operator", "list", "-o", "json")
        assert status == 0
        return {o["name"]: o for o in json.loads(out)}

    found = listed()
    assert set(found) == {"vera", "otto"}, "a refused create leaves no operator"
    assert (found["vera"]["role"], found["vera"]["apps"]) == ("viewer", None)
    assert (found["otto"]["role"], found["otto"]["apps"]) == ("operator", [billing])

    assert cli("operator", "set", "otto", "--app", billing, "--app", reports)[0] == 0
    assert listed()["otto"]["apps"] == sorted([billing, reports])
    assert listed()["otto"]["role"] == "operator", "an app change keeps the role"
    assert cli("operator", "set", "vera", "--role", "admin")[0] == 0
    assert listed()["vera"] == {**found["vera"], "role": "admin"}
    assert cli("operator", "set", "otto", "--every-app")[0] == 0
    assert listed()["otto"]["apps"] is None
    status, _, err = cli("operator", "set", "otto")
    assert status == 2 and "--role, --app or --every-app" in err
    status, _, err = cli("operator", "set", "ghost", "--role", "viewer")
    assert status == 2 and "no operator 'ghost'" in err
    status, out, _ = cli("operator", "list")
    assert "otto" in out and "(every app)" in out and "admin" in out
