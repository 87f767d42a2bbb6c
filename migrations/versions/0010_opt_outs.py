"""audited, expiring opt-outs (issue #27): who, why, since, until, scope and cluster

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 04:00:00

Only a new table: the pod label keeps working beside it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "opt_outs",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("target", sa.String(length=320), nullable=False),
        sa.Column("actor", sa.String(length=256), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("until", sa.DateTime(timezone=True), nullable=False),
        sa.Column("removed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("removed_by", sa.String(length=256), nullable=True),
        sa.Column("expired_noted_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_opt_outs")),
    )
    op.create_index(
        "ix_opt_outs_cluster_scope_target", "opt_outs", ["cluster", "scope", "target"]
    )


def downgrade() -> None:
    op.drop_index("ix_opt_outs_cluster_scope_target", table_name="opt_outs")
    op.drop_table("opt_outs")
