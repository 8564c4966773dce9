"""The API as a contract: several API keys per app, disabled apps, idempotency keys
compared exactly, and the remembered answers of keyed batch creates and triggers.

``jobs.client_request_id`` moves to a binary, NO PAD collation: `Report-1` and
`report-1` (or `r` and `r `) become different keys (no stored keys can clash: the old
collation already kept them apart and more). Each app's API key is copied to
api_keys; apps.api_key_hash stays, holding the newest key, for API processes of earlier
versions.

MySQL commits each DDL statement on its own: every step can run again, so a migration
cut short is completed by running it again.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def _exact_collation() -> str:
    """MariaDB's binary NO PAD collation, or MySQL 8's."""
    version = str(op.get_bind().execute(sa.text("SELECT VERSION()")).scalar())
    return "utf8mb4_nopad_bin" if "MariaDB" in version else "utf8mb4_0900_bin"


def _tables() -> set[str]:
    return set(sa.inspect(op.get_bind()).get_table_names())


def _app_columns() -> set[str]:
    return {c["name"] for c in sa.inspect(op.get_bind()).get_columns("apps")}


_API_KEYS = """
CREATE TABLE api_keys (
  id BIGINT NOT NULL AUTO_INCREMENT,
  key_id VARCHAR(40) NOT NULL,
  app_id BIGINT NOT NULL,
  key_hash VARCHAR(64) NOT NULL,
  created_at BIGINT NOT NULL,
  expires_at BIGINT NULL,
  revoked_at BIGINT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY key_id (key_id),
  UNIQUE KEY key_hash (key_hash),
  KEY ix_api_keys_app_id (app_id, id),
  FOREIGN KEY (app_id) REFERENCES apps (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
"""

_IDEMPOTENCY_KEYS = """
CREATE TABLE idempotency_keys (
  id BIGINT NOT NULL AUTO_INCREMENT,
  app_id BIGINT NOT NULL,
  idempotency_key VARCHAR(128) CHARACTER SET utf8mb4 COLLATE {collation} NOT NULL,
  operation VARCHAR(32) NOT NULL,
  request_hash VARCHAR(64) NOT NULL,
  status_code INT NOT NULL,
  response MEDIUMTEXT NOT NULL,
  location VARCHAR(255) NULL,
  created_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uq_idempotency_keys_app_operation_key (app_id, operation, idempotency_key),
  KEY ix_idempotency_keys_expires_at (expires_at),
  FOREIGN KEY (app_id) REFERENCES apps (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
"""


def upgrade() -> None:
    """Add api_keys (with each app's key), apps.disabled_at, idempotency_keys; make
    jobs.client_request_id compare exactly."""
    collation = _exact_collation()
    tables = _tables()
    if "api_keys" not in tables:
        op.execute(_API_KEYS)
    op.execute(
        "INSERT INTO api_keys (key_id, app_id, key_hash, created_at) "
        "SELECT CONCAT('key_', SUBSTRING(api_key_hash, 1, 16)), id, api_key_hash, created_at "
        "FROM apps WHERE api_key_hash NOT IN (SELECT key_hash FROM api_keys)"
    )
    if "disabled_at" not in _app_columns():
        op.execute("ALTER TABLE apps ADD COLUMN disabled_at BIGINT NULL")
    if "idempotency_keys" not in tables:
        op.execute(_IDEMPOTENCY_KEYS.format(collation=collation))
    op.execute(
        "ALTER TABLE jobs MODIFY client_request_id VARCHAR(128) CHARACTER SET utf8mb4 "
        f"COLLATE {collation} NULL"
    )


def downgrade() -> None:
    """Remove what upgrade added; keys differing only in case or trailing spaces make
    the old unique key fail, and the downgrade with it."""
    op.execute(
        "ALTER TABLE jobs MODIFY client_request_id VARCHAR(128) CHARACTER SET utf8mb4 "
        "COLLATE utf8mb4_unicode_ci NULL"
    )
    op.execute("DROP TABLE IF EXISTS idempotency_keys")
    if "disabled_at" in _app_columns():
        op.execute("ALTER TABLE apps DROP COLUMN disabled_at")
    op.execute("DROP TABLE IF EXISTS api_keys")
