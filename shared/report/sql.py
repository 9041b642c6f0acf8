"""The report's aggregate queries: counts, means and percentiles computed by the database.

Why SQL text: these are analytics queries (common table expressions, window functions, UNION ALL of a
few result kinds) written for PostgreSQL (12+) and SQLite (3.25+), and they are easier to read and to
check against ``EXPLAIN`` as SQL. Every value comes in as a bound parameter; the only text put together
is fixed fragments (a range condition, the time-bin ``CASE``, the dialect's pieces below).

One statement per part of the page (snapshots, finished jobs, the GPU timeline, shadow models). None
of them reads a decision row per snapshot or per finished job (migration 0008,
``shared.store.derived``): the per-snapshot figures read ``decision_snapshots`` (one row per snapshot,
written with its decision), and the finished jobs are grouped by who started them from the outcome's
own copy of that decision (``outcomes.decision_*``). Over the 69 days of a 10M-row store these two
reads went from a lookup per snapshot and per job across every partition (27-37 s per report) to
reading 200,000 and 400,000 narrow rows (``docs/results/store-scale.md``).

Exact percentiles, two ways, the same numbers (numpy's linear interpolation, up to rounding):

- PostgreSQL: ``percentile_cont(ARRAY[...]) WITHIN GROUP (ORDER BY v)`` in the ``GROUP BY``;
- SQLite (no ordered-set aggregates): ``ROW_NUMBER() OVER (PARTITION BY group ORDER BY v)`` and
  ``COUNT(*) OVER`` number each group's values; only the rows at ``floor((n - 1) p / 100)`` and the
  next one leave the database, and ``aggregates.interpolate`` does the rest.

On PostgreSQL the report's transaction turns JIT compilation off (it costs more than these queries
save) and gives its sorts 32 MB of memory (``SET LOCAL``: this transaction only).

``decisions`` is partitioned by ``snapshot_time`` on PostgreSQL (migration 0007); the one read of it
left, the applied ranks beside shadow ranks, names the report's range of times (a shadow rank and its
decision share their snapshot's time), so PostgreSQL plans only the partitions of that range.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from shared.report.aggregates import (
    METRICS,
    MOST_GROUPS,
    NO_MODEL_YET,
    PERCENTS,
    TOTAL,
    BinnedBusy,
    BusyTimeline,
    DecisionCount,
    Distribution,
    FallbackCount,
    FloatArray,
    OutcomeGroup,
    OutcomeStats,
    ShadowSummary,
    SnapshotStats,
    finite_or_nan,
    interpolate,
)

#: label of finished jobs whose outcome names no stored decision
UNATTRIBUTED = "unattributed"
#: how many of each order's first jobs the shadow section compares
TOP_K = 10
#: busy-GPU timelines with more changes than this are binned by the database into ``STEP_BINS`` bins
MOST_STEPS = 4000
STEP_BINS = 800
#: decided snapshots counted at most to size the time bins (more do not change them)
COUNT_FOR_BINS = 120

FLOAT = "DOUBLE PRECISION"
PG = "postgresql"
#: slack (s) for clocks around "a job was started by a decision made while it was pending": the
#: decision's snapshot time lies between the job's submit and start times. One hour: far more than
#: rounding (Slurm reports whole seconds) or skew between the adapter's and the scheduler's clocks
PENDING_SLACK_S = 3600
#: "the decision that started the job was made while it was pending", on the outcome's own copy of
#: that decision (``outcomes.decision_time``, migration 0008); a decision outside it counts as
#: unattributed, as when the report joined the decision rows under this condition
DECIDED_WHILE_PENDING = (
    f"o.decision_time >= o.submit_s - {PENDING_SLACK_S} AND o.decision_time <= o.start_s + {PENDING_SLACK_S}"
)


@dataclass(frozen=True)
class Window:
    """A cluster and the range ``since <= t < until`` of its clock (either bound open)."""

    cluster: str
    since: float | None
    until: float | None

    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cluster": self.cluster}
        if self.since is not None:
            out["since"] = self.since
        if self.until is not None:
            out["until"] = self.until
        return out

    def cut(self, column: str) -> str:
        """``AND column >= :since AND column < :until`` for the bounds that are set."""
        out = ""
        if self.since is not None:
            out += f" AND {column} >= :since"
        if self.until is not None:
            out += f" AND {column} < :until"
        return out

    def ran(self) -> str:
        """Jobs that ran during the range: started before its end, ended after its start."""
        out = ""
        if self.until is not None:
            out += " AND start_s < :until"
        if self.since is not None:
            out += " AND end_s > :since"
        return out


async def prepare(conn: AsyncConnection) -> None:
    """The report's settings for this transaction (module docstring); nothing on SQLite."""
    if conn.dialect.name == PG:
        await conn.execute(text("SET LOCAL jit = off"))
        await conn.execute(text("SET LOCAL work_mem = '32MB'"))


