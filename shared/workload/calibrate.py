"""Re-measure the generator's defaults: ``python -m shared.workload.calibrate [--traces DIR]``.

Prints, statistic by statistic, the value measured on the trace, the current default in
``GeneratorParams`` (or what it implies), and the same statistic measured on a generated workload,
followed by fitted values (duration mixtures, request shapes, type sets, estimate model) in a form
that can be pasted into ``params.py``. Why: the defaults are only as good as the day they were
measured; this script makes that measurement repeatable when the traces or the model change.

Traces are read with the project's loaders (``shared.traces``); the traces folder defaults to the
``traces_dir`` setting (``HYLO_TRACES_DIR``). None of this runs on a user's machine: the generator
itself needs no trace.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from shared.domain.cluster import load_cluster_spec
from shared.domain.jobs import WHOLE_GPU_MILLI, JobTable
from shared.workload import stats
from shared.workload.feasibility import fits_cluster, offered_load
from shared.workload.generator import generate_workload
from shared.workload.params import GeneratorParams

FloatArray = npt.NDArray[np.float64]

PHILLY = "philly/pollux_philly.csv"
OPENB = "alibaba/openb_pod_list_gpuspec33.csv"
HPC2N = "swf/HPC2N-2002-2.2-cln.swf.gz"
EMBEDDED_JOBS, EMBEDDED_SEED = 20_000, 0
TOP_SHAPES = 12


@dataclass(frozen=True)
class Traces:
    philly: JobTable
    openb: JobTable  # GPU pods that ran
    hpc2n: JobTable


def load_traces(root: Path) -> Traces:
    """The three traces through the project's loaders (``shared.traces``)."""
    from shared.traces.openb import load_openb
    from shared.traces.philly import load_philly
    from shared.traces.swf import load_swf

    openb = load_openb(root / OPENB)
    return Traces(
        philly=load_philly(root / PHILLY),
        openb=openb.take(np.flatnonzero(openb.gpus > 0)),
        hpc2n=load_swf(root / HPC2N),
    )


# ---- fitting -----------------------------------------------------------------------------------


def fit_lognormal_mixture(x: FloatArray, k: int, iters: int = 400) -> list[tuple[float, float, float]]:
    """EM on log durations: ``k`` (weight, median_s, sigma) triples, deterministic (quantile start)."""
    y = np.log(np.maximum(np.asarray(x, dtype=np.float64), 1.0))
    mu = np.quantile(y, np.linspace(0.1, 0.9, k))
    sd = np.full(k, max(float(y.std()) / k, 0.05))
    w = np.full(k, 1.0 / k)
    for _ in range(iters):
        ll = -0.5 * ((y[:, None] - mu) / sd) ** 2 - np.log(sd) + np.log(w)
        r = np.exp(ll - ll.max(axis=1, keepdims=True))
        r /= r.sum(axis=1, keepdims=True)
        nk = r.sum(axis=0)
        w = nk / len(y)
        mu = (r * y[:, None]).sum(axis=0) / nk
        sd = np.maximum(np.sqrt((r * (y[:, None] - mu) ** 2).sum(axis=0) / nk), 0.05)
    order = np.argsort(mu)
    return [(float(w[i]), float(np.exp(mu[i])), float(sd[i])) for i in order]


def constant_max_users(table: JobTable, min_jobs: int = 10, share: float = 0.9) -> tuple[set[int], int]:
    """Users who ask their own maximum in >= ``share`` of their jobs, and how many users have >= ``min_jobs``.

    Why per user: requesting the limit every time is a habit of a person (or of a script's default),
    so the generator draws it per user; users with few jobs say nothing about a habit.
    """
    by_user: dict[int, list[float]] = {}
    for u, e in zip(table.user.tolist(), table.estimate.tolist(), strict=True):
        by_user.setdefault(u, []).append(e)
    counted, constant = 0, set()
    for user, requests in by_user.items():
        if len(requests) < min_jobs:
            continue
        counted += 1
        value, count = Counter(requests).most_common(1)[0]
        if count / len(requests) >= share and value == max(requests):
            constant.add(user)
    return constant, counted


