"""Apps in MySQL: a rotated API key replaces the old one; listings show no secrets."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from common.db.apps import (
    all_apps,
    create_app,
    find_app_by_key,
    rotate_api_key,
    rotate_signing_secret,
    signing_secrets,
)


def test_a_rotated_key_finds_the_app_and_the_old_one_does_not(engine: Engine) -> None:
    with engine.begin() as conn:
        created = create_app(conn, "billing", 5)
        other = create_app(conn, "reports", 6)
        new_key = rotate_api_key(conn, created.app_id)
        assert new_key is not None and new_key != created.api_key
        assert find_app_by_key(conn, created.api_key) is None
        found = find_app_by_key(conn, new_key)
        assert found is not None and found.app_id == created.app_id
        assert find_app_by_key(conn, other.api_key) is not None  # others untouched
        assert rotate_api_key(conn, "app_nope") is None
        listed = [(r.app_id, r.name, r.created_at) for r in all_apps(conn)]
    assert listed == [(created.app_id, "billing", 5), (other.app_id, "reports", 6)]


def test_a_rotated_secret_signs_with_the_previous_one_too_until_its_overlap_ends(
    engine: Engine,
) -> None:
    with engine.begin() as conn:
        created = create_app(conn, "billing", 5)
        app = find_app_by_key(conn, created.api_key)
        assert app is not None
        assert signing_secrets(conn, app.id, 1_000) == [created.signing_secret]
        new_secret = rotate_signing_secret(conn, created.app_id, until_ms=2_000)
        assert new_secret is not None and new_secret != created.signing_secret
        assert signing_secrets(conn, app.id, 1_999) == [new_secret, created.signing_secret]
        assert signing_secrets(conn, app.id, 2_000) == [new_secret]
        assert rotate_signing_secret(conn, "app_nope", until_ms=2_000) is None
        assert signing_secrets(conn, app.id + 1_000, 0) == []
