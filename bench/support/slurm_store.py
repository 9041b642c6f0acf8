"""The Slurm experiment's decisions database: made, migrated, read and dropped as a provider would.

Why PostgreSQL and a database of its own: the experiment runs Hylo's services as separately deployed
processes against the store a provider runs (``docs/operations.md``), not the embedded SQLite file.
Each invocation of ``bench/slurm_experiment.py`` creates one database with a unique name on the
server (by default the machine's, ``postgresql://postgres@127.0.0.1:5432/postgres``, trust auth),
migrates it the way the product does (``python -m shared.store.migrate`` as a one-shot process with
``HYLO_DATABASE_URL``, compose's ``migrate`` service) and drops it at the end unless kept. Every run
of every arm records into it under a cluster name of its own, so job ids (each fresh Slurm starts at
1) never collide, and the bench reads each run's per-job figures back from its ``outcomes`` rows.
SQLite stays available (``--store sqlite``: a file in the work folder) for tests and machines
without PostgreSQL.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


class StoreError(RuntimeError):
    """The experiment's database could not be made, migrated or read (message says which)."""


def _safe(url: str) -> str:
    """The URL without a password (for messages and the report)."""
    head, sep, tail = url.partition("@")
    if not sep or ":" not in head.split("//", 1)[-1]:
        return url
    scheme, _, creds = head.partition("//")
    return f"{scheme}//{creds.split(':', 1)[0]}:***@{tail}"


async def _admin(dsn: str, sql: str) -> None:
    import asyncpg  # type: ignore[import-untyped]

    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@dataclass
class ExperimentStore:
    """One database for one invocation: ``create`` (and migrate), ``read_*``, ``drop``."""

    kind: str  # "postgres" or "sqlite"
    admin_url: str = DEFAULT_ADMIN_URL
    workdir: Path = Path("/tmp/slurmexp/work")
    name: str = field(
        default_factory=lambda: f"hylo_slurmexp_{time.strftime('%Y%m%d_%H%M%S')}_{uuid.uuid4().hex[:6]}"
    )
    url: str = ""
    migrate_s: float = 0.0

    def create(self, root: Path) -> str:
        """Make the database, migrate it to head in a process of its own; returns its URL."""
        if self.kind == "postgres":
            if not self.admin_url.startswith("postgresql://"):
                raise StoreError(
                    f"--pg-admin-url {_safe(self.admin_url)!r}: expected postgresql://USER@HOST:PORT/DB"
                )
            try:
                asyncio.run(_admin(self.admin_url, f'CREATE DATABASE "{self.name}"'))
            except (TimeoutError, OSError) as err:
                raise StoreError(f"cannot reach PostgreSQL at {_safe(self.admin_url)}: {err}") from None
            except Exception as err:  # asyncpg's own errors: refused login, no permission
                raise StoreError(
                    f"cannot create database {self.name} at {_safe(self.admin_url)}: {err}"
                ) from None
            base = self.admin_url.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://", 1)
            self.url = f"{base}/{self.name}"
        elif self.kind == "sqlite":
            self.workdir.mkdir(parents=True, exist_ok=True)
            self.url = f"sqlite+aiosqlite:///{self.workdir / (self.name + '.db')}"
        else:
            raise StoreError(f"--store {self.kind!r}: expected postgres or sqlite")
        t0 = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "shared.store.migrate"],
            cwd=root,
            env={**os.environ, "HYLO_DATABASE_URL": self.url, "PYTHONPATH": str(root)},
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.migrate_s = time.monotonic() - t0
        if done.returncode != 0:
            self.drop()
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise StoreError(
                f"python -m shared.store.migrate failed on {self.describe()}: {' | '.join(tail)}"
            )
        return self.url

    def describe(self) -> str:
        return f"database {self.name} ({_safe(self.url) if self.url else self.kind})"

    def drop(self) -> None:
        if self.kind == "postgres" and self.url:
            asyncio.run(_admin(self.admin_url, f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'))
        elif self.kind == "sqlite" and self.url:
            path = Path(self.url.split("///", 1)[1])
            for extra in ("", "-wal", "-shm"):
                Path(str(path) + extra).unlink(missing_ok=True)

    # -- reading ----------------------------------------------------------------------------------

    def _query(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        from sqlalchemy import text

        from shared.store.engine import create_engine

        async def run() -> list[dict[str, Any]]:
            engine = create_engine(self.url)
            try:
                async with engine.connect() as conn:
                    result = await conn.execute(text(sql), params)
                    return [dict(row._mapping) for row in result]
            finally:
                await engine.dispose()

        return asyncio.run(run())

    def outcome_count(self, cluster: str) -> int:
        rows = self._query("SELECT count(*) AS n FROM outcomes WHERE cluster = :c", c=cluster)
        return int(rows[0]["n"])

    def wait_outcomes(self, cluster: str, expected: int, timeout_s: float) -> int:
        """Poll the outcomes rows of ``cluster`` until ``expected`` are there; returns how many are."""
        deadline = time.monotonic() + timeout_s
        n = 0
        while True:
            n = self.outcome_count(cluster)
            if n >= expected or time.monotonic() >= deadline:
                return n
            time.sleep(1.0)

    def outcomes(self, cluster: str) -> dict[str, dict[str, Any]]:
        """Job id -> its ``outcomes`` row (times in epoch seconds, where it ran)."""
        rows = self._query(
            "SELECT job_id, submit_s, start_s, end_s, wait_s, jct_s, gpus, status, nodes, gpu_type, "
            "correlation_id FROM outcomes WHERE cluster = :c",
            c=cluster,
        )
        return {str(r["job_id"]): r for r in rows}

    def decision_summary(self, cluster: str) -> dict[str, Any]:
        """What the run's decision rows say: snapshots decided, rows, jobs, who decided."""
        rows = self._query(
            "SELECT count(DISTINCT correlation_id) AS snapshots, count(*) AS rows_, "
            "count(DISTINCT job_id) AS jobs, min(snapshot_time) AS first_t, max(snapshot_time) AS last_t "
            "FROM decisions WHERE cluster = :c",
            c=cluster,
        )
        deciders = self._query(
            "SELECT policy, model_version, count(*) AS n, sum(CASE WHEN fallback IS NULL THEN 0 ELSE 1 END) "
            "AS fallback_rows FROM decisions WHERE cluster = :c GROUP BY policy, model_version",
            c=cluster,
        )
        jobs = self._query("SELECT count(*) AS n FROM jobs WHERE cluster = :c", c=cluster)
        out = dict(rows[0])
        out["rows"] = out.pop("rows_")
        out["job_rows"] = int(jobs[0]["n"])
        out["deciders"] = [
            {k: (int(v) if k in ("n", "fallback_rows") and v is not None else v) for k, v in d.items()}
            for d in deciders
        ]
        return out

    def first_decisions(self, cluster: str) -> dict[str, float]:
        """Job id -> the snapshot time of the first decision that ranked it (epoch seconds)."""
        rows = self._query(
            "SELECT job_id, min(snapshot_time) AS t FROM decisions WHERE cluster = :c GROUP BY job_id",
            c=cluster,
        )
        return {str(r["job_id"]): float(r["t"]) for r in rows}
