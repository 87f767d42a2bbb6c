"""signal archive: each reading's own timing (`observed_at`, `step_us`) and runs still open
(`open`), so a backtest reproduces decisions at a `for` boundary and sees a fault still going

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 01:20:00

Existing rows keep their `lag_ms` (the replay applies it as before); the lead re-chains at merge.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "signal_archive", sa.Column("observed_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column("signal_archive", sa.Column("step_us", sa.BigInteger(), nullable=True))
    op.add_column(
        "signal_archive",
        sa.Column("open", sa.Boolean(), server_default=sa.false(), nullable=False),
    )


def downgrade() -> None:
    op.drop_column("signal_archive", "open")
    op.drop_column("signal_archive", "step_us")
    op.drop_column("signal_archive", "observed_at")
