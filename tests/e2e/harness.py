"""Running real ``kairos`` processes for end-to-end tests, and a callback receiver."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from tests.stores import free_port as free_port

KAIROS = str(Path(sys.executable).parent / "kairos")


def wait_until(
    check: Callable[[], Any], timeout: float, interval: float = 0.1, what: str = "condition"
) -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


@dataclass
class Processes:
    """Kairos processes started for one test, each with its own log file."""

    env: dict[str, str]
    log_dir: Path
    running: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, name: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
        """Start ``kairos <args>`` as a user would."""
        return self.start_command(name, [KAIROS, *args], **env)

    def start_command(self, name: str, command: list[str], **env: str) -> subprocess.Popen[bytes]:
        """Start ``command`` (one that runs Kairos some other way) as ``name``."""
        log = open(self.log_dir / f"{name}.log", "wb")
        process = subprocess.Popen(
            command, env={**self.env, **env}, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        self.running[name] = process
        return process

    def log(self, name: str) -> str:
        """Everything the named process wrote so far."""
        return (self.log_dir / f"{name}.log").read_text(errors="replace")

    def signal(self, name: str, signum: int) -> None:
        """Send a real signal to one process, by its pid."""
        os.kill(self.running[name].pid, signum)

    def stop_all(self) -> None:
        """SIGTERM every process still running, SIGKILL what does not stop in time."""
        for process in self.running.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.running.values():
            try:
                process.wait(timeout=45)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def run(self, *args: str) -> str:
        """Run a short ``kairos`` command and return its standard output."""
        done = subprocess.run(
            [KAIROS, *args], env=self.env, capture_output=True, text=True, timeout=60, check=True
        )
        return done.stdout


@dataclass
class Api:
    """HTTP access to a running API as one app."""

    base: str
    api_key: str
    signing_secret: str

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    def post_job(self, body: dict[str, Any], **headers: str) -> httpx.Response:
        """POST /openapi/jobs."""
        return httpx.post(
            f"{self.base}/openapi/jobs", json=body, headers=self._headers() | headers, timeout=10
        )

    def act(self, job_id: int, action: str) -> httpx.Response:
        """POST /openapi/jobs/{id}/{action}: pause, resume, trigger or cancel."""
        return httpx.post(
            f"{self.base}/openapi/jobs/{job_id}/{action}", headers=self._headers(), timeout=10
        )

    def trigger(self, job_id: int, params: dict[str, Any] | None = None) -> httpx.Response:
        """POST /openapi/jobs/{id}/trigger, with ``params`` for that run when given."""
        return httpx.post(
            f"{self.base}/openapi/jobs/{job_id}/trigger",
            json=None if params is None else {"params": params},
            headers=self._headers(),
            timeout=10,
        )

    def job(self, job_id: int) -> dict[str, Any]:
        """GET /openapi/jobs/{id} as JSON."""
        response = httpx.get(f"{self.base}/openapi/jobs/{job_id}", headers=self._headers())
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    def executions(self, job_id: int) -> list[dict[str, Any]]:
        """GET /openapi/jobs/{id}/executions, newest first."""
        response = httpx.get(
            f"{self.base}/openapi/jobs/{job_id}/executions", headers=self._headers()
        )
        response.raise_for_status()
        rows: list[dict[str, Any]] = response.json()["executions"]
        return rows

    def wait_status(self, job_id: int, statuses: set[str], timeout: float = 30) -> dict[str, Any]:
        """Poll the job until its status is one of ``statuses``."""
        found: dict[str, Any] = wait_until(
            lambda: (job := self.job(job_id))["status"] in statuses and job,
            timeout,
            what=f"job {job_id} to reach {statuses}",
        )
        return found


def wait_healthy(port: int) -> str:
    """Wait until the API on ``port`` answers /healthz; returns its base URL."""
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(healthy, 60, what="the API to answer /healthz")
    return base


def connect_api(processes: Processes, port: int, probe_handler: str = "demo.noop") -> Api:
    """Wait for /healthz and for a worker's handlers, then create an app via the CLI."""
    base = wait_healthy(port)
    created = json.loads(processes.run("app", "create", "e2e", "--handlers", "*"))
    api = Api(base, created["apiKey"], created["signingSecret"])
    probe = {"jobName": "probe", "jobHandler": probe_handler, "triggerAt": "2100-01-01T00:00:00Z"}
    wait_until(
        lambda: api.post_job(probe).status_code == 202, 30, what="a worker to register handlers"
    )
    return api


@dataclass
class Received:
    """One callback request as the receiver saw it."""

    headers: dict[str, str]
    body: str


class CallbackReceiver:
    """A local HTTP server that records callbacks and answers with scripted status codes."""

    def __init__(self, statuses: list[int] | None = None, delay_seconds: float = 0.0) -> None:
        self.received: list[Received] = []
        self.statuses = list(statuses or [])
        self.delay_seconds = delay_seconds
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = self.rfile.read(length).decode()
                time.sleep(receiver.delay_seconds)
                receiver.received.append(Received(dict(self.headers.items()), body))
                code = receiver.statuses.pop(0) if receiver.statuses else 204
                self.send_response(code)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()


class StallingReceiver:
    """A callback receiver that never finishes an answer until ``release()``.

    ``trickle=False``: it reads each request and then says nothing. ``trickle=True``: it
    sends the status line one byte every half second, never reaching its end.
    ``arrived`` counts the requests that reached it.
    """

    def __init__(self, trickle: bool = False) -> None:
        self.arrived = 0
        self.released = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                receiver.arrived += 1
                line = b"HTTP/1.1 200 OK\r\n"
                for n in range(600):
                    if receiver.released.wait(0.5):
                        break
                    if trickle and n < len(line):
                        try:
                            self.wfile.write(line[n : n + 1])
                            self.wfile.flush()
                        except OSError:
                            return  # the notifier gave up and closed the connection
                self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Let every request held end (with no complete answer)."""
        self.released.set()

    def close(self) -> None:
        """Release what is held and stop serving."""
        self.release()
        self._server.shutdown()
        self._server.server_close()
