"""Losing one of three NATS nodes mid-run: messages lost and how long scheduling pauses (issue 22).

    .venv/bin/python bench/nats_failover.py                 # 300 jobs, the decisions' leader killed
    .venv/bin/python bench/nats_failover.py --jobs 200 --kill-after 60 --repeats 6
    .venv/bin/python bench/nats_failover.py --jobs 200 --kill-after 60 --target idle --repeats 5
    .venv/bin/python bench/nats_failover.py --jobs 200 --kill-after 60 --stop ldm --repeats 3

What runs: a three-node NATS cluster on loopback (``bench/support/nats_cluster.py``), streams at
replication 3, the featurizer, prioritizer and placer (one process each, as deployed), a SQLite
store, and the simulated cluster replaying ``--jobs`` jobs of the embedded workload through them
as fast as decisions come back. After ``--kill-after`` job ends a node is stopped: by default the
one that leads the placements stream, SIGKILLed (no lame-duck mode); ``--target`` picks another
(``quiet``: the one leading fewest of the decision path's raft groups, ``idle``: one whose path
leaderships are moved to another node first, ``random``), ``--stop`` another way (``term``:
SIGTERM, ``ldm``: lame-duck mode, which hands the leaderships over before the node stops).

Reported per repeat: the scheduling pause (from the last decision the simulated cluster received
before the stop to the end of the last stall, a gap over ``STALL_S`` between two decisions, after
it), the job-end pause of the earlier results (the longest gap between two job ends), and where the
pause went: the raft groups the node led, when each got its new leader (the survivors' logs), the
last of those on the decision path (server side) and what the pause lasted beyond it (client side),
the hops of the stalled cycles (publish acks, messages stored, decision received) and the services'
warnings. Loss checks: every decision on the stream stored once, one outcome per job, none
published twice. Target (issue 22): 0 lost, pause <= 5 s. Prints a table and writes JSON
(``--keep`` also keeps the nodes' and services' logs).

The simulated cluster's own publisher and decision bridge are wrapped in this process to time them
(``_Timing``); the services, other processes, run unmodified.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import random
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import nats.errors
import numpy as np
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import ServiceUnavailableError
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.support.nats_cluster import NatsCluster, nats_cluster  # noqa: E402
from services.adapter_sim.bridge import PipelineBridge  # noqa: E402
from services.adapter_sim.replay import load_workload, replay  # noqa: E402
from services.adapter_sim.settings import AdapterSimSettings  # noqa: E402
from services.adapter_sim.stack import LocalStack  # noqa: E402
from shared.bus import BusSettings, connect, create_streams  # noqa: E402
from shared.bus.publisher import HEADER_CORRELATION, Publisher  # noqa: E402
from shared.bus.streams import stream_name  # noqa: E402
from shared.schemas import Limits, PlacementDecision, Subjects, decode  # noqa: E402
from shared.schemas.subjects import Kind  # noqa: E402
from shared.store.migrate import upgrade_url  # noqa: E402

console = Console()
T = TypeVar("T")
ROOT_SUBJECT = "failover"
#: the streams a scheduling cycle goes through, in order: the simulated cluster publishes its outcomes
#: and its snapshot, the featurizer, prioritizer and placer each publish the next kind
CHAIN: tuple[Kind, ...] = ("outcomes", "snapshots", "features", "priorities", "placements")
#: the durable consumers on the decision path (the bridge's own, ``adapter-sim-*``, is added per run)
PATH_CONSUMERS = {"snapshots": "featurizer", "features": "prioritizer", "priorities": "placer"}
_NATS_LOG = re.compile(r"^\[\d+\] (\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d+) \[\w+\] (.*)$")
#: a gap between two decisions longer than this is a stall (cycles take 0.05-0.1 s on this bench)
STALL_S = 1.0
_SERVICE_LOG = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+) (\w+) (WARNING|ERROR) (.*)$")


class _Recorder(logging.Handler):
    """Keeps this process' warnings (the simulated cluster's client: publish retries, its consumer's
    errors, reconnects) with their wall-clock time, for the timeline."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.created, f"sim {record.getMessage()}"[:240]))


