"""The promotion gate: a candidate replaces the current model only when it is measurably better.

Why a gate at all: PPO fine-tuning can make a policy worse (a bad workload slice, a reward that
drifted), and a worse prioritizer in production costs every job on the cluster. So a candidate is
replayed through the simulator on held-out windows beside the model it would replace (or, when the
cluster has none, beside the base policy it was trained against), the two run on *the same* windows,
and the candidate passes only when

- its relative improvement on the gate's metric is at least ``margin`` (2% by default), and
- the lower end of the paired-bootstrap confidence interval of that improvement is above zero
  (the interval excludes "no better").

Both conditions, not one: a large mean gain carried by one lucky window has a wide interval that
reaches zero, and a tiny but consistent gain (interval above zero) is not worth a model change.
The evaluation is the one ``hylo evaluate`` does (``shared.rl``: greedy decisions, the same warm-up
before every window, chronological train/test split so the windows were not trained on) and the
interval is ``shared.metrics.paired_difference``. Comparing a model with itself gives identical
per-window values, an improvement of exactly 0 and a zero-width interval at 0: refused whatever the
margin.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from shared.config import PROJECT_ROOT, HyloBaseSettings
from shared.metrics import PairedDifference, Window, chronological_split, make_windows, paired_difference
from shared.model import ActorCritic, ModelCard
from shared.rl.episodes import EpisodeRunner, episode_seed
from shared.rl.reward import METRIC_NAMES, RewardSpec, window_score
from shared.rl.setup import RunSetup, load_runner, load_trained, trained_estimates

DEFAULT_WINDOW_SIZE = 256
DEFAULT_JOBS = 20_000
DEFAULT_TRAIN_FRACTION = 0.9
#: the smallest window the gate shrinks to when the held-out part is short (``fit_windows``)
MIN_WINDOW_SIZE = 16


class GateError(Exception):
    """The gate cannot be run (bad configuration, unusable checkpoint, no windows)."""


class GateSettings(HyloBaseSettings):
    """How the promotion gate evaluates a candidate (``HYLO_GATE_*`` or ``gate_*`` in hylo.toml).

    Every field left unset follows the candidate's card (the trace, cluster and window size it was
    trained with), as ``hylo evaluate`` does, so by default the gate measures the candidate on the
    held-out part of its own workload.
    """

    model_config = SettingsConfigDict(env_prefix="HYLO_GATE_", extra="ignore")

    trace: str | None = Field(default=None, description="trace name or path; 'embedded' = generated")
    cluster: str | None = Field(default=None, description="cluster preset or spec file")
    jobs: int | None = Field(default=None, ge=2, description="size of the generated workload")
    windows: int = Field(default=20, ge=1, description="held-out windows compared")
    min_windows: int = Field(
        default=5, ge=1, description="fewer windows than this (a short test part) refuse the candidate"
    )
    window_size: int | None = Field(default=None, ge=1, description="jobs per window")
    warmup: int | None = Field(default=None, ge=0, description="jobs simulated before each window")
    train_fraction: float | None = Field(
        default=None, gt=0.0, lt=1.0, description="windows come from after this chronological split"
    )
    overlap: bool = Field(default=False, description="allow overlapping windows (small workloads)")
    estimates: Literal["noisy", "history", "predicted", "oracle", "trace"] | None = Field(
        default=None, description="estimate model (default: the candidate card's; noisy if it has none)"
    )
    metric: str | None = Field(default=None, description="wait | jct | bsld | utilization (default: card's)")
    margin: float = Field(
        default=0.02, ge=0.0, description="relative improvement required (0.02 = 2% better)"
    )
    ci: float = Field(default=0.95, gt=0.0, lt=1.0, description="confidence level of the interval")
    n_boot: int = Field(default=2000, ge=100, description="bootstrap resamples")
    seed: int = Field(default=0, description="seed of the window choice and the bootstrap")


@dataclass(frozen=True)
class GateResult:
    """The gate's verdict and the numbers behind it (stored with the version and its history).

    ``reference`` is ``model:<version>`` or ``policy:<name>``; means and values are in the metric's
    unit (seconds for wait and JCT); ``rel_*`` is the relative improvement (positive = candidate
    better) with its interval at level ``ci``.
    """

    passed: bool
    reason: str
    metric: str
    lower_is_better: bool
    reference: str
    margin: float
    ci: float
    n_windows: int
    candidate_mean: float
    reference_mean: float
    rel_improvement: float
    rel_low: float
    rel_high: float
    mean_diff: float
    diff_low: float
    diff_high: float
    frac_candidate_better: float
    windows: tuple[str, ...] = ()
    candidate_values: tuple[float, ...] = ()
    reference_values: tuple[float, ...] = ()
    setup: dict[str, Any] = field(default_factory=dict)

    def metrics(self) -> dict[str, float]:
        """The summary numbers (finite ones only): the ``metrics`` of the version and its message."""
        values = {
            "margin": self.margin,
            "ci": self.ci,
            "n_windows": float(self.n_windows),
            "candidate_mean": self.candidate_mean,
            "reference_mean": self.reference_mean,
            "rel_improvement": self.rel_improvement,
            "rel_low": self.rel_low,
            "rel_high": self.rel_high,
            "mean_diff": self.mean_diff,
            "diff_low": self.diff_low,
            "diff_high": self.diff_high,
            "frac_candidate_better": self.frac_candidate_better,
        }
        return {k: float(v) for k, v in values.items() if math.isfinite(v)}

    def summary(self) -> dict[str, Any]:
        """What ``model_versions.metrics`` keeps: the numbers plus what they measure."""
        return {
            **self.metrics(),
            "passed": self.passed,
            "metric": self.metric,
            "lower_is_better": self.lower_is_better,
            "reference": self.reference,
        }

    def to_dict(self) -> dict[str, Any]:
        """Everything, JSON-ready (non-finite numbers become None): the history's detail."""
        safe: dict[str, Any] = _json_safe(asdict(self))
        return safe