def _percentiles(expr: str, percents: Sequence[int]) -> str:
    """PostgreSQL: the ``percents`` of ``expr`` over the group, as an array."""
    fractions = ", ".join(f"{p / 100!r}" for p in percents)
    return f"percentile_cont(ARRAY[{fractions}]::{FLOAT}[]) WITHIN GROUP (ORDER BY {expr})"


def _at_positions(percents: Iterable[int]) -> str:
    """SQLite: the condition that keeps the rows ``interpolate`` needs (columns ``rn``, ``n``)."""
    terms = []
    for p in sorted(set(percents)):
        lo = f"((n - 1) * {int(p)}) / 100"
        terms += [f"rn = {lo}", f"rn = {lo} + 1"]
    return "(" + " OR ".join(terms) + ")"


def _ranked(source: str, keys: str, value: str) -> str:
    """SQLite: ``source``'s rows numbered in the order of ``value`` within each group of ``keys``."""
    return (
        f"SELECT {keys}, {value} AS v, ROW_NUMBER() OVER (PARTITION BY {keys} ORDER BY {value}) - 1 AS rn, "
        f"COUNT(*) OVER (PARTITION BY {keys}) AS n FROM {source}"
    )


def _bin_case(column: str, edges: FloatArray, params: dict[str, Any]) -> str:
    """The time bin of ``column`` as numpy's ``searchsorted`` puts it: the last edge at or before it,
    clipped to the bins (so the last edge belongs to the last bin)."""
    whens = []
    for b in range(len(edges) - 2, 0, -1):
        params[f"e{b}"] = float(edges[b])
        whens.append(f"WHEN {column} >= :e{b} THEN {b}")
    return f"CASE {' '.join(whens)} ELSE 0 END" if whens else "0"


def _floor(expr: str, dialect: str) -> str:
    """``floor`` of a non-negative number as an integer (SQLite's CAST truncates, PostgreSQL's rounds)."""
    return f"CAST(FLOOR({expr}) AS INTEGER)" if dialect == PG else f"CAST({expr} AS INTEGER)"


def _quantiles(row: Any, column: str, percents: Sequence[int], n: int) -> dict[int, float]:
    """PostgreSQL's array of ``percents`` in ``column`` of ``row``, as {percent: value}."""
    values = getattr(row, column)
    if not n or values is None:
        return {p: float("nan") for p in percents}
    return {p: finite_or_nan(v) for p, v in zip(percents, values, strict=True)}


def _ordered(rows: Iterable[Any], key_of: Any) -> dict[Any, tuple[int, dict[int, float]]]:
    """SQLite: rows (``rn``, ``n``, ``v``) grouped by ``key_of(row)`` as (n, {position: value})."""
    out: dict[Any, tuple[int, dict[int, float]]] = {}
    for r in rows:
        out.setdefault(key_of(r), (int(r.n), {}))[1][int(r.rn)] = float(r.v)
    return out


def _interpolated(n: int, at: Mapping[int, float], percents: Sequence[int]) -> dict[int, float]:
    return {p: interpolate(at, n, p) for p in percents}


def _distribution(n: int, mean: Any, most: Any, q: Mapping[int, float]) -> Distribution:
    if n <= 0:
        return Distribution.empty()
    nan = float("nan")
    return Distribution(
        n,
        finite_or_nan(mean),
        q.get(50, nan),
        q.get(90, nan),
        q.get(99, nan),
        finite_or_nan(most),
        q.get(5, nan),
        q.get(25, nan),
        q.get(75, nan),
        q.get(95, nan),
    )


# --- how the time bins are sized --------------------------------------------------------------------


