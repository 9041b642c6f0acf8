"""Shadow mode: what a candidate model would have prioritized, beside what was applied.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22

Why a table of its own and not rows in ``decisions``: a shadow model's priorities were never applied;
mixing them with decisions would make every existing query ("who decided", "which jobs started")
count them. One row per job and shadow version of a snapshot (``shadow_priorities``), unique on
(correlation_id, job_id, model_version) so a redelivered message stores nothing twice. The view
``shadow_vs_applied`` puts each shadow rank beside the applied decision's rank of the same snapshot
and job, and the job's outcome where it finished; it uses only SQL both PostgreSQL and SQLite accept.
``model_versions.shadow`` says which candidate the registry last put in shadow mode (nullable:
older rows and rows recorded only from announcements read as "no").
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

IdType = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
NOW = sa.func.now()

VIEWS = {
    "shadow_vs_applied": """
CREATE VIEW shadow_vs_applied AS
SELECT s.cluster, s.correlation_id, s.job_id, s.snapshot_time, s.sequence,
       s.model_version AS shadow_version, s.rank AS shadow_rank, s.priority AS shadow_priority,
       s.applied_policy, s.applied_model_version,
       d.rank AS applied_rank, d.priority AS applied_priority, d.placed,
       d.rank - s.rank AS rank_shift,
       o.wait_s, o.jct_s, o.bsld, o.status AS outcome_status,
       CASE WHEN o.correlation_id = s.correlation_id THEN 1 ELSE 0 END AS started_job
FROM shadow_priorities s
LEFT JOIN decisions d ON d.correlation_id = s.correlation_id AND d.job_id = s.job_id
LEFT JOIN outcomes o ON o.cluster = s.cluster AND o.job_id = s.job_id
""",
}


def upgrade() -> None:
    with op.batch_alter_table("model_versions") as batch:
        batch.add_column(sa.Column("shadow", sa.Boolean(), nullable=True))
    op.create_table(
        "shadow_priorities",
        sa.Column("id", IdType, primary_key=True, autoincrement=True),
        sa.Column("cluster", sa.String(63), nullable=False),
        sa.Column("correlation_id", sa.String(64), nullable=False),
        sa.Column("job_id", sa.String(128), nullable=False),
        sa.Column("model_version", sa.String(64), nullable=False),
        sa.Column("snapshot_time", sa.Float(), nullable=False),
        sa.Column("sequence", sa.BigInteger(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("priority", sa.Float(), nullable=False),
        sa.Column("applied_policy", sa.String(128), nullable=False),
        sa.Column("applied_model_version", sa.String(64), nullable=True),
        sa.Column("recorded_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
        sa.UniqueConstraint(
            "correlation_id", "job_id", "model_version", name="uq_shadow_priorities_corr_job_model"
        ),
    )
    op.create_index("ix_shadow_priorities_cluster_model", "shadow_priorities", ["cluster", "model_version"])
    for sql in VIEWS.values():
        op.execute(sql)


def downgrade() -> None:
    for name in reversed(list(VIEWS)):
        op.execute(f"DROP VIEW IF EXISTS {name}")
    op.drop_index("ix_shadow_priorities_cluster_model", table_name="shadow_priorities")
    op.drop_table("shadow_priorities")
    with op.batch_alter_table("model_versions") as batch:
        batch.drop_column("shadow")
