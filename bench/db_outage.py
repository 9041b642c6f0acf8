"""A PostgreSQL outage in the middle of a run: how many rows are lost, how soon the rest is stored.

    .venv/bin/python bench/db_outage.py                      # 60 s outage: the retry window, then the old one
    .venv/bin/python bench/db_outage.py --outage-s 10 --scenarios window
    .venv/bin/python bench/db_outage.py --jobs 2000 --outage-at 15

What runs, per scenario: a throwaway PostgreSQL (``initdb``/``pg_ctl`` on a free port, in a
temporary directory; as the ``postgres`` user when run as root), a private nats-server, and the
featurizer, prioritizer and placer as processes, exactly as ``hylo up`` starts them; the simulated
cluster replays the embedded workload through them in lockstep. ``--outage-at`` seconds into the
replay, PostgreSQL is stopped (``pg_ctl stop -m fast``: sessions cut, new ones refused) for
``--outage-s`` seconds, then started again on the same port.

Scenarios: ``window``, the recorders as they ship (retried with back-off for ``HYLO_RETRY_WINDOW_S``,
15 minutes); ``old``, the recorders' behaviour before it (5 tries 0.5 s apart, then a dead letter:
``HYLO_RETRY_WINDOW_S=2 HYLO_RETRY_BACKOFF_S=0.5 HYLO_RETRY_BACKOFF_MAX_S=0.5``), after which the
dead letters are re-applied with ``hylo deadletters replay``'s code.

Measured, against what was published (``shared.cli.store_check``: every decision on the placements
stream, its jobs, and the outcomes the simulated cluster sent), never the services' own counters:
rows lost at the end (decisions rows, outcomes, jobs rows), the recorders' dead letters, the seconds
from PostgreSQL answering again until every message published before that moment was stored (the
recorders' durable consumers' ack floors reach the streams' last sequences as of the recovery: each
such message stored, or dead-lettered in the ``old`` scenario), and
what the placer's ``/readyz`` said during the outage. Prints a table and writes
bench/results/db_outage.json. Target (issue 20): 0 rows lost, all stored within 60 s of recovery.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.support.postgres import PostgresUnavailable, ThrowawayPostgres  # noqa: E402
from services.adapter_sim.replay import load_workload, replay  # noqa: E402
from services.adapter_sim.settings import AdapterSimSettings  # noqa: E402
from services.adapter_sim.stack import LocalStack  # noqa: E402
from services.placer.deadletters import replay_dead_letters  # noqa: E402
from shared.bus import BusSettings, connect, stream_name  # noqa: E402
from shared.cli.store_check import expected_rows, placements_mark, store_check  # noqa: E402
from shared.schemas import Limits, Subjects  # noqa: E402
from shared.schemas.subjects import Kind  # noqa: E402
from shared.store import create_engine, upgrade  # noqa: E402

CLUSTER = "embedded"
RECORDERS: dict[str, Kind] = {
    "recorder-jobs": "features",
    "recorder-decisions": "placements",
    "recorder-outcomes": "outcomes",
}
SCENARIOS: dict[str, dict[str, str]] = {
    "window": {},  # the shipped settings
    "old": {"HYLO_RETRY_WINDOW_S": "2", "HYLO_RETRY_BACKOFF_S": "0.5", "HYLO_RETRY_BACKOFF_MAX_S": "0.5"},
}


def _postgres() -> ThrowawayPostgres:
    """A server of its own (its directory apart from the stack's: the ``postgres`` user must reach it)."""
    try:
        return ThrowawayPostgres(prefix="db-outage-pg-")
    except PostgresUnavailable as err:
        raise SystemExit(f"cannot start a throwaway PostgreSQL: {err}") from None


async def _migrate(url: str) -> None:
    engine = create_engine(url)
    await upgrade(engine)
    await engine.dispose()


async def _floors_reached(bus: BusSettings, targets: dict[str, int]) -> bool:
    """True once every recorder durable has acked everything up to its target stream sequence."""
    nc = await connect(bus)
    try:
        js = nc.jetstream()
        subjects = Subjects(bus.subject_root)
        for durable, seq in targets.items():
            info = await js.consumer_info(stream_name(subjects, RECORDERS[durable]), durable)
            if int(info.ack_floor.stream_seq or 0) < seq:
                return False
        return True
    finally:
        await nc.close()


async def _last_seqs(bus: BusSettings) -> dict[str, int]:
    nc = await connect(bus)
    try:
        js = nc.jetstream()
        subjects = Subjects(bus.subject_root)
        out = {}
        for durable, kind in RECORDERS.items():
            info = await js.stream_info(stream_name(subjects, kind))
            out[durable] = int(info.state.last_seq or 0)
        return out
    finally:
        await nc.close()


def _readyz(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
            return f"{answer.status} ready"
    except urllib.error.HTTPError as err:
        body = json.loads(err.read() or b"{}")
        return f"{err.code} {'; '.join(body.get('problems', []))}"
    except Exception as err:
        return f"no answer: {err}"


def _outage(
    pg: ThrowawayPostgres,
    bus: BusSettings,
    placer_port: int,
    args: argparse.Namespace,
    started: threading.Event,
) -> dict[str, Any]:
    """Wait ``outage_at`` s into the replay, stop PostgreSQL for ``outage_s``, start it, and time how
    long the recorders take to store everything published before the recovery."""
    out: dict[str, Any] = {}
    started.wait()
    time.sleep(args.outage_at)
    pg.stop()
    t_down = time.monotonic()
    time.sleep(min(args.outage_s / 2, 10.0))
    out["readyz_during"] = _readyz(placer_port)
    time.sleep(max(0.0, args.outage_s - (time.monotonic() - t_down)))
    pg.start()
    t_up = time.monotonic()
    out["outage_s"] = round(t_up - t_down, 1)
    targets = asyncio.run(_last_seqs(bus))
    while not asyncio.run(_floors_reached(bus, targets)):
        if time.monotonic() - t_up > args.outage_s + 900:
            out["stored_after_recovery_s"] = None
            return out
        time.sleep(0.25)
    out["stored_after_recovery_s"] = round(time.monotonic() - t_up, 2)
    out["readyz_after"] = _readyz(placer_port)
    return out


def _scenario(name: str, args: argparse.Namespace, console: Console) -> dict[str, Any]:
    settings = AdapterSimSettings(sim_cluster=CLUSTER, sim_jobs=args.jobs, sim_load=args.load)
    work = load_workload(settings)  # a load out of reach fails here, before anything starts
    tmp = Path(tempfile.mkdtemp(prefix=f"db-outage-{name}-"))
    pg = _postgres()
    stack = LocalStack(tmp / "stack")
    try:
        pg.start()
        asyncio.run(_migrate(pg.url))
        nats_url = stack.start_nats()
        bus = BusSettings(nats_url=nats_url, subject_root="hylo")
        env = {
            "HYLO_NATS_URL": nats_url,
            "HYLO_DATABASE_URL": pg.url,
            "HYLO_CLUSTERS": json.dumps({CLUSTER: "embedded"}),
            "HYLO_LOG_LEVEL": "WARNING",
            **SCENARIOS[name],
        }
        stack.start_services(env)
        stack.wait_ready(180)
        placer_port = next(c.port for c in stack.services() if c.name == "placer")
        mark = asyncio.run(placements_mark(bus))
        started = threading.Event()
        result: dict[str, Any] = {}
        outage = threading.Thread(target=lambda: result.update(_outage(pg, bus, placer_port, args, started)))
        outage.start()

        def progress(done: int, total: int, now: float) -> None:
            started.set()

        t0 = time.monotonic()
        run = asyncio.run(replay(bus, settings, work, progress=progress))
        replay_s = time.monotonic() - t0
        outage.join()
        expected = asyncio.run(expected_rows(bus, CLUSTER, mark, "", run.stats.outcomes))
        check = asyncio.run(store_check(pg.url, CLUSTER, "", expected))
        deadline = time.monotonic() + 60
        while check.lost_rows and time.monotonic() < deadline:  # the last rows of the replay
            time.sleep(1)
            check = asyncio.run(store_check(pg.url, CLUSTER, "", expected))
        row: dict[str, Any] = {
            "scenario": name,
            "retry_window_s": float(SCENARIOS[name].get("HYLO_RETRY_WINDOW_S", BusSettings().retry_window_s)),
            "jobs": len(work.bound.jobs),
            "replay_s": round(replay_s, 1),
            "outage_ended_before_the_replay": result.get("outage_s", 0) + args.outage_at < replay_s,
            **result,
            **check.to_json(),
        }
        row["dead_letters"], row["lost_after_replay"] = _replayed(bus, pg.url, expected)
        console.print(f"{name}: {row}", soft_wrap=True)
        return row
    finally:
        stack.stop()
        pg.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


def _replayed(bus: BusSettings, url: str, expected: Any) -> tuple[int, int]:
    """(the recorder's dead letters, rows still lost after ``hylo deadletters replay``'s code ran)."""

    async def main() -> tuple[int, int]:
        nc = await connect(bus)
        engine = create_engine(url)
        try:
            limits = Limits(max_message_bytes=min(bus.max_message_bytes, nc.max_payload))
            summary = await replay_dead_letters(
                nc.jetstream(), Subjects(bus.subject_root), engine, limits, CLUSTER
            )
        finally:
            await nc.close()
            await engine.dispose()
        check = await store_check(url, CLUSTER, "", expected)
        return len(summary.letters), check.lost_rows

    return asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--outage-s", type=float, default=60.0, help="seconds PostgreSQL is down")
    parser.add_argument("--outage-at", type=float, default=10.0, help="seconds into the replay it goes down")
    parser.add_argument("--jobs", type=int, default=1600, help="jobs of the embedded workload replayed")
    parser.add_argument("--load", type=float, default=0.9, help="offered load of the replay (in-span)")
    parser.add_argument(
        "--scenarios", default="window,old", help=f"comma-separated, from {', '.join(SCENARIOS)}"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "db_outage.json")
    args = parser.parse_args()
    console = Console(width=180)
    rows = [_scenario(name.strip(), args, console) for name in args.scenarios.split(",") if name.strip()]
    table = Table(title=f"PostgreSQL down {args.outage_s:g} s, {args.outage_at:g} s into the replay")
    for column in (
        "scenario",
        "retry window s",
        "replay s",
        "decision rows lost",
        "outcomes lost",
        "jobs rows lost",
        "dead letters",
        "backlog done after recovery s",
        "lost after deadletters replay",
    ):
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(
            r["scenario"],
            f"{r['retry_window_s']:g}",
            f"{r['replay_s']:.0f}",
            f"{r['decision_rows_missing']:,} of {r['decision_rows_expected']:,}",
            f"{r['outcomes_missing']:,} of {r['outcomes_expected']:,}",
            f"{r['jobs_missing']:,} of {r['jobs_expected']:,}",
            f"{r['dead_letters']:,}",
            "n/a" if r.get("stored_after_recovery_s") is None else f"{r['stored_after_recovery_s']:.1f}",
            f"{r['lost_after_replay']:,}",
        )
    console.print(table)
    for r in rows:
        console.print(f"{r['scenario']}: /readyz during the outage: {r.get('readyz_during')}", soft_wrap=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "outage_s": args.outage_s,
        "outage_at_s": args.outage_at,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "scenarios": rows,
    }
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
