"""The report's shadow mode section on a real store (SQLite and PostgreSQL), numbers worked out by hand.

History of cluster ``c`` (applied decisions by model ``m-1``, ranks in the order listed):

- s1 (time 101): applied j0 j1 j2 j3; shadow ``m-sh`` priorities 1 2 3 4, so its order is j3 j2 j1 j0:
  reversed, rho = -1; with 4 jobs the first 10 are all of them: overlap 1. Shadow ``m-sh2`` orders
  s1 as applied: rho 1, overlap 1.
- s2 (time 102): applied j0 .. j11; ``m-sh`` puts j10 and j11 first, then j0 .. j9. Rank differences:
  2 for j0 .. j9 (10 x 4 = 40), 10 for j10 and j11 (2 x 100): sum d^2 = 240, n = 12, so
  rho = 1 - 6 x 240 / (12 x 143) = 276 / 1716 = 0.16084; shadow top 10 = j10 j11 j0 .. j7, applied
  top 10 = j0 .. j9: overlap 8 / 10.
- s3 (time 103): ranked by ``m-sh`` only (its vector was stale: no decision): scored, not compared.

``m-sh``: 3 snapshots scored, 2 compared; rho mean and p50 (-1 + 0.16084) / 2 = -0.41958, p10
-1 + 0.1 x 1.16084 = -0.88392, p90 -1 + 0.9 x 1.16084 = 0.04476; overlap (1 + 0.8) / 2 = 0.9.
Finished jobs and waits: j0 10, j3 50, j9 1000, j10 100, j11 200. The shadow put j0 .. j7, j10, j11 in
its top 10 at least once: finished j0 j3 j10 j11, mean wait 90; the applied order j0 .. j9: finished
j0 j3 j9, mean (10 + 50 + 1000) / 3 = 353.33.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shared.report import generate_report
from shared.report.shadow import spearman
from shared.schemas import JobOutcome, ShadowPriorities
from shared.store import record_decision, record_outcome, record_shadow
from tests.report.report_helpers import decode_png, migrated, read_page, unique_cluster
from tests.schemas.message_factories import decision


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}"
    return str(request.getfixturevalue("postgres_url"))


def shadow(
    cluster: str, seq: int, jobs: list[str], priorities: list[float], version: str
) -> ShadowPriorities:
    return ShadowPriorities(
        cluster=cluster,
        correlation_id=f"{cluster}-s{seq}",
        snapshot_time=100.0 + seq,
        sequence=seq,
        model_version=version,
        applied_policy="model",
        applied_model_version="m-1",
        job_ids=tuple(jobs),
        priorities=tuple(priorities),
    )


def finished(cluster: str, job: str, wait: float) -> JobOutcome:
    return JobOutcome(
        cluster=cluster,
        correlation_id=f"{cluster}-s2",
        job_id=job,
        submit_s=0.0,
        start_s=wait,
        end_s=wait + 60.0,
        gpus=1,
    )


async def seed(url: str, c: str) -> None:
    engine = await migrated(url)
    four = [f"j{i}" for i in range(4)]
    twelve = [f"j{i}" for i in range(12)]
    async with engine.begin() as conn:
        await record_decision(conn, decision(c, f"{c}-s1", tuple(four), "m-1", 1))
        await record_decision(conn, decision(c, f"{c}-s2", tuple(twelve), "m-1", 2))
        await record_shadow(conn, shadow(c, 1, four, [1.0, 2.0, 3.0, 4.0], "m-sh"))
        await record_shadow(conn, shadow(c, 1, four, [4.0, 3.0, 2.0, 1.0], "m-sh2"))
        # m-sh on s2: j10 and j11 first, then j0 .. j9 (higher priority first)
        prio = [float(12 - 2 - i) for i in range(10)] + [12.0, 11.0]
        await record_shadow(conn, shadow(c, 2, twelve, prio, "m-sh"))
        await record_shadow(conn, shadow(c, 3, ["j20", "j21"], [1.0, 2.0], "m-sh"))
        for job, wait in (("j0", 10.0), ("j3", 50.0), ("j9", 1000.0), ("j10", 100.0), ("j11", 200.0)):
            await record_outcome(conn, finished(c, job, wait))
    await engine.dispose()


def test_spearman_of_known_rankings() -> None:
    same = np.array([0.0, 1.0, 2.0, 3.0])
    assert spearman(same, same) == 1.0
    assert spearman(same, same[::-1].copy()) == -1.0
    # ranks re-numbered within the jobs compared: 5 9 7 is the order 0 2 1
    assert spearman(np.array([0.0, 1.0, 2.0]), np.array([5.0, 9.0, 7.0])) == pytest.approx(0.5)
    assert np.isnan(spearman(np.array([0.0]), np.array([0.0])))


@pytest.mark.asyncio
async def test_shadow_section_compares_each_shadow_version_with_the_applied_orders(store_url: str) -> None:
    c = unique_cluster()
    await seed(store_url, c)
    engine = await migrated(store_url)
    data, page = await generate_report(engine, cluster=c)
    _, window = await generate_report(engine, cluster=c, until=103.0)  # leaves s3 out
    await engine.dispose()
    assert sum(s.snapshots for s in data.shadows) == 4  # (m-sh: s1 s2 s3) + (m-sh2: s1)
    p = read_page(page)
    rows = p.rows("shadow-table")
    assert set(rows) == {"m-sh", "m-sh2"}
    values = [cell.value for cell in rows["m-sh"][2:]]
    assert rows["m-sh"][1].text == "m-1 (3)"
    expected = [3, 2, -0.41958, -0.88392, -0.41958, 0.04476, 0.9, 4, 90.0, 3, 1060 / 3]
    assert [float(v) for v in values if v is not None] == pytest.approx(expected, abs=1e-4)
    second = [float(cell.value) for cell in rows["m-sh2"][2:9] if cell.value is not None]
    assert second == pytest.approx([1, 1, 1.0, 1.0, 1.0, 1.0, 1.0])
    width, height = decode_png(p.images["fig-shadow"])
    assert width > 100 and height > 100
    assert "no-shadow" not in p.ids

    cut = read_page(window).rows("shadow-table")
    assert [cut["m-sh"][i].value for i in (2, 3)] == ["2", "2"]


@pytest.mark.asyncio
async def test_without_shadow_data_the_section_says_so(store_url: str) -> None:
    c = unique_cluster()
    engine = await migrated(store_url)
    async with engine.begin() as conn:
        await record_decision(conn, decision(c, f"{c}-s1", ("j0", "j1"), "m-1", 1))
    data, page = await generate_report(engine, cluster=c)
    await engine.dispose()
    p = read_page(page)
    assert data.shadows == () and "no-shadow" in p.ids
    assert "shadow-table" not in p.tables and "fig-shadow" not in p.images
