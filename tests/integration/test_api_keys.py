"""Several API keys per app: a rotation overlaps, a key can be revoked, an app can be
disabled; the CLI runs in-process on the test's namespace, the API with no key cache."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from common.config import ApiSettings, StoreSettings
from common.db.apps import AppCredentials
from services.cli import main


@pytest.fixture(autouse=True)
def on_namespace(namespace: StoreSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAIROS_NAMESPACE", namespace.namespace)


@pytest.fixture
def api(namespace: StoreSettings) -> Iterator[TestClient]:
    from services.api.app import create_app

    settings = ApiSettings(namespace=namespace.namespace, auth_cache_seconds=0)
    with TestClient(create_app(settings)) as client:
        yield client


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def status_with(api: TestClient, key: str) -> int:
    return api.get("/openapi/jobs", headers={"Authorization": f"Bearer {key}"}).status_code


def test_a_rotation_with_overlap_keeps_both_keys_working(
    api: TestClient, app_credentials: AppCredentials, capsys: pytest.CaptureFixture[str]
) -> None:
    app_id, old = app_credentials.app_id, app_credentials.api_key
    code, out, _ = run(capsys, "app", "rotate-key", app_id, "--overlap-hours", "2")
    rotated = json.loads(out)
    assert code == 0 and rotated["keyId"].startswith("key_")
    assert status_with(api, old) == status_with(api, rotated["apiKey"]) == 200
    code, out, _ = run(capsys, "app", "keys", app_id)
    header, *rows = out.splitlines()
    assert header.split() == ["KEY_ID", "CREATED", "ENDS", "STATE"]
    assert [row.split()[-1] for row in rows] == ["active", "active"]
    assert rows[0].split()[0] == app_credentials.key_id
    assert rows[0].split()[2] != "-" and rows[1].split()[2] == "-"


def test_a_rotation_without_overlap_ends_the_old_key(
    api: TestClient, app_credentials: AppCredentials, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = run(capsys, "app", "rotate-key", app_credentials.app_id, "--overlap-hours", "0")
    assert status_with(api, app_credentials.api_key) == 401
    assert status_with(api, json.loads(out)["apiKey"]) == 200


def test_a_revoked_key_stops_and_the_others_go_on(
    api: TestClient, app_credentials: AppCredentials, capsys: pytest.CaptureFixture[str]
) -> None:
    app_id = app_credentials.app_id
    _, out, _ = run(capsys, "app", "rotate-key", app_id)
    new_key = json.loads(out)["apiKey"]
    code, out, err = run(capsys, "app", "revoke-key", app_id, app_credentials.key_id)
    assert code == 0 and json.loads(out)["revoked"] is True
    assert status_with(api, app_credentials.api_key) == 401
    assert status_with(api, new_key) == 200
    code, _, err = run(capsys, "app", "revoke-key", app_id, "key_nope")
    assert code == 2 and "has no key 'key_nope'" in err


def test_a_disabled_app_is_refused_until_enabled(
    api: TestClient, app_credentials: AppCredentials, capsys: pytest.CaptureFixture[str]
) -> None:
    app_id, key = app_credentials.app_id, app_credentials.api_key
    code, out, _ = run(capsys, "app", "disable", app_id)
    assert code == 0 and json.loads(out) == {"appId": app_id, "disabled": True}
    refused = api.get("/openapi/jobs", headers={"Authorization": f"Bearer {key}"})
    assert refused.status_code == 403
    assert refused.json()["type"] == "urn:kairos:problem:app-disabled"
    _, out, _ = run(capsys, "app", "list")
    assert "disabled" in out.splitlines()[1]
    run(capsys, "app", "enable", app_id)
    assert status_with(api, key) == 200


def test_commands_on_an_unknown_app_say_so(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["keys", "app_nope"], ["disable", "app_nope"], ["revoke-key", "app_nope", "k"]):
        code, out, err = run(capsys, "app", *argv)
        assert code == 2 and out == ""
        assert "no app 'app_nope'" in err
