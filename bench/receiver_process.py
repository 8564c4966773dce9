"""``bench/fast_receiver.py`` as a child process: its URL, its counts per phase, and
the share of one core it used meanwhile (read from ``/proc/<pid>/stat``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from harness import BenchError

REPO = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")
STARTUP_SECONDS = 10.0


class ReceiverNotStarted(BenchError):
    """The receiver process did not say it listens; its stderr says why."""


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds the process used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # After the command name: state is field 3, utime and stime fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / TICKS


@dataclass
class PhaseSeen:
    """What the receiver saw in one phase; filled in when the phase ends."""

    posts: int = 0
    ids: int = 0
    cpu_share: float = 0.0


class ReceiverProcess:
    """The running receiver; ``start()`` it as a context manager."""

    def __init__(self, process: subprocess.Popen[str], port: int) -> None:
        self._process = process
        self.url = f"http://127.0.0.1:{port}/hook"
        self._stats = f"http://127.0.0.1:{port}/stats"

    @classmethod
    @contextmanager
    def start(cls) -> Iterator[ReceiverProcess]:
        """Start the receiver; SIGTERM it (by pid) on exit."""
        argv = [sys.executable, str(REPO / "bench" / "fast_receiver.py"), "--port", "0"]
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            if not line.startswith("listening "):
                raise ReceiverNotStarted(f"fast_receiver.py printed {line!r}; see its stderr")
            yield cls(process, int(line.split()[1]))
        finally:
            process.terminate()
            process.wait(timeout=10)

    def counts(self, reset: bool = False) -> tuple[int, int]:
        """POSTs and distinct webhook-ids since the last reset."""
        found = json.loads(httpx.get(self._stats + ("?reset=1" if reset else "")).text)
        return int(found["posts"]), int(found["ids"])

    @contextmanager
    def phase(self) -> Iterator[PhaseSeen]:
        """Counts start afresh; on exit, what came and the CPU share meanwhile."""
        self.counts(reset=True)
        seen = PhaseSeen()
        cpu, began = cpu_seconds(self._process.pid), time.monotonic()
        try:
            yield seen
        finally:
            wall = time.monotonic() - began
            seen.cpu_share = round((cpu_seconds(self._process.pid) - cpu) / max(wall, 1e-3), 3)
            seen.posts, seen.ids = self.counts()

    def run_beside(self, argv: list[str], env: dict[str, str]) -> str:
        """Run a command to its end while the receiver serves; its stdout."""
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise BenchError(f"{argv[2:4]} exited {done.returncode}: {done.stderr[-2000:]}")
        return done.stdout