async def time_span(conn: AsyncConnection, w: Window) -> tuple[float | None, float | None, int]:
    """(first, last, count) of the snapshot times and job starts the figures over time span; the
    count of snapshots only up to ``COUNT_FOR_BINS`` (enough to size the bins)."""
    params = w.params()
    jobs = (
        await conn.execute(
            text(
                "SELECT COUNT(*) AS n, MIN(start_s) AS lo, MAX(start_s) AS hi FROM outcomes "
                f"WHERE cluster = :cluster{w.cut('start_s')}"
            ),
            params,
        )
    ).one()
    snaps = (
        await conn.execute(
            text(
                "SELECT MIN(snapshot_time) AS lo, MAX(snapshot_time) AS hi FROM decision_snapshots "
                f"WHERE cluster = :cluster{w.cut('snapshot_time')}"
            ),
            params,
        )
    ).one()
    count = int(jobs.n)
    if count < COUNT_FOR_BINS and snaps.lo is not None:
        count += int(
            (
                await conn.execute(
                    text(
                        "SELECT COUNT(*) FROM (SELECT snapshot_time FROM decision_snapshots "
                        f"WHERE cluster = :cluster{w.cut('snapshot_time')} LIMIT {COUNT_FOR_BINS}) s"
                    ),
                    params,
                )
            ).scalar_one()
        )
    lows = [float(v) for v in (jobs.lo, snaps.lo) if v is not None]
    highs = [float(v) for v in (jobs.hi, snaps.hi) if v is not None]
    return min(lows, default=None), max(highs, default=None), count


# --- decided snapshots ------------------------------------------------------------------------------

_SNAPSHOTS = """
snap AS {materialized} (
    SELECT s.snapshot_time AS t, s.policy, s.model_version, s.fallback, s.latencies_ms, s.latency_ms,
           s.decision_rows AS n_rows, s.placed_rows AS n_placed, {bin} AS bin,
           CASE WHEN s.model_version IS NOT NULL THEN s.model_version ELSE 'policy:' || s.policy END
               AS decided_by,
           ROW_NUMBER() OVER (ORDER BY s.sequence, s.snapshot_time, s.first_decision_id) AS pos
    FROM decision_snapshots s WHERE s.cluster = :cluster{cut}
),
charged AS (
    SELECT pos, model_version, fallback, n_rows, COUNT(model_version) OVER (ORDER BY pos) AS era FROM snap
),
eras AS (SELECT era, MAX(model_version) AS in_charge FROM charged GROUP BY era),
stage AS {materialized} (
    SELECT s.pos, s.bin, e.key AS stage, {ord} AS ord, CAST(e.value AS {float}) AS ms
    FROM snap s, {each} WHERE {numeric}
    UNION ALL
    SELECT pos, bin, '{total}', 0, latency_ms FROM snap WHERE latency_ms IS NOT NULL
)"""

_SNAPSHOT_COUNTS = """
SELECT 'decided' AS kind, decided_by AS k1, MAX(model_version) AS k2, -1 AS bin, COUNT(*) AS n,
       CAST(SUM(n_rows) AS {float}) AS a, CAST(SUM(n_placed) AS {float}) AS b,
       CAST(SUM(CASE WHEN fallback IS NULL THEN 0 ELSE 1 END) AS {float}) AS c{no_q}
FROM snap GROUP BY decided_by
UNION ALL
SELECT 'fallback', e.in_charge, c.fallback, -1, COUNT(*), CAST(SUM(c.n_rows) AS {float}), NULL, NULL{no_q}
FROM charged c JOIN eras e ON e.era = c.era WHERE c.fallback IS NOT NULL GROUP BY e.in_charge, c.fallback"""


