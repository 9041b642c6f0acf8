"""The synthetic workload generator: ``generate_workload(n_jobs, seed) -> JobTable``.

The model, one independent random stream per part (so that changing, say, the type-set table
leaves the arrival times of a seed untouched):

1. arrivals: a non-homogeneous Poisson process of *batches* whose rate is
   ``mean rate x diurnal(t) x weekly(t) x burst(t)``; ``burst(t)`` is a two-state Markov chain
   (normal / burst, exponential sojourns). Each batch brings a geometric number of jobs at the same
   second (scripted sweeps). Event times are drawn as a unit-rate Poisson process in "operational
   time" and mapped back through the cumulative intensity on a one-minute grid: exact for the
   piecewise-constant rate, fully vectorized, and independent of any per-event loop.
2. GPUs: a categorical count; among 1-GPU jobs a fraction takes a share of one GPU.
3. runtimes: a lognormal mixture per GPU class, rounded up to whole seconds and clipped to
   [1, max_runtime_s].
4. users (Zipf) packed into VCs (Zipf shares); estimates = runtime x factor rounded up to the
   wall-time ladder, or the ladder's top for the users who always ask for the maximum.
5. GPU-type sets from openb's tables, mapped onto the target cluster's types.
6. CPU and memory from openb's most frequent request shapes.

The time axis of the model starts on a Monday at 00:00 (the diurnal and weekly phases refer to it);
``TraceMeta.origin`` is that clock's time of the first job, as for a rebased trace.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from shared.domain.cluster import ClusterSpec
from shared.domain.jobs import WHOLE_GPU_MILLI, JobTable, TraceMeta, TypeSetBook
from shared.workload.params import DAY, HOUR, GeneratorParams, RequestShape, WeightedTypeSet

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

GRID_S = 60.0  # resolution of the intensity grid; bursts last hours, so a minute is exact enough
CLOCK_START = 4 * DAY  # Unix time 345,600 = Monday 1970-01-05 00:00 UTC: the model's t = 0
N_STREAMS = 8


def _probs(weights: npt.ArrayLike) -> FloatArray:
    w = np.asarray(weights, dtype=np.float64)
    out: FloatArray = w / w.sum()
    return out


def _zipf_probs(n: int, s: float) -> FloatArray:
    return _probs(np.arange(1, n + 1, dtype=np.float64) ** -s)


# ---- arrivals ----------------------------------------------------------------------------------


def _burst_state(params: GeneratorParams, horizon: float, rng: np.random.Generator) -> FloatArray:
    """Boundaries of alternating normal/burst sojourns covering [0, horizon]; index parity = state.

    The chain starts in its stationary law, so the first hour is as bursty as any other.
    """
    gap, dur = params.burst_mean_gap_s, params.burst_mean_duration_s
    start_burst = rng.random() < dur / (gap + dur)
    pairs = int(horizon / (gap + dur) * 1.5) + 16
    while True:
        sojourns = np.empty(2 * pairs)
        sojourns[0::2] = rng.exponential(dur if start_burst else gap, pairs)
        sojourns[1::2] = rng.exponential(gap if start_burst else dur, pairs)
        bounds = np.cumsum(sojourns)
        if bounds[-1] >= horizon:
            break
        pairs *= 2
    # Prepend an empty first sojourn when starting in a burst, so odd segments are always bursts.
    return np.concatenate(([0.0], bounds)) if start_burst else bounds


def _intensity_multiplier(
    params: GeneratorParams, centers: FloatArray, burst_bounds: FloatArray
) -> FloatArray:
    """Relative arrival rate at each grid point; its long-run mean is 1."""
    hour = (centers / HOUR) % 24.0
    diurnal = 1.0 + params.diurnal_amplitude * np.cos(2.0 * np.pi * (hour - params.diurnal_peak_hour) / 24.0)
    weekday = (centers // DAY) % 7  # 0 = Monday
    wf = params.weekend_factor
    weekly = np.where(weekday >= 5, wf, 1.0) / ((5.0 + 2.0 * wf) / 7.0)
    in_burst = np.searchsorted(burst_bounds, centers, side="right") % 2 == 1
    m, pi_b = (
        params.burst_multiplier,
        params.burst_mean_duration_s / (params.burst_mean_duration_s + params.burst_mean_gap_s),
    )
    burst = np.where(in_burst, m, 1.0) / (1.0 - pi_b + pi_b * m)
    result: FloatArray = diurnal * weekly * burst
    return result


def _arrival_times(n: int, params: GeneratorParams, rng: np.random.Generator) -> FloatArray:
    """Submit times (s on the model clock, whole seconds, non-decreasing) of ``n`` jobs."""
    q = params.batch_continue_prob
    mean_batch = 1.0 / (1.0 - q)
    chunk = int(n / mean_batch * 1.05) + 16
    sizes = rng.geometric(1.0 - q, chunk)
    while sizes.sum() < n:
        sizes = np.concatenate((sizes, rng.geometric(1.0 - q, chunk)))
    n_events = int(np.searchsorted(np.cumsum(sizes), n)) + 1
    sizes = sizes[:n_events]
    event_rate = params.mean_arrival_rate() / mean_batch
    operational = np.cumsum(rng.exponential(1.0, n_events))
    horizon = operational[-1] / event_rate * 1.25 + 7 * DAY
    while True:
        edges = np.arange(0.0, horizon + GRID_S, GRID_S)
        bounds = _burst_state(params, horizon, rng)
        mult = _intensity_multiplier(params, edges[:-1] + GRID_S / 2.0, bounds)
        cumulative = np.concatenate(([0.0], np.cumsum(mult * (event_rate * GRID_S))))
        if cumulative[-1] >= operational[-1]:
            break
        horizon *= 2.0
    event_times = np.floor(np.interp(operational, cumulative, edges))
    times: FloatArray = np.repeat(event_times, sizes)[:n]
    return times


# ---- per-job attributes ------------------------------------------------------------------------


def _runtimes(gpus: IntArray, params: GeneratorParams, rng: np.random.Generator) -> FloatArray:
    mins = np.array([c.min_gpus for c in params.duration_classes])
    cls = np.searchsorted(mins, gpus, side="right") - 1
    log_median = np.empty(len(gpus))
    sigma = np.empty(len(gpus))
    z = rng.standard_normal(len(gpus))
    u = rng.random(len(gpus))
    for k, dc in enumerate(params.duration_classes):
        sel = cls == k
        cdf = np.cumsum(_probs([c.weight for c in dc.components]))
        comp = np.minimum(np.searchsorted(cdf, u[sel], side="right"), len(cdf) - 1)
        log_median[sel] = np.log([c.median_s for c in dc.components])[comp]
        sigma[sel] = np.array([c.sigma for c in dc.components])[comp]
    raw = np.exp(np.minimum(log_median + sigma * z, np.log(params.max_runtime_s) + 1.0))
    runtime: FloatArray = np.clip(np.ceil(raw), 1.0, np.floor(params.max_runtime_s))
    return runtime


def _users_and_vcs(
    n: int, params: GeneratorParams, rng: np.random.Generator
) -> tuple[IntArray, IntArray, BoolArray]:
    """User of each job, VC of each job, and which users always ask for the maximum wall time.

    Users belong to one VC each. They are packed greedily (largest user first, into the VC furthest
    below its Zipf share) so that VC job shares follow the VC Zipf law without a user spanning VCs.
    """
    p_user = _zipf_probs(params.n_users, params.user_zipf_s)
    p_vc = _zipf_probs(params.n_vcs, params.vc_zipf_s)
    user_vc = np.empty(params.n_users, dtype=np.int64)
    filled = np.zeros(params.n_vcs)
    for u in range(params.n_users):  # users are already in decreasing share order
        k = int(np.argmax(p_vc - filled))
        user_vc[u] = k
        filled[k] += p_user[u]
    maxers = rng.random(params.n_users) < params.max_request_user_fraction
    user = rng.choice(params.n_users, size=n, p=p_user).astype(np.int64)
    return user, user_vc[user], maxers


def _estimates(
    runtime: FloatArray, maxer: BoolArray, params: GeneratorParams, rng: np.random.Generator
) -> FloatArray:
    """Round runtime x factor up to the ladder; factor 1 for a share of jobs, else exp(sigma |Z|)."""
    ladder = np.asarray(params.estimate_ladder_s, dtype=np.float64)
    n = len(runtime)
    exact = rng.random(n) < params.estimate_exact_fraction
    factor = np.where(exact, 1.0, np.exp(params.estimate_factor_sigma * np.abs(rng.standard_normal(n))))
    idx = np.minimum(np.searchsorted(ladder, runtime * factor, side="left"), len(ladder) - 1)
    est: FloatArray = np.where(maxer, ladder[-1], ladder[idx])
    return est


def _type_masks(
    table: tuple[WeightedTypeSet, ...], types: tuple[str, ...]
) -> tuple[IntArray, IntArray, FloatArray]:
    """Per table entry: bitmask over ``types`` of the allowed set, the set's size, and its probability."""
    pos = {t: i for i, t in enumerate(types)}
    masks = np.array([sum(1 << pos[t] for t in set(ws.types) if t in pos) for ws in table], dtype=np.int64)
    sizes = np.array([len(set(ws.types)) for ws in table], dtype=np.int64)
    return masks, sizes, _probs([ws.weight for ws in table])


