"""Decision rows at months of data: ``decisions`` range-partitioned on the snapshot's time (PostgreSQL),
its unique key with that time, and ``decision_rollups``, which outlives the raw rows.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-13

Why (issue 22, item 4): one row per pending job per decision is billions of rows a month on a busy
cluster. Partitioned by time, a read of a window touches that window's partitions, and retention drops
whole partitions instead of deleting rows (``shared.store.partitions``, ``shared.store.maintain``).

The partition key is ``snapshot_time``, which the decision message carries: a redelivered decision has
the same one. PostgreSQL requires a partitioned table's unique constraints to contain the partition
key, so the idempotency key becomes (``correlation_id``, ``job_id``, ``snapshot_time``)
(``uq_decisions_correlation_job_time``; a correlation id names one snapshot, so it identifies the same
rows as before) and the primary key (``id``, ``snapshot_time``). SQLite is not partitioned, but its key
changes the same way, so both stores keep one logical schema and the writes one conflict target.

PostgreSQL, in this migration's transaction (``decisions`` is locked throughout: 14-19 s for a
million rows on a busy 2-core machine, ``docs/results/store-scale.md``; plan the upgrade of a large store):

1. the views that read ``decisions`` are dropped (``decision_outcomes``, ``latest_decision_per_job``,
   ``model_version_outcomes``, ``shadow_vs_applied``) and the table is renamed ``decisions_0006``;
2. a new ``decisions`` with the same columns, defaults and checks is made, ``PARTITION BY RANGE
   (snapshot_time)``, with the schema ``hylo_partitions``, its default partition, a partition for each
   span (``HYLO_DECISION_PARTITION_DAYS``) that holds rows, and ``HYLO_DECISION_PARTITIONS_AHEAD``
   spans after the newest row (after the wall clock's now in an empty store: a Slurm cluster's clock);
3. the rows are copied (ids kept; the id sequence moves to the new table), the old table dropped;
4. keys, the foreign key to ``clusters`` and the indexes are built on the filled table (faster than
   maintaining them row by row), under their former names, and the views are created again, unchanged.
   ``ix_decisions_report_jobs`` gains ``snapshot_time`` and ``fallback`` (on SQLite too), so that the
   decision that started a job is read from the index alone (``INDEXES``).

SQLite cannot drop a constraint, so ``decisions`` is copied into a table with the new key (views
dropped and created again around it); an embedded store is small. Both: ``decision_rollups`` is created,
and ``outcomes`` gets indexes on (cluster, start_s) and (cluster, submit_s): the analyst recipes and the
report ask about the jobs of a period, which at months of data is a small part of the table.

Downgrade: the reverse; a plain ``decisions`` gets every row (one per (correlation_id, job_id), the
lowest id, should two snapshots' times ever share a correlation id), the partitions and their schema
are dropped, and so is ``decision_rollups`` (what it held of dropped raw rows is lost).
"""

from __future__ import annotations

import time
from importlib import import_module

import sqlalchemy as sa
from alembic import op

from shared.store import partitions
from shared.store.settings import MaintenanceSettings

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

NOW = sa.func.now()
OLD_KEY = ("correlation_id", "job_id")
NEW_KEY = ("correlation_id", "job_id", "snapshot_time")
OLD_UNIQUE = "uq_decisions_correlation_job"
NEW_UNIQUE = "uq_decisions_correlation_job_time"
#: the indexes of ``decisions`` (0001 and 0005), built again on the partitioned table
OLD_INDEXES = {
    "ix_decisions_cluster_job": ["cluster", "job_id"],
    "ix_decisions_cluster_time": ["cluster", "snapshot_time"],
    "ix_decisions_model_version": ["model_version"],
    "ix_decisions_report_snapshots": ["cluster", "snapshot_time", "correlation_id", "placed", "id"],
    "ix_decisions_report_jobs": ["cluster", "correlation_id", "job_id", "policy", "model_version", "rank"],
}
#: the same, the decision that started a job read from the index alone: its time (which the join names,
#: to open one partition) and its fallback (which the recipes count) join the index of 0005; without
#: them each finished job cost a visit to a row of a 10 GB table (seconds for a week's jobs)
REPORT_JOBS = "ix_decisions_report_jobs"
INDEXES = {
    **OLD_INDEXES,
    REPORT_JOBS: [
        "cluster",
        "correlation_id",
        "job_id",
        "snapshot_time",
        "policy",
        "model_version",
        "rank",
        "fallback",
    ],
}


def _views() -> dict[str, str]:
    """The views that read ``decisions``, as their latest revisions define them (recreated unchanged)."""
    initial = import_module("shared.store.migrations.versions.0001_initial")
    shadow = import_module("shared.store.migrations.versions.0004_shadow_priorities")
    what_happened = import_module("shared.store.migrations.versions.0006_what_happened")
    return {
        **what_happened.VIEWS,
        "model_version_outcomes": initial.VIEWS["model_version_outcomes"],
        **shadow.VIEWS,
    }


#: the jobs of a period: the report and the analyst recipes cut outcomes by start or submission time
OUTCOME_INDEXES = {
    "ix_outcomes_cluster_start": ["cluster", "start_s"],
    "ix_outcomes_cluster_submit": ["cluster", "submit_s"],
}


def _drop_views() -> None:
    for name in _views():
        op.execute(f"DROP VIEW IF EXISTS {name}")


