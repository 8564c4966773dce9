"""``kairos up``: which handler modules its workers import, and its children's metrics ports."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from common.errors import ConfigurationError
from services.cli import build_parser, main
from services.stack import (
    DEMO_HANDLERS,
    Child,
    _children,
    _supervise,
    _with_metrics,
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


def test_every_worker_is_started_with_the_handlers() -> None:
    workers = [c for c in _children(8000, 3, "app.jobs")[0] if c.name.startswith("worker-")]
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


# Exits 2 as a service does when it cannot bind its metrics port (the one named in
# argv[1]); serves on any other.
SERVES_IF_PORT_FREE = (
    "import sys, time\n"
    "at = sys.argv.index('--metrics-port')\n"
    "sys.exit(2) if sys.argv[at + 1] == sys.argv[1] else time.sleep(60)"
)


def _listening() -> socket.socket:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    return taken


def test_a_child_whose_metrics_port_was_taken_meanwhile_restarts_on_the_next_free_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Another stack starting at the same moment saw the port free too, and bound it first.
    with _listening() as taken:
        port = taken.getsockname()[1]
        child = Child("notifier", [sys.executable, "-c", SERVES_IF_PORT_FREE, str(port)])
        child.argv += ["--metrics-port", str(port)]
        child.metrics_port = port
        child.process = subprocess.Popen(child.argv)
        try:
            assert _supervise([child], {port}, lambda: child.metrics_port != port) == 0
            assert child.metrics_port is not None and child.metrics_port > port
            assert child.argv[-2:] == ["--metrics-port", str(child.metrics_port)]
            assert wait_running(child), "restarted, and running"
        finally:
            child.process.kill()
            child.process.wait()
    moved = f"port {port} is in use; notifier serves metrics on {child.metrics_port}"
    assert moved in capsys.readouterr().out


def wait_running(child: Child) -> bool:
    """The restarted child is still running a moment later (it did not exit on its port)."""
    assert child.process is not None
    try:
        child.process.wait(timeout=1)
    except subprocess.TimeoutExpired:
        return True
    return False


def test_a_metrics_port_in_use_moves_the_child_to_the_next_free_one_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with _listening() as taken:
        port = taken.getsockname()[1]
        given: set[int] = set()
        first = _with_metrics(Child("dispatcher", ["kairos"]), port, given)
        second = _with_metrics(Child("notifier", ["kairos"]), port, given)
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


def test_the_banner_names_the_real_management_ui_and_the_workers_by_their_ids() -> None:
    from common.config import StoreSettings
    from services.stack import banner

    settings = StoreSettings(
        namespace="shop", amqp_management_url="https://ops:s3cret@mq.internal:15671"
    )
    children, _ = _children(8000, 2, "app.jobs")
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


def test_up_runs_as_many_notifiers_as_asked_each_with_its_metrics_port() -> None:
    children, _ = _children(8000, 2, "app.jobs", notifiers=3)
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
