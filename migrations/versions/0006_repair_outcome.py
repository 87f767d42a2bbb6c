"""repair before replace: the outcome column (repaired or replaced) and the new open states
(resetting_gpu, rebooting, diagnosing, uncordoning) in the partial open-remediation indexes

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 15:40:00

Chained after 0005 (main's head) on the repair branch (one head); the lead re-chains at merge. Types are
spelled out (no model imports), as in 0001.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OPEN_BEFORE = (
    "state IN ('awaiting_approval', 'checkpointing', 'detected', 'draining', 'held', "
    "'held_by_opt_out', 'quarantined', 'queued', 'replacing', 'verifying')"
)
OPEN_AFTER = (
    "state IN ('awaiting_approval', 'checkpointing', 'detected', 'diagnosing', 'draining', "
    "'held', 'held_by_opt_out', 'quarantined', 'queued', 'rebooting', 'replacing', "
    "'resetting_gpu', 'uncordoning', 'verifying')"
)
REPAIR_STATES = "('diagnosing', 'rebooting', 'resetting_gpu', 'uncordoning')"


def _open_indexes(predicate: str) -> None:
    op.drop_index("ix_remediations_open", table_name="remediations")
    op.drop_index("uq_remediations_open_node", table_name="remediations")
    newest: list[str | sa.TextClause] = ["cluster", sa.text("created_at DESC"), sa.text("id DESC")]
    op.create_index(
        "ix_remediations_open",
        "remediations",
        newest,
        postgresql_where=sa.text(predicate),
        sqlite_where=sa.text(predicate),
    )
    op.create_index(
        "uq_remediations_open_node",
        "remediations",
        ["cluster", "node"],
        unique=True,
        postgresql_where=sa.text(predicate),
        sqlite_where=sa.text(predicate),
    )


def upgrade() -> None:
    op.add_column("remediations", sa.Column("outcome", sa.String(length=16), nullable=True))
    _open_indexes(OPEN_AFTER)


def downgrade() -> None:
    # The older schema knows no repair step: a remediation in one is held for a human.
    op.execute(f"UPDATE remediations SET state = 'held' WHERE state IN {REPAIR_STATES}")
    _open_indexes(OPEN_BEFORE)
    op.drop_column("remediations", "outcome")
