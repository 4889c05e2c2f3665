"""Workloads and tuning records: the first tables.

Revision ID: 0001
Revises:
Created: 2026-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Spelled out here, not imported from storage/: a migration must keep meaning what it meant.
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "workloads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("description", JSON, nullable=False),
        sa.Column("flops", sa.BigInteger(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workloads")),
    )
    op.create_index(op.f("ix_workloads_key"), "workloads", ["key"], unique=True)

    op.create_table(
        "tuning_records",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("workload_id", sa.Integer(), nullable=False),
        sa.Column("target_key", sa.String(length=255), nullable=False),
        sa.Column("trace", JSON, nullable=False),
        sa.Column("trace_hash", sa.String(length=64), nullable=False),
        sa.Column("run_secs", JSON, nullable=False),
        sa.Column("mean_secs", sa.Float(), nullable=True),
        sa.Column("median_secs", sa.Float(), nullable=True),
        sa.Column("error_kind", sa.String(length=32), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=False),
        sa.Column("temper_version", sa.String(length=64), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["workload_id"],
            ["workloads.id"],
            name=op.f("fk_tuning_records_workload_id_workloads"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tuning_records")),
    )
    op.create_index(
        "ix_tuning_records_best", "tuning_records", ["workload_id", "target_key", "median_secs"], unique=False
    )
    op.create_index(op.f("ix_tuning_records_target_key"), "tuning_records", ["target_key"], unique=False)
    op.create_index(op.f("ix_tuning_records_trace_hash"), "tuning_records", ["trace_hash"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_tuning_records_trace_hash"), table_name="tuning_records")
    op.drop_index(op.f("ix_tuning_records_target_key"), table_name="tuning_records")
    op.drop_index("ix_tuning_records_best", table_name="tuning_records")
    op.drop_table("tuning_records")
    op.drop_index(op.f("ix_workloads_key"), table_name="workloads")
    op.drop_table("workloads")
