"""The job's user and partition on its outcome.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-27

Why (issue 22, item 4): the analyst recipe "Waits per user and virtual cluster (partition)" joined each
finished job of the period to its ``jobs`` row for two columns. Over the 69 days of a 10M-row store
that hashed all 400,000 jobs, and once PostgreSQL switched a prepared statement run many times to its
generic plan (which assumes a range holds 0.5% of ``outcomes``) it built that hash in every worker and
sorted on disk: p99 5.3 s against a target of 2 s (``docs/results/store-scale.md``). The two columns
are written once on the outcome, where the recipe reads (``shared.store.derived``), as migration 0008
did for the decision that started the job:

- ``outcomes`` gets ``user_name`` and ``partition`` (nullable: NULL while the job's row is not stored;
  a job's row never has NULL there), and a partial index on (cluster, job_id) of the outcomes still
  without them, where a write of new jobs looks (usually empty);
- on PostgreSQL, ``ix_outcomes_cluster_start`` (cluster, start_s) is built again holding the columns
  the recipe reads (``INCLUDE``): the recipe's plan for a period is an index scan of it, and once
  PostgreSQL has switched a prepared statement to its generic plan it is that scan over the whole store
  too, which visited a heap page per job (1.2-1.4 s for the 400,000 jobs of the 10M-row store, in
  ``psql`` with the generic plan forced); from the index alone it reads the index's pages in order.
  ``ix_outcomes_cluster_decision`` (cluster, decision_time) likewise holds what "Waits per model
  version" reads: its generic plan over the whole store was the same scan (3.1 s, 346,000 buffers).
  SQLite has no ``INCLUDE``: its indexes stay as they are. An index-only scan skips the heap for the
  pages the visibility map marks all-visible, which (auto)vacuum maintains: after ``VACUUM FULL``,
  which leaves the map empty, run ``VACUUM`` too.

The backfill (``derived.backfill_job_columns``) joins ``outcomes`` to ``jobs`` in one statement. As in
0008, it writes a new version of every outcome row that has a job row, so on PostgreSQL ``outcomes``
holds as many dead versions until it is vacuumed (autovacuum does it within minutes, ``VACUUM ANALYZE
outcomes`` at once); ``outcomes`` is locked meanwhile, so the recorder's outcome writes wait
(``docs/results/store-scale.md`` has the time on the 10M-row store).

Downgrade: the index and the columns are dropped (SQLite 3.35+ drops a column in place).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from shared.store import derived

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

COLUMNS = (("user_name", sa.String(128)), ("partition", sa.String(128)))
UNNAMED = "user_name IS NULL"
#: what the recipe reads of an outcome besides the index's key (``models.PER_USER_READ`` at 0009;
#: written out so that this revision stays what it was)
PER_USER_READ = ["user_name", "partition", "wait_s", "end_s", "gpus"]
#: likewise for "Waits per model version" (``models.PER_MODEL_READ``)
PER_MODEL_READ = ["decision_model_version", "decision_policy", "decision_fallback", "wait_s", "bsld"]


def upgrade() -> None:
    for name, kind in COLUMNS:
        op.add_column("outcomes", sa.Column(name, kind, nullable=True))
    derived.backfill_job_columns(op.get_bind())
    # built after the backfill: it holds only the outcomes left without a job row
    op.create_index(
        "ix_outcomes_unnamed",
        "outcomes",
        ["cluster", "job_id"],
        postgresql_where=sa.text(UNNAMED),
        sqlite_where=sa.text(UNNAMED),
    )
    if op.get_context().dialect.name == "postgresql":
        _rebuild("ix_outcomes_cluster_start", "start_s", PER_USER_READ)
        _rebuild("ix_outcomes_cluster_decision", "decision_time", PER_MODEL_READ)
        op.execute("ANALYZE outcomes")


def _rebuild(name: str, column: str, include: list[str]) -> None:
    """PostgreSQL: the index ``name`` on (cluster, ``column``) built again, holding ``include``."""
    op.drop_index(name, table_name="outcomes")
    op.create_index(name, "outcomes", ["cluster", column], postgresql_include=include)


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        _rebuild("ix_outcomes_cluster_start", "start_s", [])
        _rebuild("ix_outcomes_cluster_decision", "decision_time", [])
    op.drop_index("ix_outcomes_unnamed", table_name="outcomes")
    for name, _ in reversed(COLUMNS):
        op.drop_column("outcomes", name)
