"""Apps in MySQL: a rotated API key replaces the old one; listings show no secrets;
handler patterns are stored with the app."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.db.apps import MySqlAppStore
from common.db.jobs import NewJob, insert_job
from common.handler_patterns import EVERY_HANDLER, NO_HANDLER, HandlerPatterns


def test_a_rotated_key_finds_the_app_and_the_old_one_does_not(engine: Engine) -> None:
    with engine.begin() as conn:
        created = MySqlAppStore(conn).create_app("billing", 5, EVERY_HANDLER)
        other = MySqlAppStore(conn).create_app("reports", 6, EVERY_HANDLER)
        rotated = MySqlAppStore(conn).rotate_api_key(created.app_id, 10, 10)
        assert rotated is not None and rotated.api_key != created.api_key
        assert MySqlAppStore(conn).find_app_by_key(created.api_key) is None
        found = MySqlAppStore(conn).find_app_by_key(rotated.api_key)
        assert found is not None and found.app_id == created.app_id
        assert MySqlAppStore(conn).find_app_by_key(other.api_key) is not None  # others untouched
        assert MySqlAppStore(conn).rotate_api_key("app_nope", 10, 10) is None
        listed = [(r.app_id, r.name, r.created_at) for r in MySqlAppStore(conn).all_apps()]
    assert listed == [(created.app_id, "billing", 5), (other.app_id, "reports", 6)]


def test_a_rotated_secret_signs_with_the_previous_one_too_until_its_overlap_ends(
    engine: Engine,
) -> None:
    with engine.begin() as conn:
        created = MySqlAppStore(conn).create_app("billing", 5, EVERY_HANDLER)
        app = MySqlAppStore(conn).find_app_by_key(created.api_key)
        assert app is not None
        assert MySqlAppStore(conn).signing_secrets(app.id, 1_000) == [created.signing_secret]
        new_secret = MySqlAppStore(conn).rotate_signing_secret(created.app_id, 1_000, 2_000)
        assert new_secret is not None and new_secret != created.signing_secret
        assert MySqlAppStore(conn).signing_secrets(app.id, 1_999) == [
            new_secret,
            created.signing_secret,
        ]
        assert MySqlAppStore(conn).signing_secrets(app.id, 2_000) == [new_secret]
        assert MySqlAppStore(conn).rotate_signing_secret("app_nope", 1_000, 2_000) is None
        assert MySqlAppStore(conn).signing_secrets(app.id + 1_000, 0) == []
        # A second rotation inside the overlap would drop the secret it promised to keep.
        assert MySqlAppStore(conn).rotate_signing_secret(created.app_id, 1_500, 9_000) is None
        assert MySqlAppStore(conn).previous_secret_until(created.app_id) == 2_000
        assert MySqlAppStore(conn).signing_secrets(app.id, 1_999) == [
            new_secret,
            created.signing_secret,
        ]
        forced = MySqlAppStore(conn).rotate_signing_secret(created.app_id, 1_500, 9_000, force=True)
        assert forced is not None
        assert MySqlAppStore(conn).signing_secrets(app.id, 1_999) == [forced, new_secret]
        after = MySqlAppStore(conn).rotate_signing_secret(
            created.app_id, 9_000, 10_000
        )  # overlap over
        assert after is not None
        assert MySqlAppStore(conn).signing_secrets(app.id, 9_500) == [after, forced]


def test_handler_patterns_are_stored_with_the_app_and_come_with_its_key(engine: Engine) -> None:
    restricted = HandlerPatterns(("report.*", "billing.export"))
    with engine.begin() as conn:
        created = MySqlAppStore(conn).create_app("billing", 5, EVERY_HANDLER)
        other = MySqlAppStore(conn).create_app("reports", 6, EVERY_HANDLER)
        bare = MySqlAppStore(conn).create_app("bare", 7, NO_HANDLER)
        assert MySqlAppStore(conn).handler_patterns(created.app_id) == EVERY_HANDLER
        # An app made without patterns may call no handler until one is granted.
        assert MySqlAppStore(conn).handler_patterns(bare.app_id) == NO_HANDLER
        assert MySqlAppStore(conn).set_handler_patterns(created.app_id, restricted)
        assert MySqlAppStore(conn).handler_patterns(created.app_id) == restricted
        found = MySqlAppStore(conn).find_app_by_key(created.api_key)
        assert found is not None and found.handlers == restricted
        untouched = MySqlAppStore(conn).find_app_by_key(other.api_key)
        assert untouched is not None and untouched.handlers == EVERY_HANDLER
        listed = {r.app_id: r.handlers for r in MySqlAppStore(conn).all_apps()}
        assert listed == {
            created.app_id: restricted,
            other.app_id: EVERY_HANDLER,
            bare.app_id: NO_HANDLER,
        }
        assert MySqlAppStore(conn).set_handler_patterns(
            created.app_id, restricted
        )  # the same again
        assert MySqlAppStore(conn).set_handler_patterns(created.app_id, EVERY_HANDLER)
        assert MySqlAppStore(conn).handler_patterns(created.app_id) == EVERY_HANDLER
        assert not MySqlAppStore(conn).set_handler_patterns("app_nope", restricted)
        assert MySqlAppStore(conn).handler_patterns("app_nope") is None


def test_live_jobs_are_counted_by_handler_for_one_app(engine: Engine) -> None:
    with engine.begin() as conn:
        created = MySqlAppStore(conn).create_app("billing", 5, EVERY_HANDLER)
        other = MySqlAppStore(conn).create_app("reports", 6, EVERY_HANDLER)
        pks = {
            row.app_id: row.id for row in conn.execute(sa.text("SELECT id, app_id FROM apps")).all()
        }
        app_pk = pks[created.app_id]
        for handler, status in [
            ("a", "WAITING"),
            ("a", "PAUSED"),
            ("b", "RUNNING"),
            ("c", "SUCCEEDED"),
            ("d", "CANCELLED"),
        ]:
            job_id = insert_job(
                conn, NewJob(app_pk, "j", handler, {}, None, 0, None, None, None), 0
            )
            conn.execute(
                sa.text("UPDATE jobs SET status = :s WHERE id = :j"), {"s": status, "j": job_id}
            )
        deleted = insert_job(conn, NewJob(app_pk, "j", "e", {}, None, 0, None, None, None), 0)
        conn.execute(sa.text("UPDATE jobs SET deleted_at = 1 WHERE id = :j"), {"j": deleted})
        insert_job(conn, NewJob(pks[other.app_id], "j", "f", {}, None, 0, None, None, None), 0)
        assert MySqlAppStore(conn).live_job_handlers(created.app_id) == {"a": 2, "b": 1}
        assert MySqlAppStore(conn).live_job_handlers("app_nope") == {}
