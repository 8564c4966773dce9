"""The schema migrations on real MariaDB: the newest goes down and up again cleanly."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Engine

from common.db import engine as engine_module
from common.db.engine import current_revision, migrate


def app_columns(engine: Engine) -> set[str]:
    return {c["name"] for c in sa.inspect(engine).get_columns("apps")}


def test_the_secret_rotation_migration_goes_down_and_up_again(engine: Engine) -> None:
    rotation = {"previous_signing_secret", "previous_secret_until"}
    assert rotation <= app_columns(engine)
    config = Config()
    config.set_main_option("script_location", str(engine_module._MIGRATIONS))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "0002")
    assert current_revision(engine) == "0002"
    assert not rotation & app_columns(engine)
    migrate(engine)
    assert current_revision(engine) == "0003"
    assert rotation <= app_columns(engine)
