"""the fleet: cluster identities (name → the UID of its kube-system namespace)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 01:00:00

Only a new table: an existing single-cluster database keeps every row and its `cluster` value;
its controller records the identity at its first start after the upgrade.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "clusters",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("kube_system_uid", sa.String(length=64), nullable=False),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("registered_by", sa.String(length=256), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_clusters")),
    )
    op.create_index("uq_clusters_kube_system_uid", "clusters", ["kube_system_uid"], unique=True)


def downgrade() -> None:
    op.drop_index("uq_clusters_kube_system_uid", table_name="clusters")
    op.drop_table("clusters")