async def snapshot_stats(conn: AsyncConnection, w: Window, edges: FloatArray) -> SnapshotStats:
    """Decided snapshots of the range: counts per decider, fallbacks per model version in charge,
    latency per stage (overall and per time bin of ``edges``)."""
    params = w.params()
    pg = conn.dialect.name == PG
    ctes = _SNAPSHOTS.format(
        materialized="MATERIALIZED" if pg else "",
        cut=w.cut("s.snapshot_time"),
        bin=_bin_case("s.snapshot_time", edges, params),
        ord="e.ord" if pg else "e.id",
        each="jsonb_each(s.latencies_ms) WITH ORDINALITY AS e(key, value, ord)"
        if pg
        else "json_each(s.latencies_ms) AS e",
        numeric="jsonb_typeof(e.value) = 'number'" if pg else "e.type IN ('integer', 'real')",
        float=FLOAT,
        total=TOTAL,
    )
    if pg:
        q, q_bin = _percentiles("ms", PERCENTS), _percentiles("ms", (50, 99))
        sql = f"""WITH {ctes}
{_SNAPSHOT_COUNTS.format(float=FLOAT, no_q=f", CAST(NULL AS {FLOAT}[]) AS q")}
UNION ALL
SELECT 'stage', stage, NULL, -1, COUNT(*), AVG(ms), MAX(ms), CAST(MIN(pos * 1000000 + ord) AS {FLOAT}), {q}
FROM stage GROUP BY stage
UNION ALL
SELECT 'stage_bin', stage, NULL, bin, COUNT(*), NULL, NULL, NULL, {q_bin} FROM stage GROUP BY stage, bin"""
    else:
        sql = f"""WITH {ctes},
ranked AS ({_ranked("stage", "stage", "ms")}),
ranked_bin AS ({_ranked("stage", "stage, bin", "ms")})
{_SNAPSHOT_COUNTS.format(float=FLOAT, no_q=", NULL AS rn, NULL AS v")}
UNION ALL
SELECT 'stage', stage, NULL, -1, COUNT(*), AVG(ms), MAX(ms), CAST(MIN(pos * 1000000 + ord) AS {FLOAT}),
       NULL, NULL
FROM stage GROUP BY stage
UNION ALL
SELECT 'stage_q', stage, NULL, -1, n, NULL, NULL, NULL, rn, v FROM ranked WHERE {_at_positions(PERCENTS)}
UNION ALL
SELECT 'stage_bin_q', stage, NULL, bin, n, NULL, NULL, NULL, rn, v FROM ranked_bin
WHERE {_at_positions((50, 99))}"""
    rows = (await conn.execute(text(sql), params)).all()
    return _snapshot_stats(rows, pg, len(edges) - 1)


def _snapshot_stats(rows: Sequence[Any], pg: bool, bins: int) -> SnapshotStats:
    by_kind: dict[str, list[Any]] = defaultdict(list)
    for r in rows:
        by_kind[r.kind].append(r)
    decided = [DecisionCount(str(r.k1), int(r.n), int(r.a), int(r.b), int(r.c)) for r in by_kind["decided"]]
    decided.sort(key=lambda c: (-c.snapshots, c.decided_by))
    fallbacks = [
        FallbackCount(r.k1 if r.k1 is not None else NO_MODEL_YET, str(r.k2), int(r.n), int(r.a))
        for r in by_kind["fallback"]
    ]
    fallbacks.sort(key=lambda f: (-f.snapshots, f.model_version, f.reason))
    stages = sorted(by_kind["stage"], key=lambda r: (r.k1 != TOTAL, float(r.c)))
    if pg:
        q = {r.k1: _quantiles(r, "q", PERCENTS, int(r.n)) for r in stages}
        q_bin = {(r.k1, int(r.bin)): _quantiles(r, "q", (50, 99), int(r.n)) for r in by_kind["stage_bin"]}
    else:
        q = {
            k: _interpolated(n, at, PERCENTS)
            for k, (n, at) in _ordered(by_kind["stage_q"], lambda r: r.k1).items()
        }
        q_bin = {
            k: _interpolated(n, at, (50, 99))
            for k, (n, at) in _ordered(by_kind["stage_bin_q"], lambda r: (r.k1, int(r.bin))).items()
        }
    latency = {r.k1: _distribution(int(r.n), r.a, r.b, q[r.k1]) for r in stages}
    latency.setdefault(TOTAL, Distribution.empty())
    latency = {TOTAL: latency.pop(TOTAL), **latency}
    series: dict[str, FloatArray] = {}
    for (stage, b), values in q_bin.items():
        series.setdefault(stage, np.full((bins, 2), np.nan))[b] = [values[50], values[99]]
    return SnapshotStats(
        count=sum(c.snapshots for c in decided),
        rows=sum(c.rows for c in decided),
        placed=sum(c.placed for c in decided),
        decided=tuple(decided),
        fallbacks=tuple(fallbacks),
        model_versions=frozenset(str(r.k2) for r in by_kind["decided"] if r.k2 is not None),
        latency=latency,
        latency_bins=series,
    )


