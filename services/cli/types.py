"""argparse types for the CLI: the subcommand table each module adds its commands to,
and numeric options (the text read, then held to a range)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeAlias

# What ``add_subparsers`` returns: each CLI module adds its commands to one of these.
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def whole_number(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` to ``high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        _hold(value, str(value), low, high)
        return value

    return parse


def number(low: float, high: float) -> Callable[[str], float]:
    """An argparse type: a number from ``low`` to ``high``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        _hold(value, text, low, high)
        return value

    return parse


def _hold(value: float, shown: str, low: float, high: float) -> None:
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"{shown} is not between {low} and {high}")


def cli_actor() -> str:
    """Who the audit trail names for a change made with the CLI: ``cli:<os user>``."""
    import getpass

    return f"cli:{getpass.getuser()}"
