"""Quarantined machines: which remediation quarantined a machine and when a hold was last lifted

Revision ID: 0015_quar33
Revises: 0014_fleet33
Create Date: 2026-12-02 11:40:00

Two nullable columns on ledger_machines: existing rows need no value.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015_quar33"
down_revision: str | None = "0014_fleet33"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("ledger_machines", sa.Column("quarantined_by", sa.BigInteger(), nullable=True))
    op.add_column(
        "ledger_machines", sa.Column("hold_lifted_at", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("ledger_machines", "hold_lifted_at")
    op.drop_column("ledger_machines", "quarantined_by")
