"""An upkeep step that fails for a reason of its own does not stop the others: driven
through ``Upkeep.sweep()`` itself, with every step a fake that records it ran."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest
from pika.exceptions import AMQPConnectionError

from services.dispatcher.upkeep import sweep as sweep_module
from services.dispatcher.upkeep.recall import RecallSettings
from services.dispatcher.upkeep.reconcile import ReconcileSettings
from services.dispatcher.upkeep.rescue import RescueSettings
from services.dispatcher.upkeep.sweep import Upkeep, UpkeepSettings
from services.dispatcher.upkeep.timeouts import TimeoutSettings

STEPS = [
    "epoch",
    "rescue",
    "draining",
    "recall",
    "timeouts",
    "callbacks",
    "alert summaries",
    "gauges",
    "reconcile",
]


class Steps:
    """Fake steps: each records its name, then raises what ``failures`` holds for it."""

    def __init__(self, failures: dict[str, Exception]) -> None:
        self.ran: list[str] = []
        self.failures = failures

    def step(self, name: str) -> Callable[..., None]:
        def run(*_args: object) -> None:
            self.ran.append(name)
            if name in self.failures:
                raise self.failures[name]

        return run


def upkeep_of(steps: Steps, monkeypatch: pytest.MonkeyPatch) -> Upkeep:
    """An Upkeep whose every step is one of ``steps`` (no store behind any of them)."""
    monkeypatch.setattr(sweep_module, "republish_stale_deliveries", steps.step("callbacks"))
    upkeep = object.__new__(Upkeep)
    upkeep._stores = SimpleNamespace(  # type: ignore[assignment]
        engine=None, clock=SimpleNamespace(now_ms=lambda: 0), redis=None, keys=None
    )
    upkeep._marks = SimpleNamespace(epoch=steps.step("epoch"))  # type: ignore[assignment]
    upkeep._publisher = None  # type: ignore[assignment]
    upkeep._settings = UpkeepSettings(
        RescueSettings(15_000, 3_600_000),
        TimeoutSettings(1_000, 1_000),
        pending_republish_ms=5_000,
        reconcile=ReconcileSettings(300_000, 604_800),
        recall=RecallSettings(604_800),
    )
    upkeep.rescue = SimpleNamespace(  # type: ignore[assignment]
        rescue_dead_workers=steps.step("rescue"),
        move_off_draining_workers=steps.step("draining"),
    )
    upkeep._recall = SimpleNamespace(recall_surplus=steps.step("recall"))  # type: ignore[assignment]
    upkeep._timeouts = SimpleNamespace(sweep=steps.step("timeouts"))  # type: ignore[assignment]
    upkeep._gauges = SimpleNamespace(refresh=steps.step("gauges"))  # type: ignore[assignment]
    upkeep._alerts = SimpleNamespace(  # type: ignore[assignment]
        send_summaries=steps.step("alert summaries")
    )
    upkeep._reconciler = SimpleNamespace(sweep=steps.step("reconcile"))  # type: ignore[assignment]
    upkeep._next_reconcile = 0.0
    return upkeep


def test_every_step_runs_when_each_fails_on_its_own_data(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = Steps({name: ValueError(f"a row {name} cannot handle") for name in STEPS})
    upkeep_of(steps, monkeypatch).sweep()
    assert steps.ran == STEPS
    for name in STEPS:
        assert f"upkeep step {name} failed" in caplog.text


def test_a_step_failing_on_its_data_leaves_the_next_ones_to_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    steps = Steps({"rescue": ValueError("a row no step can handle")})
    upkeep_of(steps, monkeypatch).sweep()
    assert steps.ran == STEPS


def test_a_store_outage_stops_the_sweep(monkeypatch: pytest.MonkeyPatch) -> None:
    steps = Steps({"rescue": AMQPConnectionError()})
    with pytest.raises(AMQPConnectionError):
        upkeep_of(steps, monkeypatch).sweep()
    assert steps.ran == ["epoch", "rescue"]
