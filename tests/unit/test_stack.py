"""``kairos up``: which handler modules its workers import, and its children's metrics ports."""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from common.errors import ConfigurationError
from common.probes import Health, serve_probes
from services.cli import build_parser, main
from services.stack import (
    DEMO_HANDLERS,
    Child,
    _children,
    _supervise,
    _with_metrics,
    listen_on,
    run_stack,
    worker_handlers,
)


def test_demo_adds_the_demo_handlers_to_the_modules_given() -> None:
    assert worker_handlers("", demo=True) == DEMO_HANDLERS
    assert worker_handlers("app.jobs, app.reports", demo=False) == "app.jobs,app.reports"
    assert worker_handlers("app.jobs", demo=True) == f"app.jobs,{DEMO_HANDLERS}"
    assert worker_handlers(DEMO_HANDLERS, demo=True) == DEMO_HANDLERS


def test_no_module_at_all_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigurationError, match=r"--handlers.*--demo"):
        worker_handlers(" , ", demo=False)


def test_every_worker_is_started_with_the_handlers(released: list[Child]) -> None:
    released += _children(8000, 3, "app.jobs")[0]
    workers = [c for c in released if c.name.startswith("worker-")]
    assert len(workers) == 3
    for child in workers:
        at = child.argv.index("--handlers")
        assert child.argv[at + 1] == "app.jobs"


def test_up_takes_handlers_and_demo_flags() -> None:
    args = build_parser().parse_args(["up", "--handlers", "app.jobs", "--demo"])
    assert (args.handlers, args.demo) == ("app.jobs", True)


def test_up_without_handlers_stops_before_starting_anything(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KAIROS_HANDLERS", raising=False)
    assert main(["up"]) == 2
    assert "--demo" in capsys.readouterr().err


# A service that dies at its first start and serves on its inherited metrics socket
# at the next (argv[1] is a file that says it started before): answers "ok" to the
# first connection.
DIES_ONCE_THEN_SERVES = (
    "import os, socket, sys, time\n"
    "if not os.path.exists(sys.argv[1]):\n"
    "    open(sys.argv[1], 'w').close()\n"
    "    sys.exit(2)\n"
    "listening = socket.socket(fileno=int(os.environ['KAIROS_METRICS_FD']))\n"
    "conn, _ = listening.accept()\n"
    "conn.sendall(b'ok')\n"
    "time.sleep(60)\n"
)


def _listening() -> socket.socket:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    return taken


@pytest.fixture
def released() -> Iterator[list[Child]]:
    """Children whose metrics sockets the test closes at its end."""
    children: list[Child] = []
    yield children
    for child in children:
        child.release()


def test_a_restarted_child_serves_on_the_metrics_socket_kept_for_it(
    tmp_path: Path, released: list[Child]
) -> None:
    with _listening() as free:
        port = free.getsockname()[1]
    child = Child("notifier", [sys.executable, "-c", DIES_ONCE_THEN_SERVES, str(tmp_path / "ran")])
    released.append(_with_metrics(child, port, set()))
    assert child.metrics_port == port and child.metrics_socket is not None
    child.start()
    try:
        assert _supervise([child], lambda: bool(child.restarts)) == 0
        assert listen_on(port) is None, "the port stayed held between the two starts"
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.settimeout(10)
            assert conn.recv(2) == b"ok", "the restarted child serves on the same port"
    finally:
        assert child.process is not None
        child.process.kill()
        child.process.wait()


# A service that serves "api" on its inherited API socket, once.
SERVES_ON_THE_API_SOCKET = (
    "import os, socket, time\n"
    "listening = socket.socket(fileno=int(os.environ['KAIROS_API_FD']))\n"
    "conn, _ = listening.accept()\n"
    "conn.sendall(b'api')\n"
    "time.sleep(60)\n"
)


def test_the_api_serves_on_the_port_up_bound_for_it(released: list[Child]) -> None:
    kept = listen_on(0)
    assert kept is not None
    port = kept.getsockname()[1]
    child = Child("api", [sys.executable, "-c", SERVES_ON_THE_API_SOCKET], api_socket=kept)
    released.append(child)
    child.start()
    try:
        assert listen_on(port) is None, "held from the choice on, before the API starts"
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.settimeout(10)
            assert conn.recv(3) == b"api"
    finally:
        assert child.process is not None
        child.process.kill()
        child.process.wait()


def test_two_stacks_starting_together_never_get_the_same_metrics_port(
    released: list[Child],
) -> None:
    with _listening() as free:
        port = free.getsockname()[1]
    # Each stack has its own view of what it gave; the port is held from the choice on.
    first = _with_metrics(Child("dispatcher", ["kairos"]), port, set())
    second = _with_metrics(Child("dispatcher", ["kairos"]), port, set())
    released += [first, second]
    assert first.metrics_port == port
    assert second.metrics_port is not None and second.metrics_port != port


def test_a_service_serves_probes_on_a_socket_it_inherited() -> None:
    listening = listen_on(0)
    assert listening is not None
    port = listening.getsockname()[1]
    serve_probes(Health(threading.Event()), 1, "127.0.0.1", listening.detach())
    answer = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10)
    assert answer.status_code == 200 and answer.json() == {"status": "ok"}