def _type_sets(
    gpus: IntArray,
    fractional: BoolArray,
    types: tuple[str, ...],
    params: GeneratorParams,
    rng: np.random.Generator,
) -> tuple[IntArray, list[tuple[str, ...]]]:
    """Type-set code of each job and the code table, naming only ``types``."""
    n, n_types = len(gpus), len(types)
    if n_types > 62:
        raise ValueError("at most 62 GPU types are supported")
    mask = np.zeros(n, dtype=np.int64)  # 0 = any type
    size = np.zeros(n, dtype=np.int64)  # the set's size in the source trace
    eligible = gpus <= params.max_constrained_gpus
    u = rng.random(n)
    for table, sel in (
        (params.type_sets_whole, eligible & ~fractional),
        (params.type_sets_fractional, fractional),
    ):
        masks, sizes, p = _type_masks(table, types)
        k = np.minimum(np.searchsorted(np.cumsum(p), u[sel], side="right"), len(p) - 1)
        mask[sel], size[sel] = masks[k], sizes[k]
    unmatched = (size > 0) & (mask == 0)
    if params.unmatched_types == "redraw" and unmatched.any() and n_types > 0:
        # A random subset of the cluster's types, as large as the source set (capped at all types).
        keys = rng.random((int(unmatched.sum()), n_types))
        rank = np.argsort(np.argsort(keys, axis=1), axis=1)
        take = rank < np.minimum(size[unmatched], n_types)[:, None]
        mask[unmatched] = (take * (np.int64(1) << np.arange(n_types, dtype=np.int64))).sum(axis=1)
    full = (np.int64(1) << n_types) - 1
    mask[mask == full] = 0  # allowing every type of the cluster is no constraint
    book = TypeSetBook()
    distinct, inverse = np.unique(mask, return_inverse=True)
    codes = np.array(
        [book.code(tuple(t for i, t in enumerate(types) if int(m) >> i & 1)) for m in distinct.tolist()],
        dtype=np.int64,
    )
    return codes[inverse.reshape(-1)], book.sets


