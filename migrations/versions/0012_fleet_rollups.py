"""the fleet figures' daily rollups: per cluster, day, pool and GPU model

Revision ID: 0012_fleet_rollups
Revises: 0011
Create Date: 2026-12-02 08:00:00

Only new tables, filled by the fleet console as it reads finished days: an upgraded database
starts with none and builds each day once, on the first read of a window that holds it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0012_fleet_rollups"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "fleet_rollup_days",
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("pending", JSON, nullable=False),
        sa.Column("covered_until", sa.DateTime(timezone=True), nullable=False),
        sa.Column("built_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("cluster", "day", name=op.f("pk_fleet_rollup_days")),
    )
    op.create_table(
        "fleet_rollups",
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("pool", sa.Text(), nullable=False),
        sa.Column("gpu_model", sa.Text(), nullable=False),
        sa.Column("faults", sa.Integer(), nullable=False),
        sa.Column("repaired", sa.Integer(), nullable=False),
        sa.Column("replaced", sa.Integer(), nullable=False),
        sa.Column("repair_seconds", JSON, nullable=False),
        sa.Column("lost_hours", sa.Float(), nullable=False),
        sa.Column("lost_open_gpus", sa.Integer(), nullable=False),
        sa.Column("lost_open_gpu_seconds", sa.Float(), nullable=False),
        sa.Column("disrupted_hours", sa.Float(), nullable=False),
        sa.Column("disrupted_open_gpus", sa.Integer(), nullable=False),
        sa.Column("disrupted_open_gpu_seconds", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint(
            "cluster", "day", "pool", "gpu_model", name=op.f("pk_fleet_rollups")
        ),
    )


def downgrade() -> None:
    op.drop_table("fleet_rollups")
    op.drop_table("fleet_rollup_days")
