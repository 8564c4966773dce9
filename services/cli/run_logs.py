"""``kairos executions logs``: an execution's run log, whole or followed while it runs."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from services.cli.render import print_json

if TYPE_CHECKING:
    from services.api.run_logs import RunLogPage

FOLLOW_POLL_SECONDS = 1.0
PAGE_LINES = 1000


def add_logs_parser(executions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``kairos executions logs EXECUTION_ID [--follow] [-o table|json]``."""
    logs = executions.add_parser(
        "logs", help="the lines an execution's handler logged (ctx.log and logging)"
    )
    logs.add_argument("execution_id")
    logs.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="keep printing new lines until the execution ends",
    )
    logs.add_argument(
        "-o",
        "--output",
        choices=["table", "json"],
        default="table",
        help="default table; json: one document, or one JSON line per log line with --follow",
    )
    logs.set_defaults(func=cmd_executions_logs)


def cmd_executions_logs(args: argparse.Namespace) -> int:
    """Print an execution's log; with ``--follow``, poll until it has ended."""
    from common.config import ApiSettings
    from services.api.operator.jobs import operator_state
    from services.api.run_logs import operator_run_log

    with operator_state(ApiSettings()) as state:

        def read(after: int) -> RunLogPage:
            with state.engine.connect() as conn:
                return operator_run_log(conn, args.execution_id, after, PAGE_LINES)

        if args.follow:
            follow_log(read, json_lines=args.output == "json")
        else:
            print_whole_log(read, as_json=args.output == "json")
    return 0


def print_whole_log(read: Callable[[int], RunLogPage], as_json: bool) -> None:
    """Every line stored now, as a table or one JSON document."""
    pages: list[RunLogPage] = []
    after = 0
    while True:
        page = read(after)
        pages.append(page)
        if not page.lines:
            break
        after = page.nextAfter
    last = pages[-1]
    lines = [line for p in pages for line in p.lines]
    if as_json:
        whole = last.model_copy(update={"lines": lines, "nextAfter": after})
        print_json(whole.model_dump(mode="json"))
        return
    for line in lines:
        print(_text(line.at, line.level, line.line))
    if not lines:
        print(f"(no log lines; the execution is {last.status})")


def follow_log(
    read: Callable[[int], RunLogPage],
    json_lines: bool,
    poll: float = FOLLOW_POLL_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Print lines as they are stored, until the execution has ended and a read finds no
    more; how many were printed."""
    after, printed = 0, 0
    while True:
        page = read(after)
        for line in page.lines:
            if json_lines:
                print(json.dumps(line.model_dump(mode="json"), ensure_ascii=False), flush=True)
            else:
                print(_text(line.at, line.level, line.line), flush=True)
        printed += len(page.lines)
        after = page.nextAfter
        if page.lines:
            continue
        if page.ended:
            return printed
        sleep(poll)


def _text(at: str, level: str, line: str) -> str:
    return f"{at}  {level:<7}  {line}"
