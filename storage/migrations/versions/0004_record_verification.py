"""Tuning records: where each came from and whether this deployment has verified it.

A record measured here is trusted as it is. An imported one is data from elsewhere: it is used for
compiles only after a worker has replayed, built and run it against the reference kernel here
(tuner.verify), which also replaces its timings with this machine's.

Rows that exist before this revision keep being used (they cannot be told apart): `measured`.

Revision ID: 0004
Revises: 0003
Created: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from storage.base import UTCDateTime

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

VERIFICATION_CHECK = "verification IN ('measured', 'pending', 'verified', 'rejected')"


def upgrade() -> None:
    with op.batch_alter_table("tuning_records") as batch:
        batch.add_column(sa.Column("verification", sa.String(16), nullable=False, server_default="measured"))
        batch.add_column(sa.Column("verified_at", UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("verify_message", sa.Text(), nullable=False, server_default=""))
        batch.create_check_constraint(op.f("ck_tuning_records_verification"), VERIFICATION_CHECK)
        batch.create_index(op.f("ix_tuning_records_verification"), ["verification"])


def downgrade() -> None:
    with op.batch_alter_table("tuning_records") as batch:
        batch.drop_index(op.f("ix_tuning_records_verification"))
        batch.drop_constraint(op.f("ck_tuning_records_verification"), type_="check")
        batch.drop_column("verify_message")
        batch.drop_column("verified_at")
        batch.drop_column("verification")
