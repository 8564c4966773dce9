"""``kairos up``: migrate, then run api, dispatcher, workers and notifier as children."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

import httpx

from common.config import ApiSettings, StoreSettings, WorkerSettings
from common.errors import ConfigurationError, PortInUseError, WorkerIdInUseError
from common.handler_patterns import HandlerPatterns
from common.namespace import app_api_key, prepare_namespace
from common.runtime import open_stores
from common.vhost import management_api
from services.worker.id_guard import refuse_if_running

STOP_GRACE_SECONDS = 40.0
MAX_RESTARTS = 5
RESTART_WINDOW_SECONDS = 60.0
API_METRICS_PORT = 9100
DISPATCHER_METRICS_PORT = 9101
FIRST_WORKER_METRICS_PORT = 9111
NOTIFIER_METRICS_PORT = 9121
# Notifiers past the tenth serve no metrics.
MOST_NOTIFIER_PORTS = 10
DEMO_HANDLERS = "services.worker.demo"
DEMO_APP = "demo"
# How long the API may take to answer: imports alone take seconds on a busy machine.
API_START_SECONDS = 120
# How many ports from a child's own are tried for its metrics.
PORT_SEARCH = 50


@dataclass
class Child:
    """One service process of the stack."""

    name: str
    argv: list[str]
    process: subprocess.Popen[bytes] | None = None
    restarts: list[float] = field(default_factory=list)

    def may_restart(self, now: float) -> bool:
        """True while this child has restarted fewer than 5 times in the last minute."""
        self.restarts = [t for t in self.restarts if now - t < RESTART_WINDOW_SECONDS]
        if len(self.restarts) >= MAX_RESTARTS:
            return False
        self.restarts.append(now)
        return True

    metrics_port: int | None = None
    metrics_socket: socket.socket | None = None
    """The metrics port, bound and listening in ``kairos up`` for as long as it runs:
    every start of the child serves on it (``KAIROS_METRICS_FD``), and no other program
    can take the port between the choice and the child's start."""
    worker_id: str | None = None
    """The id a worker child runs under (``--id``); None for other services."""
    api_socket: socket.socket | None = None
    """The API's port, bound and listening in ``kairos up`` as the metrics ports are
    (``KAIROS_API_FD``); None for other services."""

    def start(self) -> None:
        """Start the child's process, handing it its listening sockets."""
        env = _child_env()
        fds: list[int] = []
        for name, kept in (
            ("KAIROS_METRICS_FD", self.metrics_socket),
            ("KAIROS_API_FD", self.api_socket),
        ):
            if kept is not None:
                fds.append(kept.fileno())
                env[name] = str(fds[-1])
        self.process = subprocess.Popen(self.argv, env=env, pass_fds=fds)

    def release(self) -> None:
        """Close the sockets kept for the child (the stack stops)."""
        for kept in (self.metrics_socket, self.api_socket):
            if kept is not None:
                kept.close()
        self.metrics_socket = self.api_socket = None


def worker_handlers(setting: str, demo: bool) -> str:
    """The ``--handlers`` of the stack's workers: the modules given, and with ``demo`` the
    demo handlers; raises ``ConfigurationError`` when that names none."""
    modules = [m.strip() for m in setting.split(",") if m.strip()]
    if demo and DEMO_HANDLERS not in modules:
        modules.append(DEMO_HANDLERS)
    if not modules:
        raise ConfigurationError(
            "no handler modules for the workers: pass --handlers MODULE[,MODULE...] "
            f"(KAIROS_HANDLERS), or --demo for the demo handlers ({DEMO_HANDLERS})"
        )
    return ",".join(modules)


