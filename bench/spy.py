"""py-spy around a block: the interpreter-holding stacks of one process, raw format.

py-spy is a bench-only dependency (``bench/requirements-callbacks.txt``), started as a
subprocess next to this interpreter; it writes its profile when it gets SIGINT. A box
that forbids ptrace (no CAP_SYS_PTRACE, a strict ``ptrace_scope``) makes it exit at
once: that is ``SpyUnavailable``, and the block runs unprofiled.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness import BenchError

PY_SPY = Path(sys.executable).parent / "py-spy"
ATTACH_SECONDS = 1.0
WRITE_SECONDS = 60.0


class SpyUnavailable(BenchError):
    """py-spy is not installed or could not attach to the process."""


@contextmanager
def recording(pid: int, raw: Path, rate: int = 100) -> Iterator[None]:
    """Sample ``pid`` (GIL-holding threads only) into ``raw`` while the block runs."""
    if not PY_SPY.exists():
        raise SpyUnavailable(
            f"{PY_SPY} is missing: pip install -r bench/requirements-callbacks.txt"
        )
    argv = [str(PY_SPY), "record", "--gil", "-f", "raw", "-r", str(rate), "-o", str(raw)]
    spy = subprocess.Popen(
        [*argv, "--pid", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    time.sleep(ATTACH_SECONDS)
    if spy.poll() is not None:
        error = spy.stderr.read().decode(errors="replace") if spy.stderr else ""
        raise SpyUnavailable(f"py-spy exited {spy.returncode}: {error.strip()[-500:]}")
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=WRITE_SECONDS)
