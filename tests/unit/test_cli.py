"""The command line: bad settings are named, with their flag and variable, not a traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

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


@pytest.fixture
def no_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the stores nowhere: a command that reached one would fail another way."""
    monkeypatch.setenv("KAIROS_DATABASE_URL", "mysql+pymysql://nobody@127.0.0.1:1")
    monkeypatch.setenv("KAIROS_REDIS_URL", "redis://127.0.0.1:1/0")


@pytest.mark.parametrize(
    ("patterns", "says"),
    [
        (["report.*", "bad pattern"], "--allow: 'bad pattern' holds ' '"),
        ([""], "--allow: '' is empty"),
        (["x" * 201], "--allow: 'xxx"),
        ([f"h{i}" for i in range(51)], "--allow: 51 patterns given; an app may have at most 50"),
    ],
)
def test_a_bad_handler_pattern_names_the_flag_before_any_store_is_touched(
    patterns: list[str], says: str, no_store: None, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["app", "handlers", "app_1"] + [arg for p in patterns for arg in ("--allow", p)]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("kairos: ") and says in captured.err
    assert captured.out == "" and "Traceback" not in captured.err


def test_allow_and_all_together_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["app", "handlers", "app_1", "--allow", "report.*", "--all"])
    assert exited.value.code == 2
    assert "--all: not allowed with argument --allow" in capsys.readouterr().err


def _run_into_a_closed_pipe(*args: str) -> subprocess.CompletedProcess[bytes]:
    """Run ``kairos ARGS`` with stdout a pipe whose reader has gone, as after ``| head``."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "services.cli", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=60,
        )
    finally:
        os.close(write_end)


def test_a_reader_that_stops_reading_ends_the_command_quietly_as_sigpipe_would() -> None:
    done = _run_into_a_closed_pipe("completion", "bash")
    assert done.stderr == b"", done.stderr.decode()
    assert done.returncode == 128 + signal.SIGPIPE
