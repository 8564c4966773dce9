"""`kairos app networks`, `limits` and `show` run in-process on the test's namespace:
what an operator grants an app is stored, shown, and a bad value changes nothing."""

from __future__ import annotations

import json

import pytest
from sqlalchemy.engine import Engine

from common.config import StoreSettings
from common.db.apps import MySqlAppTransactions
from common.db.records import AppLimits
from services.cli import main
from tests.integration.helpers import make_app


@pytest.fixture(autouse=True)
def on_namespace(namespace: StoreSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI reads its settings from KAIROS_* variables: point them at the test's stores."""
    monkeypatch.setenv("KAIROS_NAMESPACE", namespace.namespace)
    monkeypatch.setenv("KAIROS_CALLBACK_ALLOWED_NETWORKS", "10.0.0.0/8")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_an_operator_sets_shows_and_clears_an_apps_callback_networks(
    engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    app = make_app(engine, "billing")
    code, out, _ = run(capsys, "app", "networks", app.app_id)
    assert code == 0
    assert json.loads(out)["callbackNetworks"] is None
    assert json.loads(out)["callbackNetworksInEffect"] == ["10.0.0.0/8"]
    code, out, err = run(
        capsys,
        "app",
        "networks",
        app.app_id,
        "--allow",
        "127.0.0.0/8,10.20.0.0/16",
        "--allow",
        "::1",
    )
    assert code == 0 and "KAIROS_AUTH_CACHE_SECONDS" in err
    assert json.loads(out)["callbackNetworks"] == ["127.0.0.0/8", "10.20.0.0/16", "::1/128"]
    with MySqlAppTransactions(engine).reading() as apps:
        found = apps.find_app_by_key(app.api_key)
        assert found is not None
        assert [str(n) for n in found.callback_networks or ()] == [
            "127.0.0.0/8",
            "10.20.0.0/16",
            "::1/128",
        ]
    code, out, _ = run(capsys, "app", "networks", app.app_id, "--clear")
    assert code == 0 and json.loads(out)["callbackNetworks"] is None
    with MySqlAppTransactions(engine).reading() as apps:
        assert apps.callback_networks(found.id) is None


def test_a_bad_network_or_app_changes_nothing(
    engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    app = make_app(engine, "billing")
    code, out, err = run(capsys, "app", "networks", app.app_id, "--allow", "10.0.0.0/8,nope")
    assert code == 2 and out == "" and "--allow: 'nope' is no network" in err
    code, _, err = run(capsys, "app", "networks", "app_nope", "--allow", "10.0.0.0/8")
    assert code == 2 and "app_nope" in err
    with MySqlAppTransactions(engine).reading() as apps:
        found = apps.find_app_by_key(app.api_key)
    assert found is not None and found.callback_networks is None


def test_an_operator_sets_and_lifts_an_apps_limits(
    engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    app = make_app(engine, "billing")
    code, out, _ = run(capsys, "app", "limits", app.app_id)
    assert code == 0
    assert json.loads(out)["limits"] == {
        "weight": 1,
        "maxRunning": None,
        "maxJobs": None,
        "minCronIntervalSeconds": None,
        "runLogBytesPerHour": None,
        "maxRetries": 100,
    }
    code, out, _ = run(
        capsys,
        "app",
        "limits",
        app.app_id,
        "--weight",
        "3",
        "--max-running",
        "50",
        "--max-jobs",
        "1000",
        "--min-cron-interval",
        "60",
        "--run-log-bytes-per-hour",
        "50000000000",
        "--max-retries",
        "3",
    )
    assert code == 0
    assert json.loads(out)["limits"]["maxRetries"] == 3
    assert json.loads(out)["limits"]["maxRunning"] == 50
    assert json.loads(out)["limits"]["runLogBytesPerHour"] == 50_000_000_000
    with MySqlAppTransactions(engine).reading() as apps:
        found = apps.find_app_by_key(app.api_key)
        assert found is not None
        expected = AppLimits(3, 50, 1000, 60, 50_000_000_000, 3)
        assert apps.app_limits(found.id) == expected == found.limits
        assert apps.run_log_quotas() == {found.id: 50_000_000_000}
    code, out, _ = run(capsys, "app", "limits", app.app_id, "--max-jobs", "none")
    assert code == 0
    with MySqlAppTransactions(engine).reading() as apps:
        assert apps.app_limits(found.id) == AppLimits(3, 50, None, 60, 50_000_000_000, 3)
    for bad in (
        ["--weight", "0"],
        ["--weight", "none"],
        ["--max-running", "-1"],
        ["--run-log-bytes-per-hour", "0"],
        ["--max-retries", "101"],
        ["--max-retries", "none"],
    ):
        with pytest.raises(SystemExit):
            main(["app", "limits", app.app_id, *bad])
    run(capsys, "app", "limits", app.app_id, "--run-log-bytes-per-hour", "none")
    with MySqlAppTransactions(engine).reading() as apps:
        assert apps.app_limits(found.id) == AppLimits(3, 50, None, 60, max_retries=3)
        assert apps.run_log_quotas() == {}


def test_show_prints_everything_an_operator_granted(
    engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    app = make_app(engine, "billing")
    run(capsys, "app", "handlers", app.app_id, "--allow", "report.*")
    run(capsys, "app", "networks", app.app_id, "--allow", "127.0.0.0/8")
    run(capsys, "app", "limits", app.app_id, "--max-running", "5")
    run(capsys, "app", "disable", app.app_id)
    code, out, _ = run(capsys, "app", "show", app.app_id, "-o", "json")
    assert code == 0
    shown = json.loads(out)
    assert shown["handlerPatterns"] == ["report.*"] and shown["disabled"] is True
    assert shown["callbackNetworks"] == ["127.0.0.0/8"]
    assert shown["limits"]["maxRunning"] == 5 and shown["limits"]["weight"] == 1
    code, out, _ = run(capsys, "app", "show", app.app_id)
    assert code == 0
    assert "handlers:           report.*" in out and "max running:        5" in out
    assert "disabled since" in out and "127.0.0.0/8" in out
    assert "run log bytes/hour: none" in out and "max retries:        100" in out
    code, _, err = run(capsys, "app", "show", "app_nope")
    assert code == 2 and "app_nope" in err
