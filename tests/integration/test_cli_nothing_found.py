"""One "nothing found" convention across the CLI's lists: a table says so in one line
that starts with "no ", JSON is an object whose list is empty."""

from __future__ import annotations

import json

import pytest

from common.config import StoreSettings
from services.cli import main

TABLES = [
    ["jobs", "list"],
    ["workers"],
    ["app", "list"],
    ["callbacks", "dead"],
    ["executions", "stuck"],
    ["operator", "list"],
]
JSON = {
    ("jobs", "list"): "jobs",
    ("workers",): "workers",
    ("callbacks", "dead"): "deliveries",
    ("executions", "stuck"): "executions",
}


@pytest.fixture
def in_namespace(namespace: StoreSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAIROS_NAMESPACE", namespace.namespace)


@pytest.mark.parametrize("command", TABLES, ids=" ".join)
def test_an_empty_table_is_one_line_that_says_so(
    in_namespace: None, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(command) == 0
    out = capsys.readouterr().out
    assert out.startswith("no ") and out.count("\n") == 1, out


@pytest.mark.parametrize("command", list(JSON), ids=" ".join)
def test_an_empty_json_list_is_an_object_naming_its_list(
    in_namespace: None, command: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*command, "-o", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert isinstance(shown, dict) and shown[JSON[command]] == []