class _Timing:
    """When each of the simulated cluster's cycles started and got its decision, and each of its
    publishes (kind, start, end, acked): the client side of the pause, seen from the cluster."""

    def __init__(self) -> None:
        self.cycles: list[tuple[str, float, float, bool]] = []
        self.publishes: list[tuple[str, str, float, float, bool]] = []

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Wrap the bridge's round trip and the publisher of this process (the services, other
        processes, are untouched) for the duration of one run."""
        round_trip, publish = PipelineBridge.round_trip, Publisher.publish
        timing = self

        async def timed_round_trip(bridge: PipelineBridge, snapshot: Any, outcomes: Any) -> Any:
            t0 = time.time()
            decision = None
            try:
                decision = await round_trip(bridge, snapshot, outcomes)
                return decision
            finally:
                timing.cycles.append((snapshot.correlation_id, t0, time.time(), decision is not None))

        async def timed_publish(publisher: Publisher, message: Any, headers: Any = None) -> Any:
            t0, ok = time.time(), False
            try:
                result = await publish(publisher, message, headers)
                ok = True
                return result
            finally:
                kind = str(getattr(type(message), "kind", "?"))
                timing.publishes.append((kind, message.correlation_id or "", t0, time.time(), ok))

        setattr(PipelineBridge, "round_trip", timed_round_trip)  # noqa: B010
        setattr(Publisher, "publish", timed_publish)  # noqa: B010
        try:
            yield
        finally:
            setattr(PipelineBridge, "round_trip", round_trip)  # noqa: B010
            setattr(Publisher, "publish", publish)  # noqa: B010


async def _decisions(url: str) -> list[str]:
    nc = await connect(BusSettings(nats_url=url, subject_root=ROOT_SUBJECT))
    try:
        js = nc.jetstream()
        subjects = Subjects(ROOT_SUBJECT)
        info = await js.stream_info(stream_name(subjects, "placements"))
        sub = await js.pull_subscribe(subjects.all_clusters("placements"), durable=None)
        out: list[str] = []
        while len(out) < info.state.messages:
            for m in await sub.fetch(200, timeout=2):
                out.append(
                    decode(PlacementDecision, m.data, Limits(max_message_bytes=8 << 20)).correlation_id
                )
                await m.ack()
        return out
    finally:
        await nc.close()


async def _leaders(url: str) -> dict[str, str]:
    """Raft group -> the server leading it now: the decision path's streams and their consumers
    (``stream:<KIND>``, ``consumer:<durable>``) and the meta group is read from the servers' logs."""
    nc = await connect(BusSettings(nats_url=url, subject_root=ROOT_SUBJECT))
    try:
        js = nc.jetstream()
        subjects = Subjects(ROOT_SUBJECT)
        out: dict[str, str] = {}
        for kind in CHAIN:
            name = stream_name(subjects, kind)
            info = await js.stream_info(name)
            if info.cluster is not None and info.cluster.leader:
                out[f"stream:{kind}"] = info.cluster.leader
            for c in await js.consumers_info(name):
                if c.cluster is not None and c.cluster.leader and c.name:
                    out[f"consumer:{c.name}"] = c.cluster.leader
        return out
    finally:
        await nc.close()


def _on_path(group: str) -> bool:
    """Whether a cycle waits for this raft group: the chain's streams, the stages' consumers, the
    simulated cluster's decision consumer (recorders and per-replica consumers are off the path)."""
    if group.startswith("stream:"):
        return group.removeprefix("stream:") in CHAIN
    name = group.removeprefix("consumer:")
    return name.startswith("adapter-sim-") or any(name == f"{d}-failover" for d in PATH_CONSUMERS.values())


async def _stored_after(url: str, t_from: float) -> dict[str, list[tuple[float, str]]]:
    """Per stream of the chain, (stored at, correlation id) of every message stored from ``t_from``
    (epoch seconds) on: when each stream took its first publish after the kill."""
    nc = await connect(BusSettings(nats_url=url, subject_root=ROOT_SUBJECT))
    try:
        js = nc.jetstream()
        subjects = Subjects(ROOT_SUBJECT)
        start = datetime.fromtimestamp(t_from, tz=UTC)
        out: dict[str, list[tuple[float, str]]] = {}
        for kind in CHAIN:
            config = ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_TIME,
                opt_start_time=start,
                ack_policy=AckPolicy.NONE,
                mem_storage=True,
                num_replicas=1,
            )
            sub = await js.pull_subscribe(
                subjects.all_clusters(kind), durable=None, stream=stream_name(subjects, kind), config=config
            )
            rows: list[tuple[float, str]] = []
            with contextlib.suppress(nats.errors.TimeoutError, TimeoutError):
                for m in await sub.fetch(300, timeout=2):
                    stamp = m.metadata.timestamp
                    at = stamp.timestamp() if stamp is not None else float("nan")
                    rows.append((at, (m.headers or {}).get(HEADER_CORRELATION, "")))
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
            out[kind] = sorted(rows)
        return out
    finally:
        await nc.close()