def _json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def _pct(x: float) -> str:
    return f"{x:+.2%}" if math.isfinite(x) else "n/a"


def decide(
    candidate: Sequence[float],
    reference: Sequence[float],
    *,
    metric: str,
    reference_label: str,
    margin: float,
    ci: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    windows: Sequence[str] = (),
    setup: dict[str, Any] | None = None,
    min_windows: int = 1,
    note: str = "",
) -> GateResult:
    """The verdict on paired per-window values of the candidate and the reference (pure function).

    Passes iff at least ``min_windows`` windows compare, the relative improvement is >= ``margin``
    and the interval's lower end is > 0. (One window gives a zero-width interval that "excludes
    zero" whatever the luck, hence the minimum.) ``note`` (how the windows were chosen, e.g. sized
    to a short held-out part) ends the reason, so whoever reads the verdict reads it too.
    """
    if metric not in METRIC_NAMES:
        raise GateError(f"unknown gate metric {metric!r}; choose from {', '.join(METRIC_NAMES)}")
    if len(candidate) != len(reference) or not candidate:
        raise GateError(
            f"the gate needs the same non-zero number of windows for both models, got "
            f"{len(candidate)} and {len(reference)}"
        )
    lower = metric != "utilization"
    try:
        diff: PairedDifference = paired_difference(
            list(candidate), list(reference), lower_is_better=lower, n_boot=n_boot, ci=ci, seed=seed
        )
    except ValueError as err:  # every window NaN for one of them (no job finished)
        raise GateError(f"no window can compare the two models on {metric}: {err}") from None
    direction = "lower is better" if lower else "higher is better"
    pairs = [
        (c, r) for c, r in zip(candidate, reference, strict=True) if not (math.isnan(c) or math.isnan(r))
    ]
    cand_mean = sum(c for c, _ in pairs) / len(pairs)
    ref_mean = sum(r for _, r in pairs) / len(pairs)
    head = (
        f"{metric} ({direction}) on {diff.n} held-out windows: candidate {cand_mean:.4g} vs "
        f"{reference_label} {ref_mean:.4g}, improvement {_pct(diff.rel_improvement)} "
        f"[{ci:.0%} CI {_pct(diff.rel_low)}, {_pct(diff.rel_high)}]"
    )
    if diff.n < min_windows:
        passed = False
        why = (
            f"only {diff.n} comparable windows, fewer than the {min_windows} required: an interval over "
            "so few windows is not evidence (HYLO_GATE_WINDOWS, HYLO_GATE_WINDOW_SIZE)"
        )
    elif not math.isfinite(diff.rel_improvement):
        passed = False
        why = (
            f"the {reference_label} mean is 0 on these windows, so there is nothing to improve; "
            "choose windows where jobs queue (HYLO_GATE_TRACE, HYLO_GATE_CLUSTER, HYLO_GATE_WINDOWS)"
        )
    elif diff.rel_improvement < margin:
        passed = False
        why = f"below the required margin of {_pct(margin)}"
    elif not diff.rel_low > 0.0:
        passed = False
        why = "the confidence interval reaches zero (not reliably better)"
    else:
        passed = True
        why = f">= margin {_pct(margin)} and the interval excludes zero"
    return GateResult(
        passed=passed,
        reason=f"{'passed' if passed else 'refused'}: {head}; {why}" + (f"; {note}" if note else ""),
        metric=metric,
        lower_is_better=lower,
        reference=reference_label,
        margin=margin,
        ci=ci,
        n_windows=diff.n,
        candidate_mean=cand_mean,
        reference_mean=ref_mean,
        rel_improvement=diff.rel_improvement,
        rel_low=diff.rel_low,
        rel_high=diff.rel_high,
        mean_diff=diff.mean_diff,
        diff_low=diff.diff_low,
        diff_high=diff.diff_high,
        frac_candidate_better=diff.frac_a_better,
        windows=tuple(windows),
        candidate_values=tuple(float(v) for v in candidate),
        reference_values=tuple(float(v) for v in reference),
        setup=dict(setup or {}),
    )


