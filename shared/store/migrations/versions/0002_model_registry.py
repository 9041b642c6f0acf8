"""Model registry: gate results and promotion bookkeeping on model_versions, and their history.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22

Why a separate events table and not more columns: a version changes state many times (registered,
refused by the gate, promoted, retired, rolled back to), and the question an operator asks after an
incident is "who made which model current, when, and on what evidence"; one row per state change
with its timestamp answers it, while ``model_versions`` keeps only the latest state. The new columns
on ``model_versions`` are nullable, so rows written before this revision (and by services that only
record announcements) stay valid.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

JsonType = sa.JSON().with_variant(JSONB(), "postgresql")
IdType = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
EVENTS = "('registered', 'gate-passed', 'gate-refused', 'promoted', 'retired', 'rolled-back')"


def upgrade() -> None:
    with op.batch_alter_table("model_versions") as batch:
        batch.add_column(sa.Column("metrics", JsonType, nullable=True))
        batch.add_column(sa.Column("reason", sa.String(2048), nullable=True))
        batch.add_column(sa.Column("promoted_by", sa.String(128), nullable=True))
        batch.add_column(sa.Column("forced", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "model_version_events",
        sa.Column("id", IdType, primary_key=True, autoincrement=True),
        sa.Column("version", sa.String(64), sa.ForeignKey("model_versions.version"), nullable=False),
        sa.Column("cluster", sa.String(63), nullable=True),
        sa.Column("event", sa.String(16), nullable=False),
        sa.Column("from_status", sa.String(16), nullable=True),
        sa.Column("to_status", sa.String(16), nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("forced", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.String(2048), nullable=True),
        sa.Column("detail", JsonType, nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(f"event IN {EVENTS}", name="ck_model_version_events_event"),
    )
    op.create_index("ix_model_version_events_version", "model_version_events", ["version"])
    op.create_index("ix_model_version_events_cluster_at", "model_version_events", ["cluster", "at"])


def downgrade() -> None:
    op.drop_index("ix_model_version_events_cluster_at", table_name="model_version_events")
    op.drop_index("ix_model_version_events_version", table_name="model_version_events")
    op.drop_table("model_version_events")
    with op.batch_alter_table("model_versions") as batch:
        for column in ("retired_at", "forced", "promoted_by", "reason", "metrics"):
            batch.drop_column(column)
