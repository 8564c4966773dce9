"""Jobs that other jobs wait for: ``jobs.has_children``.

The results path reads the flag with each job's settings; when a flagged job's run
ends, the runs of its children that wait for it are looked at again at once instead of
at their next hold time. Jobs already some job's parent are flagged here.

Every step can run again, so a migration cut short is completed by running it again.

Revision ID: 0021
Revises: 0020
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def _columns(table: str) -> set[str]:
    return {str(c["name"]) for c in sa.inspect(op.get_bind()).get_columns(table)}


def upgrade() -> None:
    """Add the flag (if missing) and set it on every job that is a parent now."""
    if "has_children" not in _columns("jobs"):
        op.add_column(
            "jobs",
            sa.Column("has_children", sa.Boolean, nullable=False, server_default=sa.false()),
        )
    op.execute(
        "UPDATE jobs SET has_children = 1 WHERE has_children = 0 AND id IN "
        "(SELECT parent_job_id FROM job_dependencies)"
    )


def downgrade() -> None:
    """Drop the flag."""
    if "has_children" in _columns("jobs"):
        op.drop_column("jobs", "has_children")
