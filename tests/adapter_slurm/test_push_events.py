"""Push events: slurmctld's hooks make the adapter poll at once; polling still repairs lost events.

Against the real local Slurm (``deploy/slurm-dev/up`` installs ``job_submit.lua`` and
``EpilogSlurmctld``, addressed to udp://127.0.0.1:6997 for the tests' cluster) and a throwaway NATS:
with a 30 s poll a submitted job is in a snapshot within a few seconds, and a finished job's outcome
too; with the hooks' datagrams lost (the adapter listens elsewhere) the periodic poll still picks
the job up. The coalescing and follow-ups of ``EventPoller`` are tested on their own, without Slurm.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio

from services.adapter_sim.stack import free_port
from services.adapter_slurm.events import FOLLOW_UPS, EventPoller, SlurmEvent, events_subject, parse_datagram
from services.adapter_slurm.service import DEFINITION
from shared.schemas import JobOutcome, QueueSnapshot, decode
from shared.service import ServiceRuntime, ServiceSettings
from shared.store.settings import StoreSettings
from tests.adapter_slurm.conftest import SlurmCluster
from tests.conftest_services import Bus

CLUSTER = "slurm-test"
#: where the test cluster's hooks send (deploy/slurm-dev/up: the slurmctld port 6917 + 80)
HOOK_PORT = 6997

# -- EventPoller and the datagram format, without Slurm ---------------------------------------------


def test_datagrams_parse_or_are_refused() -> None:
    submit = parse_datagram(b"hylo1 submit slurm-test", 1.0)
    assert submit == SlurmEvent(kind="submit", cluster="slurm-test", received_at=1.0)
    done = parse_datagram(b"hylo1 complete slurm-test 42", 2.0)
    assert done is not None and done.job_id == "42"
    for bad in (
        b"",
        b"hylo1 submit",
        b"hylo2 submit slurm-test",
        b"hylo1 complete slurm-test",
        b"hylo1 complete slurm-test 4x",
        b"hylo1 submit a.b",
        b"hylo1 submit slurm-test extra",
        b"\xff\xfe",
        b"hylo1 submit " + b"x" * 300,
    ):
        assert parse_datagram(bad, 0.0) is None, bad


class FakeCluster:
    """A poll that takes ``seconds`` and then shows ``jobs`` (what a real poll would have read)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.jobs: dict[str, str] = {}
        self.shown: dict[str, str] = {}
        self.polls = 0
        self.in_flight = 0
        self.most_in_flight = 0
        #: run after each poll has read the jobs (the cluster moving on between two polls)
        self.after_poll: Callable[[], None] | None = None

    async def poll(self) -> None:
        self.polls += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(self.seconds)
        self.shown = dict(self.jobs)
        self.in_flight -= 1
        if self.after_poll is not None:
            self.after_poll()


def submit_event() -> SlurmEvent:
    return SlurmEvent(kind="submit", cluster=CLUSTER, received_at=time.time())


async def settle(poller: EventPoller) -> None:
    while poller.task is not None and not poller.task.done():
        await asyncio.sleep(0.01)


@pytest.mark.asyncio
async def test_a_burst_of_events_is_coalesced() -> None:
    cluster = FakeCluster(0.1)
    poller = EventPoller(cluster.poll, lambda: cluster.shown, min_gap_s=0.0)
    for i in range(50):  # 50 submissions while the first poll runs: one more poll covers them all
        cluster.jobs[str(i + 1)] = "PENDING"
        poller.notify(submit_event())
        await asyncio.sleep(0.001)
    await settle(poller)
    assert cluster.polls == 2 and cluster.most_in_flight == 1
    assert poller.expected == 0 and poller.events == 50


@pytest.mark.asyncio
async def test_events_during_a_poll_get_exactly_one_more_poll() -> None:
    cluster = FakeCluster(0.05)
    poller = EventPoller(cluster.poll, lambda: cluster.shown, min_gap_s=0.02)
    cluster.jobs["1"] = "PENDING"
    poller.notify(submit_event())
    await settle(poller)
    assert cluster.polls == 1  # the job showed: no follow-up
    cluster.jobs["2"] = "PENDING"
    poller.notify(submit_event())
    await asyncio.sleep(0.01)
    cluster.jobs["3"] = "PENDING"
    poller.notify(submit_event())  # the first poll may already have read the queue: poll again
    await settle(poller)
    assert cluster.polls == 3 and cluster.most_in_flight == 1


