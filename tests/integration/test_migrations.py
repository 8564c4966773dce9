"""The schema migrations on real MariaDB: each recent one goes down and up again cleanly."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine

from common.db import engine as engine_module
from common.db.engine import current_revision, migrate


def _head() -> str:
    config = Config()
    config.set_main_option("script_location", str(engine_module._MIGRATIONS))
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None
    return head


HEAD = _head()
TEXT_COLUMNS = {
    ("jobs", "params"),
    ("executions", "message"),
    ("executions", "result"),
    ("callback_deliveries", "payload"),
    ("callback_deliveries", "last_error"),
}


def app_columns(engine: Engine) -> set[str]:
    return {c["name"] for c in sa.inspect(engine).get_columns("apps")}


def column_types(engine: Engine) -> dict[tuple[str, str], str]:
    inspector = sa.inspect(engine)
    return {
        (table, column["name"]): str(column["type"])
        for table, _ in TEXT_COLUMNS
        for column in inspector.get_columns(table)
        if (table, column["name"]) in TEXT_COLUMNS
    }


def downgrade(engine: Engine, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(engine_module._MIGRATIONS))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, revision)
    assert current_revision(engine) == revision


def test_the_secret_rotation_migration_goes_down_and_up_again(engine: Engine) -> None:
    rotation = {"previous_signing_secret", "previous_secret_until"}
    assert rotation <= app_columns(engine)
    downgrade(engine, "0002")
    assert not rotation & app_columns(engine)
    migrate(engine)
    assert current_revision(engine) == HEAD
    assert rotation <= app_columns(engine)


def worker_columns(engine: Engine) -> set[str]:
    return {c["name"] for c in sa.inspect(engine).get_columns("workers")}


def test_the_text_size_migration_goes_down_and_up_again_keeping_rows(engine: Engine) -> None:
    assert set(column_types(engine).values()) == {"MEDIUMTEXT"}
    assert "overrun" in worker_columns(engine)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO apps (app_id, name, api_key_hash, signing_secret, created_at) "
                "VALUES ('a', 'a', 'h', 's', 0)"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO jobs (app_pk, job_name, handler, params, status, version, "
                "created_at, updated_at) VALUES (1, 'j', 'demo.noop', :params, 'WAITING', "
                "0, 0, 0)"
            ),
            {"params": '{"€":1}'},
        )
    downgrade(engine, "0003")
    assert set(column_types(engine).values()) == {"TEXT"}
    assert "overrun" not in worker_columns(engine)
    migrate(engine)
    assert current_revision(engine) == HEAD
    assert set(column_types(engine).values()) == {"MEDIUMTEXT"}
    assert "overrun" in worker_columns(engine)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT params FROM jobs")).scalar_one() == '{"€":1}'


def test_the_handler_patterns_migration_goes_down_and_up_again_keeping_apps(
    engine: Engine,
) -> None:
    assert "handler_patterns" in app_columns(engine)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO apps (app_id, name, api_key_hash, signing_secret, created_at, "
                "handler_patterns) VALUES ('a', 'billing', 'h', 's', 0, :patterns)"
            ),
            {"patterns": '["report.*"]'},
        )
    downgrade(engine, "0004")
    assert "handler_patterns" not in app_columns(engine)
    migrate(engine)
    assert current_revision(engine) == HEAD
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT app_id, name, handler_patterns FROM apps")).one()
    # Going down drops every restriction; coming up again grants every handler, as the
    # app had before handler access was granted explicitly (0013).
    assert tuple(row) == ("a", "billing", '["*"]')


def test_the_operators_migration_goes_down_and_up_again(engine: Engine) -> None:
    tables = {"operators", "operator_sessions"}
    assert tables <= set(sa.inspect(engine).get_table_names())
    downgrade(engine, "0005")
    assert not tables & set(sa.inspect(engine).get_table_names())
    migrate(engine)
    assert current_revision(engine) == HEAD
    assert tables <= set(sa.inspect(engine).get_table_names())


def test_the_callback_attempts_migration_goes_down_and_up_again_keeping_deliveries(
    engine: Engine,
) -> None:
    added = {"next_attempt_at", "dead_reason"}

    def delivery_columns() -> set[str]:
        return {c["name"] for c in sa.inspect(engine).get_columns("callback_deliveries")}

    assert "callback_attempts" in sa.inspect(engine).get_table_names()
    assert added <= delivery_columns()
    downgrade(engine, "0007")
    assert "callback_attempts" not in sa.inspect(engine).get_table_names()
    assert not added & delivery_columns()
    migrate(engine)
    migrate(engine)  # every step can run again
    assert current_revision(engine) == HEAD
    assert added <= delivery_columns()
    assert "callback_attempts" in sa.inspect(engine).get_table_names()


def app_reference_columns(engine: Engine) -> dict[str, set[str]]:
    inspector = sa.inspect(engine)
    tables = ("api_keys", "jobs", "callback_deliveries", "idempotency_keys")
    return {t: {c["name"] for c in inspector.get_columns(t)} & {"app_id", "app_pk"} for t in tables}


def test_the_app_pk_migration_goes_down_and_up_again_keeping_jobs(engine: Engine) -> None:
    assert set(map(frozenset, app_reference_columns(engine).values())) == {frozenset({"app_pk"})}
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO apps (app_id, name, api_key_hash, signing_secret, created_at) "
                "VALUES ('app_a', 'a', 'h', 's', 0)"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO jobs (app_pk, job_name, handler, params, status, version, "
                "created_at, updated_at) VALUES (1, 'j', 'demo.noop', '{}', 'WAITING', 0, 0, 0)"
            )
        )
    downgrade(engine, "0010")
    assert set(map(frozenset, app_reference_columns(engine).values())) == {frozenset({"app_id"})}
    migrate(engine)
    assert current_revision(engine) == HEAD
    with engine.connect() as conn:
        found = conn.execute(sa.text("SELECT app_pk FROM jobs WHERE job_name = 'j'")).scalar_one()
        indexes = {i["name"] for i in sa.inspect(conn).get_indexes("jobs")}
    assert found == 1 and "ix_jobs_app_pk_id" in indexes


SHARE_COLUMNS = {"weight", "max_running", "max_jobs", "min_cron_interval_seconds"}


def test_the_app_shares_migration_goes_down_and_up_again_keeping_apps_and_jobs(
    engine: Engine,
) -> None:
    assert SHARE_COLUMNS | {"callback_networks"} <= app_columns(engine)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO apps (app_id, name, api_key_hash, signing_secret, created_at) "
                "VALUES ('app_a', 'a', 'h', 's', 0)"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO jobs (app_pk, job_name, handler, params, status, version, "
                "created_at, updated_at) VALUES (1, 'j', 'demo.noop', '{}', 'WAITING', 0, 0, 0)"
            )
        )
    downgrade(engine, "0011")
    assert not SHARE_COLUMNS & app_columns(engine)
    migrate(engine)
    with engine.connect() as conn:
        weight = conn.execute(sa.text("SELECT weight FROM apps WHERE app_id = 'app_a'")).scalar()
        priority = conn.execute(sa.text("SELECT priority FROM jobs WHERE job_name = 'j'")).scalar()
    assert (weight, priority) == (1, 5)


def test_the_handlers_granted_migration_keeps_what_apps_made_before_could_call(
    engine: Engine,
) -> None:
    rows = {"old": None, "narrow": '["report.*"]', "none": "[]"}
    with engine.begin() as conn:
        for name, patterns in rows.items():
            conn.execute(
                sa.text(
                    "INSERT INTO apps (app_id, name, api_key_hash, signing_secret, created_at, "
                    "handler_patterns) VALUES (:name, :name, :name, 's', 0, :patterns)"
                ),
                {"name": name, "patterns": patterns},
            )
    downgrade(engine, "0012")
    migrate(engine)
    migrate(engine)  # running it again changes nothing
    assert current_revision(engine) == HEAD
    with engine.connect() as conn:
        query = sa.text("SELECT app_id, handler_patterns FROM apps")
        found = {str(row[0]): row[1] for row in conn.execute(query)}
    # NULL meant every handler before 0013; from 0013 on it means none.
    assert found == {"old": '["*"]', "narrow": '["report.*"]', "none": "[]"}


def test_the_run_logs_migration_goes_down_and_up_again(engine: Engine) -> None:
    assert "execution_logs" in sa.inspect(engine).get_table_names()
    downgrade(engine, "0015")
    assert "execution_logs" not in sa.inspect(engine).get_table_names()
    migrate(engine)
    assert current_revision(engine) == HEAD
    assert "execution_logs" in sa.inspect(engine).get_table_names()


def test_the_run_log_quota_migration_goes_down_and_up_again_keeping_apps(
    engine: Engine,
) -> None:
    assert "run_log_bytes_per_hour" in app_columns(engine)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO apps (app_id, name, api_key_hash, signing_secret, created_at) "
                "VALUES ('app_q', 'q', 'h', 's', 0)"
            )
        )
    downgrade(engine, "0020")
    assert "run_log_bytes_per_hour" not in app_columns(engine)
    migrate(engine)
    assert current_revision(engine) == HEAD
    with engine.connect() as conn:
        query = sa.text("SELECT run_log_bytes_per_hour FROM apps WHERE app_id = 'app_q'")
        assert conn.execute(query).one() == (None,)


def test_operators_from_before_roles_become_admins_of_every_app(engine: Engine) -> None:
    downgrade(engine, "0020")
    assert "operator_apps" not in sa.inspect(engine).get_table_names()
    with engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO operators (name, token_hash, created_at) VALUES ('old', 'h', 0)")
        )
    migrate(engine)
    assert current_revision(engine) == HEAD
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT role FROM operators")).scalar_one() == "admin"
        assert conn.execute(sa.text("SELECT COUNT(*) FROM operator_apps")).scalar_one() == 0


def test_the_alerts_migration_goes_down_and_up_again_keeping_callbacks(engine: Engine) -> None:
    tables = {"alert_rules", "alert_states"}

    def delivery_columns() -> dict[str, bool]:
        columns = sa.inspect(engine).get_columns("callback_deliveries")
        return {str(c["name"]): bool(c["nullable"]) for c in columns}

    assert tables <= set(sa.inspect(engine).get_table_names())
    assert delivery_columns()["job_id"] and "alert_rule_pk" in delivery_columns()
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO apps (app_id, name, api_key_hash, signing_secret, created_at) "
                "VALUES ('app_q', 'q', 'h', 's', 0)"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO jobs (app_pk, job_name, handler, params, status, version, "
                "created_at, updated_at) VALUES (1, 'j', 'demo.noop', '{}', 'WAITING', 0, 0, 0)"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO alert_rules (rule_id, url, kinds, signing_secret, created_at, "
                "created_by) VALUES ('alr_1', 'https://x', 'FAILED', 's', 0, 't')"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO callback_deliveries (delivery_id, execution_id, job_id, app_pk, "
                "url, payload, status, attempts, created_at, updated_at, alert_rule_pk) VALUES "
                "('msg_cb', 'e1', 1, 1, 'https://x', '{}', 'DELIVERED', 1, 0, 0, NULL), "
                "('msg_alert', NULL, NULL, NULL, 'https://x', '{}', 'DEAD', 1, 0, 0, 1)"
            )
        )
    downgrade(engine, "0025")
    assert not tables & set(sa.inspect(engine).get_table_names())
    assert not delivery_columns()["job_id"]
    migrate(engine)
    migrate(engine)  # every step can run again
    assert current_revision(engine) == HEAD
    assert tables <= set(sa.inspect(engine).get_table_names())
    with engine.connect() as conn:
        kept = conn.execute(sa.text("SELECT delivery_id FROM callback_deliveries")).scalars()
        assert list(kept) == ["msg_cb"]


def test_the_retry_limit_migration_goes_down_and_up_again_giving_apps_the_default(
    engine: Engine,
) -> None:
    downgrade(engine, "0024")
    assert "max_retries" not in app_columns(engine)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO apps (app_id, name, api_key_hash, signing_secret, created_at) "
                "VALUES ('app_r', 'r', 'h', 's', 0)"
            )
        )
    migrate(engine)
    assert current_revision(engine) == HEAD
    with engine.connect() as conn:
        query = sa.text("SELECT max_retries FROM apps WHERE app_id = 'app_r'")
        assert conn.execute(query).one() == (100,)
