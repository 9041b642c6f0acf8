"""``GET /v1/report`` over the whole range of a large PostgreSQL store: latency under concurrent clients.

    .venv/bin/python bench/report_scale.py                          # 1,000,000 decision rows, 4 clients
    .venv/bin/python bench/report_scale.py --keep /tmp/report-store  # keep the store, reuse it next time
    .venv/bin/python bench/report_scale.py --rows 20000 --rounds 2   # a smoke run (seconds)
    .venv/bin/python bench/report_scale.py --server-root /tmp/old    # the query API of another checkout

What runs: a throwaway PostgreSQL (``bench/support/postgres.py``; never the machine's shared server),
migrated with the store's own migrations and filled by ``bench/support/big_store.py`` (``--rows``
decision rows of a steady queue of ``--queue`` jobs, their jobs, outcomes, model versions and shadow
ranks, loaded with COPY); then the query API as it ships (``python -m shared.query``: uvicorn in a
process of its own, default settings but a report time limit of ``--timeout-s`` so that slow reports
are measured rather than cut at 30 s) on that store. Phases, one after the other:

1. ``cold``: one request alone, the first the process serves (imports, first figures);
2. ``1 client``: ``--rounds`` requests one after the other;
3. ``N clients, same``: ``--clients`` clients at once, each sending ``--rounds`` requests one after the
   other, all for the report of the whole range (no ``since``/``until``, the store's only cluster):
   the target's case;
4. ``N clients, distinct``: the same, but each request asks for a range no other request asks for
   (``until`` a different number of seconds after the store's last time: still the whole range), so
   no request can share another's read or figures: the worst case of the same load.

Measured: each request's latency (sent to the last byte read, failed requests included), its status
and size; the server process's resident memory when idle and its peak (``VmHWM`` of
``/proc/PID/status``) after each phase. Prints a table and writes ``--out`` (JSON). Target (issue
20): p99 <= 2 s with 4 concurrent clients on 1M decision rows.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import http.client
import json
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from sqlalchemy import text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.support.big_store import Shape, plan_store, write_store  # noqa: E402
from bench.support.postgres import PostgresUnavailable, ThrowawayPostgres, free_port  # noqa: E402
from shared.store import create_engine, upgrade  # noqa: E402

#: the kept store's description, beside its data directory
MARKER = "store.json"


@dataclass(frozen=True)
class Request:
    client: int
    seconds: float
    status: int
    bytes: int


def _get(port: int, path: str, headers: dict[str, str], timeout_s: float) -> Request:
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("GET", path, headers=headers)
        answer = conn.getresponse()
        body = answer.read()
        return Request(0, time.perf_counter() - t0, answer.status, len(body))
    except (OSError, http.client.HTTPException):
        return Request(0, time.perf_counter() - t0, 0, 0)
    finally:
        conn.close()


def fire(
    port: int,
    clients: int,
    rounds: int,
    headers: dict[str, str],
    timeout_s: float,
    done: Callable[[], None] = lambda: None,
    path_of: Callable[[int, int], str] = lambda client, round_: "/v1/report",
) -> list[Request]:
    """``clients`` threads, released together, each sending ``rounds`` report requests in turn
    (``path_of(client, round)``: the path each asks for)."""
    out: list[Request] = []
    lock = threading.Lock()
    start = threading.Barrier(clients)

    def client(k: int) -> None:
        start.wait()
        for i in range(rounds):
            r = _get(port, path_of(k, i), headers, timeout_s)
            with lock:
                out.append(Request(k, r.seconds, r.status, r.bytes))
            done()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def memory_mib(pid: int) -> dict[str, float]:
    """Resident memory now (``VmRSS``) and at its peak (``VmHWM``) of a process, in MiB."""
    found: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) / 1024
    return {"rss_mib": found.get("VmRSS", float("nan")), "peak_mib": found.get("VmHWM", float("nan"))}


def summary(requests: list[Request]) -> dict[str, Any]:
    """Latency percentiles over every request (a failed one counts with the time it took)."""
    lat = np.array([r.seconds for r in requests], dtype=np.float64)
    stats = {"p50_s": None, "p99_s": None, "max_s": None, "mean_s": None}
    if len(lat):
        stats = {
            "p50_s": float(np.percentile(lat, 50)),
            "p99_s": float(np.percentile(lat, 99)),
            "max_s": float(np.max(lat)),
            "mean_s": float(np.mean(lat)),
        }
    return {
        "requests": len(requests),
        "errors": sum(r.status != 200 for r in requests),
        "statuses": sorted({r.status for r in requests}),
        "page_bytes": max((r.bytes for r in requests), default=0),
        **stats,
    }


class QueryApi:
    """``python -m shared.query`` on the store at ``url``, on a free port."""

    def __init__(self, url: str, extra_env: dict[str, str], log: Path, root: Path = ROOT) -> None:
        self.port = free_port()
        env = {
            **os.environ,
            "HYLO_DATABASE_URL": url,
            "HYLO_HTTP_HOST": "127.0.0.1",
            "HYLO_HTTP_PORT": str(self.port),
            "HYLO_LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(root),
            **extra_env,
        }
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "shared.query"], cwd=root, env=env, stdout=self._log, stderr=self._log
        )

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the query API exited with status {self.proc.returncode}")
            if _get(self.port, "/healthz", {}, 2.0).status == 200:
                return
            time.sleep(0.1)
        raise SystemExit(f"the query API did not answer /healthz within {timeout_s:g} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def _postgres(keep: Path | None) -> ThrowawayPostgres:
    try:
        return ThrowawayPostgres(keep, prefix="report-scale-pg-")
    except PostgresUnavailable as err:
        raise SystemExit(f"cannot start a throwaway PostgreSQL: {err}") from None


def _fill(pg: ThrowawayPostgres, shape: Shape, revision: str, console: Console) -> dict[str, Any]:
    """Migrate and fill the store, or reuse a kept one made with the same shape (migrated to the
    newest schema first, as a deployment's store is)."""

    async def migrate() -> None:
        engine = create_engine(pg.url)
        await upgrade(engine, revision)
        await engine.dispose()

    t0 = time.perf_counter()
    asyncio.run(migrate())
    upgraded_s = round(time.perf_counter() - t0, 1)
    marker = pg.root / MARKER
    if pg.reused and marker.exists():
        kept = json.loads(marker.read_text())
        if kept.get("shape") == asdict(shape):
            # a kept store of an older revision was moved forward now: how long that took is worth keeping
            console.print(f"reusing the store kept in {pg.root} (migrated to {revision} in {upgraded_s} s)")
            return {**kept["store"], "upgrade_s": upgraded_s}
        raise SystemExit(f"{pg.root} holds a store of another shape ({kept.get('shape')}): delete it")
    t0 = time.perf_counter()
    plan = plan_store(shape)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("decision rows", total=plan.rows)

        def tell(what: str, rows: int) -> None:
            if what == "decisions":
                progress.advance(task, rows)

        store = asyncio.run(write_store(pg.dsn, plan, tell))
    store["load_s"] = round(time.perf_counter() - t0, 1)
    marker.write_text(json.dumps({"shape": asdict(shape), "store": store}, indent=2) + "\n")
    return store


def _measure(api: QueryApi, args: argparse.Namespace, end_s: float, console: Console) -> dict[str, Any]:
    headers = dict(h.split(":", 1) for h in args.header)
    headers = {k.strip(): v.strip() for k, v in headers.items()}
    pid = api.proc.pid
    out: dict[str, Any] = {"idle": memory_mib(pid)}

    def distinct(client: int, round_: int) -> str:
        return f"/v1/report?until={end_s + 1 + client + args.clients * round_:.3f}"

    phases: dict[str, tuple[int, int, Callable[[int, int], str]]] = {
        "cold": (1, 1, lambda c, i: "/v1/report"),
        "1 client": (1, args.rounds, lambda c, i: "/v1/report"),
        f"{args.clients} clients, same": (args.clients, args.rounds, lambda c, i: "/v1/report"),
    }
    if not args.no_distinct:
        phases[f"{args.clients} clients, distinct"] = (args.clients, args.rounds, distinct)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        for name, (clients, rounds, path_of) in phases.items():
            task = progress.add_task(f"requests, {name}", total=clients * rounds)
            t0 = time.perf_counter()
            step = functools.partial(progress.advance, task)
            requests = fire(api.port, clients, rounds, headers, args.timeout_s, step, path_of)
            out[name] = {
                "clients": clients,
                "rounds": rounds,
                "wall_s": round(time.perf_counter() - t0, 2),
                **summary(requests),
                **memory_mib(pid),
                "latencies_s": [round(r.seconds, 4) for r in requests],
            }
    return out


async def _last_time(url: str) -> float:
    """The store's last cluster-clock time (a decision's or a job's end)."""
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            times = await conn.execute(
                text("SELECT (SELECT MAX(snapshot_time) FROM decisions), (SELECT MAX(end_s) FROM outcomes)")
            )
            return max((float(t) for t in times.one() if t is not None), default=0.0)
    finally:
        await engine.dispose()


def _table(result: dict[str, Any], title: str) -> Table:
    table = Table(title=title)
    for column in (
        "phase",
        "requests",
        "errors",
        "p50 s",
        "p99 s",
        "max s",
        "server RSS MiB",
        "peak RSS MiB",
    ):
        table.add_column(column, justify="right")

    def sec(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.2f}"

    for name, r in result.items():
        if name == "idle":
            table.add_row("idle", "", "", "", "", "", f"{r['rss_mib']:.0f}", f"{r['peak_mib']:.0f}")
            continue
        table.add_row(
            name,
            str(r["requests"]),
            str(r["errors"]),
            sec(r["p50_s"]),
            sec(r["p99_s"]),
            sec(r["max_s"]),
            f"{r['rss_mib']:.0f}",
            f"{r['peak_mib']:.0f}",
        )
    return table


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="decision rows in the store (at least)")
    parser.add_argument("--queue", type=int, default=50, help="mean pending jobs per snapshot")
    parser.add_argument("--shadow-share", type=float, default=0.1, help="share of snapshots a shadow scored")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients")
    parser.add_argument("--rounds", type=int, default=5, help="requests per client, one after the other")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="a request's time limit")
    parser.add_argument("--keep", type=Path, default=None, help="keep the store in this folder (reused)")
    parser.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="a setting of the query API process"
    )
    parser.add_argument("--header", action="append", default=[], metavar="NAME: VALUE", help="request header")
    parser.add_argument("--no-distinct", action="store_true", help="leave out the phase of distinct ranges")
    parser.add_argument(
        "--revision", default="head", help="migrate the store up to this revision (older: before/after)"
    )
    parser.add_argument(
        "--server-root", type=Path, default=ROOT, help="run the query API of this checkout (before/after)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "report_scale.json")
    args = parser.parse_args(argv)
    console = Console(width=160)
    shape = Shape(rows=args.rows, queue=args.queue, shadow_share=args.shadow_share, seed=args.seed)
    pg = _postgres(args.keep)
    extra_env = {
        "HYLO_REPORT_TIMEOUT_S": str(args.timeout_s),
        "HYLO_REPORT_MAX_CONCURRENT": str(max(4, args.clients)),
        **dict(e.split("=", 1) for e in args.env),
    }
    try:
        pg.start()
        store = _fill(pg, shape, args.revision, console)
        console.print(f"store: {store}", soft_wrap=True)
        api = QueryApi(pg.url, extra_env, pg.root / "query-api.log", args.server_root.resolve())
        try:
            api.wait_ready()
            result = _measure(api, args, asyncio.run(_last_time(pg.url)), console)
        finally:
            api.stop()
    finally:
        if args.keep is None:
            pg.cleanup()
        elif pg.running:
            pg.stop()
    title = (
        f"GET /v1/report, whole range: {store['decision_rows']:,} decision rows, "
        f"{store['outcomes']:,} outcomes, {args.clients} clients x {args.rounds} rounds"
    )
    console.print(_table(result, title))
    doc = {
        "target": "p99 <= 2 s with 4 concurrent clients at 1M decision rows (issue 20)",
        "server_root": str(args.server_root.resolve()),
        "server_env": extra_env,
        "shape": asdict(shape),
        "store": store,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()},
        "phases": result,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    console.print(f"wrote {args.out}")
    return doc


if __name__ == "__main__":
    main()
