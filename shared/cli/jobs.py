"""``hylo jobs`` and ``hylo job ID``: the decisions database as an admin reads a scheduler's
accounting (``sacct``/``squeue``), not as SQL.

``hylo jobs`` lists jobs with their derived state (``jobs_query``), filtered by state, arrival time,
user and GPU type, as a table, ``--json`` or ``--format`` columns (``sacct --format`` style, one
``|``-separated line per job, for scripts). ``hylo job ID`` tells one job's story: arrival, every
decision about it (rank, the model's score, policy, model version, fallback, nodes), its start,
end and outcome, or why it is still pending. Both only read: the store must exist
(``--database``, as every command reads it). Times are the cluster clock's seconds, as stored.
Exit codes: 0 shown (also an empty list), 2 error (no such store, job or cluster).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table
from sqlalchemy.ext.asyncio import AsyncConnection

from shared.cli.common import DatabaseOpt, console, fail
from shared.cli.jobs_query import STATES, JobFilter, clusters_of_job, list_jobs
from shared.cli.report import parse_time
from shared.cli.store_read import choose_cluster, read_store

#: ``--format`` columns: name -> how a listed row shows it
COLUMNS = (
    "job_id",
    "cluster",
    "state",
    "user",
    "partition",
    "qos",
    "gpus",
    "gpu_types",
    "submit_s",
    "start_s",
    "end_s",
    "wait_s",
    "jct_s",
    "est_runtime_s",
    "decisions",
)
DEFAULT_FORMAT = "job_id,state,user,gpus,gpu_types,submit_s,start_s,end_s,wait_s"

ClusterOpt = Annotated[str | None, typer.Option("--cluster", help="only this cluster (default: all)")]


def _number(value: Any, digits: int = 1) -> str:
    return "" if value is None else f"{float(value):.{digits}f}"


def _gpus(row: dict[str, Any]) -> str:
    """``2``, or ``1x0.50`` for a fractional GPU (gpu_milli < 1000)."""
    milli = int(row.get("gpu_milli") or 1000)
    return str(row["gpus"]) if milli >= 1000 else f"{row['gpus']}x{milli / 1000:.2f}"


def cell(row: dict[str, Any], column: str) -> str:
    """A listed row's value in ``column``, as text."""
    if column == "user":
        return str(row["user_name"])
    if column == "gpus":
        return _gpus(row)
    if column == "gpu_types":
        return ",".join(row.get("gpu_types") or []) or "any"
    if column in ("submit_s", "start_s", "end_s", "wait_s", "jct_s", "est_runtime_s"):
        return _number(row.get(column))
    value = row.get(column)
    return "" if value is None else str(value)


def _columns(fmt: str) -> list[str]:
    names = [c.strip().lower() for c in fmt.split(",") if c.strip()]
    bad = [c for c in names if c not in COLUMNS]
    if bad or not names:
        raise fail(
            f"--format {fmt!r}: unknown column {', '.join(bad) or '(none)'}; choose from {', '.join(COLUMNS)}"
        )
    return names


def _states(value: str | None) -> tuple[str, ...]:
    names = tuple(s.strip().lower() for s in (value or "").split(",") if s.strip())
    bad = [s for s in names if s not in STATES]
    if bad:
        raise fail(f"--state {value!r}: unknown state {', '.join(bad)}; choose from {', '.join(STATES)}")
    return names


def _allows(row: dict[str, Any], gpu_type: str) -> bool:
    """The job may run on ``gpu_type`` (it names it, or takes any type)."""
    types = [t.lower() for t in row.get("gpu_types") or []]
    return not types or gpu_type.lower() in types


def _json_safe(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in row.items()}


