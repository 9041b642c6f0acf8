"""The store records what happened, not only the advice: where a job ran, what the placer and the
model knew, the raw values behind the features, and models given by path.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06

Why (issue 21): ``decisions.nodes`` is the placer's advice; a cluster may start a job elsewhere or
later (Slurm schedules, the simulated cluster's own cycle decides when no decision came), so an
analyst could not say on which nodes or GPU type a job really ran. The placer's per-job status and
reservation, and the model's score before ranking, were in the messages but not stored, and only the
normalized features were. New columns, all nullable so that every existing row stays valid and reads
back as "not recorded":

- ``outcomes``: ``nodes`` (JSON list of names), ``node_gpus`` (JSON list, the whole GPUs held on each
  node), ``gpu_type``, as the adapter reported them;
- ``decisions``: ``score`` (the model's raw score), ``placer_status`` (``placed``, ``reserved``,
  ``waiting``), ``reserved_s``, ``placer`` (strategy), ``solver_status`` (CP-SAT's status),
  ``raw_features`` (JSON: the raw values behind the normalized ``features`` that no other table
  holds);
- ``model_versions.status`` may also be ``external``: a checkpoint a prioritizer was given by path,
  recorded so that its decisions join to a row (the registry never gated it).

The views ``decision_outcomes`` and ``latest_decision_per_job`` are recreated with the new columns
appended (same names and order before them, so existing queries are unchanged). Adding a nullable
column is a catalog change on both PostgreSQL and SQLite (no table rewrite). SQLite cannot alter a
CHECK constraint, so ``model_versions`` (a few rows) is copied into a new table there; its history
(``model_version_events``) references it, so foreign keys are checked at commit for that step.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

JsonType = sa.JSON().with_variant(JSONB(), "postgresql")

DECISION_COLUMNS = (
    ("score", sa.Float()),
    ("placer_status", sa.String(16)),
    ("reserved_s", sa.Float()),
    ("placer", sa.String(16)),
    ("solver_status", sa.String(32)),
    ("raw_features", JsonType),
)
OUTCOME_COLUMNS = (
    ("nodes", JsonType),
    ("node_gpus", JsonType),
    ("gpu_type", sa.String(128)),
)
STATUS_CHECK = "ck_model_versions_status"
OLD_STATUSES = "status IN ('candidate', 'current', 'retired')"
NEW_STATUSES = "status IN ('candidate', 'current', 'retired', 'external')"

#: the decision columns every view gave before (0001), then the new ones
_DECISION_COLS = (
    "d.id AS decision_id, d.cluster, d.job_id, d.correlation_id, d.snapshot_time, d.sequence, "
    "d.rank, d.priority, d.placed, d.nodes, d.mode, d.policy, d.model_version, d.fallback, d.features"
)
_NEW_DECISION_COLS = "d.score, d.placer_status, d.reserved_s, d.placer, d.solver_status, d.raw_features"

VIEWS = {
    "decision_outcomes": f"""
CREATE VIEW decision_outcomes AS
SELECT {_DECISION_COLS}, d.latency_ms, d.decided_at,
       o.submit_s, o.start_s, o.end_s, o.wait_s, o.jct_s, o.bsld, o.status AS outcome_status,
       CASE WHEN o.correlation_id = d.correlation_id THEN 1 ELSE 0 END AS started_job,
       {_NEW_DECISION_COLS},
       o.nodes AS ran_on, o.node_gpus AS ran_node_gpus, o.gpu_type AS ran_gpu_type
FROM decisions d
LEFT JOIN outcomes o ON o.cluster = d.cluster AND o.job_id = d.job_id
""",
    "latest_decision_per_job": f"""
CREATE VIEW latest_decision_per_job AS
SELECT decision_id, cluster, job_id, correlation_id, snapshot_time, sequence, rank, priority, placed,
       nodes, mode, policy, model_version, fallback, features, latency_ms,
       score, placer_status, reserved_s, placer, solver_status, raw_features
FROM (
    SELECT {_DECISION_COLS}, d.latency_ms, {_NEW_DECISION_COLS},
           ROW_NUMBER() OVER (
               PARTITION BY d.cluster, d.job_id ORDER BY d.sequence DESC, d.snapshot_time DESC, d.id DESC
           ) AS rn
    FROM decisions d
) ranked
WHERE rn = 1
""",
}


def _old_views() -> dict[str, str]:
    """The definitions 0006 replaces (revision 0001's), for the downgrade."""
    from importlib import import_module

    initial = import_module("shared.store.migrations.versions.0001_initial")
    return {name: initial.VIEWS[name] for name in VIEWS}


def _replace_views(views: dict[str, str]) -> None:
    for name in views:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    for sql in views.values():
        op.execute(sql)


def _status_check(check: str) -> None:
    """Replace the CHECK constraint of ``model_versions.status`` by ``check``."""
    if op.get_context().dialect.name != "sqlite":
        op.drop_constraint(STATUS_CHECK, "model_versions", type_="check")
        op.create_check_constraint(STATUS_CHECK, "model_versions", sa.text(check))
        return
    # SQLite: the table is copied; dropping the old one with its history still referencing it would
    # break the foreign key (checked immediately, and deferring it fails at commit), so the history
    # is set aside and put back, ids and all
    op.execute("CREATE TEMP TABLE hylo_0006_events AS SELECT * FROM model_version_events")
    op.execute("DELETE FROM model_version_events")
    with op.batch_alter_table("model_versions", recreate="always") as batch:
        batch.drop_constraint(STATUS_CHECK, type_="check")
        batch.create_check_constraint(STATUS_CHECK, sa.text(check))
    op.execute("INSERT INTO model_version_events SELECT * FROM hylo_0006_events")
    op.execute("DROP TABLE hylo_0006_events")


def upgrade() -> None:
    with op.batch_alter_table("decisions") as batch:
        for name, kind in DECISION_COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True))
    with op.batch_alter_table("outcomes") as batch:
        for name, kind in OUTCOME_COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True))
    _replace_views(VIEWS)
    _status_check(NEW_STATUSES)


def downgrade() -> None:
    op.execute("UPDATE model_versions SET status = 'candidate' WHERE status = 'external'")
    _status_check(OLD_STATUSES)
    # the views read the new columns: they go first (SQLite refuses to drop a column a view reads)
    for name in VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    # plain ALTER TABLE ... DROP COLUMN on both (SQLite >= 3.35): a copy of ``decisions`` would be
    # slow and would trip over the other views that read it
    for name, _ in reversed(OUTCOME_COLUMNS):
        op.drop_column("outcomes", name)
    for name, _ in reversed(DECISION_COLUMNS):
        op.drop_column("decisions", name)
    _replace_views(_old_views())
