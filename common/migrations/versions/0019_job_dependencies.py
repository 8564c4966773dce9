"""Job dependencies: a job's runs wait for named runs of other jobs of its app.

``job_dependencies`` holds one row per edge (child job, parent job, the outcome the
child waits for: SUCCEEDED or FINISHED). ``jobs.has_dependencies`` flags a child, so
the firer looks edges up only for the runs of jobs that have some. ``executions.waited_for``
records, as a JSON array, the parent runs a child's run waited for.

Every step can run again, so a migration cut short is completed by running it again.

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def _columns(table: str) -> set[str]:
    return {str(c["name"]) for c in sa.inspect(op.get_bind()).get_columns(table)}


def _tables() -> set[str]:
    return set(sa.inspect(op.get_bind()).get_table_names())


def upgrade() -> None:
    """Add the edges table and the two columns (those missing)."""
    if "has_dependencies" not in _columns("jobs"):
        op.add_column(
            "jobs",
            sa.Column("has_dependencies", sa.Boolean, nullable=False, server_default=sa.false()),
        )
    if "waited_for" not in _columns("executions"):
        op.add_column("executions", sa.Column("waited_for", sa.Text, nullable=True))
    if "job_dependencies" not in _tables():
        op.create_table(
            "job_dependencies",
            sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
            sa.Column("child_job_id", sa.BigInteger, sa.ForeignKey("jobs.id"), nullable=False),
            sa.Column("parent_job_id", sa.BigInteger, sa.ForeignKey("jobs.id"), nullable=False),
            sa.Column("on_outcome", sa.String(16), nullable=False),
            sa.UniqueConstraint("child_job_id", "parent_job_id", name="uq_job_dependencies_edge"),
            sa.Index("ix_job_dependencies_parent", "parent_job_id"),
        )


def downgrade() -> None:
    """Remove what upgrade added."""
    if "job_dependencies" in _tables():
        op.drop_table("job_dependencies")
    if "waited_for" in _columns("executions"):
        op.drop_column("executions", "waited_for")
    if "has_dependencies" in _columns("jobs"):
        op.drop_column("jobs", "has_dependencies")
