"""deploy/: the Grafana dashboard and the Prometheus rules use only metrics Kairos
defines, compose provisions both, and the Kubernetes manifests hold together with the
CLI (commands, ports, probes, resources, disruption budgets, grace periods)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import Counter, Gauge, Histogram

from common import metrics
from services.cli import build_parser
from services.worker.main import DRAIN_GRACE_SECONDS

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "kairos.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
K8S = DEPLOY / "k8s"
_METRIC = re.compile(r"\bkairos_[a-z0-9_]+")


def defined_series() -> set[str]:
    """Every series name the metrics of common/metrics.py expose."""
    names: set[str] = set()
    for value in vars(metrics).values():
        if isinstance(value, Counter):
            base = value._name
            names |= {f"{base}_total", f"{base}_created"}
        elif isinstance(value, Histogram):
            base = value._name
            names |= {f"{base}_bucket", f"{base}_count", f"{base}_sum", f"{base}_created"}
        elif isinstance(value, Gauge):
            names.add(value._name)
    return names


def dashboard_exprs() -> list[str]:
    document = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    panels = list(document["panels"])
    for panel in document["panels"]:
        panels += panel.get("panels", [])
    return [t["expr"] for p in panels for t in p.get("targets", [])]


def alert_rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_every_metric_the_dashboard_and_the_alerts_use_exists() -> None:
    exprs = dashboard_exprs() + [str(rule["expr"]) for rule in alert_rules()]
    used = {name for expr in exprs for name in _METRIC.findall(expr)}
    assert used, "no metric found: the files moved?"
    assert used <= defined_series(), sorted(used - defined_series())


def test_the_dashboard_shows_every_kairos_metric() -> None:
    used = {name for expr in dashboard_exprs() for name in _METRIC.findall(expr)}
    families = {re.sub(r"_(total|bucket|count|sum)$", "", name) for name in used}
    defined = {re.sub(r"_(total|bucket|count|sum|created)$", "", n) for n in defined_series()}
    assert defined <= families, sorted(defined - families)


def test_the_alerts_cover_what_operators_must_hear_of() -> None:
    rules = {rule["alert"]: rule for rule in alert_rules()}
    expected = {
        "KairosTriggerLagHigh": "kairos_trigger_lag_seconds_bucket",
        "KairosResultsBacklog": 'queue="kairos.results"',
        "KairosDeadCallbacksGrowing": 'outcome="dead"',
        "KairosNoLiveWorkerForHandler": "kairos_handler_live_workers",
        "KairosExecutionsReconciled": "kairos_executions_reconciled_total",
        "KairosResultsSetAside": "kairos_results_set_aside_total",
    }
    for alert, needle in expected.items():
        assert needle in str(rules[alert]["expr"]), alert
    for name, rule in rules.items():
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
        expr = str(rule["expr"])
        assert expr.count("(") == expr.count(")"), name


def test_compose_provisions_prometheus_with_the_rules_and_grafana_with_the_dashboard() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    services = compose["services"]
    mounts = {
        str(v).rsplit(":", 1)[0] if str(v).endswith(":ro") else str(v)
        for v in services["prometheus"]["volumes"] + services["grafana"]["volumes"]
    }
    assert "./deploy/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml" in mounts
    assert "./deploy/prometheus/alerts.yml:/etc/prometheus/alerts.yml" in mounts
    assert "./deploy/grafana/provisioning:/etc/grafana/provisioning" in mounts
    assert "./deploy/grafana/dashboards:/var/lib/grafana/dashboards" in mounts

    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
    targets: set[str] = set()
    for job in config["scrape_configs"]:
        for static in job.get("static_configs", []):
            targets |= set(static["targets"])
        for dns in job.get("dns_sd_configs", []):
            targets |= {f"{name}:{dns['port']}" for name in dns["names"]}
    parser = build_parser()
    expected = set()
    for name in ("api", "dispatcher", "worker-1", "worker-2", "notifier"):
        command = [str(word) for word in services[name]["command"]]
        expected.add(f"{name}:{parser.parse_args(command[1:]).metrics_port}")
    assert targets == expected

    source = yaml.safe_load(
        (DEPLOY / "grafana" / "provisioning" / "datasources" / "kairos.yml").read_text()
    )["datasources"][0]
    assert source["url"] == "http://prometheus:9090"
    uids = {
        p["datasource"]["uid"]
        for p in json.loads(DASHBOARD.read_text())["panels"]
        if "datasource" in p
    }
    assert uids == {source["uid"]}
    provider = yaml.safe_load(
        (DEPLOY / "grafana" / "provisioning" / "dashboards" / "kairos.yml").read_text()
    )["providers"][0]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"


def k8s_documents() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    return docs


def workloads() -> dict[str, dict[str, Any]]:
    found = {}
    for doc in k8s_documents():
        if doc["kind"] in ("Deployment", "StatefulSet"):
            found[doc["metadata"]["labels"]["app.kubernetes.io/component"]] = doc
    return found


def container(workload: dict[str, Any]) -> dict[str, Any]:
    (only,) = workload["spec"]["template"]["spec"]["containers"]
    return dict(only)


def test_k8s_runs_api_two_dispatchers_workers_and_notifier() -> None:
    found = workloads()
    assert set(found) == {"api", "dispatcher", "worker", "notifier"}
    assert found["dispatcher"]["spec"]["replicas"] == 2
    assert found["worker"]["kind"] == "StatefulSet", "workers keep their ids across restarts"
    parser = build_parser()
    for component, workload in found.items():
        command = container(workload)["command"]
        assert command[0] == "kairos", component
        args = parser.parse_args(command[1:])
        assert args.command == component, component
        spec = workload["spec"]
        labels = spec["template"]["metadata"]["labels"]
        assert spec["selector"]["matchLabels"].items() <= labels.items(), component


@pytest.mark.parametrize("component", ["api", "dispatcher", "worker", "notifier"])
def test_k8s_probes_hit_the_port_the_process_serves_them_on(component: str) -> None:
    workload = workloads()[component]
    spec = container(workload)
    args = build_parser().parse_args(spec["command"][1:])
    port = args.port if component == "api" else args.metrics_port
    assert port is not None, f"{component} serves no probes without --metrics-port"
    named = {p["name"]: p["containerPort"] for p in spec["ports"]}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        check = spec[probe]["httpGet"]
        assert check["path"] == path, f"{component} {probe}"
        assert named.get(check["port"], check["port"]) == port, f"{component} {probe}"
    annotations = workload["spec"]["template"]["metadata"]["annotations"]
    # Every component is scraped on its metrics port, the API too: its own port is public.
    assert args.metrics_port is not None, f"{component} serves no metrics"
    assert annotations["prometheus.io/port"] == str(args.metrics_port)
    assert named.get("metrics") == args.metrics_port, f"{component} names its metrics port"
    env = {e["name"]: e for e in spec.get("env", [])}
    if component != "api":
        config = next(d for d in k8s_documents() if d["kind"] == "ConfigMap")
        assert config["data"]["KAIROS_METRICS_HOST"] == "0.0.0.0"
    if component == "worker":
        assert env["KAIROS_WORKER_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


@pytest.mark.parametrize("component", ["api", "dispatcher", "worker", "notifier"])
def test_k8s_requests_resources_and_reads_stores_from_a_secret(component: str) -> None:
    workload = workloads()[component]
    spec = container(workload)
    requests = spec["resources"]["requests"]
    assert requests["cpu"] and requests["memory"], component
    assert spec["resources"]["limits"]["memory"], component
    sources = {next(iter(s)): next(iter(s.values()))["name"] for s in spec["envFrom"]}
    assert sources == {"configMapRef": "kairos-settings", "secretRef": "kairos-stores"}
    pod = workload["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["allowPrivilegeEscalation"] is False


def test_every_workload_has_a_disruption_budget_and_workers_outlast_their_drain() -> None:
    budgets = [d for d in k8s_documents() if d["kind"] == "PodDisruptionBudget"]
    for component, workload in workloads().items():
        labels = workload["spec"]["template"]["metadata"]["labels"]
        covering = [
            b for b in budgets if b["spec"]["selector"]["matchLabels"].items() <= labels.items()
        ]
        assert len(covering) == 1, component
        spec = covering[0]["spec"]
        assert "minAvailable" in spec or "maxUnavailable" in spec
    grace = workloads()["worker"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > DRAIN_GRACE_SECONDS + 10, "a worker's drain must finish before SIGKILL"


def test_no_secret_value_is_applied_with_the_folder() -> None:
    kinds = {d["kind"] for d in k8s_documents()}
    assert "Secret" not in kinds, "secrets are created by the operator, not applied"
    examples = list(yaml.safe_load_all((K8S / "examples" / "secrets.yaml").read_text()))
    assert {d["metadata"]["name"] for d in examples} == {"kairos-stores", "kairos-migrate"}