def model_ratios(
    runtime: FloatArray, exact: float, sigma: float, u: FloatArray, z: FloatArray, p: GeneratorParams
) -> FloatArray:
    """estimate / runtime under the generator's factor model (no max-requesters), for given draws."""
    ladder = np.asarray(p.estimate_ladder_s)
    r = np.minimum(runtime, p.max_runtime_s)
    factor = np.where(u < exact, 1.0, np.exp(sigma * np.abs(z)))
    idx = np.minimum(np.searchsorted(ladder, r * factor, side="left"), len(ladder) - 1)
    out: FloatArray = ladder[idx] / r
    return out


RATIO_QS = np.linspace(0.1, 0.9, 9)


CRASH_S = 60.0


def fit_estimate_factor(
    hpc2n: JobTable, exclude_users: set[int], p: GeneratorParams, n: int = 40_000
) -> tuple[float, float, FloatArray, FloatArray]:
    """Grid search of (exact fraction, sigma) matching HPC2N's request/runtime quantiles (log distance).

    The model is applied to the trace's own runtimes, so only the users' habit is fitted. Left out:
    jobs of the always-the-maximum users (modelled separately) and jobs shorter than a minute
    (crashes: their ratio says nothing about how users estimate). The trace's ratios below 1 (jobs
    that overran their request by the scheduler's grace) count as 1, since the model never
    under-estimates. Returns (exact fraction, sigma, trace ratio quantiles, model ratio quantiles).
    """
    ok = np.isfinite(hpc2n.estimate) & (hpc2n.runtime >= CRASH_S) & ~np.isin(hpc2n.user, list(exclude_users))
    rng = np.random.default_rng(0)
    idx = rng.choice(np.flatnonzero(ok), size=min(n, int(ok.sum())), replace=False)
    rt = hpc2n.runtime[idx]
    trace_q = np.quantile(np.maximum(hpc2n.estimate[idx] / rt, 1.0), RATIO_QS)
    z, u = rng.standard_normal(len(rt)), rng.random(len(rt))
    best: tuple[float, float, float, FloatArray] = (math.inf, 0.0, 0.0, trace_q)
    for exact in np.linspace(0.0, 0.95, 20):
        for sigma in np.linspace(0.0, 8.0, 81):
            q = np.quantile(model_ratios(rt, float(exact), float(sigma), u, z, p), RATIO_QS)
            err = float(np.abs(np.log(q) - np.log(trace_q)).sum())
            if err < best[0]:
                best = (err, float(exact), float(sigma), q)
    return best[1], best[2], trace_q, best[3]


def top_shapes(
    cpu: npt.ArrayLike, mem: npt.ArrayLike, k: int = TOP_SHAPES
) -> tuple[list[tuple[int, int, int]], float]:
    """The ``k`` most frequent (cpu_milli, mem_mib) pairs with counts, and the share they cover."""
    pairs = Counter(zip(np.asarray(cpu).tolist(), np.asarray(mem).tolist(), strict=True))
    top = pairs.most_common(k)
    covered = sum(c for _, c in top) / max(sum(pairs.values()), 1)
    return [(int(c), int(m), int(n)) for (c, m), n in top], covered


BURST_KEYS = (
    "interarrival_cv",
    "same_second_fraction",
    "hourly_dispersion",
    "burst_hour_fraction",
    "burst_mean_run_h",
    "burst_ratio",
    "jobs_in_bursts",
)
ARRIVAL_GRID = {
    "burst_multiplier": (20.0, 24.0, 30.0, 36.0),
    "burst_mean_duration_s": (1800.0, 2160.0, 2700.0),
    "burst_mean_gap_s": (18000.0, 21600.0, 25200.0),
    "batch_continue_prob": (0.04, 0.05, 0.06),
}


