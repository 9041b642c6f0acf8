"""One retraining run: rebuild -> (imitate) -> fine-tune -> register -> gate -> promote or record why not.

1. **Workload.** The cluster's finished jobs (``shared.retrain.rebuild_workload``; the last
   ``history_s`` seconds of submissions, or all), with the configured trace files placed before
   them (``mix_tables``); missing estimates of trace jobs are filled (``noisy``). Written as Hylo's
   own job table in the run's folder (``write_workload``, ``workload.npz``: fractional GPUs, GPU
   types, CPUs and memory exactly as recorded): training, the card and the gate all use that file,
   so the gate replays exactly the workload the candidate was trained on. The split holds out the
   newest ``holdout_fraction`` of the *recorded* jobs (``train_fraction_for``). Training windows
   larger than the training part allows are shrunk to fit it, and the gate sizes its windows to the
   held-out part (``shared.registry.gate.fit_windows``); both say so.
2. **Start.** PPO starts from the cluster's current model (its weights, its model shape and its
   feature sampling rule), or, when the cluster has none, from an imitation of the base policy
   (``shared.imitation``, ``imitation_epochs`` > 0), or from random weights.
3. **Fine-tune.** ``shared.rl.trainer.train(initial_state=...)`` for ``epochs`` epochs; the best
   validation epoch is saved as a checkpoint with a card (``data_window``, ``fine_tuned_from``,
   ``imitation``, the trigger, the workload notes).
4. **Register and gate.** The checkpoint is registered as a candidate and promoted through the
   registry's gate (``Registry.promote``) against the current model on the held-out windows, or
   against the base policy when there is none. The registry publishes the promotion on ``models``;
   a refusal stays a candidate with the gate's reason, which the run's report repeats. Without a
   NATS publisher (``hylo retrain --local`` where no server runs) the candidate is gated all the
   same (``Registry.evaluate``): refused, or ``passed`` but not promoted, the verdict on it.

The CPU-bound steps run in a worker thread (``asyncio.to_thread``), so the service keeps answering
its health checks and API while a run trains.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from sqlalchemy.ext.asyncio import AsyncEngine

from services.trainer.settings import TrainerSettings
from shared.bus.publisher import Publisher
from shared.domain.jobs import JobTable
from shared.metrics import chronological_split, make_windows
from shared.model import CheckpointError, ModelConfig, save_checkpoint
from shared.registry import GateSettings, Registry, RegistryError, VersionInfo
from shared.retrain import (
    WORKLOAD_FILE,
    latest_submit,
    mix_tables,
    rebuild_workload,
    train_fraction_for,
    write_workload,
)
from shared.rl.episodes import EpisodeRunner
from shared.rl.setup import RunSetup, load_runner, load_trained, make_card
from shared.rl.trainer import TrainConfig, split_windows, train

__all__ = ["RetrainReport", "retrain_once"]

ACTOR = "trainer"


@dataclass
class RetrainReport:
    """What a run did; ``status`` is ``promoted``, ``refused`` (the gate said no), ``passed`` (the
    gate said yes, but with no NATS publisher nothing could be announced: still a candidate),
    ``skipped`` (too few jobs) or ``failed`` (an error, named in ``reason``)."""

    run_id: str
    cluster: str
    trigger: str
    status: str = "running"
    reason: str = ""
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    finished_at: str | None = None
    version: str | None = None
    previous: str | None = None
    fine_tuned_from: str | None = None
    recorded_jobs: int = 0
    workload_jobs: int = 0
    data_window: list[float] | None = None
    workload_path: str | None = None
    checkpoint: str | None = None
    imitation: dict[str, Any] | None = None
    train: dict[str, Any] | None = None
    gate: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def new_run_id() -> str:
    return f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


@dataclass
class _Trained:
    checkpoint: Path
    imitation: dict[str, Any] | None
    train: dict[str, Any]


def _train_blocking(
    settings: TrainerSettings,
    *,
    workload_path: Path,
    spec_arg: str,
    base_policy: str,
    train_fraction: float,
    current: VersionInfo | None,
    run_dir: Path,
    card_extra: dict[str, Any],
) -> _Trained:
    """Steps 2 and 3 (module docstring): CPU-bound, run in a worker thread."""
    torch.set_num_threads(1)
    model_cfg = ModelConfig()
    sampling = "state"
    initial_state: dict[str, torch.Tensor] | None = None
    if current is not None:
        model, card, schema = load_trained(current.uri)
        model_cfg, sampling = card.model, schema.sampling.mode
        initial_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    setup = RunSetup(
        base_policy=base_policy,
        metric=settings.metric,
        estimates="trace",
        warmup=settings.warmup,
        sampling=sampling,
        seed=settings.seed,
    )
    work, runner = load_runner(str(workload_path), spec_arg, setup)
    cfg = TrainConfig(
        epochs=settings.epochs,
        windows_per_epoch=settings.windows_per_epoch,
        window_size=settings.window_size,
        seed=settings.seed,
        workers=settings.workers,
        train_fraction=train_fraction,
        validation_windows=4,
        model=model_cfg,
    )
    imitation = None
    if initial_state is None and settings.imitation_epochs > 0:
        initial_state, imitation = _imitate(runner, cfg, settings)
    result = train(runner, cfg, initial_state=initial_state)
    last = result.history[-1]
    val_rewards = [r["val_reward"] for r in result.history if "val_reward" in r]
    summary = {
        "epochs": int(last["epoch"]),
        "best_epoch": result.best_epoch,
        "wall_seconds": result.wall_seconds,
        "val_reward_first": _finite(result.history[0].get("val_reward")),
        "val_reward_best": _finite(max(val_rewards)) if val_rewards else None,
    }
    card = make_card(
        result.best_model,
        runner,
        trace=str(workload_path),
        cluster=work.spec.name,
        seed=settings.seed,
        epochs=int(last["epoch"]),
        extra={
            **card_extra,
            "best_epoch": result.best_epoch,
            "train_range": [result.train_range.start, result.train_range.stop],
            "window_size": settings.window_size,
            "train_fraction": train_fraction,
            "cluster_arg": spec_arg,
            "imitation_epochs": settings.imitation_epochs if imitation is not None else 0,
            "imitation": imitation,
            "wall_seconds": result.wall_seconds,
        },
    )
    checkpoint = run_dir / "checkpoint"
    save_checkpoint(checkpoint, result.best_model, card)
    return _Trained(checkpoint, imitation, summary)


def _imitate(
    runner: EpisodeRunner, cfg: TrainConfig, settings: TrainerSettings
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    from shared.imitation import ImitationConfig, imitate

    fit, _ = split_windows(len(runner.workload.jobs), cfg)
    windows = make_windows(fit, cfg.window_size, settings.imitation_windows, seed=cfg.seed, overlap=True)
    res = imitate(
        runner, windows, cfg.model, ImitationConfig(epochs=settings.imitation_epochs, seed=cfg.seed)
    )
    info = {
        "epochs": settings.imitation_epochs,
        "windows": len(windows),
        "demonstrations": res.demonstrations,
        "nll_per_pick_first": res.history[0]["nll_per_pick"],
        "nll_per_pick_last": res.history[-1]["nll_per_pick"],
        "seconds": res.wall_seconds,
    }
    return res.state, info


def _load_traces(names: list[str], seed: int) -> list[JobTable]:
    from shared.traces import apply_estimates, load_trace

    return [apply_estimates(load_trace(name).table, "noisy", seed) for name in names]


async def retrain_once(
    engine: AsyncEngine,
    publisher: Publisher | None,
    settings: TrainerSettings,
    *,
    cluster: str,
    spec_arg: str,
    base_policy: str = "fcfs",
    trigger: str = "api",
    gate: GateSettings | None = None,
    run_id: str | None = None,
    report: RetrainReport | None = None,
) -> RetrainReport:
    """One run (module docstring). Never raises for a run that cannot finish: the report says why.

    ``publisher`` is needed for a promotion; without one the candidate is registered and gated
    (``Registry.promote`` refuses to promote without a publisher: the report says so).
    """
    t0 = time.perf_counter()
    rep = report or RetrainReport(run_id=run_id or new_run_id(), cluster=cluster, trigger=trigger)
    try:
        await _run(engine, publisher, settings, rep, spec_arg, base_policy, gate)
    except CheckpointError as err:  # the current model's checkpoint: it cannot be fine-tuned
        rep.status = "failed"
        rep.reason = f"the current model {rep.previous!r} cannot be loaded: {type(err).__name__}: {err}"
    except (RegistryError, ValueError, OSError, RuntimeError) as err:
        rep.status, rep.reason = "failed", f"{type(err).__name__}: {err}"
    rep.finished_at = datetime.now(UTC).isoformat()
    rep.seconds = time.perf_counter() - t0
    return rep


async def _run(
    engine: AsyncEngine,
    publisher: Publisher | None,
    settings: TrainerSettings,
    rep: RetrainReport,
    spec_arg: str,
    base_policy: str,
    gate: GateSettings | None,
) -> None:
    cluster = rep.cluster
    newest = await latest_submit(engine, cluster)
    if newest is None:
        rep.status, rep.reason = "skipped", f"no finished jobs of cluster {cluster!r} in the database"
        return
    since = newest - settings.history_s if settings.history_s is not None else None
    rebuilt = await rebuild_workload(
        engine, cluster, since_s=since, gpu_types_by_partition=settings.gpu_types_by_partition
    )
    rep.recorded_jobs = len(rebuilt.table)
    rep.data_window = [rebuilt.jobs[0].submit_s, rebuilt.jobs[-1].submit_s] if rebuilt.jobs else None
    rep.notes += [e.describe() for e in rebuilt.exclusions]
    if rep.recorded_jobs < settings.min_jobs:
        rep.status = "skipped"
        rep.reason = f"{rep.recorded_jobs} finished jobs recorded, fewer than min_jobs={settings.min_jobs}"
        return
    traces = await asyncio.to_thread(_load_traces, settings.traces, settings.seed)
    mixed = mix_tables(rebuilt.table, traces)
    rep.workload_jobs = len(mixed)
    fraction = train_fraction_for(len(mixed), len(rebuilt.table), settings.holdout_fraction)
    settings = _fit_training_windows(settings, len(chronological_split(len(mixed), fraction)[0]), rep)
    run_dir = settings.out_dir / cluster / rep.run_id
    workload_path = run_dir / WORKLOAD_FILE
    await asyncio.to_thread(write_workload, mixed, workload_path)
    rep.workload_path = str(workload_path)

    registry = Registry(engine, publisher, actor=ACTOR)
    current = await registry.current(cluster)
    rep.previous = current.version if current else None
    rep.fine_tuned_from = rep.previous
    card_extra: dict[str, Any] = {
        "run_id": rep.run_id,
        "trigger": rep.trigger,
        "data_window": rep.data_window,
        "recorded_jobs": rep.recorded_jobs,
        "traces": list(settings.traces),
        "fine_tuned_from": rep.fine_tuned_from,
        "workload_notes": list(rep.notes),
        "holdout_fraction": settings.holdout_fraction,
    }
    trained = await asyncio.to_thread(
        _train_blocking,
        settings,
        workload_path=workload_path,
        spec_arg=spec_arg,
        base_policy=base_policy,
        train_fraction=fraction,
        current=current,
        run_dir=run_dir,
        card_extra=card_extra,
    )
    rep.checkpoint, rep.imitation, rep.train = str(trained.checkpoint), trained.imitation, trained.train

    version = f"rt-{rep.run_id}"
    info, _ = await registry.register(trained.checkpoint, cluster=cluster, version=version)
    rep.version = info.version
    gate_settings = (gate or GateSettings()).model_copy(
        update={
            "trace": str(workload_path),
            "cluster": spec_arg,
            "estimates": "trace",
            "train_fraction": fraction,
            "window_size": settings.window_size,
            "warmup": settings.warmup,
            "windows": settings.gate_windows,
            "overlap": False,  # disjoint windows, sized to the held-out part (gate.fit_windows)
            "metric": settings.metric,
        }
    )
    await _gate(registry, info.version, gate_settings, rep)


def _fit_training_windows(settings: TrainerSettings, n_train: int, rep: RetrainReport) -> TrainerSettings:
    """``settings`` with training windows that fit a training part of ``n_train`` jobs.

    Why: the training windows are drawn from the training part less its validation tail, and a
    window larger than that cannot be drawn (a small cluster's first run, or one right after a short
    ``hylo run``); a quarter of the part leaves room for several distinct windows. Noted in the
    report when it changes anything."""
    fitted = min(settings.window_size, max(2, n_train // 4))
    if fitted == settings.window_size:
        return settings
    rep.notes.append(
        f"training windows sized to the data: the training part holds {n_train} jobs, so windows of "
        f"{fitted} jobs instead of {settings.window_size}"
    )
    return settings.model_copy(update={"window_size": fitted})


async def _gate(registry: Registry, version: str, gate: GateSettings, rep: RetrainReport) -> None:
    """Step 4's verdict: promote through the gate, or, with no NATS publisher to announce a
    promotion on, gate the candidate and keep the verdict on it (``Registry.evaluate``)."""
    if registry.publisher is None:
        verdict = await registry.evaluate(version, gate=gate)
        rep.gate = verdict.summary()
        rep.status = "passed" if verdict.passed else "refused"
        rep.reason = verdict.reason
        if verdict.passed:
            rep.reason += (
                "; not promoted: no NATS server to announce it on (hylo models promote "
                f"{version} --nats-url ... promotes it)"
            )
        return
    result = await registry.promote(version, gate=gate)
    rep.gate = result.gate.summary() if result.gate is not None else None
    rep.status = "promoted" if result.promoted else "refused"
    rep.reason = result.gate.reason if result.gate is not None else rep.status
