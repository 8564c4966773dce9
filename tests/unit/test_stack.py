"""``kairos up``: which handler modules its workers import."""

from __future__ import annotations

import pytest

from common.errors import ConfigurationError
from services.cli import build_parser, main
from services.stack import DEMO_HANDLERS, _children, worker_handlers


def test_demo_adds_the_demo_handlers_to_the_modules_given() -> None:
    assert worker_handlers("", demo=True) == DEMO_HANDLERS
    assert worker_handlers("app.jobs, app.reports", demo=False) == "app.jobs,app.reports"
    assert worker_handlers("app.jobs", demo=True) == f"app.jobs,{DEMO_HANDLERS}"
    assert worker_handlers(DEMO_HANDLERS, demo=True) == DEMO_HANDLERS


def test_no_module_at_all_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigurationError, match=r"--handlers.*--demo"):
        worker_handlers(" , ", demo=False)


def test_every_worker_is_started_with_the_handlers() -> None:
    workers = [c for c in _children(8000, 3, "app.jobs") if c.name.startswith("worker-")]
    assert len(workers) == 3
    for child in workers:
        at = child.argv.index("--handlers")
        assert child.argv[at + 1] == "app.jobs"


def test_up_takes_handlers_and_demo_flags() -> None:
    args = build_parser().parse_args(["up", "--handlers", "app.jobs", "--demo"])
    assert (args.handlers, args.demo) == ("app.jobs", True)


def test_up_without_handlers_stops_before_starting_anything(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KAIROS_HANDLERS", raising=False)
    assert main(["up"]) == 2
    assert "--demo" in capsys.readouterr().err
