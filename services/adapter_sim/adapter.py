"""One run of the simulated cluster: the cluster in a worker thread, the bus on the event loop.

The cluster (``shared.sim.applied.run_applied``) starts exactly what the pipeline's placer decides,
on the nodes it decides (``PipelineDecider``), so a replay runs the scheduler ``hylo simulate``
measures. Why lockstep (the default): the simulated clock waits for each decision, so a run is
deterministic whatever the services' speed (the same jobs and the same decisions give the same
schedule), which is what the tests and the demo compare against the base policy. A decision that
does not come within ``decision_timeout_s`` is replaced by the simulator's own cycle in the base
policy's order for that one event, and counted. Accelerated mode trades that determinism for a
cluster that lives in (scaled) real time, as a live one does: the clock never waits, and the newest
decision in is applied.

Snapshot ``sequence`` numbers start at the wall clock in microseconds: the services remember the
newest sequence per cluster (latest-wins), so a second run on the same cluster must not start
below the first one's numbers or its snapshots would be skipped as stale.

The cluster itself is ``SimulatedCluster`` (``cluster.py``), the simulated cluster's implementation
of the contract every cluster adapter implements (``shared.service.cluster_adapter``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

from nats.js import JetStreamContext

from services.adapter_sim.bridge import PipelineBridge
from services.adapter_sim.pipeline_decider import Mode, PipelineDecider, ProgressHook
from services.adapter_sim.snapshot import DEFAULT_MAX_PENDING
from services.adapter_sim.stats import AdapterStats
from shared.bus import BusSettings, Publisher
from shared.policies import make_policy
from shared.scheduling.binding import BoundWorkload
from shared.scheduling.result import SimResult
from shared.scheduling.state import Alloc
from shared.schemas import validate_cluster_name
from shared.service.cluster_adapter import wall_clock_sequence
from shared.sim.applied import run_applied
from shared.sim.config import SimConfig
from shared.sim.simulator import runtime_estimates


@dataclass
class AdapterRun:
    """The schedule the pipeline produced (``result``, a ``SimResult``) and the run's counters."""

    result: SimResult
    #: every job's allocation, as the placer decided it (job index -> Alloc)
    allocations: dict[int, Alloc]
    stats: AdapterStats
    cluster: str
    base_policy: str
    wall_s: float


def first_sequence() -> int:
    """Microseconds since the epoch: above every sequence an earlier run on this cluster used."""
    return wall_clock_sequence(1_000_000)


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
    config = config or SimConfig()
    base = make_policy(base_policy)
    estimate = runtime_estimates(workload, config)  # the simulator's, NaN refused with the count
    stats = AdapterStats()
    stop = stop or threading.Event()
    bridge = PipelineBridge(
        js, publisher, bus_settings, cluster, decision_timeout_s=decision_timeout_s, stats=stats
    )
    decider = PipelineDecider(
        workload,
        estimate,
        base,
        config,
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
    await bridge.start()
    t0 = time.perf_counter()
    try:
        try:
            applied = await asyncio.to_thread(
                run_applied, workload, decider, estimate, policy=base, label=f"pipeline/{base.name}"
            )
        except asyncio.CancelledError:
            stop.set()  # the thread ends at its next event
            raise
        await bridge.flush()  # accelerated mode: publishes still in flight
        decider.note_end(applied.tail)  # jobs that ended after the last event with a queue
        rest = decider.take_outcomes()
        await bridge.publish_outcomes(rest)
        stats.outcomes += len(rest)
    finally:
        await bridge.close()
    return AdapterRun(
        result=applied.result,
        allocations=applied.allocations,
        stats=stats,
        cluster=cluster,
        base_policy=base_policy,
        wall_s=time.perf_counter() - t0,
    )
