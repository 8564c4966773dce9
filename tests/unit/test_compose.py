"""The container stack: docker-compose.yml and the Dockerfile hold together.

No Docker engine is needed: the files are parsed and checked against the ``kairos`` CLI.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from common.config import ApiSettings
from services.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"

STORES = ("mysql", "redis", "rabbitmq")
KAIROS_SERVICES = ("migrate", "api", "dispatcher", "worker-1", "worker-2", "notifier")
MONITORING = ("prometheus", "grafana")
LONG_RUNNING = ("api", "dispatcher", "worker-1", "worker-2", "notifier")

# ${NAME}, ${NAME:-default}, ${NAME-default} and ${NAME:?error}, as compose reads them.
_VARIABLE = re.compile(
    r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"(?:(?P<op>:?-|:?\?)(?P<word>[^}]*))?\}"
)
REQUIRED_SECRETS = {
    "KAIROS_MYSQL_ADMIN_PASSWORD",
    "KAIROS_MYSQL_PASSWORD",
    "KAIROS_REDIS_PASSWORD",
    "KAIROS_RABBITMQ_ADMIN_PASSWORD",
    "KAIROS_RABBITMQ_PASSWORD",
    "KAIROS_GRAFANA_PASSWORD",
}


def _interpolate(value: str) -> str:
    """The value compose would use with no variable set but the required secrets, each
    set to its own name in lower case (so a test can tell which one landed where)."""

    def one(m: re.Match[str]) -> str:
        if m.group("name") in REQUIRED_SECRETS:
            return m.group("name").lower()
        with_default = (m.group("op") or "").endswith("-")
        return (m.group("word") or "") if with_default else ""

    return _VARIABLE.sub(one, value)


def _mapping(value: object, what: str) -> dict[str, Any]:
    assert isinstance(value, dict), f"{what} must be a mapping, got {value!r}"
    return value


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    """The services of docker-compose.yml, with YAML anchors and merge keys resolved."""
    document = _mapping(yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8")), "the file")
    found = _mapping(document.get("services"), "services")
    return {name: _mapping(spec, f"service {name}") for name, spec in found.items()}


def _command(spec: dict[str, Any]) -> list[str]:
    command = spec.get("command")
    if isinstance(command, str):
        return shlex.split(command)
    assert isinstance(command, list), f"command must be a string or a list, got {command!r}"
    return [str(part) for part in command]


def _environment(spec: dict[str, Any]) -> dict[str, str]:
    env = spec.get("environment", {})
    if isinstance(env, list):
        pairs = (str(item).split("=", 1) for item in env)
        return {pair[0]: pair[1] if len(pair) > 1 else "" for pair in pairs}
    return {str(k): "" if v is None else str(v) for k, v in _mapping(env, "environment").items()}


def _depends_on(spec: dict[str, Any]) -> dict[str, str]:
    """Each dependency with its condition (a plain list means ``service_started``)."""
    deps = spec.get("depends_on", {})
    if isinstance(deps, list):
        return {str(name): "service_started" for name in deps}
    return {
        str(name): str(_mapping(cond, f"depends_on.{name}").get("condition", "service_started"))
        for name, cond in _mapping(deps, "depends_on").items()
    }


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, rest = (pending + line).partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
        pending = ""
    return instructions


def _exec_or_shell(arguments: str) -> list[str]:
    """The words of a CMD or ENTRYPOINT in exec (JSON) form or shell form."""
    if arguments.startswith("["):
        words = json.loads(arguments)
        assert isinstance(words, list)
        return [str(word) for word in words]
    return shlex.split(arguments)


def test_stores_and_kairos_services_exist(services: dict[str, dict[str, Any]]) -> None:
    missing = [name for name in (*STORES, *KAIROS_SERVICES, *MONITORING) if name not in services]
    assert not missing, f"docker-compose.yml lacks services {missing}"


def test_stores_have_healthchecks(services: dict[str, dict[str, Any]]) -> None:
    for name in STORES:
        assert "test" in _mapping(services[name].get("healthcheck"), f"{name}.healthcheck")
    rabbit_test = services["rabbitmq"]["healthcheck"]["test"]
    assert "rabbitmq-diagnostics" in " ".join(map(str, rabbit_test))


def test_store_images(services: dict[str, dict[str, Any]]) -> None:
    assert str(services["mysql"]["image"]).startswith("mariadb:10.11")
    assert str(services["redis"]["image"]).startswith("redis:7")
    image = str(services["rabbitmq"]["image"])
    assert image.startswith("rabbitmq:") and image.endswith("-management"), image
    ports = {str(port) for port in services["rabbitmq"].get("ports", [])}
    assert {"127.0.0.1:5672:5672", "127.0.0.1:15672:15672"} <= ports, "loopback only"


@pytest.mark.parametrize("name", KAIROS_SERVICES)
def test_command_is_a_valid_kairos_command(services: dict[str, dict[str, Any]], name: str) -> None:
    command = _command(services[name])
    assert command[0] == "kairos", f"{name}: command {command} does not start with kairos"
    try:
        args = build_parser().parse_args(command[1:])
    except SystemExit as e:  # argparse exits on anything it does not accept
        pytest.fail(f"{name}: `{shlex.join(command)}` is not accepted by the CLI ({e})")
    assert callable(args.func)


def test_commands_name_the_expected_subcommands(services: dict[str, dict[str, Any]]) -> None:
    subcommands = {name: _command(services[name])[1] for name in KAIROS_SERVICES}
    assert subcommands == {
        "migrate": "migrate",
        "api": "api",
        "dispatcher": "dispatcher",
        "worker-1": "worker",
        "worker-2": "worker",
        "notifier": "notifier",
    }


def test_workers_have_distinct_ids(services: dict[str, dict[str, Any]]) -> None:
    parser = build_parser()
    ids = [parser.parse_args(_command(services[n])[1:]).worker_id for n in ("worker-1", "worker-2")]
    assert all(ids), f"every worker needs a fixed --id, got {ids}"
    assert len(set(ids)) == len(ids), f"worker ids must differ, got {ids}"


@pytest.mark.parametrize("name", ["worker-1", "worker-2"])
def test_workers_register_the_handlers_named_in_kairos_handlers_demo_by_default(
    services: dict[str, dict[str, Any]], name: str
) -> None:
    command = _command(services[name])
    assert "${KAIROS_HANDLERS" in " ".join(command), "operators name their own modules"
    args = build_parser().parse_args([_interpolate(word) for word in command[1:]])
    assert args.handlers == "services.worker.demo"


@pytest.mark.parametrize("name", ["api", "dispatcher", "worker-1", "worker-2", "notifier"])
def test_every_service_serves_metrics_on_the_network_only(
    services: dict[str, dict[str, Any]], name: str
) -> None:
    args = build_parser().parse_args(_command(services[name])[1:])
    assert args.metrics_port == 9100, f"{name} needs --metrics-port 9100"
    environment = _mapping(services[name].get("environment"), f"{name}.environment")
    assert environment.get("KAIROS_METRICS_HOST") == "0.0.0.0", "not 127.0.0.1 in a container"
    assert "9100" in [str(port) for port in services[name].get("expose", [])]
    published = [str(port) for port in services[name].get("ports", [])]
    assert not any("9100" in port for port in published), "metrics stay on the compose network"


def test_dispatcher_runs_two_replicas(services: dict[str, dict[str, Any]]) -> None:
    deploy = _mapping(services["dispatcher"].get("deploy"), "dispatcher.deploy")
    assert deploy.get("replicas") == 2
    assert "--id" not in _command(services["dispatcher"]), "replicas cannot share a fixed id"


def test_api_listens_on_all_interfaces_and_publishes_8000_on_loopback_only(
    services: dict[str, dict[str, Any]],
) -> None:
    api = services["api"]
    args = build_parser().parse_args(_command(api)[1:])
    assert args.host == "0.0.0.0", "the API must not bind 127.0.0.1 inside a container"
    assert args.port == 8000
    published = {str(port) for port in api.get("ports", [])}
    assert published == {"127.0.0.1:8000:8000"}, "other hosts come through a TLS proxy"
    test = " ".join(map(str, _mapping(api.get("healthcheck"), "api.healthcheck")["test"]))
    assert "/healthz" in test


def test_console_cookies_are_secure_by_default(services: dict[str, dict[str, Any]]) -> None:
    environment = _mapping(services["api"].get("environment"), "api.environment")
    assert _interpolate(str(environment["KAIROS_CONSOLE_SECURE_COOKIES"])) == "true"


def test_the_api_limits_each_apps_rate(services: dict[str, dict[str, Any]]) -> None:
    env = {key: _interpolate(value) for key, value in _environment(services["api"]).items()}
    settings = ApiSettings.model_validate(
        {
            "rate_limit_per_second": env["KAIROS_RATE_LIMIT_PER_SECOND"],
            "rate_limit_burst": env["KAIROS_RATE_LIMIT_BURST"],
        }
    )
    assert settings.rate_limit_per_second > 0
    assert settings.rate_limit_burst >= settings.rate_limit_per_second
    others = _environment(services["dispatcher"])
    assert {key: env[key] for key in others} == {k: _interpolate(v) for k, v in others.items()}


@pytest.mark.parametrize("name", KAIROS_SERVICES)
def test_kairos_services_share_image_and_point_at_the_stores(
    services: dict[str, dict[str, Any]], name: str
) -> None:
    spec = services[name]
    assert spec.get("build") in (".", {"context": "."}), f"{name}: not built from the Dockerfile"
    assert spec.get("image") == services["api"].get("image")
    env = {key: _interpolate(value) for key, value in _environment(spec).items()}
    expected = {
        "KAIROS_DATABASE_URL": ("mysql", 3306),
        "KAIROS_REDIS_URL": ("redis", 6379),
        "KAIROS_AMQP_URL": ("rabbitmq", 5672),
        "KAIROS_AMQP_MANAGEMENT_URL": ("rabbitmq", 15672),
    }
    for variable, (host, port) in expected.items():
        assert variable in env, f"{name}: {variable} is not set"
        url = urlsplit(env[variable])
        assert (url.hostname, url.port) == (host, port), f"{name}: {variable}={env[variable]}"
    assert urlsplit(env["KAIROS_DATABASE_URL"]).scheme == "mysql+pymysql"


def _env(services: dict[str, dict[str, Any]], name: str) -> dict[str, str]:
    return {key: _interpolate(value) for key, value in _environment(services[name]).items()}


def test_no_password_has_a_default() -> None:
    text = COMPOSE_FILE.read_text(encoding="utf-8")
    used = {m.group("name"): m.group("op") for m in _VARIABLE.finditer(text)}
    passwords = {name for name in used if "PASSWORD" in name}
    assert passwords == REQUIRED_SECRETS
    assert all(used[name] == ":?" for name in passwords), "compose must refuse to start"
    writer = (ROOT / "scripts" / "compose-env.sh").read_text(encoding="utf-8")
    assert all(f"{name}=$(secret)" in writer for name in REQUIRED_SECRETS)


def test_the_services_use_their_own_users_and_migrate_the_owners(
    services: dict[str, dict[str, Any]],
) -> None:
    mysql, broker = _env(services, "mysql"), _env(services, "rabbitmq")
    assert mysql.get("MARIADB_RANDOM_ROOT_PASSWORD") == "1" and "MARIADB_ROOT_PASSWORD" not in mysql
    owner = (mysql["MARIADB_USER"], mysql["MARIADB_PASSWORD"])
    admin = (broker["RABBITMQ_DEFAULT_USER"], broker["RABBITMQ_DEFAULT_PASS"])
    migrate = _env(services, "migrate")
    database = urlsplit(migrate["KAIROS_DATABASE_URL"])
    assert (database.username, database.password) == owner
    management = urlsplit(migrate["KAIROS_AMQP_MANAGEMENT_URL"])
    assert (management.username, management.password) == admin
    for name in LONG_RUNNING:
        env = _env(services, name)
        database = urlsplit(env["KAIROS_DATABASE_URL"])
        assert database.username not in ("root", owner[0]), name
        assert database.password == "kairos_mysql_password", name
        for variable in ("KAIROS_AMQP_URL", "KAIROS_AMQP_MANAGEMENT_URL"):
            url = urlsplit(env[variable])
            assert url.username != admin[0], f"{name}: {variable}"
            assert url.password == "kairos_rabbitmq_password", f"{name}: {variable}"
        assert urlsplit(env["KAIROS_REDIS_URL"]).password == "kairos_redis_password"
    script = (ROOT / "deploy" / "mariadb" / "initdb" / "10-kairos-user.sh").read_text()
    assert "GRANT SELECT, INSERT, UPDATE, DELETE ON" in script and "KAIROS_MYSQL_PASSWORD" in script
    assert mysql["KAIROS_MYSQL_PASSWORD"] == "kairos_mysql_password"
    mounts = [str(v) for v in services["mysql"].get("volumes", [])]
    assert "./deploy/mariadb/initdb:/docker-entrypoint-initdb.d:ro" in mounts


def test_redis_has_a_password_and_keeps_its_data(services: dict[str, dict[str, Any]]) -> None:
    redis_service = services["redis"]
    command = " ".join(_command(redis_service))
    assert "--requirepass" in command and "--appendonly yes" in command
    assert _env(services, "redis")["REDISCLI_AUTH"] == "kairos_redis_password"
    assert any(str(v).endswith(":/data") for v in redis_service.get("volumes", []))


def test_migrate_waits_for_healthy_stores(services: dict[str, dict[str, Any]]) -> None:
    assert _depends_on(services["migrate"]) == {name: "service_healthy" for name in STORES}
    assert services["migrate"].get("restart", "no") == "no", "migrate runs once"


@pytest.mark.parametrize("name", LONG_RUNNING)
def test_services_wait_for_a_successful_migration(
    services: dict[str, dict[str, Any]], name: str
) -> None:
    assert _depends_on(services[name]).get("migrate") == "service_completed_successfully"


def test_dockerfile_installs_the_project_and_runs_kairos() -> None:
    instructions = _dockerfile_instructions()
    base = [args for keyword, args in instructions if keyword == "FROM"]
    assert base and base[0].startswith("python:3.11-slim")
    runs = [args for keyword, args in instructions if keyword == "RUN"]
    assert any(re.search(r"\bpip install\b[^&;]*\s\.(\s|$)", run) for run in runs), runs
    users = [args for keyword, args in instructions if keyword == "USER"]
    assert users and users[-1] not in ("root", "0"), "the image must not run as root"
    starts = [
        word
        for keyword, args in instructions
        if keyword in ("CMD", "ENTRYPOINT")
        for word in _exec_or_shell(args)
    ]
    assert "kairos" in starts, f"CMD/ENTRYPOINT do not run kairos: {starts}"
