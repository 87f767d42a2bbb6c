"""Fences have one owner: the store's identity and the operators' fence decisions

Revision ID: 0016_fences38
Revises: 0015_quar33
Create Date: 2026-12-07 21:10:00

`store_identity` holds one row, written here with the schema: the id that every fence mark this
store writes carries, so that a controller on another database (a restored backup, a wrong
database_url) never takes our marks for its own, nor we its. `fence_decisions` is append-only:
an operator's fence, release or adoption of a node, with who and why.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0016_fences38"
down_revision: str | None = "0015_quar33"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    identity = op.create_table(
        "store_identity",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("store_id", sa.String(length=36), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_store_identity")),
    )
    op.bulk_insert(
        identity, [{"id": 1, "store_id": str(uuid.uuid4()), "created_at": datetime.now(UTC)}]
    )
    op.create_table(
        "fence_decisions",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True
        ),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("actor", sa.String(length=256), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("mark", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_fence_decisions")),
    )
    op.create_index(
        "ix_fence_decisions_cluster_node", "fence_decisions", ["cluster", "node", "id"]
    )


def downgrade() -> None:
    op.drop_index("ix_fence_decisions_cluster_node", table_name="fence_decisions")
    op.drop_table("fence_decisions")
    op.drop_table("store_identity")
