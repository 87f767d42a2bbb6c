"""signal archive: every received signal as runs, their cycles, label sets and node inventory

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 14:40:00

Written by hand to match the models (types spelled out, no model imports), like 0001.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def _ts(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "signal_archive",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("gpu", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("code", sa.Integer(), nullable=True),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("source", sa.String(length=64), nullable=False),
        sa.Column("label_set", sa.BigInteger(), nullable=True),
        _ts("first_at"),
        _ts("last_at", nullable=True),
        sa.Column("readings", sa.Integer(), nullable=False),
        sa.Column("lag_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_signal_archive")),
    )
    op.create_index("ix_signal_archive_cluster_first", "signal_archive", ["cluster", "first_at"])
    op.create_index(
        "ix_signal_archive_cluster_key",
        "signal_archive",
        ["cluster", "node", "gpu", "kind", "first_at"],
    )
    op.create_index(
        "ix_signal_archive_cluster_kind_value", "signal_archive", ["cluster", "kind", "value"]
    )
    op.create_table(
        "signal_label_sets",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("gpu_uuid", sa.String(length=128), nullable=True),
        sa.Column("labels", JSON, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_signal_label_sets")),
    )
    op.create_index(
        "uq_signal_label_sets_cluster_digest",
        "signal_label_sets",
        ["cluster", "digest"],
        unique=True,
    )
    op.create_table(
        "signal_cycles",
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("source", sa.String(length=64), nullable=False),
        _ts("at"),
        sa.PrimaryKeyConstraint("cluster", "source", "at", name=op.f("pk_signal_cycles")),
    )
    op.create_table(
        "signal_archive_nodes",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        _ts("at"),
        sa.Column("present", sa.Boolean(), nullable=False),
        sa.Column("pool", sa.String(length=128), nullable=False),
        sa.Column("labels", JSON, nullable=False),
        sa.Column("ready", sa.Boolean(), nullable=False),
        sa.Column("cordoned", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_signal_archive_nodes")),
    )
    op.create_index("ix_signal_archive_nodes_cluster_at", "signal_archive_nodes", ["cluster", "at"])


def downgrade() -> None:
    op.drop_index("ix_signal_archive_nodes_cluster_at", table_name="signal_archive_nodes")
    op.drop_table("signal_archive_nodes")
    op.drop_table("signal_cycles")
    op.drop_index("uq_signal_label_sets_cluster_digest", table_name="signal_label_sets")
    op.drop_table("signal_label_sets")
    op.drop_index("ix_signal_archive_cluster_kind_value", table_name="signal_archive")
    op.drop_index("ix_signal_archive_cluster_key", table_name="signal_archive")
    op.drop_index("ix_signal_archive_cluster_first", table_name="signal_archive")
    op.drop_table("signal_archive")
