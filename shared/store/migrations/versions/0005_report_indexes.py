"""Indexes that let the report read a large store without visiting the rows of ``decisions``.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29

Why: ``hylo report`` and ``GET /v1/report`` read, over a cluster's range, how many decision rows and
placed rows each snapshot has, and for each finished job (and each shadow rank) the decision row of the
same job and snapshot. On a store of a million decision rows (about 1 GB of heap: every row carries its
job's features as JSON) PostgreSQL answered both by scanning the whole table (issue 20: 20 s per
report). Two covering indexes make them index-only reads of narrow entries:

- ``ix_decisions_report_snapshots`` (cluster, snapshot_time, correlation_id, placed, id): rows and
  placed rows per snapshot, and the id of its first row;
- ``ix_decisions_report_jobs`` (cluster, correlation_id, job_id, policy, model_version, rank): who
  decided the row that started a job (outcomes) and the applied rank beside a shadow rank.

Both are plain multi-column B-trees, the same on PostgreSQL and SQLite. ``ix_decisions_cluster_time``
and ``ix_decisions_cluster_job`` are prefixes of them and are kept: the query API's pages use them.
Creating them locks writes to ``decisions`` while they are built (seconds per million rows).
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

INDEXES = {
    "ix_decisions_report_snapshots": ["cluster", "snapshot_time", "correlation_id", "placed", "id"],
    "ix_decisions_report_jobs": ["cluster", "correlation_id", "job_id", "policy", "model_version", "rank"],
}


def upgrade() -> None:
    for name, columns in INDEXES.items():
        op.create_index(name, "decisions", columns)


def downgrade() -> None:
    for name in reversed(list(INDEXES)):
        op.drop_index(name, table_name="decisions")
