"""An index on jobs by status and last change, for retention to find finished jobs.

Retention deletes jobs that ended (or were deleted) longer ago than the retention
period; without the index each sweep would read every finished job to find the old
ones. Building it reads the jobs table once.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ix_jobs_status_updated."""
    op.execute("CREATE INDEX ix_jobs_status_updated ON jobs (status, updated_at)")


def downgrade() -> None:
    """Remove what upgrade added."""
    op.execute("DROP INDEX ix_jobs_status_updated ON jobs")
