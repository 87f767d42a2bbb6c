"""the fleet rollups' repair times as packed float64s, not JSON lists; each day's faults on
its marker

Revision ID: 0014_fleet33
Revises: 0013_rma28
Create Date: 2026-12-02 11:30:00

The rollups are a cache of the remediations: both tables are emptied (a day's marker without
its rows would read as a day without faults) and each day is summed again on the first read of a
window that holds it. Nothing else changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0014_fleet33"
down_revision: str | None = "0013_rma28"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def _repair_times(kind: sa.types.TypeEngine[object]) -> None:
    op.execute(sa.text("DELETE FROM fleet_rollups"))
    op.execute(sa.text("DELETE FROM fleet_rollup_days"))
    with op.batch_alter_table("fleet_rollups") as batch:
        batch.drop_column("repair_seconds")
        batch.add_column(sa.Column("repair_seconds", kind, nullable=False))


def upgrade() -> None:
    _repair_times(sa.LargeBinary())
    with op.batch_alter_table("fleet_rollup_days") as batch:
        batch.add_column(sa.Column("faults", sa.Integer(), nullable=False))


def downgrade() -> None:
    _repair_times(JSON)
    with op.batch_alter_table("fleet_rollup_days") as batch:
        batch.drop_column("faults")
