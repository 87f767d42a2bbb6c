"""queued remediations, a human's cancel that sticks, and the breaker's durable fault window

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 14:55:00

Adds `queued` to the open states (so the one-open-remediation-per-node guard and the open index
cover queued ones), the queue's cause and `while_queued`, a cancel's `suppressed_until`, and the
storm breaker's fault window on the controller state. Types spelled out, no model imports.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
OPEN_BEFORE = (
    "state IN ('awaiting_approval', 'checkpointing', 'detected', 'draining', 'held', "
    "'held_by_opt_out', 'quarantined', 'replacing', 'verifying')"
)
OPEN_AFTER = (
    "state IN ('awaiting_approval', 'checkpointing', 'detected', 'draining', 'held', "
    "'held_by_opt_out', 'quarantined', 'queued', 'replacing', 'verifying')"
)


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
    op.add_column("remediations", sa.Column("queue_cause", sa.String(length=16), nullable=True))
    op.add_column("remediations", sa.Column("while_queued", sa.String(length=16), nullable=True))
    op.add_column(
        "remediations", sa.Column("suppressed_until", sa.DateTime(timezone=True), nullable=True)
    )
    op.create_index(
        "ix_remediations_cluster_suppressed", "remediations", ["cluster", "suppressed_until"]
    )
    op.add_column("controller_state", sa.Column("breaker_faults", JSON, nullable=True))
    _open_indexes(OPEN_AFTER)


def downgrade() -> None:
    # Queued remediations have no place in the older schema: they are cancelled first.
    op.execute("UPDATE remediations SET state = 'cancelled' WHERE state = 'queued'")
    _open_indexes(OPEN_BEFORE)
    op.drop_column("controller_state", "breaker_faults")
    op.drop_index("ix_remediations_cluster_suppressed", table_name="remediations")
    # Plain ALTER TABLE … DROP COLUMN (SQLite 3.35+): a batch copy would lose the triggers.
    for column in ("suppressed_until", "while_queued", "queue_cause"):
        op.drop_column("remediations", column)