@pytest.mark.asyncio
async def test_min_gap_spaces_event_polls() -> None:
    cluster = FakeCluster(0.0)
    poller = EventPoller(cluster.poll, lambda: cluster.shown, min_gap_s=0.2)
    started = time.monotonic()
    for i in range(3):
        cluster.jobs[str(i + 1)] = "PENDING"
        poller.notify(submit_event())
        await settle(poller)
    assert cluster.polls == 3 and time.monotonic() - started >= 0.4


@pytest.mark.asyncio
async def test_follow_ups_until_the_event_shows_then_give_up() -> None:
    # a submission whose job no poll shows (the hook runs before slurmctld creates it; or the job
    # was refused): polled again FOLLOW_UPS times, then left to the periodic poll
    cluster = FakeCluster(0.0)
    poller = EventPoller(cluster.poll, lambda: cluster.shown, min_gap_s=0.01)
    poller.notify(submit_event())
    await settle(poller)
    assert cluster.polls == 1 + FOLLOW_UPS and poller.expected == 0
    # a job end seen while the job is still COMPLETING: polled again until it is final
    cluster.jobs["7"] = "COMPLETING"
    cluster.polls = 0
    # the job becomes final right after the first poll read it (not after a wall-clock delay: on a
    # loaded machine the first poll could start late and already read COMPLETED)
    cluster.after_poll = lambda: cluster.jobs.update({"7": "COMPLETED"})
    poller.notify(SlurmEvent(kind="complete", cluster=CLUSTER, job_id="7", received_at=time.time()))
    await settle(poller)
    assert cluster.polls == 2 and not poller.ending


@pytest.mark.asyncio
async def test_a_failed_poll_does_not_stop_event_polls() -> None:
    calls = 0

    async def failing() -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("slurmctld unreachable")

    poller = EventPoller(failing, dict, min_gap_s=0.0, follow_ups=0)
    poller.notify(submit_event())
    await settle(poller)
    poller.notify(submit_event())
    await settle(poller)
    assert calls == 2


# -- the service against the real Slurm ---------------------------------------------------------------


@pytest_asyncio.fixture
async def adapter_service(
    bus: Bus, slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Callable[..., Awaitable[None]]]:
    """Start the adapter service with push events on ``listen`` and a poll every ``poll_s``."""
    running: list[tuple[asyncio.Event, asyncio.Task[None]]] = []

    async def _start(listen: str, poll_s: float) -> None:
        monkeypatch.setenv("HYLO_SLURM_CLUSTER", CLUSTER)
        monkeypatch.setenv("HYLO_SLURM_CONF", str(slurm.conf))
        monkeypatch.setenv("HYLO_CLUSTERS", json.dumps({CLUSTER: str(slurm.spec)}))
        monkeypatch.setenv("HYLO_SLURM_POLL_INTERVAL_S", str(poll_s))
        monkeypatch.setenv("HYLO_SLURM_PARTITIONS", '["gpu"]')
        monkeypatch.setenv("HYLO_SLURM_EVENTS_LISTEN", listen)
        lease = slurm.state_dir / "leases" / f"{uuid.uuid4().hex}.json"
        monkeypatch.setenv("HYLO_SLURM_FAILSAFE_LEASE", str(lease))
        settings = ServiceSettings(http_port=free_port(), replica="r1", clusters={CLUSTER: str(slurm.spec)})
        bus_settings = bus.settings.model_copy(update={"subject_root": bus.subjects.root})
        runtime = ServiceRuntime(DEFINITION, settings, bus_settings, StoreSettings())
        await runtime.start()
        stop = asyncio.Event()
        running.append((stop, asyncio.create_task(runtime.run(stop))))

    yield _start
    for stop, task in running:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)