def _nats_events(folder: Path, nodes: int, t_from: float) -> list[tuple[float, str, str]]:
    """(time, node, what) of every leader election the survivors logged from ``t_from`` on."""
    events = []
    for i in range(nodes):
        path = folder / f"n{i}.log"
        if not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            m = _NATS_LOG.match(line)
            if m is None or "leader" not in m.group(2):
                continue
            at = datetime.strptime(m.group(1), "%Y/%m/%d %H:%M:%S.%f").timestamp()
            if at >= t_from:
                events.append((at, f"n{i}", m.group(2)[:200]))
    return sorted(events)


def _group_of(event: str) -> str | None:
    """The raft group an election line names (``stream:<kind>``, ``consumer:<durable>``, ``meta``)."""
    if "metadata leader" in event:
        return "meta"
    m = re.search(r"new (stream|consumer) leader for '[^']*? > ([^' ]+)(?: > ([^' ]+))?'", event)
    if m is None:
        return None
    if m.group(1) == "consumer" and m.group(3):
        return f"consumer:{m.group(3)}"
    stream = m.group(2).lower().removeprefix(f"{ROOT_SUBJECT}_")
    return f"stream:{stream}"


def _service_events(folder: Path, t_from: float) -> list[tuple[float, str]]:
    """(time, "service: warning") of what the services logged from ``t_from`` on."""
    out = []
    for path in sorted(folder.glob("*.log")):
        for line in path.read_text(errors="replace").splitlines():
            m = _SERVICE_LOG.match(line)
            if m is None:
                continue
            at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if at >= t_from:
                out.append((at, f"{m.group(2)} {m.group(4)}"[:240]))
    return out


def _stream_of(group: str) -> Kind:
    """The stream of a decision-path raft group (``stream:<kind>``, ``consumer:<durable>``)."""
    kind, _, name = group.partition(":")
    for k in CHAIN:
        if kind == "stream" and name == k:
            return k
        if kind == "consumer" and (
            name == f"{PATH_CONSUMERS.get(k)}-failover"
            or (k == "placements" and name.startswith("adapter-sim-"))
        ):
            return k
    raise ValueError(f"{group} is not on the decision path")


async def _move_leaders_off(url: str, node: int, nodes: int) -> dict[str, str]:
    """Ask every decision-path group ``node`` leads to hand its leadership to another node (a raft
    leadership transfer, ``$JS.API.*.LEADER.STEPDOWN`` with a preferred peer), until it leads none;
    returns the leaders then. For ``--target idle``: the pause of losing a node that leads nothing
    the decision path needs is the clients' alone."""
    subjects = Subjects(ROOT_SUBJECT)
    other = f"n{(node + 1) % nodes}"
    body = json.dumps({"placement": {"preferred": other}}).encode()
    nc = await connect(BusSettings(nats_url=url, subject_root=ROOT_SUBJECT))
    try:
        for _ in range(5):
            leaders = await _leaders(url)
            mine = [g for g, n in leaders.items() if n == f"n{node}" and _on_path(g)]
            if not mine:
                return leaders
            for group in mine:
                kind, _, name = group.partition(":")
                stream = stream_name(subjects, _stream_of(group))
                subject = f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}"
                if kind == "consumer":
                    subject = f"$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.{name}"
                with contextlib.suppress(Exception):
                    await nc.request(subject, body, timeout=5)
            await asyncio.sleep(2.0)
        return await _leaders(url)
    finally:
        await nc.close()


def _retrying(make: Callable[[], Coroutine[Any, Any, T]], tries: int = 4) -> T:
    """``asyncio.run(make())``, again after a pause if the cluster did not answer: a JetStream API
    request right after the run can time out on this loaded machine (an ephemeral consumer's
    creation took over 5 s once, a fresh one refused its first fetch once), which must not throw
    the run's measurements away."""
    for k in range(tries):
        try:
            return asyncio.run(make())
        except (nats.errors.TimeoutError, TimeoutError, ServiceUnavailableError):
            if k == tries - 1:
                raise
            time.sleep(2.0)
    raise AssertionError("unreachable")