def _children(
    port: int, workers: int, handlers: str, notifiers: int = 1
) -> tuple[list[Child], set[int]]:
    """The stack's children, and the metrics ports they were given."""
    kairos = [sys.executable, "-m", "services.cli"]
    host = socket.gethostname().split(".")[0]
    taken: set[int] = set()
    stack = [
        _with_metrics(Child("api", [*kairos, "api", "--port", str(port)]), API_METRICS_PORT, taken)
    ]
    stack.append(
        _with_metrics(Child("dispatcher", [*kairos, "dispatcher"]), DISPATCHER_METRICS_PORT, taken)
    )
    for n in range(1, workers + 1):
        worker_id = f"{host}-w{n}"
        argv = [*kairos, "worker", "--id", worker_id, "--handlers", handlers]
        worker = Child(f"worker-{n}", argv, worker_id=worker_id)
        # Worker ports stop short of the notifier's: workers past the tenth serve none.
        metrics_port = FIRST_WORKER_METRICS_PORT + n - 1
        fits = metrics_port < NOTIFIER_METRICS_PORT
        stack.append(_with_metrics(worker, metrics_port, taken) if fits else worker)
    for n in range(1, notifiers + 1):
        # They share the callbacks queue: each delivery's message goes to one of them.
        notifier = Child("notifier" if n == 1 else f"notifier-{n}", [*kairos, "notifier"])
        metrics_port = NOTIFIER_METRICS_PORT + n - 1
        fits = metrics_port < NOTIFIER_METRICS_PORT + MOST_NOTIFIER_PORTS
        stack.append(_with_metrics(notifier, metrics_port, taken) if fits else notifier)
    return stack, taken


def _with_metrics(child: Child, port: int, taken: set[int]) -> Child:
    """Give the child the first free metrics port from ``port`` on that no other child of
    the stack has (another stack or program may hold ``port``), bound here and kept for
    the child (``Child.metrics_socket``), and say when it moved."""
    reserved = _reserve_port(port, taken)
    if reserved is None:
        print(
            f"kairos up: ports {port}-{port + PORT_SEARCH - 1} are in use; {child.name} "
            "serves no metrics"
        )
        return child
    free = reserved.getsockname()[1]
    if free != port:
        print(f"kairos up: port {port} is in use; {child.name} serves metrics on {free}")
    taken.add(free)
    child.argv += ["--metrics-port", str(free)]
    child.metrics_port = free
    child.metrics_socket = reserved
    return child


def _reserve_port(port: int, taken: set[int]) -> socket.socket | None:
    """A socket listening on the first port from ``port`` on that is free and not in
    ``taken``; None past ``PORT_SEARCH`` of them. Bound and listening at once, so two
    stacks starting together cannot both take a port (a check, then a bind by the child
    seconds later, would let them)."""
    for candidate in range(port, port + PORT_SEARCH):
        if candidate not in taken and (listening := listen_on(candidate)) is not None:
            return listening
    return None


def listen_on(port: int, host: str = "127.0.0.1") -> socket.socket | None:
    """A socket bound to ``port`` and listening, as the services' metrics servers bind
    (SO_REUSEADDR); None when the port is in use."""
    listening = socket.socket()
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listening.bind((host, port))
        listening.listen(64)
    except OSError:
        listening.close()
        return None
    return listening


def _child_env() -> dict[str, str]:
    """The environment, less a metrics port (or socket) that every child would take."""
    inherited = ("KAIROS_METRICS_PORT", "KAIROS_METRICS_FD", "KAIROS_API_FD")
    return {k: v for k, v in os.environ.items() if k not in inherited}


def banner(settings: StoreSettings, base: str, children: list[Child]) -> list[str]:
    """What ``kairos up`` prints once the API answers: where each part is, the broker's
    management UI at the address the settings give (its user, never a password), and
    the workers by the ids they run under."""
    management, (user, _) = management_api(settings)
    lines = [
        f"Kairos is up (namespace {settings.namespace})",
        f"swagger ui:     {base}/docs",
        f"console:        {base}/console (sign in with a token from "
        "`kairos operator create NAME --role admin`)",
        f"rabbitmq ui:    {management} (user {user}), vhost {settings.namespace}",
    ]
    workers = [c.worker_id for c in children if c.worker_id is not None]
    lines.append(f"workers:        {', '.join(workers)} (`kairos workers` shows them)")
    label = "metrics:"
    for child in children:
        if child.metrics_port is not None:
            shown = child.worker_id or child.name
            lines.append(
                f"{label:16}http://127.0.0.1:{child.metrics_port}/metrics ({shown}; "
                "/healthz, /readyz)"
            )
            label = ""
    return lines


def _wait_healthy(base: str, deadline_seconds: float) -> bool:
    deadline = time.monotonic() + deadline_seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/healthz", timeout=1.0).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False


