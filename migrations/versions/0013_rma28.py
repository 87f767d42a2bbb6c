"""RMA cases: the GPU or machine sent back under RMA, its status, evidence bundle and webhook

Revision ID: 0013_rma28
Revises: 0012_ledger28
Create Date: 2026-12-02 07:30:00

Only a new table: nothing existing changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0013_rma28"
down_revision: str | None = "0012_ledger28"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "rma_cases",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("target", sa.String(length=16), nullable=False),
        sa.Column("hardware_id", sa.String(length=256), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=True),
        sa.Column("remediation_id", sa.BigInteger(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("history", JSON, nullable=False),
        sa.Column("bundle", JSON, nullable=False),
        sa.Column("webhook_state", sa.String(length=16), nullable=False),
        sa.Column("webhook_attempts", sa.Integer(), nullable=False),
        sa.Column("webhook_next_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("webhook_error", sa.Text(), nullable=True),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rma_cases")),
    )
    op.create_index(
        "ix_rma_cases_cluster_status", "rma_cases", ["cluster", "status", "opened_at"]
    )
    op.create_index("ix_rma_cases_hardware", "rma_cases", ["hardware_id", "status"])
    op.create_index("ix_rma_cases_webhook", "rma_cases", ["webhook_state", "webhook_next_at"])


def downgrade() -> None:
    op.drop_index("ix_rma_cases_webhook", table_name="rma_cases")
    op.drop_index("ix_rma_cases_hardware", table_name="rma_cases")
    op.drop_index("ix_rma_cases_cluster_status", table_name="rma_cases")
    op.drop_table("rma_cases")
