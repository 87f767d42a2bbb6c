"""signal dispositions: what became of each signal taken in (opened #N, joined #N, folded, in
cooldown until T, suppressed by cancel #N, below threshold, …), shown with it on the node page

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02 01:15:00

Chained after 0006 (main's head); the lead re-chains at merge. Types are spelled out (no model
imports), as in 0001.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("signals", sa.Column("disposition", sa.String(length=512), nullable=True))


def downgrade() -> None:
    op.drop_column("signals", "disposition")
