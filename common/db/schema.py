"""The MySQL schema as SQLAlchemy Core tables; Alembic migrations create it.

Times are epoch milliseconds (BIGINT) from the cluster clock, so that every process
compares the same numbers whatever its host clock says. Columns that hold text a user or
a handler supplies are MEDIUMTEXT (16 MiB): TEXT holds only 65,535 bytes, less than the
64 KiB the API accepts once a character takes more than one byte.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects.mysql import MEDIUMTEXT

metadata = MetaData()

# Idempotency keys compare exactly: byte for byte, trailing spaces counting (NO PAD).
# MariaDB's name; MySQL 8 migrates them to utf8mb4_0900_bin, its equivalent.
EXACT_COLLATION = "utf8mb4_nopad_bin"

apps = Table(
    "apps",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("app_id", String(40), nullable=False, unique=True),
    Column("name", String(128), nullable=False),
    Column("api_key_hash", String(64), nullable=False, unique=True),
    Column("signing_secret", String(128), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("previous_signing_secret", String(128), nullable=True),
    Column("previous_secret_until", BigInteger, nullable=True),
    # JSON array of glob patterns of the handlers the app may name; NULL or []: none
    # (migration 0013 gave the apps made before it ["*"], every handler).
    Column("handler_patterns", Text, nullable=True),
    # Set by `kairos app disable`: every API call with the app's keys is refused (403).
    Column("disabled_at", BigInteger, nullable=True),
    # The app's share of the slots against other apps' (migration 0012).
    Column("weight", Integer, nullable=False, server_default="1"),
    # The most runs the app may have going at once; NULL: no cap.
    Column("max_running", Integer, nullable=True),
    # Quotas: the most jobs stored, the shortest schedule interval; NULL: none.
    Column("max_jobs", Integer, nullable=True),
    Column("min_cron_interval_seconds", Integer, nullable=True),
    # Bytes of run-log text the app's runs may store per hour; NULL: no quota (0022).
    Column("run_log_bytes_per_hour", BigInteger, nullable=True),
    # The most retries a job of the app may ask for and a failed run of it gets (0025).
    Column("max_retries", Integer, nullable=False, server_default="100"),
    # JSON array of CIDRs the app's callbacks may reach; NULL: the cluster's default.
    Column("callback_networks", Text, nullable=True),
)

# An app's API keys, stored as hashes: several at once, so a rotation can overlap.
# apps.api_key_hash keeps the newest one for API processes older than schema 0007.
api_keys = Table(
    "api_keys",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("key_id", String(40), nullable=False, unique=True),
    Column("app_pk", BigInteger, ForeignKey("apps.id"), nullable=False),
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("created_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=True),
    Column("revoked_at", BigInteger, nullable=True),
    Index("ix_api_keys_app_pk", "app_pk", "id"),
)

jobs = Table(
    "jobs",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("app_pk", BigInteger, ForeignKey("apps.id"), nullable=False),
    Column("job_name", String(200), nullable=False),
    Column("handler", String(200), nullable=False),
    Column("params", MEDIUMTEXT, nullable=False),
    Column("cron_expr", String(200), nullable=True),
    Column("next_trigger_time", BigInteger, nullable=True),
    Column("status", String(16), nullable=False),
    Column("owner_worker", String(64), nullable=True),
    Column("version", Integer, nullable=False, default=0),
    Column("callback_url", String(2048), nullable=True),
    Column("client_request_id", String(128, collation=EXACT_COLLATION), nullable=True),
    Column("request_hash", String(64), nullable=True),
    Column("claim_token", String(32), nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    Column("timezone", String(64), nullable=False, server_default="UTC"),
    Column("fixed_rate_seconds", Integer, nullable=True),
    Column("misfire_policy", String(16), nullable=False, server_default="FIRE_ONCE"),
    Column("misfire_threshold_seconds", Integer, nullable=False, server_default="60"),
    Column("catch_up_window_seconds", Integer, nullable=False, server_default="3600"),
    Column("overlap_policy", String(8), nullable=False, server_default="FORBID"),
    Column("max_retries", Integer, nullable=False, server_default="0"),
    Column("retry_backoff_seconds", Integer, nullable=False, server_default="10"),
    Column("retry_backoff_max_seconds", Integer, nullable=False, server_default="3600"),
    Column("timeout_seconds", Integer, nullable=True),
    Column("deleted_at", BigInteger, nullable=True),
    # 0-9, higher first within the job's app (migration 0012).
    Column("priority", SmallInteger, nullable=False, server_default="5"),
    # Each scheduled trigger fires up to this many seconds late, by an offset fixed by
    # the job and the trigger time (``common.jitter``); 0: on time (migration 0016).
    Column("jitter_seconds", Integer, nullable=False, server_default="0"),
    # The W3C traceparent the job was submitted with, valid or NULL (migration 0017).
    Column("traceparent", String(55), nullable=True),
    # Set when the job has rows in job_dependencies (migration 0019): the firer looks
    # edges up only for the runs of such jobs.
    Column("has_dependencies", Boolean, nullable=False, server_default=sa.false()),
    # Some job waits for this one's runs: its run ends wake them (migration 0021).
    Column("has_children", Boolean, nullable=False, server_default=sa.false()),
    UniqueConstraint("app_pk", "client_request_id", name="uq_jobs_app_client_request"),
    Index("ix_jobs_status_next_trigger", "status", "next_trigger_time"),
    # Retention finds finished jobs past their age by it (migration 0009).
    Index("ix_jobs_status_updated", "status", "updated_at"),
    Index("ix_jobs_app_pk_id", "app_pk", "id"),
)

# A job waits for another's runs: each run of the child job waits until the parent's
# matching run ended as ``on_outcome`` says (SUCCEEDED, or FINISHED: ran and ended).
job_dependencies = Table(
    "job_dependencies",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("child_job_id", BigInteger, ForeignKey("jobs.id"), nullable=False),
    Column("parent_job_id", BigInteger, ForeignKey("jobs.id"), nullable=False),
    Column("on_outcome", String(16), nullable=False),
    UniqueConstraint("child_job_id", "parent_job_id", name="uq_job_dependencies_edge"),
    Index("ix_job_dependencies_parent", "parent_job_id"),
)

executions = Table(
    "executions",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("execution_id", String(36), nullable=False, unique=True),
    Column("job_id", BigInteger, ForeignKey("jobs.id"), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("trigger_time", BigInteger, nullable=False),
    Column("worker_id", String(64), nullable=True),
    Column("status", String(16), nullable=False),
    Column("message", MEDIUMTEXT, nullable=True),
    Column("result", MEDIUMTEXT, nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("dispatched_at", BigInteger, nullable=True),
    Column("started_at", BigInteger, nullable=True),
    Column("ended_at", BigInteger, nullable=True),
    Column("scheduled_at", BigInteger, nullable=True),
    Column("manual", Boolean, nullable=False, server_default=sa.false()),
    # The params a trigger with params gave this run, in place of the job's; NULL: the
    # job's params at dispatch (migration 0016).
    Column("params", MEDIUMTEXT, nullable=True),
    # The traceparent this run carries to its handler and callback (migration 0017).
    Column("traceparent", String(55), nullable=True),
    # A manual run made by a backfill of past trigger times (migration 0018).
    Column("backfill", Boolean, nullable=False, server_default=sa.false()),
    # JSON array of the parent runs this run waited for (job dependencies, 0019).
    Column("waited_for", Text, nullable=True),
    # A manual run never takes a scheduled trigger's slot (migration 0008).
    UniqueConstraint(
        "job_id", "trigger_time", "attempt", "manual", name="uq_executions_trigger_attempt"
    ),
    Index("ix_executions_status_scheduled", "status", "scheduled_at"),
    Index("ix_executions_status_dispatched", "status", "dispatched_at"),
    Index("ix_executions_worker_status", "worker_id", "status"),
)

# A run's log lines (``services/worker/run_logs.py``), written by its worker while it
# runs and deleted with the execution (migration 0020). A run that logs nothing has none.
execution_logs = Table(
    "execution_logs",
    metadata,
    Column("execution_id", String(36), primary_key=True),
    Column("seq", Integer, primary_key=True, autoincrement=False),
    Column("at", BigInteger, nullable=False),
    Column("level", String(8), nullable=False),
    Column("line", MEDIUMTEXT, nullable=False),
)

workers = Table(
    "workers",
    metadata,
    Column("worker_id", String(64), primary_key=True),
    Column("hostname", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("capacity", Integer, nullable=False),
    Column("active", Integer, nullable=False),
    Column("cpu_idle", Integer, nullable=False),
    Column("avg_ms", Integer, nullable=False),
    Column("handlers", Text, nullable=False),
    Column("state", String(16), nullable=False),
    Column("started_at", BigInteger, nullable=False),
    Column("last_heartbeat", BigInteger, nullable=False),
    Column("overrun", Integer, nullable=False, server_default="0"),
    # JSON object: handler -> ms a run of it takes, as the worker timed them (0015).
    Column("handler_ms", Text, nullable=True),
)

callback_deliveries = Table(
    "callback_deliveries",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("delivery_id", String(40), nullable=False, unique=True),
    # NULL for an alert (migration 0026): it concerns no one execution, job or app.
    Column("execution_id", String(36), nullable=True, unique=True),
    Column("job_id", BigInteger, ForeignKey("jobs.id"), nullable=True),
    Column("app_pk", BigInteger, ForeignKey("apps.id"), nullable=True),
    # The alert rule an alert is sent for (signed with its secret); NULL: a callback.
    Column(
        "alert_rule_pk",
        BigInteger,
        ForeignKey("alert_rules.id", ondelete="CASCADE"),
        nullable=True,
    ),
    Column("url", String(2048), nullable=False),
    Column("payload", MEDIUMTEXT, nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("last_status_code", Integer, nullable=True),
    Column("last_error", MEDIUMTEXT, nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    Column("delivered_at", BigInteger, nullable=True),
    # When the notifier tries a RETRYING delivery again (shown to its app).
    Column("next_attempt_at", BigInteger, nullable=True),
    # Why a DEAD delivery stopped: ``DeadReason``.
    Column("dead_reason", String(32), nullable=True),
    # The run's traceparent, sent as a header with each POST (migration 0017).
    Column("traceparent", String(55), nullable=True),
    Index("ix_callback_deliveries_status_updated", "status", "updated_at"),
    # A job's deliveries still on their way, read before each attempt (migration 0014).
    Index("ix_callback_deliveries_job_status", "job_id", "status"),
)

# One row per POST of a callback; pruned with its delivery.
callback_attempts = Table(
    "callback_attempts",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column(
        "delivery_pk",
        BigInteger,
        ForeignKey("callback_deliveries.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("attempt", Integer, nullable=False),
    Column("attempted_at", BigInteger, nullable=False),
    Column("status_code", Integer, nullable=True),
    Column("error", String(4096), nullable=True),
    Column("duration_ms", Integer, nullable=False),
    Index("ix_callback_attempts_delivery", "delivery_pk", "id"),
)

operators = Table(
    "operators",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("name", String(64), nullable=False, unique=True),
    # SHA-256 of the operator's console token; the token itself is shown once.
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("created_at", BigInteger, nullable=False),
    # viewer, operator or admin (migration 0023: operators from before roles are admins).
    Column("role", String(16), nullable=False, server_default="admin"),
)

# The apps an operator is limited to; an operator with no row here reaches every app.
operator_apps = Table(
    "operator_apps",
    metadata,
    Column(
        "operator_id",
        BigInteger,
        ForeignKey("operators.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    # No cascade: removing the last app of a list must not widen it to every app.
    Column("app_pk", BigInteger, ForeignKey("apps.id"), primary_key=True),
)

operator_sessions = Table(
    "operator_sessions",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    # SHA-256 of the session cookie's value; the value itself lives only in the browser.
    Column("session_hash", String(64), nullable=False, unique=True),
    Column(
        "operator_id", BigInteger, ForeignKey("operators.id", ondelete="CASCADE"), nullable=False
    ),
    Column("csrf_token", String(64), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=False),
    # The last request the session made; an idle session ends (migration 0012).
    Column("last_seen_at", BigInteger, nullable=True),
    Index("ix_operator_sessions_expires", "expires_at"),
)

# Every change made through the OpenAPI, the console or the CLI: who, what, on which
# object, before and after (secrets masked), written in the change's own transaction.
audit_events = Table(
    "audit_events",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("at", BigInteger, nullable=False),
    # An operator's name (console), cli:<os user> (CLI), or an API key's id (OpenAPI).
    Column("actor", String(128), nullable=False),
    Column("action", String(64), nullable=False),
    Column("object_type", String(32), nullable=False),
    Column("object_id", String(255), nullable=False),
    # The app the object belongs to; NULL for what reaches every app (a worker, an operator).
    Column("app_pk", BigInteger, nullable=True),
    Column("before_doc", MEDIUMTEXT, nullable=True),
    Column("after_doc", MEDIUMTEXT, nullable=True),
    Index("ix_audit_events_at", "at"),
    Index("ix_audit_events_app_at", "app_pk", "at"),
    Index("ix_audit_events_actor_at", "actor", "at"),
)

# An operator's alert rule (migration 0026): which run ends, dead callbacks and dead
# workers (``kinds``, comma-separated ``AlertKind``) of one app (NULL: every app) are
# posted to ``url``, signed with ``signing_secret``, at most once per ``every_seconds``
# per rule, kind and job (or worker).
alert_rules = Table(
    "alert_rules",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("rule_id", String(40), nullable=False, unique=True),
    Column("app_pk", BigInteger, ForeignKey("apps.id", ondelete="CASCADE"), nullable=True),
    Column("url", String(2048), nullable=False),
    Column("kinds", String(128), nullable=False),
    # Fire on a job's run ends only once this many in a row failed (1: every failure).
    Column("streak", Integer, nullable=False, server_default="1"),
    Column("every_seconds", Integer, nullable=False, server_default="600"),
    Column("signing_secret", String(128), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("created_by", String(128), nullable=False),
)

# Where one rule stands for one kind and one subject (a job id, a worker id): the last
# alert sent, the events kept back since, a job's failures in a row (kind STREAK), the
# death of a worker already told (``marker``: its last heartbeat). The truth a new
# leader reads, so that it sends nothing twice.
alert_states = Table(
    "alert_states",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column(
        "rule_pk",
        BigInteger,
        ForeignKey("alert_rules.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("kind", String(16), nullable=False),
    Column("subject", String(64), nullable=False),
    Column("streak", Integer, nullable=False, server_default="0"),
    Column("last_sent_at", BigInteger, nullable=True),
    Column("suppressed", Integer, nullable=False, server_default="0"),
    Column("suppressed_since", BigInteger, nullable=True),
    Column("marker", BigInteger, nullable=True),
    Column("updated_at", BigInteger, nullable=False),
    UniqueConstraint("rule_pk", "kind", "subject", name="uq_alert_states_rule_kind_subject"),
    # The summaries due (events kept back), and the states retention prunes (none).
    Index("ix_alert_states_suppressed", "suppressed", "updated_at"),
)

# The first answer to a batch create or a trigger that carried an Idempotency-Key, so a
# retry with the key gets it again instead of doing the work twice. (Single creates keep
# their key on the job: jobs.client_request_id.)
idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("app_pk", BigInteger, ForeignKey("apps.id"), nullable=False),
    Column("idempotency_key", String(128, collation=EXACT_COLLATION), nullable=False),
    Column("operation", String(32), nullable=False),
    Column("request_hash", String(64), nullable=False),
    Column("status_code", Integer, nullable=False),
    Column("response", MEDIUMTEXT, nullable=False),
    Column("location", String(255), nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=False),
    UniqueConstraint(
        "app_pk", "operation", "idempotency_key", name="uq_idempotency_keys_app_operation_key"
    ),
    Index("ix_idempotency_keys_expires_at", "expires_at"),
)
