"""Apps through the CLI: list them, rotate an API key, and the API honours the change."""

from __future__ import annotations

import json
import subprocess

import httpx

from tests.e2e.harness import KAIROS, Processes, free_port, wait_healthy, wait_until


def status_with(base: str, api_key: str) -> int:
    """The status of an authenticated read of a job that does not exist: 404, or 401."""
    headers = {"Authorization": f"Bearer {api_key}"}
    return httpx.get(f"{base}/openapi/jobs/999999", headers=headers, timeout=10).status_code


def test_a_rotated_key_replaces_the_old_one(processes: Processes) -> None:
    port = free_port()
    processes.start("api", "api", "--port", str(port), KAIROS_AUTH_CACHE_SECONDS="0.2")
    base = wait_healthy(port)
    created = json.loads(processes.run("app", "create", "billing"))
    old_key = created["apiKey"]
    assert status_with(base, old_key) == 404
    listed = processes.run("app", "list")
    assert created["appId"] in listed and "billing" in listed
    assert "kairos_" not in listed and "whsec_" not in listed  # no secrets shown
    rotated = json.loads(processes.run("app", "rotate-key", created["appId"]))
    assert rotated["appId"] == created["appId"] and rotated["apiKey"] != old_key
    assert status_with(base, rotated["apiKey"]) == 404
    wait_until(lambda: status_with(base, old_key) == 401, 10, what="the old key to stop working")


def test_rotating_the_key_of_an_unknown_app_says_so(processes: Processes) -> None:
    done = subprocess.run(
        [KAIROS, "app", "rotate-key", "app_nope"],
        env=processes.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert "no app 'app_nope'; `kairos app list` shows the apps" in done.stderr
