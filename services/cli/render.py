"""How ``kairos`` prints what it reads: tables that fit the terminal (rich), or JSON.

Ids are never cut: a column of ids is as wide as its longest id, and the other columns
give way (free text is shortened with an ellipsis) when the terminal is narrower than
the table. Output to a pipe or a file is not fitted to any width, so every line is
whole for grep; ``COLUMNS`` still sets a width when given.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any, Literal

from rich.console import Console
from rich.table import Table

from common.timefmt import iso_ms

UNFITTED_WIDTH = 10_000
"""The width a table may take when nothing is there to fit it to (a pipe, a file)."""

Kind = Literal["id", "num", "text", "word"]


@dataclass(frozen=True)
class Column:
    """A table column: ``id`` (never cut), ``num`` (right-aligned), ``word`` (short,
    never cut) or ``text`` (cut with an ellipsis when the terminal is narrow).

    When even that does not fit, columns are left out, lowest ``keep`` first (the
    last of equals first); ids are kept.
    """

    header: str
    kind: Kind = "word"
    keep: int = 1


def make_console(stream: IO[str] | None = None) -> Console:
    """A rich console on ``stream`` (stdout): as wide as the terminal, or unfitted."""
    out = stream or sys.stdout
    width = None
    if not out.isatty() and "COLUMNS" not in os.environ:
        width = UNFITTED_WIDTH
    return Console(file=out, width=width, highlight=False, soft_wrap=False, emoji=False)


def _column_options(column: Column, cells: Sequence[str]) -> dict[str, Any]:
    widest = max([len(column.header), *(len(c) for c in cells)])
    if column.kind == "text":
        return {"overflow": "ellipsis", "no_wrap": True, "ratio": 1, "min_width": 8}
    options: dict[str, Any] = {"no_wrap": True, "min_width": widest}
    if column.kind == "num":
        options["justify"] = "right"
    return options


TEXT_MIN_WIDTH = 8
GAP = 2
"""Spaces between two columns."""


def _least_width(column: Column, cells: Sequence[str]) -> int:
    widest = max([len(column.header), *(len(c) for c in cells)])
    return min(widest, TEXT_MIN_WIDTH) if column.kind == "text" else widest


def fitting_columns(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int
) -> list[int]:
    """The indexes of the columns to show in ``width`` characters: all of them when
    they fit, else without the lowest ``keep`` ones (ids are never left out)."""
    least = [_least_width(c, [r[i] for r in rows]) for i, c in enumerate(columns)]
    shown = list(range(len(columns)))
    droppable = sorted(
        (i for i, c in enumerate(columns) if c.kind != "id"),
        key=lambda i: (columns[i].keep, -i),
    )
    while sum(least[i] for i in shown) + GAP * (len(shown) - 1) > width and droppable:
        shown.remove(droppable.pop(0))
    return shown


def _text_width(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], shown: list[int], width: int
) -> int:
    """The width each shown text column may take: what the others leave, shared."""
    texts = [i for i in shown if columns[i].kind == "text"]
    if not texts:
        return width
    others = sum(_least_width(columns[i], [r[i] for r in rows]) for i in shown if i not in texts)
    left = width - others - GAP * (len(shown) - 1)
    return max(TEXT_MIN_WIDTH, left // len(texts))


def print_table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    empty: str,
    console: Console | None = None,
) -> None:
    """Print ``rows`` under ``columns``, or the line ``empty`` when there are none."""
    out = console or make_console()
    if not rows:
        out.print(empty, markup=False)
        return
    table = Table(
        box=None, pad_edge=False, show_edge=False, header_style="bold", padding=(0, GAP // 2)
    )
    shown = fitting_columns(columns, rows, out.width)
    text_width = _text_width(columns, rows, shown, out.width)
    for index in shown:
        cells = [row[index] for row in rows]
        options = _column_options(columns[index], cells)
        if columns[index].kind == "text":
            options["max_width"] = text_width
        table.add_column(columns[index].header, **options)
    for row in rows:
        table.add_row(*(row[index] for index in shown))
    _print_trimmed(out, table)


def _print_trimmed(out: Console, renderable: Table) -> None:
    """Print without the spaces rich pads the last column with."""
    with out.capture() as captured:
        out.print(renderable, markup=False)
    for line in captured.get().splitlines():
        out.file.write(line.rstrip() + "\n")


def print_json(data: object, stream: IO[str] | None = None) -> None:
    """Print ``data`` as indented JSON, one document."""
    print(json.dumps(data, indent=2, ensure_ascii=False), file=stream or sys.stdout)


def print_facts(facts: Sequence[tuple[str, str]], console: Console | None = None) -> None:
    """Print ``name: value`` lines with the names aligned."""
    out = console or make_console()
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for name, value in facts:
        grid.add_row(name, value)
    _print_trimmed(out, grid)


def seconds_text(seconds: float) -> str:
    """A span for a terminal: ``850ms``, ``4.2s``, ``3m10s``, ``2h05m``, ``3d4h``."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h"


def when_text(epoch_ms: int | None, now_ms: int) -> str:
    """An instant with how far it is from now: ``2026-12-01T14:00:00Z (in 3m05s)``."""
    if epoch_ms is None:
        return "-"
    shown = (iso_ms(epoch_ms) or "?")[:19] + "Z"
    delta = (epoch_ms - now_ms) / 1000
    relative = f"in {seconds_text(delta)}" if delta >= 0 else f"{seconds_text(-delta)} ago"
    return f"{shown} ({relative})"


def one_line(text: str | None, limit: int = 200) -> str:
    """Free text on one line, at most ``limit`` characters ("-" for none)."""
    if not text:
        return "-"
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