def fit_arrivals(
    target: dict[str, float], p: GeneratorParams, n_jobs: int, seeds: tuple[int, ...] = (0, 1, 2, 3)
) -> list[tuple[float, dict[str, float], dict[str, float]]]:
    """Grid search of the burst and batch parameters against the trace's burstiness statistics.

    Why a search and not a formula: the statistics (inter-arrival CV, hourly dispersion, the
    classifier's burst hours) are measured on hours and whole seconds, which blur the Markov chain's
    parameters; simulating each candidate and measuring it exactly as the trace was measured avoids
    modelling that blur. Each candidate is averaged over ``seeds`` (one realisation holds only ~200
    bursts). Returns (log error, parameters, statistics), best first.
    """
    results = []
    base = p.replace(target_load=None)
    keys = list(ARRIVAL_GRID)
    for combo in itertools.product(*(ARRIVAL_GRID[k] for k in keys)):
        cand = dict(zip(keys, combo, strict=True))
        q = base.replace(**cand)
        acc = [
            arrival_stats(g.submit + g.meta.origin) for g in (generate_workload(n_jobs, s, q) for s in seeds)
        ]
        mean = {k: float(np.mean([a[k] for a in acc])) for k in BURST_KEYS}
        err = float(sum(abs(math.log(mean[k] / target[k])) for k in BURST_KEYS))
        results.append((err, cand, mean))
    return sorted(results, key=lambda r: r[0])


# ---- measuring ---------------------------------------------------------------------------------


def arrival_stats(submit_epoch: FloatArray) -> dict[str, float]:
    """Every arrival statistic of the model, on absolute (epoch-like) submit times."""
    start, end = stats.active_window(submit_epoch)
    w = submit_epoch[(submit_epoch >= start) & (submit_epoch < end)]
    amp, peak = stats.diurnal_profile(w)
    out = {
        "window_days": (end - start) / stats.DAY,
        "jobs_in_window": float(len(w)),
        "mean_interarrival_s": float(stats.interarrivals(w).mean()),
        "interarrival_cv": stats.interarrival_cv(w),
        "same_second_fraction": stats.same_second_fraction(w),
        "hourly_dispersion": stats.hourly_dispersion(w),
        "diurnal_amplitude": amp,
        "diurnal_peak_hour": peak,
        "weekend_factor": stats.weekend_factor(w, start, end),
    }
    out.update(stats.burst_episodes(w))
    return out


def job_stats(table: JobTable, p: GeneratorParams) -> dict[str, Any]:
    """GPU mix, duration quantiles (clipped at the wall-time limit) and load per job."""
    runtime = table.runtime
    out: dict[str, Any] = {
        "gpu_mix": stats.gpu_mix(table.gpus, p.gpu_counts),
        "duration_q": stats.duration_quantiles(runtime, cap=p.max_runtime_s).tolist(),
        "gpu_seconds_per_job": stats.gpu_seconds_per_job(table, cap=p.max_runtime_s),
    }
    for c in p.duration_classes:
        sel = stats.fold_gpu_counts(table.gpus, p.gpu_counts) >= c.min_gpus
        nxt = [d.min_gpus for d in p.duration_classes if d.min_gpus > c.min_gpus]
        if nxt:
            sel &= stats.fold_gpu_counts(table.gpus, p.gpu_counts) < nxt[0]
        out[f"duration_q_class{c.min_gpus}"] = stats.duration_quantiles(
            runtime[sel], cap=p.max_runtime_s
        ).tolist()
    return out


