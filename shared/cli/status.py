"""``hylo status``: is the pipeline up, which model decides, how long is the queue.

Why from outside: an admin asks this of a deployment without a shell in each container. Each
service answers ``/readyz`` (ready, or the problems that keep it from working: the bus, the
database, its consumers); the prioritizer's ``/v1/model`` names the model it uses now; the database
says which version the registry holds current and how many jobs the newest decided snapshot queued.
Services are found at ``--url NAME=URL`` (repeatable), else at ``--host`` on their default ports
(``DEFAULT_PORTS``, the ``default_port`` of each service's DEFINITION, docs/services.md).

Exit codes: 0 every service probed is ready, 1 one is not (or cannot be reached), 2 error.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table
from sqlalchemy import case, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from shared.cli.common import DatabaseOpt, console, fail

#: each service's own port when ``HYLO_HTTP_PORT`` does not set one (their DEFINITIONs; the query API's)
DEFAULT_PORTS = {"featurizer": 8101, "prioritizer": 8102, "placer": 8103, "trainer": 8106, "query": 8100}
#: probed when no ``--url`` is given: the deciding pipeline
DEFAULT_SERVICES = ("featurizer", "prioritizer", "placer")


@dataclass
class Probe:
    """One service's answer: ``ready`` None when it could not be reached (``problems`` says why)."""

    name: str
    url: str
    ready: bool | None
    problems: list[str]
    model: str | None = None


def _urls(urls: list[str] | None, host: str) -> dict[str, str]:
    if not urls:
        return {name: f"http://{host}:{DEFAULT_PORTS[name]}" for name in DEFAULT_SERVICES}
    out: dict[str, str] = {}
    for item in urls:
        name, sep, url = item.partition("=")
        if not sep or not name.strip() or not url.startswith(("http://", "https://")):
            raise fail(f"--url {item!r}: expected NAME=http://HOST:PORT (e.g. placer=http://10.0.0.5:8103)")
        out[name.strip()] = url.rstrip("/")
    return out


def probe(name: str, url: str, timeout: float, token: str | None) -> Probe:
    """``GET url/readyz`` (and, for a prioritizer, ``/v1/model``)."""
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with httpx.Client(timeout=timeout, headers=headers) as client:
            answer = client.get(f"{url}/readyz")
            body = (
                answer.json() if answer.headers.get("content-type", "").startswith("application/json") else {}
            )
            found = Probe(
                name, url, bool(body.get("ready", answer.status_code == 200)), list(body.get("problems", []))
            )
            if name == "prioritizer":
                model = client.get(f"{url}/v1/model")
                if model.status_code == 200:
                    found.model = model.json().get("version") or "none (the base policy decides)"
            return found
    except httpx.HTTPError as err:
        return Probe(name, url, None, [f"unreachable: {type(err).__name__}: {err}"])
    except ValueError as err:  # not JSON: not a Hylo service
        return Probe(name, url, False, [f"not a Hylo /readyz answer: {err}"])


async def store_status(conn: AsyncConnection, cluster: str | None) -> dict[str, Any]:
    """The registry's current model and the newest decided snapshot's queue, per the store."""
    from shared.cli.store_read import choose_cluster
    from shared.query.queries import DECISIONS, list_models

    name = await choose_cluster(conn, cluster)
    if name is None:
        return {"cluster": None}
    current = await list_models(conn, name, "current", 1)
    newest = select(func.max(DECISIONS.c.sequence)).where(DECISIONS.c.cluster == name).scalar_subquery()
    placed = case((DECISIONS.c.placed.is_(True), 1), else_=0)
    stmt = select(func.count(), func.max(DECISIONS.c.snapshot_time), func.sum(placed)).where(
        DECISIONS.c.cluster == name, DECISIONS.c.sequence == newest
    )
    queued, at, placed_n = (await conn.execute(stmt)).one()  # an aggregate: always one row
    return {
        "cluster": name,
        "current_model": current[0].version if current else None,
        "last_snapshot_time": at,
        "queue_depth": int(queued or 0),
        "placed_in_last_cycle": int(placed_n or 0),
    }


def status_command(
    url: Annotated[
        list[str] | None,
        typer.Option("--url", help="a service as NAME=URL (repeatable; default: the pipeline on --host)"),
    ] = None,
    host: Annotated[
        str, typer.Option(help="where the services listen, on their default ports")
    ] = "127.0.0.1",
    database: DatabaseOpt = None,
    cluster: Annotated[
        str | None, typer.Option("--cluster", help="cluster (default: the store's only one)")
    ] = None,
    timeout: Annotated[float, typer.Option(help="seconds to wait for each service", min=0.01)] = 2.0,
    token: Annotated[
        str | None, typer.Option("--token", envvar="HYLO_API_TOKEN", help="API token for /v1/model")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the status as JSON")] = False,
) -> None:
    """Services' readiness, the model deciding now and the queue depth."""
    from shared.cli.store_read import read_store

    probes = [probe(name, where, timeout, token) for name, where in _urls(url, host).items()]
    store: dict[str, Any] | None = None
    if database is not None or _default_store_exists():
        store = read_store(database, lambda conn: store_status(conn, cluster))
    if as_json:
        print(json.dumps({"services": [asdict(p) for p in probes], "store": store}, indent=2, default=str))
    else:
        _print_status(probes, store)
    raise typer.Exit(0 if all(p.ready for p in probes) else 1)


def _default_store_exists() -> bool:
    """HYLO_DATABASE_URL names a store that is there (a server, or a SQLite file that exists)."""
    from shared.cli.common import database_option
    from shared.store.urls import sqlite_file

    path = sqlite_file(database_option(None))
    return path is None or path.is_file()


def _print_status(probes: list[Probe], store: dict[str, Any] | None) -> None:
    table = Table(title="services")
    for column in ("service", "url", "ready", "model", "problems"):
        table.add_column(column, overflow="fold")
    for p in probes:
        ready = "[green]yes[/]" if p.ready else "[red]no[/]" if p.ready is False else "[red]unreachable[/]"
        table.add_row(p.name, escape(p.url), ready, escape(p.model or ""), escape("; ".join(p.problems)))
    console.print(table)
    if store is None:
        console.print("store: none found (pass --database PATH or set HYLO_DATABASE_URL)")
    elif store["cluster"] is None:
        console.print("store: no cluster has been recorded yet")
    else:
        console.print(
            f"store, cluster {escape(store['cluster'])}: current model "
            f"{escape(store['current_model'] or 'none (the base policy decides)')}; newest decided snapshot "
            f"queued {store['queue_depth']:,} jobs ({store['placed_in_last_cycle']:,} placed)",
            highlight=False,
            soft_wrap=True,
        )
