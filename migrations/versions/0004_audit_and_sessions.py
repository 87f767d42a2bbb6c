"""audit log of human commands (append-only), server-side console sessions, and an index for
the node page's "replacement of" link

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 14:50:00

Written by hand in the style of 0001: types spelled out, no model imports; audit_log gets the
same append-only triggers as remediation_events on both backends.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

PG_APPEND_ONLY = """
CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$
"""


def _ts(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "audit_log",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        _ts("at"),
        sa.Column("actor", sa.String(length=256), nullable=False),
        sa.Column("token_id", sa.String(length=16), nullable=False),
        sa.Column("source", sa.String(length=64), nullable=False),
        sa.Column("command", sa.String(length=32), nullable=False),
        sa.Column("remediation_id", sa.BigInteger(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    op.create_index("ix_audit_log_cluster_at", "audit_log", ["cluster", "at", "id"])
    op.create_index(
        "ix_audit_log_cluster_remediation", "audit_log", ["cluster", "remediation_id", "at"]
    )
    op.create_table(
        "web_sessions",
        sa.Column("id_hash", sa.String(length=64), nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("token_id", sa.String(length=16), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=True),
        _ts("created_at"),
        _ts("expires_at"),
        _ts("revoked_at", nullable=True),
        sa.PrimaryKeyConstraint("id_hash", name=op.f("pk_web_sessions")),
    )
    op.create_index("ix_web_sessions_expires", "web_sessions", ["expires_at"])
    op.create_index("ix_remediations_cluster_new_node", "remediations", ["cluster", "new_node"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PG_APPEND_ONLY)
        op.execute(
            "CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE "
            "ON audit_log FOR EACH ROW EXECUTE FUNCTION audit_log_append_only()"
        )
        op.execute(
            "CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE "
            "ON audit_log FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only()"
        )
    else:
        for verb in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER audit_log_no_{verb.lower()} BEFORE {verb} "
                "ON audit_log BEGIN "
                f"SELECT RAISE(ABORT, 'audit_log is append-only: {verb} refused'); END"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER audit_log_no_truncate ON audit_log")
        op.execute("DROP TRIGGER audit_log_append_only ON audit_log")
        op.execute("DROP FUNCTION audit_log_append_only()")
    else:
        op.execute("DROP TRIGGER audit_log_no_update")
        op.execute("DROP TRIGGER audit_log_no_delete")
    op.drop_index("ix_remediations_cluster_new_node", table_name="remediations")
    op.drop_table("web_sessions")
    op.drop_table("audit_log")