def _draw_shapes(
    shapes: tuple[RequestShape, ...], n: int, rng: np.random.Generator
) -> tuple[IntArray, IntArray]:
    k = rng.choice(len(shapes), size=n, p=_probs([s.weight for s in shapes]))
    cpu = np.array([s.cpus_milli for s in shapes], dtype=np.int64)[k]
    mem = np.array([s.mem_mib for s in shapes], dtype=np.int64)[k]
    return cpu, mem


def _cpu_mem(
    gpus: IntArray, fractional: BoolArray, params: GeneratorParams, rng: np.random.Generator
) -> tuple[IntArray, IntArray]:
    """Total CPU (milli) and memory (MiB) of each job: per-GPU shapes x GPUs, or per-job if fractional."""
    n = len(gpus)
    cpu, mem = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    single = (gpus == 1) & ~fractional
    multi = gpus > 1
    c, m = _draw_shapes(params.single_gpu_requests, n, rng)
    cpu[single], mem[single] = c[single], m[single]
    c, m = _draw_shapes(params.multi_gpu_requests, n, rng)
    c = np.minimum(c, params.multi_gpu_cpus_per_gpu_cap_milli) * gpus
    m = np.minimum(m, params.multi_gpu_mem_per_gpu_cap_mib) * gpus
    cpu[multi], mem[multi] = c[multi], m[multi]
    c, m = _draw_shapes(params.fractional_requests, n, rng)
    cpu[fractional], mem[fractional] = c[fractional], m[fractional]
    return cpu, mem


