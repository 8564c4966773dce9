"""kairos operator create, list, revoke: the token is printed once and stored hashed."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.config import StoreSettings
from common.db.operators import digest, operator_for_token
from services.cli import main


def run(monkeypatch: pytest.MonkeyPatch, namespace: StoreSettings, *args: str) -> int:
    monkeypatch.setenv("KAIROS_NAMESPACE", namespace.namespace)
    return main(list(args))


def test_an_operator_token_is_printed_once_stored_hashed_and_revoked(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    namespace: StoreSettings,
    engine: Engine,
) -> None:
    assert run(monkeypatch, namespace, "operator", "create", "alice") == 0
    token = json.loads(capsys.readouterr().out)["token"]
    with engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT token_hash FROM operators")).scalar_one()
        assert stored == digest(token) and token not in stored
        assert operator_for_token(conn, token) is not None

    assert run(monkeypatch, namespace, "operator", "create", "alice") == 2
    assert "exists already" in capsys.readouterr().err
    assert run(monkeypatch, namespace, "operator", "create", "no spaces") == 2
    assert "not an operator name" in capsys.readouterr().err

    assert run(monkeypatch, namespace, "operator", "list") == 0
    listed = capsys.readouterr().out
    assert "alice" in listed and token not in listed

    assert run(monkeypatch, namespace, "operator", "revoke", "alice") == 0
    assert run(monkeypatch, namespace, "operator", "revoke", "alice") == 2
    assert "no operator 'alice'" in capsys.readouterr().err
    with engine.connect() as conn:
        assert operator_for_token(conn, token) is None
