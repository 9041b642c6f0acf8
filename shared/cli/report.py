"""``hylo report``: write the decisions database's report (one self-contained HTML file).

The database is ``--database`` (a SQLite file path or a SQLAlchemy URL; default ``HYLO_DATABASE_URL``,
the embedded ``hylo.db``); it is only read, never migrated or created: a SQLite file that does not
exist is an error, not a new empty file.
Why ``shared.report`` is imported inside the command: it pulls in matplotlib, which ``hylo --help``
should not wait for. Exit codes: 0 written (also when there is no data: the page says so), 2 error.
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from shared.cli.common import DatabaseOpt, console, existing_database, fail


def parse_time(value: str | None, option: str) -> float | None:
    """Cluster-clock seconds, or an ISO 8601 time (UTC unless it says otherwise) as epoch seconds."""
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise fail(
            f"{option} {value!r}: expected seconds on the cluster clock (e.g. 1763800000) "
            "or an ISO 8601 time (e.g. 2026-11-22T08:00:00Z)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def report_command(
    database: DatabaseOpt = None,
    cluster: Annotated[
        str | None,
        typer.Option("--cluster", help="cluster to report on (default: the only one in the store)"),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="from this time: cluster-clock seconds or ISO 8601 (inclusive)"),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option("--until", help="up to this time: cluster-clock seconds or ISO 8601 (exclusive)"),
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="HTML file to write")] = Path("report.html"),
    spec: Annotated[
        str | None,
        typer.Option(
            "--spec", help="cluster preset or spec file for the GPU capacity (default: the spec in the store)"
        ),
    ] = None,
) -> None:
    """Write an HTML report of the decisions database: job outcomes per policy and model version,
    GPU utilization, decision latency, fallbacks and model promotions, with plots embedded."""
    from shared.report import NotMigrated, ReportData, ReportError, generate_report, render_report
    from shared.schemas.base import CLUSTER_PATTERN
    from shared.store import create_engine
    from shared.store.settings import safe_url

    if cluster is not None and not re.match(CLUSTER_PATTERN, cluster):
        raise fail(
            f"--cluster {cluster!r}: 1-63 letters, digits, '_' or '-', starting with a letter or digit"
        )
    start, end = parse_time(since, "--since"), parse_time(until, "--until")
    if start is not None and end is not None and end <= start:
        raise fail(f"--until {until!r} must be after --since {since!r}")
    capacity, source = None, None
    if spec is not None:
        from shared.domain.cluster import SpecError, load_cluster_spec

        try:
            capacity, source = load_cluster_spec(spec).total_gpus, f"--spec {spec}"
        except (SpecError, OSError) as err:
            raise fail(f"--spec {spec!r}: {err}") from None
    url = existing_database(database)

    async def main() -> tuple[str | None, int, str]:
        engine = create_engine(url)
        try:
            data, page = await generate_report(
                engine,
                cluster=cluster,
                since=start,
                until=end,
                capacity_gpus=capacity,
                capacity_source=source,
            )
        except NotMigrated as err:  # an empty database: a page that says there is no data
            data = ReportData(
                cluster=None, since=start, until=end, generated_at=datetime.now(UTC), note=str(err)
            )
            return None, 0, render_report(data)
        except ReportError as err:
            raise fail(str(err)) from None
        except Exception as err:  # unreachable server, bad credentials, unknown driver
            raise fail(f"cannot read the database {safe_url(url)}: {type(err).__name__}: {err}") from None
        finally:
            await engine.dispose()
        return data.cluster, len(data.snapshots), page

    name, snapshots, page = asyncio.run(main())
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(page, encoding="utf-8")
    except OSError as err:
        raise fail(f"--out {out}: cannot write: {err}") from None
    if name is None:
        console.print(f"the store has no data yet; wrote a page that says so to {escape(str(out))}")
        return
    console.print(
        f"report of cluster {escape(name)} ({snapshots} snapshots decided) written to {escape(str(out))} "
        f"({len(page.encode()) / 1024:.0f} KiB)"
    )