def jobs_command(
    database: DatabaseOpt = None,
    cluster: ClusterOpt = None,
    state: Annotated[
        str | None, typer.Option("--state", help=f"comma-separated, from {', '.join(STATES)} (default: all)")
    ] = None,
    user: Annotated[
        list[str] | None, typer.Option("--user", help="only this user's jobs (repeatable)")
    ] = None,
    gpu_type: Annotated[
        str | None, typer.Option("--gpu-type", help="only jobs that may run on this GPU type (or on any)")
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="arrived from this time: cluster-clock seconds or ISO 8601")
    ] = None,
    until: Annotated[str | None, typer.Option(help="arrived before this time (as --since)")] = None,
    limit: Annotated[int, typer.Option(help="the newest this many matches (0: all)", min=0)] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="print the rows as JSON")] = False,
    fmt: Annotated[
        str | None,
        typer.Option("--format", help=f"'|'-separated columns, comma-separated from {', '.join(COLUMNS)}"),
    ] = None,
) -> None:
    """List jobs of the decisions database with their state (like sacct/squeue), oldest first."""
    columns = _columns(fmt) if fmt is not None else None
    where = JobFilter(
        cluster=cluster,
        states=_states(state),
        users=tuple(user or ()),
        since=parse_time(since, "--since"),
        until=parse_time(until, "--until"),
        limit=0 if gpu_type else limit,
    )

    async def work(conn: AsyncConnection) -> tuple[list[dict[str, Any]], bool]:
        if cluster is not None:
            await choose_cluster(conn, cluster)
        return await list_jobs(conn, where)

    rows, more = read_store(database, work)
    if gpu_type:
        rows = [r for r in rows if _allows(r, gpu_type)]
        more, rows = bool(limit) and len(rows) > limit, rows[-limit:] if limit else rows
    _print_jobs(rows, more, columns, as_json)


def _print_jobs(rows: list[dict[str, Any]], more: bool, columns: list[str] | None, as_json: bool) -> None:
    if as_json:
        print(json.dumps([_json_safe(r) for r in rows], indent=2))
        return
    if columns is not None:
        print("|".join(columns))
        for row in rows:
            print("|".join(cell(row, c) for c in columns))
        return
    if not rows:
        console.print("no jobs match")
        return
    table = Table(title=f"{len(rows):,} jobs")
    default = DEFAULT_FORMAT.split(",")
    if len({r["cluster"] for r in rows}) > 1:
        default.insert(1, "cluster")
    for column in default:
        table.add_column(column, justify="right" if column.endswith("_s") else "left")
    for row in rows:
        table.add_row(*(escape(cell(row, c)) for c in default))
    console.print(table)
    if more:
        console.print("[dim]more jobs match: narrow the filters, or pass --limit 0 for all[/]")


# -- hylo job ID ------------------------------------------------------------------------------------


async def _story(conn: AsyncConnection, job_id: str, cluster: str | None, most: int) -> dict[str, Any]:
    from shared.query.queries import job_history, job_row, outcome_row

    if cluster is None:
        found = await clusters_of_job(conn, job_id)
        if len(found) > 1:
            raise fail(f"job {job_id!r} is in several clusters ({', '.join(found)}): pass --cluster")
        cluster = found[0] if found else await choose_cluster(conn, None)
    else:
        await choose_cluster(conn, cluster)
    if cluster is None:
        raise fail(f"no job {job_id!r}: the store has no cluster yet")
    job = await job_row(conn, cluster, job_id)
    if job is None:
        raise fail(f"no job {job_id!r} in the store for cluster {cluster}")
    outcome = await outcome_row(conn, cluster, job_id)
    count, decisions = await job_history(conn, cluster, job_id, most)
    return {
        "job": dict(job._mapping),
        "outcome": dict(outcome._mapping) if outcome is not None else None,
        "decision_count": count,
        "decisions": [dict(d._mapping) for d in decisions],
    }


def job_command(
    job_id: Annotated[str, typer.Argument(help="the job's id as the cluster names it")],
    database: DatabaseOpt = None,
    cluster: Annotated[
        str | None, typer.Option("--cluster", help="its cluster (default: the one that has the job)")
    ] = None,
    decisions: Annotated[int, typer.Option(help="show the last this many decisions", min=1)] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="print the story as JSON")] = False,
) -> None:
    """One job's story: arrival, each decision (rank, score, policy, model), placement, start, end."""

    async def work(conn: AsyncConnection) -> dict[str, Any]:
        return await _story(conn, job_id, cluster, decisions)

    story = read_store(database, work)
    if as_json:
        print(json.dumps(_json_tree(story), indent=2))
        return
    _print_story(story)


def _json_tree(story: dict[str, Any]) -> dict[str, Any]:
    out = dict(story)
    out["job"] = _json_safe(story["job"])
    out["outcome"] = _json_safe(story["outcome"]) if story["outcome"] else None
    out["decisions"] = [_json_safe(d) for d in story["decisions"]]
    return out


