"""A second `kairos up` or `kairos worker` in a namespace whose stack runs refuses at once
and leaves the running one as it was."""

from __future__ import annotations

import re
import subprocess

import httpx
import redis

from common.config import StoreSettings
from common.keys import RedisKeys
from tests.e2e.harness import KAIROS, Processes, free_port, wait_until


def _run(processes: Processes, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KAIROS, *args], env=processes.env, capture_output=True, text=True, timeout=60
    )


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_second_stack_or_worker_refuses_and_the_first_runs_on(
    processes: Processes, namespace: StoreSettings
) -> None:
    port = free_port()
    processes.start("up", "up", "--port", str(port))
    # The stack migrates, then starts five processes: minutes on a machine others share.
    wait_until(lambda: _healthy(port), 180, what="the first stack's API")
    banner = wait_until(
        lambda: "workers:" in (log := processes.log("up")) and log, 60, what="the banner"
    )
    found = re.search(r"workers:\s+(\S+), (\S+) \(", banner)
    assert found is not None, banner
    worker_id = found.group(1)
    client = redis.Redis.from_url(namespace.redis_url)
    key = RedisKeys(namespace.namespace).worker(worker_id)
    wait_until(lambda: client.hget(key, "incarnation"), 30, what="the worker's heartbeat")
    incarnation = client.hget(key, "incarnation")

    same_port = _run(processes, "up", "--port", str(port))
    assert same_port.returncode == 2, same_port
    assert f"kairos: port {port} is in use: another stack? use --port" in same_port.stderr
    assert "Kairos is up" not in same_port.stdout, "no banner of the first stack's URL"

    other_port = _run(processes, "up", "--port", str(free_port()))
    assert other_port.returncode == 2, other_port
    assert f"another stack runs in namespace '{namespace.namespace}'" in other_port.stderr
    assert f"worker '{worker_id}' is already running" in other_port.stderr

    worker = _run(processes, "worker", "--id", worker_id)
    assert worker.returncode == 2, worker
    assert f"kairos: worker '{worker_id}' is already running" in worker.stderr
    assert "give this worker another --id" in worker.stderr

    assert processes.running["up"].poll() is None, "the first stack runs on"
    assert client.hget(key, "incarnation") == incarnation, "its worker was not replaced"
    assert client.hget(key, "state") == b"ACTIVE"