class Watch:
    """Every snapshot, outcome and event on the test cluster's subjects, with arrival times."""

    def __init__(self) -> None:
        self.snapshots: list[tuple[float, QueueSnapshot]] = []
        self.outcomes: list[tuple[float, JobOutcome]] = []
        self.events: list[tuple[float, SlurmEvent]] = []

    async def start(self, bus: Bus) -> None:
        async def on_snapshot(msg: Any) -> None:
            self.snapshots.append((time.monotonic(), decode(QueueSnapshot, msg.data)))

        async def on_outcome(msg: Any) -> None:
            self.outcomes.append((time.monotonic(), decode(JobOutcome, msg.data)))

        async def on_event(msg: Any) -> None:
            self.events.append((time.monotonic(), SlurmEvent.model_validate_json(msg.data)))

        await bus.nc.subscribe(bus.subjects.of(CLUSTER, "snapshots"), cb=on_snapshot)
        await bus.nc.subscribe(bus.subjects.of(CLUSTER, "outcomes"), cb=on_outcome)
        await bus.nc.subscribe(events_subject(bus.subjects, CLUSTER), cb=on_event)

    def first_with(self, job_id: str) -> float | None:
        for at, snap in self.snapshots:
            if job_id in {p.job_id for p in snap.pending} | {r.job_id for r in snap.running}:
                return at
        return None

    def outcome_of(self, job_id: str) -> float | None:
        return next((at for at, o in self.outcomes if o.job_id == job_id), None)


async def wait_until(check: Callable[[], object], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@pytest.mark.asyncio
async def test_a_submission_and_a_job_end_reach_the_bus_at_once(
    bus: Bus, slurm: SlurmCluster, adapter_service: Callable[..., Awaitable[None]]
) -> None:
    watch = Watch()
    await watch.start(bus)
    await adapter_service(f"127.0.0.1:{HOOK_PORT}", 30.0)
    await wait_until(lambda: watch.snapshots, 20, "the first (startup) poll")
    await asyncio.sleep(0.5)
    jobs: list[str] = []
    try:
        submitted = time.monotonic()
        held = await asyncio.to_thread(
            slurm.submit, "-p", "gpu", "--gres=gpu:k80:1", "-t", "5", "--begin=now+3600"
        )
        jobs.append(held)
        await wait_until(lambda: watch.first_with(held) is not None, 10, "a snapshot with the new job")
        seen = watch.first_with(held)
        assert seen is not None and seen - submitted < 5.0  # the next periodic poll is ~30 s away
        assert any(e.kind == "submit" for _, e in watch.events)

        # a job that runs for a second: its end is pushed too, and its outcome follows at once
        short = await asyncio.to_thread(
            slurm.submit, "-p", "gpu", "--gres=gpu:m40:1", "-t", "1", command="sleep 1"
        )
        jobs.append(short)
        await wait_until(lambda: watch.outcome_of(short) is not None, 15, "the short job's outcome")
        assert any(e.kind == "complete" and e.job_id == short for _, e in watch.events)
        periodic = [at for at, _ in watch.snapshots if at - submitted > 0]
        assert len(periodic) >= 2  # event polls, not the 30 s clock
    finally:
        slurm.cancel(*jobs)


@pytest.mark.asyncio
async def test_lost_events_are_repaired_by_the_periodic_poll(
    bus: Bus, slurm: SlurmCluster, adapter_service: Callable[..., Awaitable[None]]
) -> None:
    # the adapter listens where no hook sends: every datagram of the hooks is lost
    watch = Watch()
    await watch.start(bus)
    await adapter_service(f"127.0.0.1:{free_port()}", 3.0)
    await wait_until(lambda: watch.snapshots, 20, "the first (startup) poll")
    job = await asyncio.to_thread(
        slurm.submit, "-p", "gpu", "--gres=gpu:k80:1", "-t", "5", "--begin=now+3600"
    )
    try:
        submitted = time.monotonic()
        await wait_until(lambda: watch.first_with(job) is not None, 10, "the periodic poll to show the job")
        seen = watch.first_with(job)
        assert seen is not None and seen - submitted <= 3.0 + 1.5
        assert not watch.events  # nothing was pushed: the poll found it
    finally:
        slurm.cancel(job)