# ---- public API --------------------------------------------------------------------------------


def generate_workload(
    n_jobs: int,
    seed: int,
    params: GeneratorParams | None = None,
    gpu_types: tuple[str, ...] | None = None,
) -> JobTable:
    """``n_jobs`` synthetic jobs, identical for identical (n_jobs, seed, params, gpu_types).

    ``gpu_types`` are the target cluster's GPU types: type constraints only ever name these
    (``None``: the types named in ``params``' tables, i.e. openb's). Submit times start at 0 and are
    sorted; runtime >= 1 s; estimate >= runtime; fractional jobs have gpus == 1 and a share in
    1..999 milli-GPU. Use ``generate_for_cluster`` to also target a cluster's capacity.
    """
    if n_jobs < 0:
        raise ValueError("n_jobs must be >= 0")
    p = params if params is not None else GeneratorParams()
    types = tuple(sorted(set(gpu_types))) if gpu_types is not None else p.type_universe
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(N_STREAMS)]
    r_arr, r_gpu, r_run, r_usr, r_est, r_typ, r_req = streams[:7]

    gpus = r_gpu.choice(np.asarray(p.gpu_counts, dtype=np.int64), size=n_jobs, p=_probs(p.gpu_count_weights))
    fractional = (gpus == 1) & (r_gpu.random(n_jobs) < p.fractional_given_single)
    share = r_gpu.choice(
        np.asarray(p.fractional_shares, dtype=np.int64), size=n_jobs, p=_probs(p.fractional_share_weights)
    )
    gpu_milli = np.where(fractional, share, WHOLE_GPU_MILLI).astype(np.int64)
    runtime = _runtimes(gpus, p, r_run)
    user, vc, maxers = _users_and_vcs(n_jobs, p, r_usr)
    estimate = _estimates(runtime, maxers[user], p, r_est)
    type_set, type_sets = _type_sets(gpus, fractional, types, p, r_typ)
    cpus, mem = _cpu_mem(gpus, fractional, p, r_req)
    times = _arrival_times(n_jobs, p, r_arr) if n_jobs else np.zeros(0)
    origin = float(times[0]) if n_jobs else 0.0

    width = max(6, len(str(max(n_jobs - 1, 0))))
    ids = np.array([f"syn-{i:0{width}d}" for i in range(n_jobs)], dtype=np.str_)
    fingerprint = p.fingerprint()
    return JobTable(
        ids=ids,
        submit=times - origin,
        runtime=runtime,
        estimate=estimate,
        gpus=gpus,
        gpu_milli=gpu_milli,
        type_set=type_set,
        cpus_milli=cpus,
        mem_mib=mem,
        user=user,
        vc=vc,
        qos=np.zeros(n_jobs, dtype=np.int64),
        type_sets=type_sets,
        users=[f"user{u:03d}" for u in range(p.n_users)],
        vcs=[f"vc{k:02d}" for k in range(p.n_vcs)],
        qoses=["normal"],
        meta=TraceMeta(
            name=f"synthetic-n{n_jobs}-seed{seed}",
            source="shared.workload.generator",
            origin=CLOCK_START + origin,
            has_estimates=True,
            sha256=fingerprint,
            notes=(
                f"generate_workload(n_jobs={n_jobs}, seed={seed}, gpu_types={types})",
                f"params sha256 {fingerprint}",
                "clock: t = 0 of the model is Monday 00:00; origin is the first job on that clock",
            ),
        ),
    )


def generate_for_cluster(
    spec: ClusterSpec,
    n_jobs: int,
    seed: int,
    params: GeneratorParams | None = None,
    load: float | None = None,
) -> JobTable:
    """A workload for ``spec``: its GPU types, and an arrival rate aimed at ``load`` on its capacity.

    ``load`` defaults to ``params.target_load``; with neither, the rate is ``mean_interarrival_s``.
    """
    p = params if params is not None else GeneratorParams()
    if load is not None or p.target_load is not None:
        p = p.for_capacity(spec.total_gpus, load)
    return generate_workload(n_jobs, seed, p, gpu_types=spec.gpu_types)
