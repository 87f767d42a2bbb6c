"""the fleet-wide breaker: its one row, the shared fault window and each cluster's node count

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 04:00:00

Only new tables: nothing existing changes, and a database whose controllers leave the fleet
breaker off (the default) never writes to them.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "fleet_breaker",
        sa.Column("id", sa.String(length=16), nullable=False),
        sa.Column("tripped", sa.Boolean(), nullable=False),
        sa.Column("tripped_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("tripped_by", sa.String(length=128), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("reset_by", sa.String(length=256), nullable=True),
        sa.Column("reset_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reset_reason", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_fleet_breaker")),
    )
    op.create_table(
        "fleet_faults",
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("cluster", "node", name=op.f("pk_fleet_faults")),
    )
    op.create_index("ix_fleet_faults_at", "fleet_faults", ["at"])
    op.create_table(
        "fleet_node_counts",
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("nodes", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("cluster", name=op.f("pk_fleet_node_counts")),
    )


def downgrade() -> None:
    op.drop_table("fleet_node_counts")
    op.drop_index("ix_fleet_faults_at", table_name="fleet_faults")
    op.drop_table("fleet_faults")
    op.drop_table("fleet_breaker")
