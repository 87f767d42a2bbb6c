"""the hardware ledger (issue #28): machines, GPUs, where each GPU sat when, the links of
signals/remediations/verdicts to them, and swapped-card conflicts

Revision ID: 0012_ledger28
Revises: 0011
Create Date: 2026-12-02 07:30:00

Only new tables: nothing existing changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0012_ledger28"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "ledger_machines",
        sa.Column("id", sa.String(length=256), nullable=False),
        sa.Column("provider_id", sa.String(length=512), nullable=True),
        sa.Column("dmi_serial", sa.String(length=128), nullable=True),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("quarantined_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("quarantine_reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_machines")),
    )
    op.create_index("ix_ledger_machines_cluster_node", "ledger_machines", ["cluster", "node"])
    op.create_table(
        "ledger_gpus",
        sa.Column("uuid", sa.String(length=128), nullable=False),
        sa.Column("serial", sa.String(length=64), nullable=True),
        sa.Column("model", sa.String(length=128), nullable=True),
        sa.Column("vbios", sa.String(length=64), nullable=True),
        sa.Column("driver", sa.String(length=64), nullable=True),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("uuid", name=op.f("pk_ledger_gpus")),
    )
    op.create_index("ix_ledger_gpus_model", "ledger_gpus", ["model"])
    op.create_table(
        "ledger_placements",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("gpu_uuid", sa.String(length=128), nullable=False),
        sa.Column("machine_id", sa.String(length=256), nullable=True),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("pci_bus_id", sa.String(length=32), nullable=True),
        sa.Column("gpu_index", sa.Integer(), nullable=True),
        sa.Column("from_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("to_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["gpu_uuid"],
            ["ledger_gpus.uuid"],
            name=op.f("fk_ledger_placements_gpu_uuid_ledger_gpus"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["machine_id"],
            ["ledger_machines.id"],
            name=op.f("fk_ledger_placements_machine_id_ledger_machines"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_placements")),
    )
    op.create_index("ix_ledger_placements_gpu", "ledger_placements", ["gpu_uuid", "from_at"])
    op.create_index(
        "ix_ledger_placements_machine", "ledger_placements", ["machine_id", "from_at"]
    )
    op.create_index(
        "ix_ledger_placements_cluster_node", "ledger_placements", ["cluster", "node", "from_at"]
    )
    op.create_table(
        "ledger_links",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("subject", sa.String(length=16), nullable=False),
        sa.Column("ref_id", sa.BigInteger(), nullable=True),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("gpu_uuid", sa.String(length=128), nullable=True),
        sa.Column("machine_id", sa.String(length=256), nullable=True),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("code", sa.Integer(), nullable=True),
        sa.Column("detail", Json, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_links")),
    )
    op.create_index("ix_ledger_links_gpu", "ledger_links", ["gpu_uuid", "at"])
    op.create_index("ix_ledger_links_machine", "ledger_links", ["machine_id", "at"])
    op.create_index("ix_ledger_links_subject", "ledger_links", ["subject", "ref_id"])
    op.create_index("ix_ledger_links_cluster_at", "ledger_links", ["cluster", "at"])
    op.create_table(
        "ledger_conflicts",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("machine_id", sa.String(length=256), nullable=True),
        sa.Column("pci_bus_id", sa.String(length=32), nullable=False),
        sa.Column("known_uuid", sa.String(length=128), nullable=False),
        sa.Column("seen_uuid", sa.String(length=128), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_conflicts")),
    )
    op.create_index("ix_ledger_conflicts_cluster_at", "ledger_conflicts", ["cluster", "at"])


def downgrade() -> None:
    op.drop_index("ix_ledger_conflicts_cluster_at", table_name="ledger_conflicts")
    op.drop_table("ledger_conflicts")
    for name in (
        "ix_ledger_links_cluster_at",
        "ix_ledger_links_subject",
        "ix_ledger_links_machine",
        "ix_ledger_links_gpu",
    ):
        op.drop_index(name, table_name="ledger_links")
    op.drop_table("ledger_links")
    for name in (
        "ix_ledger_placements_cluster_node",
        "ix_ledger_placements_machine",
        "ix_ledger_placements_gpu",
    ):
        op.drop_index(name, table_name="ledger_placements")
    op.drop_table("ledger_placements")
    op.drop_index("ix_ledger_gpus_model", table_name="ledger_gpus")
    op.drop_table("ledger_gpus")
    op.drop_index("ix_ledger_machines_cluster_node", table_name="ledger_machines")
    op.drop_table("ledger_machines")