def _target(args: argparse.Namespace, leaders: dict[str, str], nodes: int) -> int:
    """The node to stop: the placements stream's leader, one leading as few of the decision path's
    raft groups as there are (``quiet``), or any (``random``)."""
    if args.target == "placements-leader":
        return int(leaders["stream:placements"].removeprefix("n"))
    if args.target == "random":
        return random.randrange(nodes)
    if args.target == "idle":
        return random.randrange(nodes)  # its leaderships are moved off first (``_move_leaders_off``)
    led = {i: sum(1 for g, n in leaders.items() if n == f"n{i}" and _on_path(g)) for i in range(nodes)}
    return min(led, key=lambda i: (led[i], random.random()))


def one_run(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    with nats_cluster(folder) as nats:
        bus = BusSettings(
            nats_url=nats.url, subject_root=ROOT_SUBJECT, stream_replicas=3, nats_reconnect_wait_s=0.5
        )
        asyncio.run(create_streams(bus))
        db = f"sqlite+aiosqlite:///{folder / 'store.db'}"
        upgrade_url(db)
        settings = AdapterSimSettings(
            sim_cluster="failover", sim_jobs=args.jobs, sim_decision_timeout_s=30.0, sim_give_up_after=3
        )
        env = {
            "HYLO_NATS_URL": nats.url,
            "HYLO_SUBJECT_ROOT": ROOT_SUBJECT,
            "HYLO_STREAM_REPLICAS": "3",
            "HYLO_NATS_RECONNECT_WAIT_S": "0.5",
            "HYLO_DATABASE_URL": db,
            "HYLO_CLUSTERS": json.dumps({"failover": "embedded"}),
            "HYLO_ACK_WAIT_S": "2",
            "HYLO_LOG_LEVEL": "WARNING",
        }
        for setting in args.env:
            key, _, value = setting.partition("=")
            env[key] = value
        stack = LocalStack(folder / "stack")
        stack.workdir.mkdir()
        ends: list[float] = []
        killed: list[tuple[int, float, float]] = []
        leaders: dict[str, str] = {}
        recorder = _Recorder()
        timing = _Timing()
        logging.getLogger().addHandler(recorder)
        try:
            stack.start_services(env)
            stack.wait_ready(timeout_s=300)
            work = load_workload(settings)

            def progress(done: int, _total: int, _now: float) -> None:
                ends.append(time.time())

            stop = threading.Event()

            def killer(cluster: NatsCluster) -> None:
                while len(ends) < args.kill_after and not stop.is_set():
                    time.sleep(0.005)
                if not stop.is_set():
                    leaders.update(asyncio.run(_leaders(cluster.url)))
                    node = _target(args, leaders, len(cluster.procs))
                    if args.target == "idle":
                        leaders.update(asyncio.run(_move_leaders_off(cluster.url, node, len(cluster.procs))))
                    at = time.time()
                    if args.stop == "ldm":  # lame-duck mode: leaderships are handed over first
                        cluster.procs[node].send_signal(signal.SIGUSR2)
                    elif args.stop == "term":  # a plain stop (docker stop's default signal)
                        cluster.procs[node].send_signal(signal.SIGTERM)
                    else:
                        cluster.kill(node)
                    killed.append((node, at, time.time()))

            thread = threading.Thread(target=killer, args=(nats,), daemon=True)
            thread.start()
            try:
                with timing.installed():
                    run = asyncio.run(replay(bus, settings, work, progress=progress))
            finally:
                stop.set()
                thread.join(30)
            survivors = ",".join(u for i, u in enumerate(nats.urls) if not killed or i != killed[0][0])
            decisions = _retrying(lambda: _decisions(survivors))
            t_kill = killed[0][1] if killed else 0.0
            stored = _retrying(lambda: _stored_after(survivors, t_kill - 2.0)) if killed else {}
        finally:
            logging.getLogger().removeHandler(recorder)
            stack.stop()
        elections = _nats_events(folder, len(nats.urls), t_kill) if killed else []
        services = _service_events(stack.workdir, t_kill) if killed else []
        if args.keep:
            keep = Path(args.keep) / folder.name
            shutil.copytree(folder, keep, ignore=shutil.ignore_patterns("js*", "nats", "*.db*"))
    if not killed:
        raise SystemExit(f"the node was never killed: only {len(ends)} cycles")
    node, t_kill, _ = killed[0]
    return _report(
        args, run, decisions, ends, node, t_kill, leaders, elections, stored, services, recorder, timing
    )


def _report(
    args: argparse.Namespace,
    run: Any,
    decisions: list[str],
    ends: list[float],
    node: int,
    t_kill: float,
    leaders: dict[str, str],
    elections: list[tuple[float, str, str]],
    stored: dict[str, list[tuple[float, str]]],
    services: list[tuple[float, str]],
    recorder: _Recorder,
    timing: _Timing,
) -> dict[str, Any]:
    """The pause, and where it went: elections of the groups the stopped node led (server side)
    against when each stream and stage got going again (the rest: client side).

    Two pauses: ``pause_s`` is the longest gap between two job ends recorded by the simulated
    cluster after the kill (the measure of the earlier results, kept comparable);
    ``decision_pause_s`` runs from the last decision received before the kill to the end of the last
    stall after it (the scheduling pause itself: a lone decision between two stalls does not end it).
    ``election_s`` is when the last raft group on the decision path got its new leader within that
    pause (server side), ``client_s`` what the pause lasted beyond it (client side, one normal cycle
    included)."""
    gaps_before = np.diff([t for t in ends if t <= t_kill])
    after = [t for t in ends if t > t_kill]
    last_before = max(t for t in ends if t <= t_kill)
    pause = max(np.diff([last_before, *after]).max(initial=0.0), 0.0) if after else float("inf")
    lost = sorted(g for g, n in leaders.items() if n == f"n{node}" and _on_path(g))
    elected: dict[str, float] = {}
    for at, _, what in elections:
        group = _group_of(what)
        if group is not None and group not in elected:
            elected[group] = at - t_kill
    # decisions received: the outage runs from the last decision before the kill to the end of the
    # last gap longer than STALL_S after it (a decision between two stalls does not end it: the
    # groups the node led elect one after the other, and each stalls the next cycle)
    done = sorted(t1 for _, _, t1, ok in timing.cycles if ok)
    before = [t for t in done if t <= t_kill]
    later = [t for t in done if t > t_kill]
    start = before[-1] if before else t_kill
    seq = [start, *later]
    stalls = [i for i in range(1, len(seq)) if seq[i] - seq[i - 1] > STALL_S]
    b = seq[stalls[-1]] if stalls else (later[0] if later else float("inf"))
    longest = float(np.diff(seq).max()) if len(seq) > 1 else float("inf")
    rt_before = [t1 - t0 for _, t0, t1, ok in timing.cycles if ok and t1 <= t_kill]
    in_gap = {g: t for g, t in elected.items() if _on_path(g) and t_kill + t <= b}
    election_s = max(in_gap.values(), default=0.0)
    client_s = b - max(t_kill + election_s, start)
    # the cycles that spanned the gap: when each hop of theirs was done (relative to the kill)
    spans = []
    for cid, t0, t1, _ in sorted(timing.cycles, key=lambda c: c[1]):
        if t1 < start or t0 > b:
            continue
        hops: dict[str, float | None] = {"cycle_start": round(t0 - t_kill, 3)}
        # a cycle publishes the outcomes of the jobs that ended (their own correlation ids), then its
        # snapshot (the cycle's)
        outcomes = [e for kd, _, s, e, ok in timing.publishes if kd == "outcomes" and t0 <= s <= t1 and ok]
        hops["outcomes_acked"] = round(max(outcomes) - t_kill, 3) if outcomes else None
        acked = [e for kd, c, _, e, ok in timing.publishes if kd == "snapshots" and c == cid and ok]
        hops["snapshots_acked"] = round(max(acked) - t_kill, 3) if acked else None
        for kind in ("features", "priorities", "placements"):
            rows = [at for at, c in stored.get(kind, []) if c == cid]
            hops[f"{kind}_stored"] = round(min(rows) - t_kill, 3) if rows else None
        hops["decision_received"] = round(t1 - t_kill, 3)
        spans.append(hops)
    first_stored = {
        kind: next((round(at - t_kill, 3) for at, _ in rows if at > t_kill), None)
        for kind, rows in stored.items()
    }
    events = sorted(
        [(at - t_kill, what) for at, what in services] + [(at - t_kill, w) for at, w in recorder.records]
    )
    slow = [
        (kind, round(t0 - t_kill, 3), round(t1 - t0, 3), ok)
        for kind, _, t0, t1, ok in timing.publishes
        if t1 > t_kill and t1 - t0 > 0.5
    ]
    return {
        "jobs": args.jobs,
        "target": args.target,
        "stop": args.stop,
        "env": args.env,
        "cycles": run.stats.snapshots,
        "decisions_applied": run.stats.decisions_applied,
        "killed_node": node,
        "pause_s": float(pause),
        "decision_pause_s": round(float(b - start), 3),
        "longest_decision_gap_s": round(longest, 3),
        "median_gap_before_s": float(np.median(gaps_before)) if len(gaps_before) else float("nan"),
        "median_round_trip_before_s": round(float(np.median(rt_before)), 3) if rt_before else None,
        "decisions_on_stream": len(decisions),
        "decisions_published_twice": len(decisions) - len(set(decisions)),
        "outcomes": run.stats.outcomes,
        "led_by_stopped_node": lost,
        "elections_s": {g: round(t, 3) for g, t in sorted(elected.items(), key=lambda x: x[1])},
        "election_s": round(election_s, 3),
        "client_s": round(client_s, 3),
        "resumed_s": round(b - t_kill, 3),
        "gap_cycles": spans,
        "first_stored_after_kill_s": first_stored,
        "slow_publishes": slow,
        "events": [(round(t, 3), w) for t, w in events[:60]],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=300)
    p.add_argument("--kill-after", type=int, default=80, help="cycles before the node is stopped")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument(
        "--target",
        choices=("placements-leader", "quiet", "idle", "random"),
        default="placements-leader",
        help="the node to stop: the placements stream's leader, the node leading fewest of the "
        "decision path's raft groups, one whose path leaderships were moved off first, or any",
    )
    p.add_argument(
        "--stop",
        choices=("kill", "term", "ldm"),
        default="kill",
        help="SIGKILL, SIGTERM (a plain stop), or lame-duck mode (SIGUSR2: leaderships handed over first)",
    )
    p.add_argument("--env", action="append", default=[], help="KEY=VALUE for the services (repeatable)")
    p.add_argument("--keep", default="", help="copy each run's logs (NATS nodes, services) here")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "nats_failover.json"))
    args = p.parse_args()
    rows = []
    for k in range(args.repeats):
        console.print(
            f"run {k + 1} of {args.repeats}: {args.jobs} jobs, {args.stop} the {args.target} node "
            f"after {args.kill_after} cycles"
        )
        with tempfile.TemporaryDirectory(prefix="hylo-failover-") as tmp:
            try:
                rows.append(one_run(args, Path(tmp)))
            except Exception as err:  # a cluster that failed to set up on this loaded machine: say so, go on
                console.print(f"  run {k + 1} failed: {type(err).__name__}: {err}")
                continue
        _write(args, rows)  # after every run: a later failure keeps the finished runs
        r = rows[-1]
        console.print(
            f"  pause {r['decision_pause_s']:.2f} s (job ends {r['pause_s']:.2f} s): election "
            f"{r['election_s']:.2f} s, client {r['client_s']:.2f} s; elections {r['elections_s']}"
        )
    table = Table(title=f"one of three NATS nodes ({args.target}) stopped ({args.stop}) mid-run")
    cols = ("run", "node", "groups lost", "pause s", "job-end pause s", "election s", "client s", "cycle s")
    for col in (*cols, "on stream", "twice"):
        table.add_column(col, justify="right")
    for k, r in enumerate(rows, 1):
        table.add_row(
            str(k),
            f"n{r['killed_node']}",
            str(len(r["led_by_stopped_node"])),
            f"{r['decision_pause_s']:.2f}",
            f"{r['pause_s']:.2f}",
            f"{r['election_s']:.2f}",
            f"{r['client_s']:.2f}",
            f"{r['median_round_trip_before_s']:.3f}",
            str(r["decisions_on_stream"]),
            str(r["decisions_published_twice"]),
        )
    console.print(table)
    if not rows:
        raise SystemExit("no run finished")
    pauses = [r["decision_pause_s"] for r in rows]
    console.print(f"pause: median {statistics.median(pauses):.2f} s, worst {max(pauses):.2f} s")
    console.print(f"wrote {_write(args, rows)}")


def _write(args: argparse.Namespace, rows: list[dict[str, Any]]) -> Path:
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