def test_a_metrics_port_in_use_moves_the_child_to_the_next_free_one_and_says_so(
    capsys: pytest.CaptureFixture[str], released: list[Child]
) -> None:
    with _listening() as taken:
        port = taken.getsockname()[1]
        given: set[int] = set()
        first = _with_metrics(Child("dispatcher", ["kairos"]), port, given)
        second = _with_metrics(Child("notifier", ["kairos"]), port, given)
        released += [first, second]
    assert first.metrics_port is not None and second.metrics_port is not None
    assert port < first.metrics_port < second.metrics_port, "each its own free port"
    assert first.argv[-2:] == ["--metrics-port", str(first.metrics_port)]
    out = capsys.readouterr().out
    assert f"port {port} is in use; dispatcher serves metrics on {first.metrics_port}" in out


def test_up_refuses_at_once_an_api_port_in_use(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # No store is reached: the refusal comes before the namespace is prepared.
    monkeypatch.setenv("KAIROS_DATABASE_URL", "mysql+pymysql://root@127.0.0.1:1")
    with _listening() as taken:
        port = taken.getsockname()[1]
        assert main(["up", "--demo", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"kairos: port {port} is in use: another stack? use --port (KAIROS_PORT)" in err


def test_up_reads_its_port_from_kairos_port(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KAIROS_DATABASE_URL", "mysql+pymysql://root@127.0.0.1:1")
    with _listening() as taken:
        port = taken.getsockname()[1]
        monkeypatch.setenv("KAIROS_PORT", str(port))
        assert main(["up", "--demo"]) == 2
    assert f"port {port} is in use" in capsys.readouterr().err


def test_the_banner_names_the_real_management_ui_and_the_workers_by_their_ids(
    released: list[Child],
) -> None:
    from common.config import StoreSettings
    from services.stack import banner

    settings = StoreSettings(
        namespace="shop", amqp_management_url="https://ops:s3cret@mq.internal:15671"
    )
    children, _ = _children(8000, 2, "app.jobs")
    released += children
    ids = [c.worker_id for c in children if c.name.startswith("worker-")]
    assert all(ids) and len(set(ids)) == 2
    lines = banner(settings, "http://127.0.0.1:8000", children)
    text = "\n".join(lines)
    assert "rabbitmq ui:    https://mq.internal:15671 (user ops), vhost shop" in lines
    assert "s3cret" not in text and "guest" not in text
    assert f"workers:        {ids[0]}, {ids[1]} (`kairos workers` shows them)" in lines
    for child in children:
        if child.worker_id is not None and child.metrics_port is not None:
            assert f"/metrics ({child.worker_id}; /healthz, /readyz)" in text
    for child in children:
        if child.worker_id is not None:
            at = child.argv.index("--id")
            assert child.argv[at + 1] == child.worker_id


def test_up_runs_as_many_notifiers_as_asked_each_with_its_metrics_port(
    released: list[Child],
) -> None:
    children, _ = _children(8000, 2, "app.jobs", notifiers=3)
    released += children
    notifiers = [c for c in children if "notifier" in c.argv]
    assert [c.name for c in notifiers] == ["notifier", "notifier-2", "notifier-3"]
    ports = [c.metrics_port for c in notifiers]
    assert None not in ports and len(set(ports)) == 3


def test_up_refuses_no_notifier_before_starting_anything() -> None:
    with pytest.raises(ConfigurationError, match="--notifiers 1"):
        run_stack(port=None, workers=2, demo=True, notifiers=0)


def test_up_takes_a_notifier_count() -> None:
    assert build_parser().parse_args(["up", "--notifiers", "2"]).notifiers == 2
    assert build_parser().parse_args(["up"]).notifiers == 1
