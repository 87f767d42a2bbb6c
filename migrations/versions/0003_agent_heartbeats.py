"""agent heartbeats: the newest heartbeat of each node's agent

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 14:50:00

Types are spelled out (no model imports), as in 0001.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "agent_heartbeats",
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("agent", sa.String(length=256), nullable=False),
        sa.Column("version", sa.String(length=64), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("stats", JSON, nullable=False),
        sa.PrimaryKeyConstraint("cluster", "node", name=op.f("pk_agent_heartbeats")),
    )


def downgrade() -> None:
    op.drop_table("agent_heartbeats")
