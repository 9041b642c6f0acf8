"""The report of a real store (SQLite and PostgreSQL) filled through shared.store.writes.

Every expected number is worked out by hand from the history in ``report_helpers`` (its docstring).
"""

from __future__ import annotations

import html
from pathlib import Path

import pytest
from sqlalchemy import text

from shared.report import NotMigrated, ReportError, UnknownCluster, generate_report, load_report_data
from shared.report.stats import NO_MODEL_YET
from shared.schemas import JobOutcome
from shared.store import create_engine, record_decision, record_outcome, upgrade
from tests.report.report_helpers import (
    CAPACITY,
    DEADLINE,
    NO_MODEL,
    REFUSAL,
    decode_png,
    migrated,
    read_page,
    seed,
    snapshot_decision,
    unique_cluster,
)

pytestmark = pytest.mark.asyncio

PLOTS = ("fig-outcomes", "fig-outcomes-time", "fig-utilization", "fig-latency", "fig-fallbacks", "fig-models")


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}"
    return str(request.getfixturevalue("postgres_url"))


async def test_the_report_of_a_known_history(store_url: str) -> None:
    engine = await migrated(store_url)
    c = unique_cluster()
    await seed(engine, c)
    data, page = await generate_report(engine, cluster=c)
    await engine.dispose()
    assert data.cluster == c
    p = read_page(page)

    # key figures
    assert p.number("snapshots") == 10
    assert p.number("decision-rows") == 20
    assert p.number("jobs-started") == 10
    assert p.number("jobs-finished") == 11  # ten k-a jobs and bg
    assert p.number("fallbacks") == 4
    assert p.number("model-versions") == 2
    assert p.number("promotions") == 1
    assert p.number("latency-p50") == pytest.approx(8.5)
    assert p.number("latency-p99") == pytest.approx(12.91)
    assert p.number("mean-busy-gpus") == pytest.approx(4200 / 1100)
    assert p.number("capacity") == CAPACITY

    # wait, JCT and bounded slowdown per decider
    by = p.rows("outcome-table")
    assert set(by) == {f"{c}-m1", "policy:fcfs", "unattributed"}
    m1, fcfs, bg = by[f"{c}-m1"], by["policy:fcfs"], by["unattributed"]
    assert [float(m1[1].value or 0), float(fcfs[1].value or 0), float(bg[1].value or 0)] == [6, 4, 1]
    assert float(m1[2].value or 0) == pytest.approx(350 / 6)  # mean of 30 40 50 60 80 90
    assert float(m1[3].value or 0) == pytest.approx(55)
    assert float(fcfs[2].value or 0) == pytest.approx(50)  # mean of 10 20 70 100
    assert float(fcfs[3].value or 0) == pytest.approx(45)
    assert float(fcfs[6].value or 0) == pytest.approx(150)  # JCT mean: wait + 100
    assert float(fcfs[10].value or 0) == pytest.approx(1.5)  # bounded slowdown mean: (50 + 100) / 100
    assert float(bg[2].value or 0) == 0.0

    decisions = p.rows("decision-table")
    assert [decisions[f"{c}-m1"][i].value for i in (1, 2, 3, 4)] == ["6", "12", "6", "0"]
    assert [decisions["policy:fcfs"][i].value for i in (1, 2, 3, 4)] == ["4", "8", "4", "4"]

    # fallbacks: per model version in charge, with the reason escaped, not interpreted
    fallbacks = {(r[0].text, r[1].text): (r[2].value, r[3].value) for r in p.tables["fallback-table"]}
    assert fallbacks == {(NO_MODEL_YET, NO_MODEL): ("2", "4"), (f"{c}-m1", DEADLINE): ("2", "4")}
    assert DEADLINE not in page and html.escape(DEADLINE) in page

    # decision latency per stage
    latency = p.rows("latency-table")
    assert float(latency["featurizer"][2].value or 0) == pytest.approx(5.5)
    assert float(latency["featurizer"][3].value or 0) == pytest.approx(9.91)
    assert float(latency["prioritizer"][2].value or 0) == 2.0
    assert float(latency["placer"][3].value or 0) == 1.0

    # model versions and the registry's events
    versions = p.rows("version-table")
    assert versions[f"{c}-m1"][1].text == "current" and "alice (forced)" in versions[f"{c}-m1"][3].text
    assert versions[f"{c}-m2"][1].text == "candidate"
    events = [(r[1].text, r[2].text, r[4].text) for r in p.tables["event-table"]]
    assert events == [
        (f"{c}-m1", "registered", "alice"),
        (f"{c}-m1", "promoted", "alice (forced)"),
        (f"{c}-m2", "registered", "bob"),
        (f"{c}-m2", "gate-refused", "bob"),
    ]
    assert p.tables["event-table"][3][5].text == REFUSAL

    # every plot is there, as a whole PNG
    assert set(p.images) == set(PLOTS)
    for plot in PLOTS:
        width, height = decode_png(p.images[plot])
        assert width >= 400 and height >= 150, (plot, width, height)

    # self-contained: nothing to fetch, nothing to run
    assert all(u.startswith("data:image/png;base64,") for u in p.urls), [u[:60] for u in p.urls]
    assert not {"script", "link", "iframe", "object"} & p.tags


