"""Jobs keep the GPU types they may run on.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22

Why: the trainer rebuilds a cluster's recent workload from the jobs table (``shared.retrain``); a
job that may only run on some GPU types and comes back as "any type" would be simulated on nodes it
could never use. Nullable: rows written before this revision stay valid (read as "unknown: any").
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

JsonType = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("gpu_types", JsonType, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("gpu_types")
