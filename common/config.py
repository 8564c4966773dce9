"""Typed settings, one object per service, read from ``KAIROS_*`` environment variables.

The namespace picks the MySQL database, the Redis key prefix and the RabbitMQ vhost, so
that several stacks (and every test) can share one set of servers without seeing each
other's data. The URLs name servers and credentials only.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

_NAMESPACE_RE = re.compile(r"^[a-z][a-z0-9_]{0,47}$")

METRICS_PORT_HELP = "serve Prometheus metrics on this port at /metrics; unset: no metrics server"


class StoreSettings(BaseSettings):
    """Where MySQL, Redis and RabbitMQ live, and which namespace to use in each."""

    model_config = SettingsConfigDict(env_prefix="KAIROS_", extra="ignore")

    namespace: str = Field(
        default="kairos",
        description="DB name, Redis key prefix and AMQP vhost (lower case, digits, _)",
    )
    database_url: str = Field(
        default="mysql+pymysql://root@127.0.0.1:3306",
        description="MySQL server URL without a database; the namespace names the database",
    )
    redis_url: str = Field(default="redis://127.0.0.1:6379/0")
    amqp_url: str = Field(
        default="amqp://guest:guest@127.0.0.1:5672",
        description="RabbitMQ server URL without a vhost; the namespace names the vhost",
    )
    amqp_management_url: str = Field(
        default="http://guest:guest@127.0.0.1:15672",
        description="RabbitMQ management API, used to create the namespace's vhost",
    )
    log_level: str = "INFO"
    log_json: bool = False
    metrics_fd: int | None = Field(
        default=None,
        description="a listening socket, inherited from `kairos up`, to serve metrics on "
        "instead of binding KAIROS_METRICS_PORT (set by `kairos up` for its children)",
    )
    database_read_timeout_seconds: float = Field(
        default=60.0,
        gt=0,
        description="a MySQL statement whose answer does not come within this long fails "
        "(a half-open connection, a server gone without a reset); migrations wait longer",
    )
    database_lock_wait_seconds: int = Field(
        default=5,
        ge=1,
        description="a statement waits this long at most for a row or table lock another "
        "transaction holds (a paused process's open transaction), then fails and is "
        "tried again or passed over",
    )
    database_idle_transaction_seconds: int = Field(
        default=30,
        ge=0,
        description="MariaDB ends a session that leaves a transaction open and idle this "
        "long (its process paused or cut off), so its locks go; 0 never",
    )
    results_dead_max_messages: int = Field(
        default=100_000,
        ge=1,
        description="the most messages kairos.results.dead keeps (a policy `kairos migrate` "
        "sets); past it the oldest set-aside results are dropped",
    )
    otel_endpoint: str | None = Field(
        default=None,
        description="OTLP/HTTP collector (base URL, /v1/traces added) that gets a span per "
        "stage of each job submitted with a traceparent; needs the `otel` extra; unset: "
        "OTEL_EXPORTER_OTLP_ENDPOINT, else no spans",
    )
    idempotency_ttl_seconds: int = Field(
        default=7 * 24 * 3600,
        description="how long an execution's started key lives in Redis: a copy of its "
        "dispatch message arriving within it is never run twice",
    )

    @field_validator("namespace")
    @classmethod
    def _check_namespace(cls, value: str) -> str:
        if not _NAMESPACE_RE.fullmatch(value):
            raise ValueError(
                "KAIROS_NAMESPACE must start with a letter and hold only a-z, 0-9 and _ "
                "(at most 48 characters)"
            )
        return value


class CallbackUrlSettings(BaseSettings):
    """The callback URL policy (``common.callback_urls``), shared by the API, which
    checks at submission, and the notifier, which checks again before it connects."""

    model_config = SettingsConfigDict(env_prefix="KAIROS_", extra="ignore")

    callback_allowed_networks: str = Field(
        default="",
        description="comma-separated CIDRs callbacks may reach although they are not "
        "public (loopback, private, link-local, ...), e.g. 10.0.0.0/8 for receivers on "
        "your own network; empty: public addresses only",
    )
    callback_https_only: bool = Field(
        default=False, description="accept only https:// callback URLs"
    )


class ApiSettings(StoreSettings, CallbackUrlSettings):
    """Settings of ``kairos api``."""

    host: str = "127.0.0.1"
    port: int = 8000
    api_fd: int | None = Field(
        default=None,
        description="a listening socket, inherited from `kairos up`, to serve the API on "
        "instead of binding KAIROS_HOST:KAIROS_PORT (set by `kairos up` for its API)",
    )
    max_params_bytes: int = 64 * 1024
    max_body_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        description="a request body larger than this is answered 413 before it is read",
    )
    rate_limit_per_second: float = Field(
        default=500.0,
        ge=0,
        description="requests each app may make per second on average (token bucket in "
        "Redis; a batch create counts one per job); 0 turns the limit off",
    )
    rate_limit_burst: int = Field(
        default=2000,
        ge=0,
        description="requests an app may make at once after a quiet spell (two full "
        "batches by default); 0 means one second's worth of the rate (at least 1)",
    )
    handler_cache_seconds: float = 2.0
    console_session_hours: float = Field(
        default=12.0,
        gt=0,
        le=720,
        description="how long a console sign-in lasts; an operator signs in again after it",
    )
    console_idle_minutes: float = Field(
        default=30.0,
        gt=0,
        le=1440,
        description="a console session with no request for this long ends; the operator "
        "signs in again (its last request is noted at most once a minute)",
    )
    console_secure_cookies: bool = Field(
        default=False,
        description="mark console cookies Secure (sent over HTTPS only) even when the API "
        "itself is reached over plain HTTP, as behind a TLS-terminating proxy",
    )
    heartbeat_stale_ms: int = Field(
        default=15_000,
        description="a worker heard from longer ago counts as stale in the console (the "
        "dispatchers' KAIROS_HEARTBEAT_STALE_MS)",
    )
    idempotency_key_hours: float = Field(
        default=24.0,
        gt=0,
        le=720,
        description="how long a batch create's or a trigger's Idempotency-Key and its "
        "first answer are remembered",
    )
    backfill_max_runs: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="the most trigger times one backfill call may cover (POST "
        "/openapi/jobs/{jobId}/backfill); a longer range is answered 422",
    )
    auth_cache_seconds: float = Field(
        default=30.0,
        ge=0,
        description="an API key found in MySQL is trusted this long without a look; a "
        "rotated key stops working within it",
    )
    metrics_port: int | None = Field(
        default=None,
        description=METRICS_PORT_HELP + " (never on the API's own port, which is public)",
    )
    metrics_host: str = "127.0.0.1"
    auth_miss_cache_seconds: float = Field(
        default=5.0,
        ge=0,
        description="an API key MySQL does not know is refused this long without a look, "
        "so a flood of one bad key costs one query; a new key may wait this long to work",
    )
    auth_failure_limit: int = Field(
        default=30,
        ge=0,
        description="failed authentications (unknown API keys, console sign-ins) one "
        "client address may make per KAIROS_AUTH_FAILURE_WINDOW_SECONDS before it is "
        "answered 429; 0 turns the throttle off",
    )
    auth_failure_window_seconds: int = Field(
        default=60,
        ge=1,
        description="the window failed authentications are counted in; an address over "
        "the limit waits for the window to end",
    )
    auth_tarpit_seconds: float = Field(
        default=1.0,
        ge=0,
        le=10,
        description="a request refused because its address is over the failed "
        "authentications limit waits this long before its 429, so a flood from a few "
        "connections sends a few requests a second (at most 256 wait at once per API "
        "process; more are answered at once); 0 answers at once",
    )


class DispatcherSettings(StoreSettings):
    """Settings of ``kairos dispatcher``."""

    dispatcher_id: str = ""
    strategy: str = Field(default="equal_cost", description="equal_cost, round_robin or random")
    lease_ttl_ms: int = 10_000
    leader_stall_ms: int = Field(
        default=0,
        ge=0,
        description="a leader whose dispatch or claim loop has not finished a pass for this "
        "long releases its lease and stops dispatching until the loop is back (a statement "
        "hung on a dead connection); below KAIROS_LEASE_TTL_MS; 0: two thirds of it",
    )
    batch_size: int = 1_000
    fire_batch_size: int = Field(
        default=2_000,
        ge=1,
        description="most executions sent in one transaction and one publish; triggers "
        "due at one instant up to this many leave together",
    )
    claim_window_ms: int = Field(
        default=1_000, description="claim triggers this far ahead; each fires at its time"
    )
    scan_interval_ms: int = Field(
        default=250, description="due scan period when no wake-up arrives"
    )
    slot_horizon_ms: int = Field(
        default=1_000,
        ge=0,
        description="a worker's queue holds its capacity plus what it starts within this "
        "long (measured); due runs beyond that wait in Kairos for the fair share",
    )
    priority_aging_ms: int = Field(
        default=60_000,
        ge=1,
        description="waiting this long is worth one priority step, so no run starves",
    )
    heartbeat_stale_ms: int = 15_000
    pending_republish_ms: int = 5_000
    forget_workers_after_hours: float = Field(
        default=1.0,
        ge=0,
        description="a worker silent this long, with nothing queued on it, has its queue "
        "deleted and is no longer swept (each gone worker costs every sweep); 0 never",
    )
    retention_days: float = Field(
        default=30.0,
        description="delete finished executions and settled callbacks older than this; "
        "0 keeps them forever",
    )
    timeout_grace_ms: int = Field(
        default=30_000,
        description="extra wait past a job's timeout before the dispatcher "
        "records TIMED_OUT for a run its worker never reported",
    )
    reconcile_after_seconds: float = Field(
        default=300.0,
        ge=0,
        description="an execution QUEUED this long is looked at by the reconciler: a "
        "stored outcome is recorded, one never started on a worker holding nothing is "
        "recorded LOST (retried if allowed); 0 turns the reconciler off",
    )
    results_prefetch: int = 500
    recorded_started_ttl_seconds: int = Field(
        default=3600,
        ge=0,
        description="once a result is recorded in MySQL, its execution's started key in "
        "Redis lives this much longer (a late copy of the dispatch message still finds "
        "it), instead of KAIROS_IDEMPOTENCY_TTL_SECONDS; 0 leaves it as the worker set it",
    )

    @model_validator(mode="after")
    def _check_stall(self) -> DispatcherSettings:
        if self.leader_stall_ms >= self.lease_ttl_ms:
            raise ValueError(
                "KAIROS_LEADER_STALL_MS must be below KAIROS_LEASE_TTL_MS: a stalled leader "
                "must give its lease up before it would run out"
            )
        return self

    results_batch_wait_ms: int = Field(
        default=10, description="wait this long for more results before writing a batch"
    )
    metrics_port: int | None = Field(default=None, description=METRICS_PORT_HELP)
    metrics_host: str = "127.0.0.1"


class WorkerSettings(StoreSettings):
    """Settings of ``kairos worker``."""

    worker_id: str = ""
    capacity: int = 8
    prefetch: int | None = Field(
        default=None,
        ge=1,
        description="dispatch messages held at once (each carries up to 50 executions); "
        "runs start only in free slots; default 4 x capacity",
    )
    handlers: str = ""
    heartbeat_seconds: float = 5.0
    ack_deadline_seconds: float = 20 * 60.0
    run_log_max_bytes: int = Field(
        default=64 * 1024,
        ge=0,
        le=16 * 1024 * 1024,
        description="bytes of log lines kept per run (ctx.log and logging in a handler); "
        "past it the rest is dropped and a last line says how much; 0: capture nothing",
    )
    metrics_port: int | None = Field(default=None, description=METRICS_PORT_HELP)
    metrics_host: str = "127.0.0.1"


class NotifierSettings(StoreSettings, CallbackUrlSettings):
    """Settings of ``kairos notifier``."""

    concurrency: int = 16
    app_share: int | None = Field(
        default=None,
        ge=1,
        description="callback attempts one app may have going at once; more only while as "
        "many attempts stay free for other apps; default a quarter of the concurrency",
    )
    host_share: int | None = Field(
        default=None,
        ge=1,
        description="callback attempts to one registrable domain, and to one address, at "
        "once; more only while as many attempts stay free for other hosts; default a "
        "quarter of the concurrency",
    )
    held_callbacks: int = Field(
        default=1000,
        ge=1,
        description="callback messages one notifier holds unacked at once (its prefetch), "
        "and 32 times as many callbacks in packs (a 32nd as many packs): those that cannot "
        "be attempted yet wait in it per app and per host, so other apps' callbacks reach "
        "it past one slow receiver's backlog",
    )
    app_backlog: int = Field(
        default=400,
        ge=1,
        description="callbacks of one app that may wait in a notifier once its line is full "
        "and that app's oldest has waited 2 s; past it, the rest wait in the first retry "
        "delay without an attempt (parked)",
    )
    host_backlog: int = Field(
        default=400,
        ge=1,
        description="callbacks to one receiving host that may wait in a notifier once its "
        "line is full and that host's oldest has waited 2 s; past it, the rest are parked "
        "as past the app's backlog",
    )
    host_slow_seconds: float = Field(
        default=1.0,
        gt=0,
        description="a receiving host that answers this slowly loses one attempt at once, "
        "down to a quarter of the concurrency (one that fails loses half, down to one); "
        "quick answers give them back",
    )
    request_timeout_seconds: float = Field(
        default=15.0,
        gt=0,
        description="the whole of one callback attempt (connect, send, answer): a receiver "
        "that hangs or trickles its answer fails the attempt after this long",
    )
    retry_tiers_seconds: str = Field(
        default="5,300,1800,7200,18000,36000,36000",
        description="the delays between a failing callback's attempts (the first is at "
        "once); DEAD after the attempt that follows the last delay",
    )
    retry_jitter: float = Field(
        default=0.2,
        ge=0,
        lt=1,
        description="each retry delay is spread over this fraction of it either side",
    )
    retry_after_cap_seconds: int = Field(
        default=3600,
        ge=1,
        description="the longest a receiver's Retry-After (on 429 or 503) is waited for",
    )
    secret_cache_seconds: float = Field(
        default=30.0,
        ge=0,
        description="an app's signing secrets are read again after this long, so a "
        "rotated secret is used without a restart",
    )
    metrics_port: int | None = Field(default=None, description=METRICS_PORT_HELP)
    metrics_host: str = "127.0.0.1"

    def retry_tiers(self) -> list[int]:
        """The retry delays, in seconds, in the order a failing callback walks them."""
        return [int(part) for part in self.retry_tiers_seconds.split(",") if part.strip()]
