"""An upkeep step that fails for a reason of its own does not stop the others."""

from __future__ import annotations

import pytest
from pika.exceptions import AMQPConnectionError

from services.dispatcher.upkeep.sweep import Upkeep


def test_a_step_failing_on_its_data_is_logged_and_the_sweep_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken() -> None:
        raise ValueError("a row no step can handle")

    Upkeep._run("rescue", broken)
    assert "upkeep step rescue failed" in caplog.text


def test_a_store_outage_stops_the_sweep() -> None:
    def outage() -> None:
        raise AMQPConnectionError()

    with pytest.raises(AMQPConnectionError):
        Upkeep._run("rescue", outage)
