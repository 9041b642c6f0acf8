"""One run of the simulated cluster: the simulator in a worker thread, the bus on the event loop.

Why lockstep (the default): the simulated clock waits for each decision, so a run is
deterministic whatever the services' speed (the same jobs and the same decisions give the same
schedule), which is what the tests and the demo compare against the base policy. A decision that
does not come within ``decision_timeout_s`` is replaced by the base policy's order for that one
cycle, and counted. Accelerated mode trades that determinism for a cluster that lives in (scaled)
real time, as a live one does: the clock never waits, and the newest decision in is applied.

Snapshot ``sequence`` numbers start at the wall clock in microseconds: the services remember the
newest sequence per cluster (latest-wins), so a second run on the same cluster must not start
below the first one's numbers or its snapshots would be skipped as stale.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

from nats.js import JetStreamContext

from services.adapter_sim.bridge import PipelineBridge
from services.adapter_sim.remote_policy import Mode, ProgressHook, RemotePolicy
from services.adapter_sim.snapshot import DEFAULT_MAX_PENDING
from services.adapter_sim.stats import AdapterStats
from shared.bus import BusSettings, Publisher
from shared.policies import make_policy
from shared.scheduling.binding import BoundWorkload
from shared.scheduling.result import SimResult
from shared.schemas import validate_cluster_name
from shared.sim.config import SimConfig
from shared.sim.simulator import Simulator


@dataclass
class AdapterRun:
    """The schedule the pipeline produced (``result``, a ``SimResult``) and the run's counters."""

    result: SimResult
    stats: AdapterStats
    cluster: str
    base_policy: str
    wall_s: float


def first_sequence() -> int:
    """Microseconds since the epoch: above every sequence an earlier run on this cluster used."""
    return time.time_ns() // 1000


async def run_simulated_cluster(
    js: JetStreamContext,
    publisher: Publisher,
    bus_settings: BusSettings,
    workload: BoundWorkload,
    *,
    cluster: str,
    base_policy: str = "fcfs",
    config: SimConfig | None = None,
    decision_timeout_s: float = 10.0,
    max_pending: int = DEFAULT_MAX_PENDING,
    job_id_prefix: str = "",
    job_range: tuple[int, int] | None = None,
    progress: ProgressHook | None = None,
    stop: threading.Event | None = None,
    give_up_after: int = 5,
    mode: Mode = "lockstep",
    speedup: float = 3600.0,
) -> AdapterRun:
    """Replay ``workload`` as cluster ``cluster`` scheduled through the pipeline; see the module docstring.

    The streams must exist (``ensure_streams``). ``stop`` (or cancelling this coroutine) ends the
    run at the next scheduling cycle with ``RunStopped``. ``give_up_after`` cycles in a row without
    a decision (timed out, or the snapshot dead-lettered by a stage) end it with ``AdapterError``
    naming the last reason: a pipeline that answers nothing would otherwise cost the timeout at
    every cycle (0 = never give up). ``mode="accelerated"``: the simulated clock runs ``speedup``
    times faster than the wall clock and never waits; each cycle uses the newest decision received
    so far (not deterministic; ``give_up_after`` does not apply).
    """
    validate_cluster_name(cluster)
    base = make_policy(base_policy)
    stats = AdapterStats()
    stop = stop or threading.Event()
    bridge = PipelineBridge(
        js, publisher, bus_settings, cluster, decision_timeout_s=decision_timeout_s, stats=stats
    )
    policy = RemotePolicy(
        base,
        bridge,
        cluster,
        stats=stats,
        max_pending=max_pending,
        job_id_prefix=job_id_prefix,
        first_sequence=first_sequence(),
        progress=progress,
        stop=stop,
        give_up_after=give_up_after,
        mode=mode,
        speedup=speedup,
    )
    simulator = Simulator(workload, policy, config)  # binds the policy: bad job ids fail here
    await bridge.start()
    t0 = time.perf_counter()
    try:
        try:
            result = await asyncio.to_thread(simulator.run, job_range)
        except asyncio.CancelledError:
            stop.set()  # the thread ends at its next cycle
            raise
        await bridge.flush()  # accelerated mode: publishes still in flight
        rest = policy.take_outcomes()  # jobs that ended after the last cycle
        await bridge.publish_outcomes(rest)
        stats.outcomes += len(rest)
    finally:
        await bridge.close()
    return AdapterRun(
        result=result,
        stats=stats,
        cluster=cluster,
        base_policy=base_policy,
        wall_s=time.perf_counter() - t0,
    )
