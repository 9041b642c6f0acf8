"""Replicas of a stage split the clusters between them (``shared.bus.membership``, ``shared.service.shards``).

What must hold: the assignment covers every cluster and is balanced and the same on every replica;
replicas learn of each other (hello, heartbeats), of a goodbye at once and of a silent death after
the expiry; with a sharded route each cluster's messages are handled by one replica only, every
replica handles some, a replica that stops hands its clusters over with nothing lost or handled
twice, and a cluster without a spec is still refused (dead letter), not left unread.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
import pytest_asyncio

from services.adapter_sim.stack import free_port
from shared.bus import Delivery, connect
from shared.bus.membership import Membership, assign
from shared.bus.streams import stream_name
from shared.schemas import DeadLetter, FeatureMatrix, QueueSnapshot, decode
from shared.schemas.subjects import KINDS
from shared.service import Route, ServiceContext, ServiceDefinition, ServiceRuntime, ServiceSettings, Wiring
from shared.store.settings import StoreSettings
from tests.bus.bus_helpers import read_all, wait_until
from tests.conftest_services import Bus
from tests.schemas.message_factories import features, snapshot

CLUSTERS = [f"sh{k}" for k in range(6)]


# -- the assignment -------------------------------------------------------------------------------


@pytest.mark.parametrize(("n_clusters", "n_members"), [(8, 1), (8, 2), (8, 3), (8, 4), (5, 8), (100, 7)])
def test_assignment_covers_every_cluster_and_is_balanced(n_clusters: int, n_members: int) -> None:
    clusters = [f"c{k}" for k in range(n_clusters)]
    members = [f"m{k}" for k in range(n_members)]
    owners = assign(clusters, members)
    assert set(owners) == set(clusters)
    counts = [sum(1 for m in owners.values() if m == member) for member in members]
    assert max(counts) - min(counts) <= 1
    assert sum(counts) == n_clusters


def test_assignment_is_the_same_whatever_the_order_seen() -> None:
    clusters = [f"c{k}" for k in range(9)]
    members = ["b-2", "a-1", "c-3"]
    first = assign(clusters, members)
    for perm in itertools.islice(itertools.permutations(members), 6):
        assert assign(reversed(clusters), perm) == first
    assert assign(clusters, []) == {}


# -- membership over a real server ------------------------------------------------------------------


@pytest.mark.asyncio
async def test_members_see_each_other_a_goodbye_at_once_and_a_silent_death_after_expiry(bus: Bus) -> None:
    subject = f"{bus.subjects.root}.members.test"
    changes: list[int] = []
    # generous expiry: a loaded test machine may delay a heartbeat by a second
    a = Membership(
        bus.nc, subject, me="a", heartbeat_s=0.25, expiry_s=2.5, on_change=lambda: changes.append(1)
    )
    b = Membership(bus.nc, subject, me="b", heartbeat_s=0.25, expiry_s=2.5)
    c = Membership(bus.nc, subject, me="c", heartbeat_s=0.25, expiry_s=2.5)
    await a.start()
    assert a.members == ("a",)
    await b.start()
    await c.start()
    await wait_until(lambda: a.members == b.members == c.members == ("a", "b", "c"))
    await b.close()  # goodbye: gone from the others' views before any expiry
    await asyncio.sleep(0.1)
    assert a.members == ("a", "c") and c.members == ("a", "c")
    # c dies without a word: its heartbeats stop, the others drop it after expiry_s
    assert c._task is not None and c._sub is not None
    c._task.cancel()
    await c._sub.unsubscribe()
    await asyncio.sleep(0.5)
    assert a.members == ("a", "c")  # not yet: within the expiry
    await wait_until(lambda: a.members == ("a",), timeout_s=6.0)
    assert changes  # on_change ran
    await a.close()


# -- sharded routes in the runtime ------------------------------------------------------------------


@dataclass
class Seen:
    by_replica: dict[str, list[QueueSnapshot]] = field(default_factory=lambda: defaultdict(list))


def sharded_definition(seen: Seen) -> ServiceDefinition:
    async def build(ctx: ServiceContext) -> Wiring:
        async def on_snapshot(snap: QueueSnapshot, _d: Delivery) -> FeatureMatrix:
            if snap.cluster not in ctx.specs:
                raise LookupError(f"cluster {snap.cluster!r} has no spec here")
            seen.by_replica[ctx.replica].append(snap)
            return features(snap)

        route = Route(
            kind="snapshots",
            model=QueueSnapshot,
            durable="sharded",
            handle=on_snapshot,
            reject=(LookupError,),
            sharded=True,
        )
        return Wiring(routes=[route])

    return ServiceDefinition(name="sharded-stand-in", default_port=0, build=build)


@dataclass
class Replica:
    runtime: ServiceRuntime
    stop: asyncio.Event
    task: asyncio.Task[None]


@pytest_asyncio.fixture
async def replicas(bus: Bus) -> AsyncIterator[Callable[[str, Seen], object]]:
    started: list[Replica] = []

    async def _start(name: str, seen: Seen) -> Replica:
        settings = ServiceSettings(
            http_port=free_port(),
            replica=name,
            shutdown_grace_s=5.0,
            clusters={c: "embedded" for c in CLUSTERS},
        )
        bus_settings = bus.settings.model_copy(
            update={
                "subject_root": bus.subjects.root,
                "shard_heartbeat_s": 0.25,
                "shard_expiry_s": 5.0,  # a loaded machine must not make a live replica look dead
                "shard_sweep_s": 0.5,
                "shard_fetch_timeout_s": 0.2,
            }
        )
        runtime = ServiceRuntime(sharded_definition(seen), settings, bus_settings, StoreSettings())
        await runtime.start()
        stop = asyncio.Event()
        replica = Replica(runtime, stop, asyncio.create_task(runtime.run(stop)))
        started.append(replica)
        return replica

    yield _start
    for r in started:
        r.stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(r.task, 10)


def _owners(seen: Seen) -> dict[str, set[str]]:
    owners: dict[str, set[str]] = defaultdict(set)
    for replica, snaps in seen.by_replica.items():
        for snap in snaps:
            owners[snap.cluster].add(replica)
    return owners


@pytest.mark.asyncio
async def test_each_cluster_goes_to_one_replica_and_a_stopped_one_hands_over(
    bus: Bus, replicas: Callable[[str, Seen], object]
) -> None:
    seen = Seen()
    r1: Replica = await replicas("r1", seen)  # type: ignore[misc]
    r2: Replica = await replicas("r2", seen)  # type: ignore[misc]
    shards1, shards2 = r1.runtime.shards, r2.runtime.shards
    assert shards1 is not None and shards2 is not None
    await wait_until(lambda: len(shards1.membership.members) == 2 and len(shards2.membership.members) == 2)
    # settled: each fetches exactly what it owns, and the two shares make up every cluster
    await wait_until(
        lambda: (
            r1.runtime.sharded[0].running() == shards1.owned()
            and r2.runtime.sharded[0].running() == shards2.owned()
            and shards1.owned() | shards2.owned() == set(CLUSTERS)
            and not shards1.owned() & shards2.owned()
        )
    )
    sent = []
    for i in range(4):
        for c in CLUSTERS:
            snap = snapshot(cluster=c, correlation_id=f"{c}-{i}", sequence=i + 1)
            sent.append(snap.correlation_id)
            await bus.publisher.publish(snap)
            await asyncio.sleep(0.01)
    await wait_until(lambda: sum(len(v) for v in seen.by_replica.values()) >= len(sent), timeout_s=10.0)
    owners = _owners(seen)
    assert all(len(who) == 1 for who in owners.values()), owners  # one replica per cluster
    assert {next(iter(w)) for w in owners.values()} == {"r1", "r2"}  # both took part
    # what each handled is what it owns
    for name, shards in (("r1", shards1), ("r2", shards2)):
        assert {c for c, w in owners.items() if w == {name}} == set(shards.owned())

    # r2 stops (goodbye): r1 takes every cluster; nothing published meanwhile is lost or doubled
    r2.stop.set()
    for c in CLUSTERS:
        snap = snapshot(cluster=c, correlation_id=f"{c}-late", sequence=10)
        sent.append(snap.correlation_id)
        await bus.publisher.publish(snap)
    await asyncio.wait_for(r2.task, 10)
    await wait_until(lambda: r1.runtime.sharded[0].running() == set(CLUSTERS), timeout_s=5.0)
    await wait_until(lambda: sum(len(v) for v in seen.by_replica.values()) >= len(sent), timeout_s=10.0)
    handled = [s.correlation_id for v in seen.by_replica.values() for s in v]
    # the snapshots stream keeps the newest per cluster and the route is not latest-wins here, so
    # every snapshot published is handled exactly once
    assert sorted(handled) == sorted(sent)


@pytest.mark.asyncio
async def test_a_cluster_without_a_spec_is_refused_not_left_unread(
    bus: Bus, replicas: Callable[[str, Seen], object]
) -> None:
    seen = Seen()
    await replicas("r1", seen)  # type: ignore[misc]
    await bus.publisher.publish(snapshot(cluster="nowhere", correlation_id="stray"))
    await bus.publisher.publish(snapshot(cluster=CLUSTERS[0], correlation_id="fine"))
    (payload,) = await read_all(bus.js, bus.subjects.all_clusters("dead"), expected=1, timeout_s=10.0)
    letter = decode(DeadLetter, payload)
    assert letter.reason == "rejected by sharded: cluster 'nowhere' has no spec here"
    await wait_until(lambda: [s.correlation_id for s in seen.by_replica["r1"]] == ["fine"])


@pytest.mark.asyncio
async def test_a_replica_not_sharding_takes_every_cluster(bus: Bus) -> None:
    """``HYLO_SHARD_CLUSTERS=false``: one consumer over all clusters, as before."""
    seen = Seen()
    settings = ServiceSettings(
        http_port=free_port(), replica="solo", clusters={c: "embedded" for c in CLUSTERS}
    )
    bus_settings = bus.settings.model_copy(
        update={"subject_root": bus.subjects.root, "shard_clusters": False}
    )
    runtime = ServiceRuntime(sharded_definition(seen), settings, bus_settings, StoreSettings())
    await runtime.start()
    try:
        assert runtime.route_names() == {"sharded"} and not runtime.sharded
        assert runtime.shards is not None and not runtime.shards.joined
        assert all(runtime.shards.owns(c) for c in CLUSTERS)
    finally:
        await runtime.close()


@pytest.mark.asyncio
async def test_members_subject_is_not_a_stream_subject(nats_url: str, bus: Bus) -> None:
    """Heartbeats are core NATS only: no stream of the namespace stores them."""
    nc = await connect(bus.settings)
    try:
        m = Membership(nc, f"{bus.subjects.root}.members.x", me="solo", heartbeat_s=0.1, expiry_s=0.5)
        await m.start()
        await asyncio.sleep(0.3)
        await m.close()
        for kind in KINDS:
            info = await bus.js.stream_info(stream_name(bus.subjects, kind))
            assert info.state.messages == 0
    finally:
        await nc.close()