@dataclass(frozen=True)
class WindowPlan:
    """The gate's windows over a held-out part: their size and number, and why they differ from
    what was asked (``note``; empty when they do not)."""

    size: int
    count: int
    overlap: bool
    note: str = ""


def fit_windows(held_out: int, size: int, count: int, *, overlap: bool = False) -> WindowPlan:
    """Windows that fit a held-out part of ``held_out`` jobs: ``count`` of ``size`` when they fit.

    Why size them to the data: a retraining run on a small cluster, or right after a short ``hylo
    run``, holds out a few hundred jobs; asking for 10 windows of 128 there used to stop the gate
    ("fewer than one window"), or to overlap windows until the interval said nothing. Disjoint
    windows, smaller ones, measure the candidate on every held-out job once. So when ``count``
    disjoint windows of ``size`` do not fit (and ``overlap`` was not asked for where one window
    fits), the windows shrink to ``held_out // count`` jobs, not below ``MIN_WINDOW_SIZE``; below
    that the count drops instead (the gate then refuses for too few windows, saying so).
    """
    if held_out < 1:
        raise GateError("the held-out part is empty: nothing to gate on")
    if held_out >= size * count or (overlap and held_out >= size):
        return WindowPlan(size, count, overlap)
    fitted = min(size, max(MIN_WINDOW_SIZE, held_out // count), held_out)
    windows = min(count, held_out // fitted)
    note = (
        f"windows sized to the data: the held-out part holds {held_out} jobs, fewer than {count} "
        f"windows of {size}, so {windows} disjoint window(s) of {fitted} jobs"
    )
    return WindowPlan(fitted, windows, False, note)


def _extra_int(card: ModelCard, key: str) -> int | None:
    value = card.training.extra.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _gate_metric(card: ModelCard, settings: GateSettings) -> str:
    metric = settings.metric
    if metric is None:
        spec = RewardSpec.parse(card.training.metric)
        if len(spec.metrics) != 1:
            raise GateError(
                f"the candidate was trained on a mix of metrics ({card.training.metric}); "
                f"name the gate's metric with HYLO_GATE_METRIC ({', '.join(METRIC_NAMES)})"
            )
        metric = spec.metrics[0]
    if metric not in METRIC_NAMES:
        raise GateError(f"unknown gate metric {metric!r}; choose from {', '.join(METRIC_NAMES)}")
    return metric


def _trained_cluster(cluster_arg: object) -> str | None:
    """The ``--cluster`` the candidate was trained with: a preset, or a spec file whose relative path
    was relative to the checkout (``hylo train`` runs there), so it is found from any directory."""
    if not isinstance(cluster_arg, str):
        return None
    path = Path(cluster_arg)
    if not path.is_absolute() and not path.exists() and (PROJECT_ROOT / path).is_file():
        return str(PROJECT_ROOT / path)
    return cluster_arg


def _load(path: Path, what: str) -> tuple[ActorCritic, ModelCard, Any]:
    from shared.model import CheckpointError

    try:
        return load_trained(path)
    except CheckpointError as err:
        raise GateError(f"{what} checkpoint {path} cannot be used: {err}") from None


def _learned_values(
    runner: EpisodeRunner, model: ActorCritic, base: str, windows: Sequence[Window], metric: str, seed: int
) -> list[float]:
    values = []
    for k, w in enumerate(windows):
        generator = torch.Generator().manual_seed(episode_seed(seed, 1_000_000, k))
        policy = runner.learned_policy(model, w, "greedy", generator, base)
        policy.record = False
        values.append(window_score(runner.simulate(policy, w), metric))
    return values


def evaluate_gate(
    candidate: Path,
    reference: Path | None,
    settings: GateSettings,
    *,
    reference_label: str | None = None,
) -> GateResult:
    """Run the gate: ``candidate`` against the ``reference`` checkpoint, or its base policy if None.

    CPU-bound (a few seconds per window of 256 jobs); callers in async code run it in a thread.
    """
    torch.set_num_threads(1)
    model, card, schema = _load(candidate, "candidate")
    info, extra = card.training, card.training.extra
    metric = _gate_metric(card, settings)
    sim_cfg = extra.get("sim_config")
    paper = isinstance(sim_cfg, dict) and sim_cfg.get("backfill") == "none"
    trace = settings.trace or info.trace
    cluster = settings.cluster
    if cluster is None and settings.trace is None:
        cluster = _trained_cluster(extra.get("cluster_arg"))
    setup = RunSetup(
        base_policy=info.base_policy,
        metric=metric,
        paper=paper,
        estimates=settings.estimates or trained_estimates(info),
        warmup=settings.warmup if settings.warmup is not None else _extra_int(card, "warmup"),
        sampling=schema.sampling.mode,
        feature_set=schema.sampling.feature_set,  # predictions attached when the model reads them
        seed=info.seed,
        n_jobs=settings.jobs or _extra_int(card, "jobs") or DEFAULT_JOBS,
    )
    from shared.traces import TraceFormatError, TraceNotFoundError

    try:
        work, runner = load_runner(None if trace == "embedded" else trace, cluster, setup)
    except (TraceFormatError, TraceNotFoundError, ValueError, OSError) as err:
        raise GateError(
            f"cannot load the gate's workload (trace {trace!r}, cluster {cluster!r}): {err}; "
            "set HYLO_GATE_TRACE / HYLO_GATE_CLUSTER (or --trace / --gate-cluster)"
        ) from None
    size = settings.window_size or _extra_int(card, "window_size") or DEFAULT_WINDOW_SIZE
    fraction_default = extra.get("train_fraction")
    fraction = settings.train_fraction or (
        fraction_default if isinstance(fraction_default, float) else DEFAULT_TRAIN_FRACTION
    )
    try:
        _, test = chronological_split(len(work.bound.jobs), fraction)
        plan = fit_windows(len(test), size, settings.windows, overlap=settings.overlap)
        windows = make_windows(test, plan.size, plan.count, seed=settings.seed, overlap=plan.overlap)
    except ValueError as err:
        raise GateError(f"no held-out windows in {work.name}: {err}") from None

    cand_values = _learned_values(runner, model, info.base_policy, windows, metric, settings.seed)
    if reference is None:
        label = reference_label or f"policy:{info.base_policy}"
        ref_values = [window_score(runner.simulate(info.base_policy, w), metric) for w in windows]
    else:
        label = reference_label or f"model:{reference}"
        ref_model, ref_card, ref_schema = _load(reference, "reference")
        ref_runner = runner
        if ref_schema.hash != schema.hash:  # same workload and simulator, the reference's features
            ref_settings = replace(runner.settings, sampling=ref_schema.sampling)
            ref_runner = EpisodeRunner(runner.workload, ref_settings, runner.exclusions)
        ref_values = _learned_values(
            ref_runner, ref_model, ref_card.training.base_policy, windows, metric, settings.seed
        )
    described = {
        "workload": work.name,
        "cluster": work.spec.name,
        "window_size": plan.size,
        "asked_window_size": size,
        "windows_note": plan.note,
        "warmup": runner.settings.warmup,
        "train_fraction": fraction,
        "test_jobs": [test.start, test.stop],
        "backfill": runner.settings.config.backfill,
        "estimates": setup.estimates,
        "seed": settings.seed,
        "n_boot": settings.n_boot,
    }
    return decide(
        cand_values,
        ref_values,
        metric=metric,
        reference_label=label,
        margin=settings.margin,
        ci=settings.ci,
        n_boot=settings.n_boot,
        seed=settings.seed,
        windows=[w.label for w in windows],
        setup=described,
        min_windows=settings.min_windows,
        note=plan.note,
    )