# --- finished jobs ------------------------------------------------------------------------------

_ATTRIBUTED = """
a AS {materialized} (
    SELECT o.start_s, o.wait_s, o.jct_s, o.bsld, {bin} AS bin,
           CASE WHEN o.decision_policy IS NULL OR NOT ({pending}) THEN '{unattributed}'
                WHEN o.decision_model_version IS NOT NULL THEN o.decision_model_version
                ELSE 'policy:' || o.decision_policy END AS grp
    FROM outcomes o
    WHERE o.cluster = :cluster{cut}
)"""

_GROUPS = """
SELECT 'group' AS kind, grp, -1 AS bin, COUNT(*) AS n, MIN(start_s) AS lo, MAX(start_s) AS hi,
       AVG(wait_s) AS mean_wait_s, MAX(wait_s) AS max_wait_s, AVG(jct_s) AS mean_jct_s,
       MAX(jct_s) AS max_jct_s, AVG(bsld) AS mean_bsld, MAX(bsld) AS max_bsld{q}
FROM a GROUP BY grp"""


async def outcome_stats(conn: AsyncConnection, w: Window, edges: FloatArray) -> OutcomeStats:
    """Finished jobs that started in the range, per group (who decided to start them): count, means,
    maxima and percentiles of each metric, its p50 and p90 per time bin of ``edges``, and the median
    of each metric over every job (its unit)."""
    params = w.params()
    pg = conn.dialect.name == PG
    ctes = _ATTRIBUTED.format(
        materialized="MATERIALIZED" if pg else "",
        bin=_bin_case("o.start_s", edges, params),
        unattributed=UNATTRIBUTED,
        cut=w.cut("o.start_s"),
        pending=DECIDED_WHILE_PENDING,
    )
    nulls = ", NULL" * 8
    if pg:
        q = "".join(f", {_percentiles(m, PERCENTS)} AS q_{m}" for m in METRICS)
        unit = "".join(f", ARRAY[percentile_cont(0.5) WITHIN GROUP (ORDER BY ABS({m}))]" for m in METRICS)
        binned = "".join(f", {_percentiles(m, (50, 90))}" for m in METRICS)
        sql = f"""WITH {ctes}
{_GROUPS.format(q=q)}
UNION ALL
SELECT 'unit', NULL, -1, COUNT(*){nulls}{unit} FROM a
UNION ALL
SELECT 'bin', grp, bin, COUNT(*){nulls}{binned} FROM a GROUP BY grp, bin"""
        rows = (await conn.execute(text(sql), params)).all()
        return _outcomes_pg(rows, len(edges) - 1)
    union = " UNION ALL ".join(f"SELECT '{m}' AS metric, grp, bin, {m} AS v FROM a" for m in METRICS)
    sql = f"""WITH {ctes}, q AS ({union}),
g AS ({_ranked("q", "metric, grp", "v")}),
u AS ({_ranked("q", "metric", "ABS(v)")}),
t AS ({_ranked("q", "metric, grp, bin", "v")})
{_GROUPS.format(q=", NULL AS metric, NULL AS rn, NULL AS v")}
UNION ALL
SELECT 'q', grp, -1, n{nulls}, metric, rn, v FROM g WHERE {_at_positions(PERCENTS)}
UNION ALL
SELECT 'unit', NULL, -1, n{nulls}, metric, rn, v FROM u WHERE {_at_positions((50,))}
UNION ALL
SELECT 'bin', grp, bin, n{nulls}, metric, rn, v FROM t WHERE {_at_positions((50, 90))}"""
    rows = (await conn.execute(text(sql), params)).all()
    return _outcomes_sqlite(rows, len(edges) - 1)


def _group(r: Any, q: Mapping[str, Mapping[int, float]]) -> OutcomeGroup:
    n = int(r.n)
    metrics = {m: _distribution(n, getattr(r, f"mean_{m}"), getattr(r, f"max_{m}"), q[m]) for m in METRICS}
    return OutcomeGroup(str(r.grp), n, finite_or_nan(r.lo), finite_or_nan(r.hi), metrics)