def _submit_demo(settings: StoreSettings, base: str) -> None:
    api_key, reused = app_api_key(settings, DEMO_APP, HandlerPatterns(("demo.*",)))
    headers = {"Authorization": f"Bearer {api_key}"}
    body = {"jobName": "hello", "jobHandler": "demo.echo", "params": {"hello": "kairos"}}
    deadline = time.monotonic() + 30
    while True:
        response = httpx.post(f"{base}/openapi/jobs", json=body, headers=headers, timeout=5)
        # Until a worker's first heartbeat lands, demo.echo is not a known handler yet.
        if response.status_code != 422 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    job_id = response.json().get("jobId")
    print(f"demo job:       {json.dumps(response.json())}")
    again = " (a new key of the app made by an earlier --demo)" if reused else ""
    print(f"api key:        {api_key}{again}")
    print(f"status:         curl -H 'Authorization: Bearer {api_key}' {base}/openapi/jobs/{job_id}")
    print(f"executions:     {base}/openapi/jobs/{job_id}/executions")


def _stop_all(children: list[Child]) -> None:
    for child in children:
        if child.process and child.process.poll() is None:
            child.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for child in children:
        if child.process is not None:
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.process.kill()
                child.process.wait()
        child.release()


def run_stack(
    port: int | None,
    workers: int,
    demo: bool,
    handlers: str | None = None,
    notifiers: int = 1,
) -> int:
    """Run the stack until Ctrl-C or SIGTERM; a child that exits is restarted.

    The API listens on ``port`` (default: KAIROS_PORT); one that is taken is refused
    before anything starts, since a second stack in the namespace would run workers
    under the first one's ids. Workers import ``handlers`` (default: KAIROS_HANDLERS),
    plus the demo handlers with ``demo``; ``notifiers`` notifiers deliver callbacks.
    """
    if notifiers < 1:
        raise ConfigurationError(
            f"--notifiers {notifiers}: callbacks need at least one notifier (--notifiers 1)"
        )
    modules = worker_handlers(WorkerSettings().handlers if handlers is None else handlers, demo)
    api = ApiSettings()
    port = api.port if port is None else port
    # Bound here and kept: a check now and a bind by the API seconds later would let
    # another program (or stack) take the port in between.
    api_socket = listen_on(port, api.host)
    if api_socket is None:
        raise PortInUseError(port)
    try:
        settings = StoreSettings()
        prepare_namespace(settings)
        children, _ = _children(port, workers, modules, notifiers)
    except BaseException:
        api_socket.close()
        raise
    children[0].api_socket = api_socket
    stopping = False

    def handle(_signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    base = f"http://127.0.0.1:{port}"
    try:
        _refuse_running_workers(settings, [c.worker_id for c in children if c.worker_id])
        for child in children:
            child.start()
        if not _wait_healthy(base, API_START_SECONDS):
            print(
                f"kairos up: the API did not answer /healthz within {API_START_SECONDS} s",
                file=sys.stderr,
            )
            return 1
        print("\n".join(banner(settings, base, children)))
        if demo:
            _submit_demo(settings, base)
        print("press Ctrl-C to stop", flush=True)
        return _supervise(children, lambda: stopping)
    finally:
        _stop_all(children)


def _refuse_running_workers(settings: StoreSettings, worker_ids: list[str]) -> None:
    """Refuse to start when a worker of this stack's ids runs in the namespace: another
    stack on another port, whose workers these would collide with."""
    stores = open_stores(settings, pool_size=1)
    try:
        for worker_id in worker_ids:
            try:
                refuse_if_running(stores, worker_id)
            except WorkerIdInUseError as e:
                raise ConfigurationError(
                    f"another stack runs in namespace {settings.namespace!r} ({e}); stop it "
                    "first, or start this one with another KAIROS_NAMESPACE"
                ) from e
    finally:
        stores.engine.dispose()


def _supervise(children: list[Child], stopping: Callable[[], bool]) -> int:
    """Restart a child that exits on its own (a store restart can end a service), on
    the metrics socket kept for it; give up on one that keeps failing, so a broken
    set-up is not restarted forever."""
    while not stopping():
        for child in children:
            assert child.process is not None
            code = child.process.poll()
            if code is None:
                continue
            if not child.may_restart(time.monotonic()):
                print(f"kairos up: {child.name} keeps exiting ({code}); stopping", file=sys.stderr)
                return 1
            print(f"kairos up: {child.name} exited with {code}; restarting it", file=sys.stderr)
            child.start()
        time.sleep(0.2)
    return 0