def _print_story(story: dict[str, Any]) -> None:
    job, outcome, rows = story["job"], story["outcome"], story["decisions"]
    types = ",".join(job.get("gpu_types") or []) or "any"
    console.print(
        f"[bold]job {escape(job['job_id'])}[/] on cluster {escape(job['cluster'])}: user "
        f"{escape(job['user_name'])}, partition {escape(job['partition'])}, qos {escape(job['qos'])}, "
        f"{_gpus(job)} GPU(s) of type {escape(types)}, {job['cpus_milli'] / 1000:g} CPUs, "
        f"{job['mem_mib']:,} MiB, estimated {_number(job['est_runtime_s'], 0)} s",
        highlight=False,
        soft_wrap=True,
    )
    console.print(f"arrival: t = {_number(job['submit_s'])} s", highlight=False)
    shown = f" (the last {len(rows)})" if story["decision_count"] > len(rows) else ""
    console.print(f"decisions: {story['decision_count']:,}{shown}", highlight=False)
    if rows:
        console.print(_decisions_table(rows))
    placed = [d for d in rows if d["placed"]]
    if placed:
        nodes = ", ".join(placed[0]["nodes"]) or "(none)"
        console.print(
            f"placed: t = {_number(placed[0]['snapshot_time'])} s on {escape(nodes)} "
            f"(mode {placed[0]['mode'] or '-'})",
            highlight=False,
        )
    if outcome is not None:
        console.print(
            f"start: t = {_number(outcome['start_s'])} s; end: t = {_number(outcome['end_s'])} s, "
            f"{outcome['status']}; wait {_number(outcome['wait_s'])} s, JCT {_number(outcome['jct_s'])} s, "
            f"bounded slowdown {_number(outcome['bsld'], 3)}",
            highlight=False,
        )
        if outcome.get("nodes"):  # where it really ran (the decision's nodes are the placer's advice)
            kind = f" ({escape(outcome['gpu_type'])})" if outcome.get("gpu_type") else ""
            console.print(f"ran on: {escape(', '.join(outcome['nodes']))}{kind}", highlight=False)
    else:
        console.print(f"[yellow]{escape(_pending_reason(rows))}[/]", highlight=False, soft_wrap=True)


def _decisions_table(rows: list[dict[str, Any]]) -> Table:
    table = Table()
    columns = (
        "t (s)",
        "sequence",
        "rank",
        "priority",
        "score",
        "policy",
        "model",
        "placer",
        "nodes",
        "fallback",
    )
    for column in columns:
        table.add_column(column, overflow="fold")
    for d in rows:
        score = d.get("score")
        table.add_row(
            _number(d["snapshot_time"]),
            str(d["sequence"]),
            str(d["rank"]),
            f"{d['priority']:.4g}",
            "-" if score is None else f"{score:.4g}",  # the model's raw score; none from a base policy
            escape(str(d["policy"])),
            escape(d["model_version"] or "-"),
            _placer_cell(d),
            escape(", ".join(d["nodes"] or [])),
            escape(d["fallback"] or ""),
        )
    return table


def _placer_cell(d: dict[str, Any]) -> str:
    """What the placer said: placed, reserved (until when), waiting; rows older than the store's
    revision 0006 only know whether it was placed."""
    status = d.get("placer_status")
    if status is None:
        return "placed" if d["placed"] else "not placed"
    if status == "reserved" and d.get("reserved_s") is not None:
        return f"reserved until t = {_number(d['reserved_s'])}"
    return str(status)


def _pending_reason(rows: list[dict[str, Any]]) -> str:
    """Why a job without an outcome has not finished, from its last decision."""
    if not rows:
        return "pending: seen in a queue, never decided yet"
    last = rows[-1]
    placed = [d for d in rows if d["placed"]]
    if placed:
        return f"running: placed at t = {_number(placed[0]['snapshot_time'])} s, no outcome yet"
    why = f"; the prioritizer fell back: {last['fallback']}" if last["fallback"] else ""
    status = last.get("placer_status")
    if status == "reserved" and last.get("reserved_s") is not None:
        held = f"it holds an EASY reservation to start at t = {_number(last['reserved_s'])} s"
    elif status == "waiting":
        held = "no nodes free for it, or starting it would delay a higher-ranked job's reservation"
    else:  # a row from before the store recorded the placer's status
        held = "no nodes free for it, or held back by an EASY reservation"
    return (
        f"pending: at its last decision (t = {_number(last['snapshot_time'])} s) it ranked "
        f"{last['rank']} and was not placed ({held}){why}"
    )
