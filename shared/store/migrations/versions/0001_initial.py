"""Initial schema: clusters, jobs, decisions, outcomes, model_versions and the analyst views.

Revision ID: 0001
Revises:
Create Date: 2026-11-22

Why the views are plain SQL shared by both dialects: analysts query them from psql or sqlite3 with
no Hylo code; the SQL below uses only what PostgreSQL and SQLite (>= 3.25, window functions) both
accept, so the embedded SQLite file and the deployment database answer the same queries.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

JsonType = sa.JSON().with_variant(JSONB(), "postgresql")
IdType = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
NOW = sa.func.now()

VIEWS = {
    "decision_outcomes": """
CREATE VIEW decision_outcomes AS
SELECT d.id AS decision_id, d.cluster, d.job_id, d.correlation_id, d.snapshot_time, d.sequence,
       d.rank, d.priority, d.placed, d.nodes, d.mode, d.policy, d.model_version, d.fallback,
       d.features, d.latency_ms, d.decided_at,
       o.submit_s, o.start_s, o.end_s, o.wait_s, o.jct_s, o.bsld, o.status AS outcome_status,
       CASE WHEN o.correlation_id = d.correlation_id THEN 1 ELSE 0 END AS started_job
FROM decisions d
LEFT JOIN outcomes o ON o.cluster = d.cluster AND o.job_id = d.job_id
""",
    "latest_decision_per_job": """
CREATE VIEW latest_decision_per_job AS
SELECT decision_id, cluster, job_id, correlation_id, snapshot_time, sequence, rank, priority, placed,
       nodes, mode, policy, model_version, fallback, features, latency_ms
FROM (
    SELECT d.id AS decision_id, d.cluster, d.job_id, d.correlation_id, d.snapshot_time, d.sequence,
           d.rank, d.priority, d.placed, d.nodes, d.mode, d.policy, d.model_version, d.fallback,
           d.features, d.latency_ms,
           ROW_NUMBER() OVER (
               PARTITION BY d.cluster, d.job_id ORDER BY d.sequence DESC, d.snapshot_time DESC, d.id DESC
           ) AS rn
    FROM decisions d
) ranked
WHERE rn = 1
""",
    "model_version_outcomes": """
CREATE VIEW model_version_outcomes AS
SELECT COALESCE(d.model_version, 'policy:' || d.policy) AS decided_by,
       COUNT(*) AS jobs,
       AVG(o.wait_s) AS mean_wait_s,
       AVG(o.jct_s) AS mean_jct_s,
       AVG(o.bsld) AS mean_bsld,
       MAX(o.bsld) AS max_bsld,
       SUM(CASE WHEN d.fallback IS NULL THEN 0 ELSE 1 END) AS fallbacks
FROM outcomes o
JOIN decisions d ON d.cluster = o.cluster AND d.job_id = o.job_id AND d.correlation_id = o.correlation_id
GROUP BY COALESCE(d.model_version, 'policy:' || d.policy)
""",
}


def upgrade() -> None:
    op.create_table(
        "clusters",
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("spec", JsonType, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
    )
    op.create_table(
        "jobs",
        sa.Column("id", IdType, primary_key=True, autoincrement=True),
        sa.Column("cluster", sa.String(63), sa.ForeignKey("clusters.name"), nullable=False),
        sa.Column("job_id", sa.String(128), nullable=False),
        sa.Column("submit_s", sa.Float(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("gpu_milli", sa.Integer(), nullable=False),
        sa.Column("cpus_milli", sa.BigInteger(), nullable=False),
        sa.Column("mem_mib", sa.BigInteger(), nullable=False),
        sa.Column("est_runtime_s", sa.Float(), nullable=False),
        sa.Column("user_name", sa.String(128), nullable=False),
        sa.Column("partition", sa.String(128), nullable=False),
        sa.Column("qos", sa.String(128), nullable=False),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
        sa.UniqueConstraint("cluster", "job_id", name="uq_jobs_cluster_job"),
    )
    op.create_table(
        "decisions",
        sa.Column("id", IdType, primary_key=True, autoincrement=True),
        sa.Column("correlation_id", sa.String(64), nullable=False),
        sa.Column("cluster", sa.String(63), sa.ForeignKey("clusters.name"), nullable=False),
        sa.Column("job_id", sa.String(128), nullable=False),
        sa.Column("snapshot_time", sa.Float(), nullable=False),
        sa.Column("sequence", sa.BigInteger(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("priority", sa.Float(), nullable=False),
        sa.Column("nodes", JsonType, nullable=False),
        sa.Column("placed", sa.Boolean(), nullable=False),
        sa.Column("mode", sa.String(8), nullable=True),
        sa.Column("policy", sa.String(128), nullable=False),
        sa.Column("model_version", sa.String(64), nullable=True),
        sa.Column("fallback", sa.String(1024), nullable=True),
        sa.Column("features", JsonType, nullable=False),
        sa.Column("latencies_ms", JsonType, nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
        sa.UniqueConstraint("correlation_id", "job_id", name="uq_decisions_correlation_job"),
        sa.CheckConstraint("mode IS NULL OR mode IN ('pack', 'spread')", name="ck_decisions_mode"),
    )
    op.create_index("ix_decisions_cluster_job", "decisions", ["cluster", "job_id"])
    op.create_index("ix_decisions_cluster_time", "decisions", ["cluster", "snapshot_time"])
    op.create_index("ix_decisions_model_version", "decisions", ["model_version"])
    op.create_table(
        "outcomes",
        sa.Column("id", IdType, primary_key=True, autoincrement=True),
        sa.Column("cluster", sa.String(63), sa.ForeignKey("clusters.name"), nullable=False),
        sa.Column("job_id", sa.String(128), nullable=False),
        sa.Column("correlation_id", sa.String(64), nullable=True),
        sa.Column("submit_s", sa.Float(), nullable=False),
        sa.Column("start_s", sa.Float(), nullable=False),
        sa.Column("end_s", sa.Float(), nullable=False),
        sa.Column("wait_s", sa.Float(), nullable=False),
        sa.Column("jct_s", sa.Float(), nullable=False),
        sa.Column("bsld", sa.Float(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
        sa.UniqueConstraint("cluster", "job_id", name="uq_outcomes_cluster_job"),
    )
    op.create_table(
        "model_versions",
        sa.Column("version", sa.String(64), primary_key=True),
        sa.Column("cluster", sa.String(63), nullable=True),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("uri", sa.String(1024), nullable=False),
        sa.Column("card", JsonType, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("promoted_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("status IN ('candidate', 'current', 'retired')", name="ck_model_versions_status"),
    )
    for sql in VIEWS.values():
        op.execute(sql)


def downgrade() -> None:
    for name in reversed(list(VIEWS)):
        op.execute(f"DROP VIEW IF EXISTS {name}")
    for table in ("model_versions", "outcomes", "decisions", "jobs", "clusters"):
        op.drop_table(table)