def _sorted_groups(groups: Iterable[OutcomeGroup]) -> tuple[OutcomeGroup, ...]:
    return tuple(sorted(groups, key=lambda g: (-g.n, g.decided_by)))


def _outcomes_pg(rows: Sequence[Any], bins: int) -> OutcomeStats:
    groups, medians = [], {}
    over_time: dict[str, dict[str, FloatArray]] = {}
    for r in rows:
        n = int(r.n)
        if r.kind == "group":
            groups.append(_group(r, {m: _quantiles(r, f"q_{m}", PERCENTS, n) for m in METRICS}))
        elif r.kind == "unit":  # the arrays of every kind come in the q_ columns
            medians = {m: _quantiles(r, f"q_{m}", (50,), n)[50] for m in METRICS}
        else:
            series = over_time.setdefault(str(r.grp), {m: np.full((bins, 2), np.nan) for m in METRICS})
            for m in METRICS:
                values = _quantiles(r, f"q_{m}", (50, 90), n)
                series[m][int(r.bin)] = [values[50], values[90]]
    return _outcome_stats(groups, medians, over_time)


def _outcomes_sqlite(rows: Sequence[Any], bins: int) -> OutcomeStats:
    by_kind: dict[str, list[Any]] = defaultdict(list)
    for r in rows:
        by_kind[r.kind].append(r)
    q = _ordered(by_kind["q"], lambda r: (r.grp, r.metric))
    groups = [
        _group(r, {m: _interpolated(*q[(r.grp, m)], PERCENTS) for m in METRICS}) for r in by_kind["group"]
    ]
    medians = {
        m: interpolate(at, n, 50) for m, (n, at) in _ordered(by_kind["unit"], lambda r: r.metric).items()
    }
    over_time: dict[str, dict[str, FloatArray]] = {}
    for (grp, metric, b), (n, at) in _ordered(
        by_kind["bin"], lambda r: (r.grp, r.metric, int(r.bin))
    ).items():
        series = over_time.setdefault(str(grp), {m: np.full((bins, 2), np.nan) for m in METRICS})
        series[metric][b] = [interpolate(at, n, 50), interpolate(at, n, 90)]
    return _outcome_stats(groups, medians, over_time)


def _outcome_stats(
    groups: list[OutcomeGroup],
    medians: Mapping[str, float],
    over_time: Mapping[str, Mapping[str, FloatArray]],
) -> OutcomeStats:
    ordered = _sorted_groups(groups)
    drawn = [g.decided_by for g in ordered[:MOST_GROUPS]]
    return OutcomeStats(ordered, dict(medians), {g: over_time[g] for g in drawn if g in over_time})


# --- GPU timeline ---------------------------------------------------------------------------------

_EVENTS = """
r AS (
    SELECT CASE WHEN start_s < :lo THEN :lo WHEN start_s > :hi THEN :hi ELSE start_s END AS s,
           CASE WHEN end_s < :lo THEN :lo WHEN end_s > :hi THEN :hi ELSE end_s END AS e, gpus
    FROM outcomes WHERE cluster = :cluster{ran}
),
k AS (SELECT s, e, gpus FROM r WHERE e > s),
ev AS (
    SELECT s AS t, gpus AS delta FROM k
    UNION ALL SELECT e, -gpus FROM k
    UNION ALL SELECT CAST(:lo AS {float}), 0
),
lv AS (SELECT t, delta, SUM(delta) OVER (ORDER BY t) AS level FROM ev)"""


async def busy_timeline(conn: AsyncConnection, w: Window) -> tuple[int, BusyTimeline | BinnedBusy | None]:
    """(finished jobs that ran in the range, their busy GPUs cut to it; None when none ran in it).

    The step function as ``BusyTimeline`` when it changes at most ``MOST_STEPS`` times, else the
    database's ``STEP_BINS`` bins of it (``BinnedBusy``). The level after a time counts every change
    at that time (the window's frame includes the rows that tie on ``t``)."""
    params = w.params()
    first = "SELECT COUNT(*) AS n, MIN(start_s) AS lo, MAX(end_s) AS hi FROM outcomes"
    span = (await conn.execute(text(f"{first} WHERE cluster = :cluster{w.ran()}"), params)).one()
    jobs = int(span.n)
    if not jobs:
        return 0, None
    lo = w.since if w.since is not None else float(span.lo)
    hi = w.until if w.until is not None else float(span.hi)
    if hi <= lo:
        return jobs, None
    params.update(lo=lo, hi=hi)
    events = _EVENTS.format(ran=w.ran(), float=FLOAT)
    exact = f"""WITH {events}
SELECT t AS at, MAX(level) AS level, (SELECT COUNT(*) FROM k) AS kept FROM lv WHERE t < :hi
GROUP BY t ORDER BY t LIMIT {MOST_STEPS + 1}"""
    if 2 * jobs + 1 <= MOST_STEPS:
        return jobs, _steps((await conn.execute(text(exact), params)).all(), lo, hi)
    binned = await _binned(conn, events, params, lo, hi)
    if binned is None or binned.changes > MOST_STEPS:
        return jobs, binned
    return jobs, _steps((await conn.execute(text(exact), params)).all(), lo, hi)


