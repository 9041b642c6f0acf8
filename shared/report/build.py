"""The report page: sections of tables and figures over ``ReportData``, and the async entry point.

Why every section says what it is made of: the page is read by people who did not write the queries
(an on-call engineer, a reviewer of a model promotion). Each table states its unit and population, and
a section with nothing to show says so instead of drawing an empty axis; a store with no data gives a
page that says there is none.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from shared.report import figures
from shared.report.aggregates import METRICS, MOST_GROUPS, TOTAL, Distribution
from shared.report.data import ReportData, load_report_data
from shared.report.figures import EPOCH_FROM, Plot, Units
from shared.report.page import Html, data_uri, document, el, esc, num_cell, number, table
from shared.report.shadow import shadow_section
from shared.report.stats import METRIC_TITLES


def clock_text(t: float | None) -> str:
    """A cluster-clock time as text: seconds, with the UTC date when it is epoch seconds."""
    if t is None:
        return "open"
    if t >= EPOCH_FROM:
        return f"{t:.0f} ({datetime.fromtimestamp(t, UTC):%Y-%m-%d %H:%M:%S} UTC)"
    hours = f" ({number(t / 3600)} h)" if abs(t) >= 2 * 3600 else ""
    return f"{number(t)} s{hours}"


def wall_text(t: datetime | None) -> str:
    return "" if t is None else f"{t.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def _figure(plot: Plot) -> Html:
    return el(
        "figure",
        el("img", id=plot.id, src=data_uri(plot.png), alt=plot.title, data_plot=plot.id),
        el("figcaption", el("strong", plot.title), ". ", plot.caption),
    )


def _note(text: str, **attrs: object) -> Html:
    return el("p", text, class_="note", **attrs)


def _summary(items: Sequence[tuple[str, str, float | int | None, str]]) -> Html:
    """Key figures: (id, label, raw value, shown text)."""
    cells = [
        el(
            "div",
            el("dt", label),
            el("dd", shown, id=f"sum-{key}", data_value=None if raw is None else repr(raw)),
        )
        for key, label, raw, shown in items
    ]
    return el("dl", *cells, class_="summary", id="summary")


def _units(data: ReportData) -> Units:
    """Per metric, the unit its tables and figures use (bounded slowdown has none)."""
    medians = data.outcomes.medians
    return {m: ("", 1.0) if m == "bsld" else figures.unit_of_median(medians.get(m, 0.0)) for m in METRICS}


def _outcomes_section(data: ReportData) -> list[Html]:
    out = [el("h2", "Jobs: wait, JCT and bounded slowdown", id="outcomes")]
    o = data.outcomes
    if not len(o):
        out.append(_note("No finished job started in this range.", id="no-outcomes"))
        return out
    summary = o.by_group()
    units = _units(data)
    headers = ["decided by", "jobs"]
    for m in METRICS:
        unit = units[m][0]
        for stat in ("mean", "p50", "p90", "p99"):
            headers.append(f"{METRIC_TITLES[m]} {stat}" + (f" ({unit})" if unit else ""))
    rows = []
    for group, dists in summary.items():
        row: list[Html | str] = [esc(group), num_cell(dists["wait_s"].n)]
        for m in METRICS:
            d: Distribution = dists[m]
            scale = units[m][1]
            row += [
                num_cell(d.mean, scale),
                num_cell(d.p50, scale),
                num_cell(d.p90, scale),
                num_cell(d.p99, scale),
            ]
        rows.append(row)
    out.append(
        _note(
            "Finished jobs that started in the range, grouped by the policy or model version of the decision "
            "that started them (as in the view model_version_outcomes); 'unattributed': the outcome names "
            "no stored decision. Bounded slowdown uses a 10 s threshold."
        )
    )
    out.append(table(headers, rows, id="outcome-table"))
    out.append(_figure(figures.outcome_boxes(o.groups[:MOST_GROUPS], units)))
    out.append(_figure(figures.outcomes_over_time(o.over_time, units, data.edges)))
    return out


def _decisions_section(data: ReportData) -> list[Html]:
    out = [el("h2", "Decisions", id="decisions")]
    counts = data.snapshots.decided
    if not counts:
        out.append(_note("No decision in this range.", id="no-decisions"))
        return out
    rows = [
        [
            esc(c.decided_by),
            num_cell(c.snapshots),
            num_cell(c.rows),
            num_cell(c.placed),
            num_cell(c.fallbacks),
        ]
        for c in counts
    ]
    out.append(
        _note(
            "One decision per snapshot, one decision row per pending job in it; a job is started by the "
            "row that placed it."
        )
    )
    headers = ["decided by", "snapshots", "decision rows", "jobs started", "fallback snapshots"]
    out.append(table(headers, rows, id="decision-table"))
    return out


def _utilization_section(data: ReportData) -> tuple[list[Html], float | None]:
    out = [el("h2", "GPU utilization", id="utilization")]
    timeline = data.busy
    if timeline is None:
        out.append(_note("No finished job ran in this range.", id="no-utilization"))
        return out, None
    cap = data.capacity_gpus
    share = f" = {timeline.mean / cap:.1%} of {cap} GPUs" if cap else ""
    source = f" (capacity from {data.capacity_source})" if cap and data.capacity_source else ""
    out.append(
        _note(
            f"Mean busy GPUs {number(timeline.mean)}{share}, peak {number(timeline.peak)}, over "
            f"{clock_text(timeline.start)} to {clock_text(timeline.end)}{source}."
        )
    )
    out.append(_figure(figures.busy_gpus(timeline, cap)))
    return out, timeline.mean


def _latency_section(data: ReportData) -> list[Html]:
    out = [el("h2", "Decision latency", id="latency")]
    stages = data.snapshots.stages
    summary = data.snapshots.latency
    if not data.snapshots or (summary[TOTAL].n == 0 and not stages):
        out.append(_note("No decision latency recorded in this range.", id="no-latency"))
        return out
    rows = [
        [
            esc("total (sum of stages)" if stage == TOTAL else stage),
            num_cell(d.n),
            num_cell(d.p50),
            num_cell(d.p99),
            num_cell(d.mean),
            num_cell(d.max),
        ]
        for stage, d in summary.items()
    ]
    out.append(
        table(
            ["stage", "snapshots", "p50 (ms)", "p99 (ms)", "mean (ms)", "max (ms)"], rows, id="latency-table"
        )
    )
    bins = data.snapshots.latency_bins
    series = {stage: bins.get(stage) for stage in summary}
    out.append(_figure(figures.decision_latency(series, data.edges)))
    return out


def _fallback_section(data: ReportData) -> tuple[list[Html], int]:
    out = [el("h2", "Fallbacks", id="fallbacks")]
    rows = data.snapshots.fallbacks
    total = sum(r.snapshots for r in rows)
    if not rows:
        what = (
            "the model decided every snapshot in this range"
            if data.snapshots
            else "no decision in this range"
        )
        out.append(_note(f"No fallback: {what}.", id="no-fallbacks"))
        return out, 0
    out.append(
        _note(
            "Snapshots the base policy decided instead of the model, and why. A fallback records no model "
            "version; it is charged to the model version in charge: the one of the latest earlier snapshot "
            "the model decided."
        )
    )
    body = [[esc(r.model_version), esc(r.reason), num_cell(r.snapshots), num_cell(r.rows)] for r in rows]
    out.append(
        table(["model version in charge", "reason", "snapshots", "decision rows"], body, id="fallback-table")
    )
    out.append(_figure(figures.fallbacks(rows)))
    return out, total


def _models_section(data: ReportData) -> list[Html]:
    out = [el("h2", "Model versions and promotions", id="models")]
    counts = {c.decided_by: c for c in data.snapshots.decided}
    known = {v.version for v in data.versions}
    unregistered = sorted(data.snapshots.model_versions - known)
    if unregistered:
        out.append(
            _note(
                "Decisions in this range were made by model versions the registry does not know (a "
                "checkpoint given to the prioritizer at start-up): " + ", ".join(unregistered) + ".",
                id="unregistered-models",
            )
        )
    if not data.versions and not data.events:
        out.append(_note("No model version is recorded for this cluster.", id="no-models"))
        return out
    jobs = data.outcomes.by_group()
    rows = []
    for v in data.versions:
        c = counts.get(v.version)
        j = jobs.get(v.version)
        promoted = wall_text(v.promoted_at)
        if promoted and v.promoted_by:
            promoted += f" by {v.promoted_by}" + (" (forced)" if v.forced else "")
        rows.append(
            [
                esc(v.version),
                esc(v.status),
                esc(wall_text(v.created_at)),
                esc(promoted),
                num_cell(c.snapshots if c else 0),
                num_cell(j["wait_s"].n if j else 0),
                num_cell(j["wait_s"].mean if j else None),
                num_cell(j["bsld"].mean if j else None),
            ]
        )
    headers = ["version", "status", "created", "promoted", "snapshots decided", "jobs finished"]
    out.append(table([*headers, "mean wait (s)", "mean bounded slowdown"], rows, id="version-table"))
    if data.events:
        note = "Registry history, oldest first (wall clock; not cut by the range)."
        if not data.has_event_table:
            note += (
                " The database predates the registry's history table: promotions come from model_versions."
            )
        out.append(_note(note))
        ev_rows = [
            [
                esc(wall_text(e.at)),
                esc(e.version),
                esc(e.event + (" (announced)" if e.announced else "")),
                esc(f"{e.from_status or '-'} -> {e.to_status}"),
                esc(e.actor + (" (forced)" if e.forced else "")),
                esc(e.reason or ""),
            ]
            for e in data.events
        ]
        out.append(table(["at", "version", "event", "status", "by", "reason"], ev_rows, id="event-table"))
        out.append(_figure(figures.model_events(data.events)))
    return out


def _header(data: ReportData) -> list[Html]:
    title = f"Hylo report: {data.cluster}" if data.cluster else "Hylo report"
    window = f"range: {clock_text(data.since)} to {clock_text(data.until)} (cluster clock)"
    meta = f"{window}; generated {wall_text(data.generated_at)}"
    return [el("h1", title), el("p", meta, class_="meta")]


def render_report(data: ReportData) -> str:
    """The whole page for ``data`` (CPU-bound: draws the figures)."""
    if data.cluster is None:
        body = [
            el("h1", "Hylo report"),
            el(
                "div",
                el("strong", "No data. "),
                data.note
                or "The store has no cluster yet: no decision, finished job or model version was recorded. "
                "Run the pipeline (hylo run) or point --database at the store the services write to.",
                class_="empty",
                id="no-data",
            ),
            el("p", f"generated {wall_text(data.generated_at)}", class_="meta"),
        ]
        return document("Hylo report: no data", body)
    body = _header(data)
    if data.is_empty:
        body.append(
            el(
                "div",
                el("strong", "No data. "),
                f"Cluster {data.cluster} has no decision, finished job or model version in this range.",
                class_="empty",
                id="no-data",
            )
        )
        return document(f"Hylo report: {data.cluster}", body)
    snaps = data.snapshots
    latency = snaps.latency[TOTAL]
    sections_util, mean_busy = _utilization_section(data)
    sections_fb, fallback_total = _fallback_section(data)
    rows = snaps.rows
    fb_share = f" ({fallback_total / len(snaps):.0%})" if snaps else ""
    cap = data.capacity_gpus
    items: list[tuple[str, str, float | int | None, str]] = [
        ("snapshots", "snapshots decided", len(snaps), number(len(snaps))),
        ("decision-rows", "decision rows", rows, number(rows)),
        (
            "jobs-started",
            "jobs started by decisions",
            snaps.placed,
            number(snaps.placed),
        ),
        ("jobs-finished", "finished jobs (started in range)", len(data.outcomes), number(len(data.outcomes))),
        ("fallbacks", "fallback snapshots", fallback_total, number(fallback_total) + fb_share),
        ("model-versions", "model versions", len(data.versions), number(len(data.versions))),
        (
            "promotions",
            "promotions",
            sum(e.event == "promoted" for e in data.events),
            number(sum(e.event == "promoted" for e in data.events)),
        ),
        ("latency-p50", "decision latency p50 (ms)", latency.p50, number(latency.p50)),
        ("latency-p99", "decision latency p99 (ms)", latency.p99, number(latency.p99)),
        ("mean-busy-gpus", "mean busy GPUs", mean_busy, number(mean_busy) + (f" / {cap}" if cap else "")),
        ("capacity", "GPU capacity", cap, number(cap) if cap else "unknown"),
    ]
    body.append(_summary(items))
    body += _outcomes_section(data)
    body += _decisions_section(data)
    body += sections_util
    body += _latency_section(data)
    body += sections_fb
    body += _models_section(data)
    body += shadow_section(data.shadows)
    return document(f"Hylo report: {data.cluster}", body)


async def generate_report(
    engine: AsyncEngine,
    *,
    cluster: str | None = None,
    since: float | None = None,
    until: float | None = None,
    capacity_gpus: int | None = None,
    capacity_source: str | None = None,
) -> tuple[ReportData, str]:
    """Read the store and draw the page (in a worker thread, so an event loop keeps serving)."""
    async with engine.connect() as conn:
        data = await load_report_data(
            conn,
            cluster=cluster,
            since=since,
            until=until,
            capacity_gpus=capacity_gpus,
            capacity_source=capacity_source,
        )
    page = await asyncio.to_thread(render_report, data)
    return data, page
