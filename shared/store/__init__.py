"""The store: decisions, outcomes, jobs, model versions and shadow priorities, written exactly once.

Why SQL: analysts join decisions to outcomes with the tools they have (psql, sqlite3, notebooks);
``docs/analysts.md`` lists the views and example queries. PostgreSQL (asyncpg) in deployment, SQLite
(aiosqlite) as the embedded default; the same Alembic migrations create both. On PostgreSQL
``decisions`` is partitioned by snapshot time (``partitions``), and ``maintain`` (a module of its
own, ``python -m shared.store.maintain``) keeps months of it: partitions ahead, raw rows rolled up
into ``decision_rollups`` and dropped after their retention.
"""

from shared.store.engine import create_engine
from shared.store.migrate import current_revision, downgrade, head_revision, upgrade, upgrade_url
from shared.store.models import (
    Base,
    Cluster,
    Decision,
    DecisionRollup,
    DecisionSnapshot,
    Job,
    ModelVersionEvent,
    ModelVersionRow,
    Outcome,
    ShadowPriority,
)
from shared.store.settings import MaintenanceSettings, StoreSettings
from shared.store.writes import (
    ensure_cluster,
    insert_or_ignore,
    outcome_conflict,
    record_announced_model,
    record_decision,
    record_external_model,
    record_jobs,
    record_model_event,
    record_model_version,
    record_outcome,
    record_pending,
    record_shadow,
    shadow_ranks,
    store_cluster_spec,
    update_model_version,
)

__all__ = [
    "Base",
    "Cluster",
    "Decision",
    "DecisionRollup",
    "DecisionSnapshot",
    "Job",
    "MaintenanceSettings",
    "ModelVersionEvent",
    "ModelVersionRow",
    "Outcome",
    "ShadowPriority",
    "StoreSettings",
    "create_engine",
    "current_revision",
    "downgrade",
    "ensure_cluster",
    "head_revision",
    "insert_or_ignore",
    "outcome_conflict",
    "record_announced_model",
    "record_decision",
    "record_external_model",
    "record_jobs",
    "record_model_event",
    "record_model_version",
    "record_outcome",
    "record_pending",
    "record_shadow",
    "shadow_ranks",
    "store_cluster_spec",
    "update_model_version",
    "upgrade",
    "upgrade_url",
]
