"""CPU seconds spent by a benchmark's own processes and by the store servers over a window.

On a 2-core box throughput is the inverse of what a job costs in CPU across every
process, the stores included; CPU per job also holds up better than a rate when other
work shares the box. Read from the kernel's accounting (psutil): user plus system time
of each process alive at both ends of the window, its children too (a peer that forks
its workers). The store servers are found by their process names, read only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import psutil
from harness import Service

# Store servers by the names their processes run under on this machine.
STORE_NAMES = {
    "mysqld": ("mariadbd", "mysqld"),
    "rabbitmq": ("beam.smp",),
    "redis": ("redis-server",),
}


def _store_processes() -> dict[str, list[psutil.Process]]:
    found: dict[str, list[psutil.Process]] = {name: [] for name in STORE_NAMES}
    for process in psutil.process_iter(["name"]):
        for store, names in STORE_NAMES.items():
            if process.info["name"] in names:
                found[store].append(process)
    return found


def _with_children(pid: int) -> list[psutil.Process]:
    try:
        process = psutil.Process(pid)
        return [process, *process.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _cpu_seconds(processes: Iterable[psutil.Process]) -> dict[int, float]:
    seconds = {}
    for process in processes:
        try:
            times = process.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        seconds[process.pid] = times.user + times.system
    return seconds


@dataclass
class CpuMeter:
    """CPU seconds by process name between ``start`` and ``stop``."""

    _groups: dict[str, list[psutil.Process]] = field(default_factory=dict)
    _before: dict[str, dict[int, float]] = field(default_factory=dict)

    def start(self, services: Iterable[Service]) -> None:
        """Note each service's (and store server's) CPU time so far."""
        self._groups = dict(_store_processes())
        for service in services:
            if service.process is not None:
                self._groups[service.name] = _with_children(service.process.pid)
        self._before = {name: _cpu_seconds(ps) for name, ps in self._groups.items()}

    def stop(self) -> dict[str, float]:
        """CPU seconds each service and store server used since ``start``."""
        used = {}
        for name, processes in self._groups.items():
            after = _cpu_seconds(processes)
            before = self._before.get(name, {})
            used[name] = sum(after[pid] - before.get(pid, 0.0) for pid in after)
        return used


def per_job_ms(used: dict[str, float], jobs: int) -> dict[str, float]:
    """CPU milliseconds per job by process, and their ``total``."""
    figures = {name: round(seconds * 1000 / jobs, 3) for name, seconds in used.items()}
    figures["total"] = round(sum(used.values()) * 1000 / jobs, 3)
    return figures