def measure(traces: Traces, p: GeneratorParams) -> dict[str, Any]:
    """Every calibrated statistic on the traces, plus the fits that produce the defaults."""
    ph, ob, hp = traces.philly, traces.openb, traces.hpc2n
    m: dict[str, Any] = {"philly": job_stats(ph, p)}
    m["philly"].update(arrival_stats(ph.submit + ph.meta.origin))
    folded = stats.fold_gpu_counts(ph.gpus, p.gpu_counts)
    m["philly"]["gpu_counts"] = {int(v): int(np.sum(folded == v)) for v in p.gpu_counts}
    vc_counts = np.bincount(ph.vc)
    m["philly"]["n_vcs"] = int(np.sum(vc_counts > 0))
    m["philly"]["vc_zipf_s"] = stats.zipf_mle(vc_counts)
    fits = []
    for i, c in enumerate(p.duration_classes):
        hi = p.duration_classes[i + 1].min_gpus if i + 1 < len(p.duration_classes) else 10**9
        sel = (folded >= c.min_gpus) & (folded < hi)
        fits.append((c.min_gpus, fit_lognormal_mixture(ph.runtime[sel], len(c.components))))
    m["duration_fits"] = fits

    frac = ob.gpu_milli < WHOLE_GPU_MILLI
    whole = ~frac & (ob.gpus <= p.max_constrained_gpus)
    m["openb"] = {
        "gpu_pods": len(ob),
        "fractional_fraction": stats.fractional_fraction(ob),
        "type_constrained_fraction": stats.type_constrained_fraction(ob),
        "shares": dict(sorted(Counter(ob.gpu_milli[frac].tolist()).items())),
        "type_sets_whole": Counter(ob.type_sets[k] for k in ob.type_set[whole].tolist()).most_common(),
        "type_sets_fractional": Counter(ob.type_sets[k] for k in ob.type_set[frac].tolist()).most_common(),
    }
    single = ~frac & (ob.gpus == 1)
    multi = ob.gpus > 1
    m["openb"]["single_gpu_requests"] = top_shapes(ob.cpus_milli[single], ob.mem_mib[single])
    m["openb"]["multi_gpu_requests"] = top_shapes(
        ob.cpus_milli[multi] // ob.gpus[multi], ob.mem_mib[multi] // ob.gpus[multi]
    )
    m["openb"]["fractional_requests"] = top_shapes(ob.cpus_milli[frac], ob.mem_mib[frac])

    user_counts = np.bincount(hp.user)
    constant, counted = constant_max_users(hp)
    exact, sigma, ratio_q, model_q = fit_estimate_factor(hp, constant, p)
    m["hpc2n"] = {
        "n_users": int(np.sum(user_counts > 0)),
        "user_zipf_s": stats.zipf_mle(user_counts),
        "max_request_users": (len(constant), counted),
        "max_request_user_fraction": len(constant) / max(counted, 1),
        "estimate_exact_fraction": exact,
        "estimate_factor_sigma": sigma,
        "ratio_q": ratio_q.tolist(),
        "model_ratio_q": model_q.tolist(),
    }
    return m


def measure_generated(p: GeneratorParams, n_jobs: int, seed: int) -> dict[str, Any]:
    """The same statistics on a workload generated at Philly's own rate (target_load=None)."""
    at_philly_rate = p.replace(target_load=None)
    g = generate_workload(n_jobs, seed, at_philly_rate)
    out = job_stats(g, p)
    out.update(arrival_stats(g.submit + g.meta.origin))
    out["fractional_fraction"] = stats.fractional_fraction(g)
    out["type_constrained_fraction"] = stats.type_constrained_fraction(g)
    long = g.runtime >= CRASH_S
    out["ratio_q"] = np.quantile(g.estimate[long] / g.runtime[long], RATIO_QS).tolist()
    out["vc_zipf_s"] = stats.zipf_mle(np.bincount(g.vc))
    out["user_zipf_s"] = stats.zipf_mle(np.bincount(g.user))
    return out


def measure_embedded(p: GeneratorParams) -> dict[str, Any]:
    """Offered load and feasibility of the default workload on the embedded preset."""
    spec = load_cluster_spec("embedded")
    g = generate_workload(EMBEDDED_JOBS, EMBEDDED_SEED, p, gpu_types=spec.gpu_types)
    per_type: dict[str, float] = {}
    demand = g.gpu_demand * g.runtime
    for k, ts in enumerate(g.type_sets):
        if len(ts) == 1:
            per_type[ts[0]] = float(demand[g.type_set == k].sum() / demand.sum())
    return {
        "capacity_gpus": spec.total_gpus,
        "gpus_per_type": {t: spec.gpus_of_type(t) for t in spec.gpu_types},
        "offered_load": offered_load(g, spec.total_gpus),
        "expected_load": p.target_load if p.target_capacity_gpus == spec.total_gpus else None,
        "span_days": float(g.submit[-1] / stats.DAY),
        "all_fit": bool(fits_cluster(g, spec).all()),
        "type_constrained_fraction": stats.type_constrained_fraction(g),
        "single_type_demand_share": per_type,
        "interarrival_cv": stats.interarrival_cv(g.submit),
    }