async def test_a_time_range_cuts_decisions_and_jobs(tmp_path: Path) -> None:
    engine = await migrated(f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}")
    c = unique_cluster()
    await seed(engine, c)
    _, page = await generate_report(engine, cluster=c, since=300.0, until=600.0)
    await engine.dispose()
    p = read_page(page)
    assert p.number("snapshots") == 3  # t = 300, 400, 500
    assert p.number("jobs-finished") == 3  # 3-a, 4-a, 5-a; bg started at 0
    assert p.number("fallbacks") == 0
    assert p.number("mean-busy-gpus") == pytest.approx(1600 / 300)
    assert "no-fallbacks" in p.ids and "fig-fallbacks" not in p.images
    assert set(p.rows("outcome-table")) == {f"{c}-m1"}
    assert p.number("latency-p50") == pytest.approx(7.0)  # totals 6 7 8
    # the registry's history is wall-clock and stays whole
    assert len(p.tables["event-table"]) == 4


async def test_a_range_with_nothing_in_it_says_so(tmp_path: Path) -> None:
    engine = await migrated(f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}")
    c = unique_cluster()
    await seed(engine, c)
    async with engine.connect() as conn:
        await conn.execute(text("DELETE FROM model_version_events"))
        await conn.execute(text("DELETE FROM model_versions"))
        await conn.commit()
    _, page = await generate_report(engine, cluster=c, since=5000.0)
    await engine.dispose()
    p = read_page(page)
    assert "no-data" in p.ids and not p.images
    assert f"Cluster {c} has no decision" in page


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database of its own (the session's PostgreSQL database holds other tests' clusters)."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}"
    return str(request.getfixturevalue("fresh_postgres_url"))


async def test_an_empty_store_gives_a_page_that_says_there_is_no_data(empty_url: str) -> None:
    engine = await migrated(empty_url)
    data, page = await generate_report(engine)
    await engine.dispose()
    assert data.cluster is None and data.is_empty
    p = read_page(page)
    assert "no-data" in p.ids and not p.images and not p.tables
    assert "No data." in page


async def test_cluster_choice_and_bad_ranges_are_clear_errors(tmp_path: Path) -> None:
    engine = await migrated(f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}")
    a, b = unique_cluster(), unique_cluster()
    await seed(engine, a)
    async with engine.connect() as conn:
        data = await load_report_data(conn)  # the only cluster is chosen
        assert data.cluster == a
    await seed(engine, b)
    async with engine.connect() as conn:
        with pytest.raises(ReportError, match="several clusters") as several:
            await load_report_data(conn)
        assert several.value.parameter == "cluster" and a in str(several.value) and b in str(several.value)
        with pytest.raises(UnknownCluster, match="unknown cluster 'nope'"):
            await load_report_data(conn, cluster="nope")
        with pytest.raises(ReportError, match="until") as bad:
            await load_report_data(conn, cluster=a, since=10.0, until=10.0)
        assert bad.value.parameter == "until"
    await engine.dispose()


async def test_a_database_never_migrated_is_reported_not_created(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'blank.db'}")
    async with engine.connect() as conn:
        with pytest.raises(NotMigrated, match="never migrated"):
            await load_report_data(conn)
        tables = (await conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'"))).all()
        assert tables == []
    await upgrade(engine)  # and once migrated, the same store reports "no data"
    data, _ = await generate_report(engine)
    assert data.cluster is None
    await engine.dispose()


async def test_partial_histories_render_with_notes_for_what_is_missing(tmp_path: Path) -> None:
    """Outcomes with no decision, and a decision that carried no latencies: no crash, a note each."""
    engine = await migrated(f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}")
    c = unique_cluster()
    async with engine.begin() as conn:
        for k in range(3):  # 1 GPU each on [0, 100), [100, 200), [200, 300)
            job = JobOutcome(
                cluster=c, correlation_id="x", job_id=f"j{k}", submit_s=0.0, start_s=100.0 * k,
                end_s=100.0 * k + 100, gpus=1,
            )  # fmt: skip
            await record_outcome(conn, job)
    _, page = await generate_report(engine, cluster=c)
    p = read_page(page)
    assert p.number("jobs-finished") == 3 and p.number("snapshots") == 0
    assert p.number("mean-busy-gpus") == pytest.approx(1.0)
    assert {"no-decisions", "no-latency", "no-fallbacks", "no-models"} <= p.ids
    assert set(p.images) == {"fig-outcomes", "fig-outcomes-time", "fig-utilization"}
    assert p.summary["capacity"] is None  # no spec stored: unknown, said so

    silent = snapshot_decision(c, 1).model_copy(update={"latencies_ms": {}})
    async with engine.begin() as conn:
        await record_decision(conn, silent)
    _, page = await generate_report(engine, cluster=c)
    await engine.dispose()
    p = read_page(page)
    assert p.number("snapshots") == 1 and "no-latency" in p.ids and "fig-latency" not in p.images
    assert p.number("fallbacks") == 1  # k = 1 is a "no model loaded" fallback
