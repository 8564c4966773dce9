"""An index on callback deliveries by job and status, for a job's callbacks in run order.

Before each attempt the notifier asks whether an earlier run of the callback's job has
a delivery still on its way (PENDING, QUEUED or RETRYING); if so, this one waits. The
index makes that one short range read of the job's unsettled deliveries, however many
it delivered before. It also serves the foreign key on ``job_id``, in place of the index
made for the key alone. Building it reads the deliveries table once.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

INDEX = "ix_callback_deliveries_job_status"
# The index MariaDB made for the foreign key on job_id alone, until this one serves it.
FOREIGN_KEY_INDEX = "job_id"


def _indexes() -> set[str]:
    return {str(i["name"]) for i in sa.inspect(op.get_bind()).get_indexes("callback_deliveries")}


def upgrade() -> None:
    """Add ix_callback_deliveries_job_status (again, if a first run was cut short) in
    place of the foreign key's own index on ``job_id``."""
    found = _indexes()
    steps = [] if INDEX in found else [f"ADD INDEX {INDEX} (job_id, status)"]
    # Made by a downgrade, the key's own index is not dropped by MariaDB: drop it here.
    if FOREIGN_KEY_INDEX in found:
        steps.append(f"DROP INDEX {FOREIGN_KEY_INDEX}")
    if steps:
        op.execute(f"ALTER TABLE callback_deliveries {', '.join(steps)}")


def downgrade() -> None:
    """Remove what upgrade added, leaving the foreign key an index of its own."""
    if INDEX in _indexes():
        op.execute(
            f"ALTER TABLE callback_deliveries ADD INDEX {FOREIGN_KEY_INDEX} (job_id), "
            f"DROP INDEX {INDEX}"
        )
