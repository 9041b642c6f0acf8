"""Long-range reads without decision rows: the decision that started a job on its outcome, and one row
per decided snapshot.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-20

Why (issue 22, item 4): over the 69 days of a 10M-row store, "Waits per model version" took 10-15 s
and the report 27-37 s, because both looked up a decision row per finished job (400,000) and the
report one per snapshot (200,000), in every partition (``docs/results/store-scale.md``). What they
looked up is written once, where they read (``shared.store.derived``):

- ``outcomes`` gets ``decision_time``, ``decision_policy``, ``decision_model_version``,
  ``decision_fallback`` and ``decision_rank`` (all nullable: NULL while no stored decision started the
  job), an index on (cluster, decision_time) for the jobs of a period of decisions, and a partial index
  on ``correlation_id`` of the outcomes still without a decision (the decision's write looks there);
- ``decision_snapshots``: per snapshot (cluster, snapshot_time, correlation_id: its key), its rows,
  placed rows, first row's id and what its rows share.

Both are filled from the rows already stored (``derived.backfill``): on PostgreSQL partition by
partition for the snapshots and one join for the outcomes. Adding nullable columns is a catalog
change; the backfill writes a new version of every outcome row a stored decision started, so on a
large PostgreSQL store the table holds as many dead versions afterwards until it is vacuumed:
autovacuum does it within minutes, ``VACUUM ANALYZE outcomes`` at once (a migration runs in a
transaction, where VACUUM cannot). On the 10M-row store (400,000 outcomes, 200,000 snapshots) the
migration took 342 s on a loaded 2-core machine and the vacuum 4 s (``docs/results/store-scale.md``);
``outcomes`` and the new table are locked meanwhile, so the recorder's outcome writes wait.

Downgrade: the table, the indexes and the columns are dropped (SQLite 3.35+ drops a column in place).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from shared.store import derived

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

JsonType = sa.JSON().with_variant(JSONB(), "postgresql")

COLUMNS = (
    ("decision_time", sa.Float()),
    ("decision_policy", sa.String(128)),
    ("decision_model_version", sa.String(64)),
    ("decision_fallback", sa.String(1024)),
    ("decision_rank", sa.Integer()),
)
UNDECIDED = "decision_policy IS NULL AND correlation_id IS NOT NULL"


def upgrade() -> None:
    for name, kind in COLUMNS:
        op.add_column("outcomes", sa.Column(name, kind, nullable=True))
    op.create_table(
        "decision_snapshots",
        sa.Column("cluster", sa.String(63), primary_key=True),
        sa.Column("snapshot_time", sa.Float(), primary_key=True),
        sa.Column("correlation_id", sa.String(64), primary_key=True),
        sa.Column("sequence", sa.BigInteger(), nullable=False),
        sa.Column("policy", sa.String(128), nullable=False),
        sa.Column("model_version", sa.String(64), nullable=True),
        sa.Column("fallback", sa.String(1024), nullable=True),
        sa.Column("latencies_ms", JsonType, nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("decision_rows", sa.Integer(), nullable=False),
        sa.Column("placed_rows", sa.Integer(), nullable=False),
        sa.Column("first_decision_id", sa.BigInteger(), nullable=False),
    )
    derived.backfill(op.get_bind())
    # built after the backfill: one pass over the filled table, not an update per row
    op.create_index("ix_outcomes_cluster_decision", "outcomes", ["cluster", "decision_time"])
    op.create_index(
        "ix_outcomes_undecided",
        "outcomes",
        ["correlation_id"],
        postgresql_where=sa.text(UNDECIDED),
        sqlite_where=sa.text(UNDECIDED),
    )
    if op.get_context().dialect.name == "postgresql":
        op.execute("ANALYZE outcomes")
        op.execute("ANALYZE decision_snapshots")


def downgrade() -> None:
    op.drop_index("ix_outcomes_undecided", table_name="outcomes")
    op.drop_index("ix_outcomes_cluster_decision", table_name="outcomes")
    op.drop_table("decision_snapshots")
    for name, _ in reversed(COLUMNS):
        op.drop_column("outcomes", name)
