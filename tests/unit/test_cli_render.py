"""The CLI's tables: they fit the terminal by leaving columns out, never by cutting ids."""

from __future__ import annotations

import io

from rich.console import Console

from services.cli.render import Column, fitting_columns, print_table, seconds_text, when_text

COLUMNS = [
    Column("WORKER", "id"),
    Column("STATE", keep=9),
    Column("IDLE%", "num", keep=2),
    Column("HANDLERS", "text", keep=4),
]
ROWS = [["a-long-worker-id-that-must-stay-whole", "ACTIVE", "97", "report.daily,report.weekly"]]


def rendered(width: int) -> list[str]:
    out = io.StringIO()
    print_table(COLUMNS, ROWS, "none", Console(file=out, width=width))
    return out.getvalue().splitlines()


def test_a_wide_terminal_shows_every_column() -> None:
    header, row = rendered(120)
    assert header.split() == ["WORKER", "STATE", "IDLE%", "HANDLERS"]
    assert row.split() == ROWS[0]


def test_a_narrow_terminal_leaves_out_the_least_needed_columns_and_keeps_ids_whole() -> None:
    assert fitting_columns(COLUMNS, ROWS, 120) == [0, 1, 2, 3]
    assert fitting_columns(COLUMNS, ROWS, 56) == [0, 1, 3]
    assert fitting_columns(COLUMNS, ROWS, 46) == [0, 1]
    assert fitting_columns(COLUMNS, ROWS, 10) == [0]
    for width in (56, 46):
        lines = rendered(width)
        assert all(len(line) <= width for line in lines), lines
        assert lines[1].startswith(ROWS[0][0] + " ")
    header, row = rendered(56)
    assert header.split() == ["WORKER", "STATE", "HANDLERS"]
    assert row.split()[2].endswith("…")  # free text gives way with an ellipsis


def test_no_rows_print_the_empty_line() -> None:
    out = io.StringIO()
    print_table(COLUMNS, [], "no worker has sent a heartbeat yet", Console(file=out, width=80))
    assert out.getvalue() == "no worker has sent a heartbeat yet\n"


def test_spans_and_instants_read_at_a_glance() -> None:
    assert [seconds_text(s) for s in (0.25, 4.21, 190, 7500, 3 * 86400 + 4 * 3600)] == [
        "250ms",
        "4.2s",
        "3m10s",
        "2h05m",
        "3d4h",
    ]
    now = 1_800_000_000_000
    assert when_text(now + 185_000, now) == "2027-01-15T08:03:05Z (in 3m05s)"
    assert when_text(now - 4_200, now) == "2027-01-15T07:59:55Z (4.2s ago)"
    assert when_text(None, now) == "-"