def _steps(rows: Sequence[Any], lo: float, hi: float) -> BusyTimeline | None:
    if not rows or not int(rows[0].kept):
        return None
    times = np.array([float(r.at) for r in rows], dtype=np.float64)
    busy = np.array([float(r.level) for r in rows], dtype=np.float64)
    return BusyTimeline(times, busy, lo, hi)


async def _binned(
    conn: AsyncConnection, events: str, params: dict[str, Any], lo: float, hi: float
) -> BinnedBusy | None:
    """Per bin: the sum of the changes, of the changes times their time, the highest level, the first
    change and how many distinct times; then the area under the steps at each edge (``resample``)."""
    bins = STEP_BINS
    params = {**params, "scale": bins / (hi - lo)}
    at = _floor("(t - :lo) * :scale", conn.dialect.name)
    sql = f"""WITH {events},
b AS (SELECT CASE WHEN {at} >= {bins} THEN {bins - 1} ELSE {at} END AS bin, t, delta, level
      FROM lv WHERE t < :hi)
SELECT bin, SUM(delta) AS d, SUM(delta * (t - :lo)) AS dt, MAX(level) AS peak, MIN(t) AS first_t,
       COUNT(DISTINCT t) AS changes, (SELECT COUNT(*) FROM k) AS kept
FROM b GROUP BY bin"""
    rows = (await conn.execute(text(sql), params)).all()
    if not rows or not int(rows[0].kept):
        return None
    edges = np.linspace(lo, hi, bins + 1)
    d, dt = np.zeros(bins), np.zeros(bins)
    peak, first = np.full(bins, -np.inf), np.full(bins, np.inf)
    for r in rows:
        b = int(r.bin)
        d[b], dt[b], peak[b], first[b] = float(r.d), float(r.dt), float(r.peak), float(r.first_t)
    level_after = np.cumsum(d)
    before = np.concatenate([[0.0], level_after[:-1]])  # the level when each bin starts
    area = np.concatenate([[0.0], (edges[1:] - lo) * level_after - np.cumsum(dt)])
    mean = np.diff(area) / np.diff(edges)
    # a change exactly at a bin's first edge is the bin's starting level already
    starts_on_edge = first == edges[:-1]
    bin_peak = np.where(starts_on_edge, peak, np.maximum(peak, before))
    changes = sum(int(r.changes) for r in rows)
    total_mean = float(area[-1] / (hi - lo))
    return BinnedBusy(edges, mean, bin_peak, lo, hi, total_mean, float(np.max(bin_peak)), changes)


# --- shadow models -----------------------------------------------------------------------------------