def _create_views() -> None:
    for sql in _views().values():
        op.execute(sql)


def _create_rollups() -> None:
    op.create_table(
        "decision_rollups",
        sa.Column("cluster", sa.String(63), primary_key=True),
        sa.Column("day", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("decided_by", sa.String(200), primary_key=True),
        sa.Column("gpu_type", sa.String(128), primary_key=True),
        *(
            sa.Column(name, sa.BigInteger(), nullable=False)
            for name in ("snapshots", "decision_rows", "placed_rows", "fallback_rows", "started_jobs")
        ),
        sa.Column("started_wait_s_sum", sa.Float(), nullable=False),
        sa.Column("started_wait_s_max", sa.Float(), nullable=True),
        sa.Column("started_jct_s_sum", sa.Float(), nullable=False),
        sa.Column("started_bsld_sum", sa.Float(), nullable=False),
        sa.Column("latency_snapshots", sa.BigInteger(), nullable=False),
        sa.Column("latency_ms_sum", sa.Float(), nullable=False),
        sa.Column("latency_ms_max", sa.Float(), nullable=True),
        sa.Column("first_snapshot_time", sa.Float(), nullable=False),
        sa.Column("last_snapshot_time", sa.Float(), nullable=False),
        sa.Column("rolled_up_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
    )


def _keys_and_indexes(
    primary: list[str], unique: str, key: tuple[str, ...], indexes: dict[str, list[str]]
) -> None:
    """The keys, the foreign key and the indexes of a freshly filled PostgreSQL ``decisions``."""
    op.create_primary_key("decisions_pkey", "decisions", primary)
    op.create_unique_constraint(unique, "decisions", list(key))
    op.create_foreign_key("decisions_cluster_fkey", "decisions", "clusters", ["cluster"], ["name"])
    for name, columns in indexes.items():
        op.create_index(name, "decisions", columns)


def _partition_pg() -> None:
    settings = MaintenanceSettings()
    days = settings.decision_partition_days
    conn = op.get_bind()
    op.execute("ALTER TABLE decisions RENAME TO decisions_0006")
    op.execute(
        "CREATE TABLE decisions (LIKE decisions_0006 INCLUDING DEFAULTS INCLUDING CONSTRAINTS) "
        "PARTITION BY RANGE (snapshot_time)"
    )
    partitions.create_layout(conn)
    width = days * partitions.DAY_S
    held = conn.execute(
        sa.text("SELECT DISTINCT FLOOR(snapshot_time / :width) FROM decisions_0006"), {"width": width}
    ).scalars()
    spans = [(float(k) * width, (float(k) + 1) * width) for k in held]
    newest = conn.execute(sa.text("SELECT MAX(snapshot_time) FROM decisions_0006")).scalar()
    spans += partitions.ahead(
        time.time() if newest is None else float(newest), days, settings.decision_partitions_ahead
    )
    partitions.ensure_partitions(conn, spans)
    op.execute("INSERT INTO decisions SELECT * FROM decisions_0006")
    op.execute("ALTER SEQUENCE decisions_id_seq OWNED BY decisions.id")
    op.execute("DROP TABLE decisions_0006")
    _keys_and_indexes(["id", "snapshot_time"], NEW_UNIQUE, NEW_KEY, INDEXES)


def _unpartition_pg() -> None:
    op.execute("ALTER TABLE decisions RENAME TO decisions_0007")
    op.execute("CREATE TABLE decisions (LIKE decisions_0007 INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
    op.execute(
        "INSERT INTO decisions SELECT DISTINCT ON (correlation_id, job_id) * FROM decisions_0007 "
        "ORDER BY correlation_id, job_id, id"
    )
    op.execute("ALTER SEQUENCE decisions_id_seq OWNED BY decisions.id")
    op.execute("DROP TABLE decisions_0007")
    op.execute(f"DROP SCHEMA IF EXISTS {partitions.SCHEMA}")
    _keys_and_indexes(["id"], OLD_UNIQUE, OLD_KEY, OLD_INDEXES)


def _rekey_sqlite(old: str, new: str, key: tuple[str, ...], report_jobs: list[str]) -> None:
    with op.batch_alter_table("decisions", recreate="always") as batch:
        batch.drop_constraint(old, type_="unique")
        batch.create_unique_constraint(new, list(key))
        batch.drop_index(REPORT_JOBS)
        batch.create_index(REPORT_JOBS, report_jobs)


def upgrade() -> None:
    _drop_views()
    if op.get_context().dialect.name == "postgresql":
        _partition_pg()
    else:
        _rekey_sqlite(OLD_UNIQUE, NEW_UNIQUE, NEW_KEY, INDEXES[REPORT_JOBS])
    _create_views()
    _create_rollups()
    for name, columns in OUTCOME_INDEXES.items():
        op.create_index(name, "outcomes", columns)


def downgrade() -> None:
    for name in OUTCOME_INDEXES:
        op.drop_index(name, table_name="outcomes")
    op.drop_table("decision_rollups")
    _drop_views()
    if op.get_context().dialect.name == "postgresql":
        _unpartition_pg()
    else:
        op.execute(
            "DELETE FROM decisions "
            "WHERE id NOT IN (SELECT MIN(id) FROM decisions GROUP BY correlation_id, job_id)"
        )
        _rekey_sqlite(NEW_UNIQUE, OLD_UNIQUE, OLD_KEY, OLD_INDEXES[REPORT_JOBS])
    _create_views()
