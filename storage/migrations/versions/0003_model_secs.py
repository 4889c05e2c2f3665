"""Tuning records: the seconds per call a record's kernel took inside its compiled model.

Revision ID: 0003
Revises: 0002
Created: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tuning_records") as batch:
        batch.add_column(sa.Column("model_secs", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tuning_records") as batch:
        batch.drop_column("model_secs")
