"""The command line: bad settings are named, with their flag and variable, not a traceback."""

from __future__ import annotations

import pytest

from services.cli import main


def test_a_bad_flag_value_names_the_setting_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", "--prefetch", "0"]) == 2
    err = capsys.readouterr().err
    assert "invalid setting prefetch (--prefetch or KAIROS_PREFETCH)" in err
    assert "Traceback" not in err


def test_a_bad_variable_names_the_setting(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAIROS_CAPACITY", "many")
    assert main(["worker"]) == 2
    assert "invalid setting capacity (--capacity or KAIROS_CAPACITY)" in capsys.readouterr().err


@pytest.mark.parametrize("hours", ["-1", "inf", "nan", "721", "soon"])
def test_an_overlap_outside_0_to_720_hours_is_refused_before_anything_changes(
    hours: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["app", "rotate-secret", "app_1", "--overlap-hours", hours])
    assert exited.value.code == 2
    assert "--overlap-hours" in capsys.readouterr().err