# ---- printing ----------------------------------------------------------------------------------


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def comparison_rows(
    m: dict[str, Any], gen: dict[str, Any], p: GeneratorParams
) -> list[tuple[str, Any, Any, Any]]:
    """(statistic, trace, default, generated) rows of the calibration table."""
    ph, ob, hp = m["philly"], m["openb"], m["hpc2n"]
    rows: list[tuple[str, Any, Any, Any]] = []
    for g, prob in zip(p.gpu_counts, p.gpu_count_probs, strict=True):
        rows.append((f"P(gpus={g}) [Philly]", ph["gpu_mix"][g], prob, gen["gpu_mix"][g]))
    for i, q in enumerate(stats.QUANTILES):
        name = f"duration p{round(q * 100)} s [Philly, cap 72 h]"
        rows.append((name, ph["duration_q"][i], p.runtime_quantile(q), gen["duration_q"][i]))
    for c in p.duration_classes:
        key = f"duration_q_class{c.min_gpus}"
        model_q = [p.runtime_quantile(q, c.min_gpus) for q in stats.QUANTILES]
        rows.append((f"duration p10/50/90/99, gpus class >= {c.min_gpus}", ph[key], model_q, gen[key]))
    rows.append(
        ("GPU-s per job [Philly, cap 72 h]", ph["gpu_seconds_per_job"], None, gen["gpu_seconds_per_job"])
    )
    rows.append(
        (
            "mean inter-arrival s [Philly window]",
            ph["mean_interarrival_s"],
            p.mean_interarrival_s,
            gen["mean_interarrival_s"],
        )
    )
    arrival_rows: tuple[tuple[str, float | None], ...] = (
        ("interarrival_cv", None),
        ("same_second_fraction", None),
        ("hourly_dispersion", None),
        ("burst_hour_fraction", None),
        ("burst_mean_run_h", None),
        ("burst_ratio", None),
        ("jobs_in_bursts", None),
        ("diurnal_amplitude", p.diurnal_amplitude),
        ("diurnal_peak_hour", p.diurnal_peak_hour),
        ("weekend_factor", p.weekend_factor),
    )
    for key, dv in arrival_rows:
        rows.append((f"{key} [Philly window]", ph[key], dv, gen[key]))
    rows.append(("VC Zipf s [Philly]", ph["vc_zipf_s"], p.vc_zipf_s, gen["vc_zipf_s"]))
    rows.append(
        (
            "fractional fraction [openb]",
            ob["fractional_fraction"],
            p.fractional_fraction,
            gen["fractional_fraction"],
        )
    )
    rows.append(
        (
            "type-constrained fraction [openb]",
            ob["type_constrained_fraction"],
            None,
            gen["type_constrained_fraction"],
        )
    )
    rows.append(("user Zipf s [HPC2N]", hp["user_zipf_s"], p.user_zipf_s, gen["user_zipf_s"]))
    rows.append(
        ("max-request users [HPC2N]", hp["max_request_user_fraction"], p.max_request_user_fraction, None)
    )
    rows.append(
        (
            "estimate exact fraction [HPC2N fit]",
            hp["estimate_exact_fraction"],
            p.estimate_exact_fraction,
            None,
        )
    )
    rows.append(
        ("estimate factor sigma [HPC2N fit]", hp["estimate_factor_sigma"], p.estimate_factor_sigma, None)
    )
    rows.append(
        ("request/runtime p10..p90 [HPC2N, >= 60 s]", hp["ratio_q"], hp["model_ratio_q"], gen["ratio_q"])
    )
    return rows


