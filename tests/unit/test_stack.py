"""``kairos up``: which handler modules its workers import, and its children's metrics ports."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from common.errors import ConfigurationError
from services.cli import build_parser, main
from services.stack import DEMO_HANDLERS, Child, _children, _supervise, worker_handlers


def test_demo_adds_the_demo_handlers_to_the_modules_given() -> None:
    assert worker_handlers("", demo=True) == DEMO_HANDLERS
    assert worker_handlers("app.jobs, app.reports", demo=False) == "app.jobs,app.reports"
    assert worker_handlers("app.jobs", demo=True) == f"app.jobs,{DEMO_HANDLERS}"
    assert worker_handlers(DEMO_HANDLERS, demo=True) == DEMO_HANDLERS


def test_no_module_at_all_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigurationError, match=r"--handlers.*--demo"):
        worker_handlers(" , ", demo=False)


def test_every_worker_is_started_with_the_handlers() -> None:
    workers = [c for c in _children(8000, 3, "app.jobs") if c.name.startswith("worker-")]
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


# Exits 2 as a service does when it cannot bind its metrics port; runs without one.
SERVES_IF_NO_PORT = "import sys, time\nif '--metrics-port' in sys.argv: sys.exit(2)\ntime.sleep(60)"


def test_a_child_whose_metrics_port_was_taken_meanwhile_restarts_without_metrics(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Another stack starting at the same moment saw the port free too, and bound it first.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        child = Child("notifier", [sys.executable, "-c", SERVES_IF_NO_PORT])
        child.argv += ["--metrics-port", str(port)]
        child.metrics_port = port
        child.process = subprocess.Popen(child.argv)
        try:
            assert _supervise([child], lambda: child.metrics_port is None) == 0
            assert "--metrics-port" not in child.argv
            assert child.process.poll() is None, "restarted, and running"
        finally:
            child.process.kill()
            child.process.wait()
    assert f"port {port} is in use; notifier serves no metrics" in capsys.readouterr().out


def test_the_banner_names_the_real_management_ui_and_the_workers_by_their_ids() -> None:
    from common.config import StoreSettings
    from services.stack import banner

    settings = StoreSettings(
        namespace="shop", amqp_management_url="https://ops:s3cret@mq.internal:15671"
    )
    children = _children(8000, 2, "app.jobs")
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
