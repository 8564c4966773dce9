"""The operators' CLI without stores: --version, shell completion, and one clear line
when a store does not answer."""

from __future__ import annotations

import subprocess
from importlib import metadata

import pytest

from services.cli import STORE_DOWN_EXIT, build_parser, main
from services.cli.completion import command_levels, completion_script


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"kairos {metadata.version('kairos')}\n"


def test_the_completion_knows_every_command_flag_and_choice() -> None:
    levels = command_levels(build_parser())
    assert {"jobs", "workers", "stats", "completion", "--version"} <= set(
        levels[""].commands
    ) | set(levels[""].flags)
    assert set(levels[" jobs"].commands) == {
        "list",
        "show",
        "executions",
        "pause",
        "resume",
        "trigger",
        "cancel",
        "backfill",
    }
    assert "PAUSED" in levels[" jobs list"].choices["--status"]
    assert {"--from", "--to", "--output"} <= set(levels[" jobs backfill"].flags)
    assert levels[" stats"].choices["--output"] == ["table", "json"]


def complete(line: str, shell_script: str) -> list[str]:
    """What bash offers after ``line`` (the cursor at its end) with the script loaded."""
    words = line.split(" ")
    program = (
        shell_script
        + f"COMP_WORDS=({' '.join(repr(w) for w in words)})\n"
        + f"COMP_CWORD={len(words) - 1}\n"
        + "_kairos_complete\n"
        + 'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True)
    return done.stdout.split()


@pytest.mark.parametrize(
    ("line", "offered"),
    [
        ("kairos jo", ["jobs"]),
        (
            "kairos jobs ",
            ["list", "show", "executions", "pause", "resume", "trigger", "cancel", "backfill"],
        ),
        ("kairos jobs list --st", ["--status"]),
        ("kairos jobs list --status PA", ["PAUSED"]),
        (
            "kairos jobs list --app billing --status ",
            ["WAITING", "RUNNING", "SUCCEEDED", "FAILED", "PAUSED", "CANCELLED"],
        ),
        ("kairos workers -o ", ["table", "json"]),
        ("kairos completion ", ["bash", "zsh"]),
    ],
)
def test_bash_completes_commands_flags_and_choices(line: str, offered: list[str]) -> None:
    script = completion_script(build_parser(), "bash")
    assert sorted(complete(line, script)) == sorted(offered)


def test_the_zsh_script_loads_bash_completion_first(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "zsh"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1] == "autoload -U +X bashcompinit && bashcompinit"
    assert out.rstrip().endswith("complete -F _kairos_complete kairos")


@pytest.mark.parametrize(
    ("argv", "store"),
    [
        (["jobs", "list"], "MySQL"),
        (["jobs", "show", "1"], "MySQL"),
        (["jobs", "pause", "1"], "MySQL"),
        (["workers"], "Redis"),
        (["stats"], "Redis"),
        (["app", "list"], "MySQL"),
        (["executions", "stuck"], "Redis"),
    ],
)
def test_a_store_that_does_not_answer_is_one_line_not_a_traceback(
    argv: list[str],
    store: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("KAIROS_DATABASE_URL", "mysql+pymysql://kairos:s3cret@127.0.0.1:1")
    monkeypatch.setenv("KAIROS_REDIS_URL", "redis://:s3cret@127.0.0.1:1/0")
    assert main(argv) == STORE_DOWN_EXIT
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"kairos: {store} at ") and "is not reachable" in err
    assert "s3cret" not in err and "Traceback" not in err