def print_report(m: dict[str, Any], gen: dict[str, Any], emb: dict[str, Any], p: GeneratorParams) -> None:
    rows = comparison_rows(m, gen, p)
    w = max(len(r[0]) for r in rows)
    print(f"{'statistic':<{w}}  {'trace':>14}  {'default':>14}  {'generated':>14}")
    for name, tv, dv, gv in rows:
        cells = [_fmt(v) if v is not None else "-" for v in (tv, dv, gv)]
        print(f"{name:<{w}}  {cells[0]:>14}  {cells[1]:>14}  {cells[2]:>14}")
    print("\n# fitted values (paste into params.py when they move)")
    print("gpu_count_weights =", tuple(float(v) for v in m["philly"]["gpu_counts"].values()))
    print("n_vcs =", m["philly"]["n_vcs"], " vc_zipf_s =", round(m["philly"]["vc_zipf_s"], 3))
    for min_gpus, comps in m["duration_fits"]:
        body = ", ".join(f"({w_:.3f}, {med:.0f} s, {sd:.2f})" for w_, med, sd in comps)
        print(f"duration class >= {min_gpus} GPUs (weight, median, sigma): {body}")
    ob = m["openb"]
    print("fractional_fraction =", round(ob["fractional_fraction"], 4), "of", ob["gpu_pods"], "GPU pods")
    print("fractional shares:", ob["shares"])
    print("type_sets_whole:", ob["type_sets_whole"])
    print("type_sets_fractional:", ob["type_sets_fractional"])
    for key in ("single_gpu_requests", "multi_gpu_requests", "fractional_requests"):
        shapes, covered = ob[key]
        print(f"{key} (cpu_milli, mem_mib, pods), covering {covered:.1%}:", shapes)
    hp = m["hpc2n"]
    print("n_users =", hp["n_users"], " user_zipf_s =", round(hp["user_zipf_s"], 3))
    print(
        "max_request_user_fraction =",
        hp["max_request_users"],
        "->",
        round(hp["max_request_user_fraction"], 4),
    )
    print(
        "estimate_exact_fraction =", round(hp["estimate_exact_fraction"], 3),
        " estimate_factor_sigma =", round(hp["estimate_factor_sigma"], 2),
    )  # fmt: skip
    print("\n# embedded preset, default workload (20,000 jobs, seed 0)")
    for k, v in emb.items():
        print(f"{k}: {_fmt(v) if not isinstance(v, dict) else {a: round(b, 4) for a, b in v.items()}}")


def main(argv: list[str] | None = None) -> int:
    from shared.config import get_settings

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument(
        "--traces", type=Path, default=None, help="traces folder (default: the traces_dir setting)"
    )
    ap.add_argument("--jobs", type=int, default=80_702, help="jobs in the generated comparison workload")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="also write every number to this file")
    ap.add_argument(
        "--fit-arrivals", action="store_true", help="also grid-search the burst/batch parameters (~1 min)"
    )
    args = ap.parse_args(argv)
    root = args.traces if args.traces is not None else get_settings().traces_dir
    if not (root / PHILLY).exists():
        print(f"no traces under {root} (need {PHILLY}, {OPENB}, {HPC2N})", file=sys.stderr)
        return 2
    p = GeneratorParams()
    m = measure(load_traces(root), p)
    gen = measure_generated(p, args.jobs, args.seed)
    emb = measure_embedded(p)
    print_report(m, gen, emb, p)
    if args.fit_arrivals:
        print("\n# burst/batch grid search against Philly (best 5: log error, parameters, statistics)")
        for err, cand, got in fit_arrivals(m["philly"], p, args.jobs)[:5]:
            print(f"{err:.3f}", cand, {k: round(v, 3) for k, v in got.items()})
    if args.json is not None:
        args.json.write_text(
            json.dumps({"trace": m, "generated": gen, "embedded": emb}, indent=1, default=str)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