async def shadow_summaries(conn: AsyncConnection, w: Window) -> tuple[ShadowSummary, ...]:
    """One summary per shadow model version that ranked a snapshot of the range, by version.

    The applied ranks are read per scored snapshot (``applied_ranks``: one range of the covering index
    each) and hashed, not looked up job by job: a hundred thousand shadow ranks cost a third as much."""
    params = w.params()
    k = TOP_K
    window = w.cut("snapshot_time")
    sql = f"""WITH applied_ranks AS (
    SELECT correlation_id, job_id, rank FROM decisions
    WHERE cluster = :cluster{window} AND correlation_id IN (
        SELECT DISTINCT correlation_id FROM shadow_priorities WHERE cluster = :cluster{window}
    )
),
j AS (
    SELECT s.model_version AS v, s.correlation_id AS c, s.job_id, s.rank AS sr, d.rank AS ar,
           o.wait_s AS w,
           CASE WHEN s.applied_model_version IS NOT NULL THEN s.applied_model_version
                ELSE 'policy:' || s.applied_policy END AS applied
    FROM shadow_priorities s
    LEFT JOIN applied_ranks d ON d.correlation_id = s.correlation_id AND d.job_id = s.job_id
    LEFT JOIN outcomes o ON o.cluster = s.cluster AND o.job_id = s.job_id
    WHERE s.cluster = :cluster{w.cut("s.snapshot_time")}
),
r AS (
    SELECT v, c, job_id, w,
           ROW_NUMBER() OVER (PARTITION BY v, c ORDER BY ar, sr, job_id) - 1 AS a,
           ROW_NUMBER() OVER (PARTITION BY v, c ORDER BY sr, job_id) - 1 AS b,
           COUNT(*) OVER (PARTITION BY v, c) AS n
    FROM j WHERE ar IS NOT NULL
),
k AS (SELECT v, c, job_id, w, a, b, n, CASE WHEN n < {k} THEN n ELSE {k} END AS top FROM r WHERE n >= 2)
SELECT 'per' AS kind, v, NULL AS label,
       CAST(1.0 - 6.0 * SUM((a - b) * (a - b)) / (n * (n * n - 1.0)) AS {FLOAT}) AS x,
       CAST(SUM(CASE WHEN a < top AND b < top THEN 1 ELSE 0 END) * 1.0 / MAX(top) AS {FLOAT}) AS y
FROM k GROUP BY v, c, n
UNION ALL
SELECT 'scored', v, NULL, CAST(COUNT(DISTINCT c) AS {FLOAT}), NULL FROM j GROUP BY v
UNION ALL
SELECT 'applied', v, applied, CAST(COUNT(DISTINCT c) AS {FLOAT}), NULL FROM j GROUP BY v, applied
UNION ALL
SELECT 'top_shadow', v, NULL, CAST(COUNT(*) AS {FLOAT}), CAST(AVG(w) AS {FLOAT})
FROM (SELECT v, job_id, MAX(w) AS w FROM k WHERE b < {k} AND w IS NOT NULL GROUP BY v, job_id) ts
GROUP BY v
UNION ALL
SELECT 'top_applied', v, NULL, CAST(COUNT(*) AS {FLOAT}), CAST(AVG(w) AS {FLOAT})
FROM (SELECT v, job_id, MAX(w) AS w FROM k WHERE a < {k} AND w IS NOT NULL GROUP BY v, job_id) ta
GROUP BY v"""
    rows = (await conn.execute(text(sql), params)).all()
    return _shadow_summaries(rows)


def _shadow_summaries(rows: Sequence[Any]) -> tuple[ShadowSummary, ...]:
    rho: dict[str, list[float]] = defaultdict(list)
    overlap: dict[str, list[float]] = defaultdict(list)
    scored: dict[str, int] = {}
    applied: dict[str, list[tuple[str, int]]] = defaultdict(list)
    top: dict[tuple[str, str], tuple[int, float]] = {}
    for r in rows:
        if r.kind == "per":
            rho[r.v].append(float(r.x))
            overlap[r.v].append(float(r.y))
        elif r.kind == "scored":
            scored[r.v] = int(r.x)
        elif r.kind == "applied":
            applied[r.v].append((str(r.label), int(r.x)))
        else:
            top[(r.v, r.kind)] = (int(r.x), finite_or_nan(r.y))
    nan = float("nan")
    out = []
    for version in sorted(scored):
        shadow_top = top.get((version, "top_shadow"), (0, nan))
        applied_top = top.get((version, "top_applied"), (0, nan))
        out.append(
            ShadowSummary(
                model_version=version,
                applied_by=tuple(sorted(applied[version], key=lambda kv: (-kv[1], kv[0]))),
                snapshots=scored[version],
                compared=len(rho[version]),
                rho=np.array(rho[version], dtype=np.float64),
                top_overlap=np.array(overlap[version], dtype=np.float64),
                shadow_top_jobs=shadow_top[0],
                shadow_top_wait=shadow_top[1],
                applied_top_jobs=applied_top[0],
                applied_top_wait=applied_top[1],
            )
        )
    return tuple(out)
