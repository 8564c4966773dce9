"""Manual runs apart from scheduled ones in the executions' unique key.

The key (job, trigger time, attempt) gave a manual run and a scheduled trigger at the
same millisecond one slot: a manual run taken while a job was paused, on what its
resumed or updated schedule later made a trigger time, left the claim of that trigger
without its execution (it was passed over, logged only). With ``manual`` in the key
both run. Rebuilding the index reads the whole table once.

Going down fails while a manual run and a scheduled one share a trigger time and
attempt: settle (delete) one of them first.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Put ``manual`` last in the unique key (one statement: the job's foreign key keeps
    an index on job_id throughout)."""
    op.execute(
        "ALTER TABLE executions DROP INDEX uq_executions_trigger_attempt, "
        "ADD UNIQUE INDEX uq_executions_trigger_attempt (job_id, trigger_time, attempt, manual)"
    )


def downgrade() -> None:
    """Take ``manual`` out of the key again."""
    op.execute(
        "ALTER TABLE executions DROP INDEX uq_executions_trigger_attempt, "
        "ADD UNIQUE INDEX uq_executions_trigger_attempt (job_id, trigger_time, attempt)"
    )
