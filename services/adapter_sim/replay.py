"""From settings to a finished replay: load the workload, connect, run, compare with the base policy.

Why the comparison lives here: the question every replay answers is "what did the pipeline do to
these jobs, against the base policy on the same jobs?". The base run is the plain simulator with
the same configuration, so the difference is the pipeline's and nothing else; with no model loaded
both schedules must be identical, and ``Comparison.differing_starts`` says whether they were.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from services.adapter_sim.adapter import AdapterRun, run_simulated_cluster
from services.adapter_sim.pipeline_decider import ProgressHook
from services.adapter_sim.settings import AdapterSimSettings
from shared.bus import BusSettings, Publisher, connect, ensure_streams
from shared.bus.settings import message_limits
from shared.metrics import WindowMetrics, summarize_window
from shared.policies import make_policy
from shared.scheduling.binding import bind_jobs
from shared.scheduling.result import SimResult
from shared.schemas import Subjects
from shared.sim.config import SimConfig
from shared.sim.evaluate import PreparedWorkload, prepare_workload
from shared.sim.simulator import Simulator


def sim_config(settings: AdapterSimSettings) -> SimConfig:
    """The scheduler the placer runs (``HYLO_PLACEMENT``, ``HYLO_BACKFILL``, ...), planning with
    actual runtimes when the estimates are the oracle's."""
    return settings.sim_config(oracle_runtimes=settings.sim_estimates == "oracle")


def load_workload(settings: AdapterSimSettings, *, predictions: bool = False) -> PreparedWorkload:
    """The jobs to replay, bound to the cluster spec (raises ValueError/SpecError naming the problem).

    The embedded workload is generated with ``sim_jobs`` jobs; a trace is cut to its first
    ``sim_jobs`` jobs (after any arrival rescaling): a replay runs at the pipeline's decision rate,
    and a whole trace of 100,000 jobs would take hours. ``predictions`` attaches the runtime
    predictor's predictions (``prepare_workload``), which only the predictor-based base policies
    read when the same jobs are simulated beside the replay; the replay itself does not.
    """
    work = prepare_workload(
        settings.sim_trace,
        settings.spec_source(),
        n_jobs=settings.sim_jobs,
        seed=settings.sim_seed,
        estimates=settings.sim_estimates,
        target_load=settings.sim_load,
        load_definition=settings.sim_load_definition,
        predictions=predictions,
    )
    n = len(work.bound.jobs)
    if n <= settings.sim_jobs:
        return work
    head = work.bound.jobs.take(np.arange(settings.sim_jobs))
    bound = bind_jobs(head, work.spec, node_slack=work.bound.node_slack)  # already bound: nothing excluded
    return PreparedWorkload(
        name=f"{work.name}, first {settings.sim_jobs:,} of {n:,} jobs",
        bound=bound,
        exclusions=work.exclusions,
    )


async def replay(
    bus: BusSettings,
    settings: AdapterSimSettings,
    work: PreparedWorkload,
    *,
    progress: ProgressHook | None = None,
    stop: threading.Event | None = None,
) -> AdapterRun:
    """Connect to the bus in ``bus``, make sure the streams exist, and replay ``work`` through it."""
    nc = await connect(bus)
    try:
        js = nc.jetstream()
        subjects = Subjects(bus.subject_root)
        await ensure_streams(js, subjects, bus)
        limits = message_limits(bus, nc.max_payload)
        return await run_simulated_cluster(
            js,
            Publisher(js, subjects, limits),
            bus,
            work.bound,
            cluster=settings.sim_cluster,
            base_policy=settings.base_policy,
            config=sim_config(settings),
            decision_timeout_s=settings.sim_decision_timeout_s,
            max_pending=settings.sim_max_pending,
            job_id_prefix=settings.sim_job_id_prefix,
            progress=progress,
            stop=stop,
            give_up_after=settings.sim_give_up_after,
            mode=settings.sim_mode,
            speedup=settings.sim_speedup,
        )
    finally:
        await nc.close()


@dataclass
class Comparison:
    """The pipeline's schedule against the base policy's on the same jobs."""

    pipeline: WindowMetrics
    base: WindowMetrics
    base_result: SimResult
    #: jobs whose start time differs between the two schedules (0: identical schedules)
    differing_starts: int
    #: jobs that ran on other nodes (node group or node list) in the two schedules
    differing_nodes: int = 0


def compare_with_base(run: AdapterRun, work: PreparedWorkload, config: SimConfig) -> Comparison:
    """Simulate the base policy alone on the same jobs and summarize both runs over every job."""
    sim = Simulator(work.bound, make_policy(run.base_policy), config)
    sim.record_allocations = True
    base = sim.run()
    jobs = range(len(work.bound.jobs))
    placed = {j: (a.group, tuple(a.nodes)) for j, a in run.allocations.items()}
    simulated = {j: (g, nodes) for j, (g, nodes, _, _, _) in sim.allocations.items()}
    moved = sum(1 for j in placed.keys() | simulated.keys() if placed.get(j) != simulated.get(j))
    excluded = work.excluded_count
    same = np.isclose(run.result.start, base.start, rtol=0.0, atol=0.0, equal_nan=True)
    return Comparison(
        pipeline=summarize_window(run.result, jobs, excluded=excluded, label="pipeline"),
        base=summarize_window(base, jobs, excluded=excluded, label=run.base_policy),
        base_result=base,
        differing_starts=int(np.count_nonzero(~same)),
        differing_nodes=moved,
    )
