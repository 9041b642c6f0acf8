"""``hylo train``: train the learned prioritizer with PPO against a base policy on a trace.

A run writes into a folder of its own and never over another run's (``shared/cli/train_folder.py``),
keeps a checkpoint and its training state as it goes and on Ctrl-C (``train_checkpoint.py``), and
``--resume FOLDER`` continues it from the folder's settings and state (``docs/trainer.md``).
"""

from __future__ import annotations

import csv
import json
import math
import time
from pathlib import Path
from typing import Annotated, Any

import torch
import typer
from rich.markup import escape

from shared.cli.checks import check_estimates, check_jobs, check_load, validation_line
from shared.cli.common import LOAD_DEFINITION_HELP, console, fail, load_definition_option, progress_bar
from shared.cli.ray_options import RayAddress, RayFlag, computing_on
from shared.cli.train_checkpoint import EpochSaver, TrainRun, stop_interrupted, write_checkpoint
from shared.cli.train_folder import DEFAULT_ROOT, RunPlan, check_folder, open_run_folder, plan_run
from shared.cli.train_options import TrainOptions
from shared.domain.load import DEFAULT_LOAD_DEFINITION
from shared.features import SamplingConfig
from shared.features.catalog import DEFAULT_FEATURE_SET, FEATURE_SETS
from shared.metrics import Window, chronological_split, make_windows
from shared.model import ModelConfig
from shared.policies import POLICY_NAMES, needs_predictions
from shared.rl.episodes import EpisodeRunner
from shared.rl.evaluation import GREEDY, evaluate_learned, mean_metric, mean_reward
from shared.rl.parallel import Parallelism, RunnerPool, ray_target, runner_pool
from shared.rl.plots import training_curve
from shared.rl.ppo import PPOConfig
from shared.rl.reward import RewardSpec
from shared.rl.run_log import SCALARS_FILE, TENSORBOARD_DIR, ScalarLog
from shared.rl.setup import RunSetup, load_runner
from shared.rl.train_state import STATE_FILE, TrainingInterrupted, TrainState, is_interrupt
from shared.rl.trainer import TrainConfig, TrainResult, continues, split_windows, train
from shared.sim.evaluate import PreparedWorkload


def _clean(value: float) -> float | None:
    return value if math.isfinite(value) else None


def train_command(
    ctx: typer.Context,
    trace: Annotated[
        str | None, typer.Option(help="trace name or path (default: the embedded workload)")
    ] = None,
    cluster: Annotated[
        str | None, typer.Option(help="cluster preset or spec file (default: the trace's)")
    ] = None,
    base_policy: Annotated[str, typer.Option(help=f"base policy, from {', '.join(POLICY_NAMES)}")] = "fcfs",
    metric: Annotated[
        str, typer.Option(help="wait | jct | bsld | utilization, or a mix 'wait:0.5,bsld:0.5'")
    ] = "bsld",
    epochs: Annotated[int, typer.Option(help="PPO epochs (one update each)")] = 30,
    windows_per_epoch: Annotated[int, typer.Option(help="training windows (episodes) per epoch", min=1)] = 16,
    window_size: Annotated[int, typer.Option(help="jobs per window", min=1)] = 256,
    warmup: Annotated[
        int | None, typer.Option(help="warm-up jobs before each window (default 256; 0 with --paper)", min=0)
    ] = None,
    seed: Annotated[int, typer.Option(help="seed of the model, windows, samples and estimates")] = 0,
    paper: Annotated[
        bool,
        typer.Option(
            help="the RLTune paper's setting: no backfill, oracle runtimes, first-fit, cold windows"
        ),
    ] = False,
    estimates: Annotated[str, typer.Option(help="noisy | history | predicted | oracle | trace")] = "noisy",
    workers: Annotated[
        int, typer.Option(help="processes (with --ray: Ray workers) simulating episodes in parallel", min=1)
    ] = 1,
    sampling: Annotated[
        str, typer.Option(help="feature selection: state (the paper's rule) | fixed")
    ] = "state",
    feature_set: Annotated[
        str,
        typer.Option(
            help=f"the model's feature pool: {' | '.join(FEATURE_SETS)} (predicted: classic + the "
            "runtime predictor's prediction and band; the workload is then prepared with predictions)"
        ),
    ] = DEFAULT_FEATURE_SET,
    learning_rate: Annotated[float, typer.Option(help="Adam learning rate")] = 3e-4,
    update_epochs: Annotated[int, typer.Option(help="passes over each epoch's decisions", min=1)] = 4,
    minibatch_size: Annotated[int, typer.Option(help="decisions per minibatch", min=1)] = 256,
    ent_coef: Annotated[float, typer.Option(help="entropy bonus")] = 0.0,
    gamma: Annotated[float, typer.Option(help="discount per decision")] = 1.0,
    gae_lambda: Annotated[float, typer.Option(help="GAE lambda")] = 0.97,
    target_kl: Annotated[float, typer.Option(help="KL early stop (0: off)")] = 0.02,
    kl_min_epochs: Annotated[
        int,
        typer.Option(
            help="update epochs run in full before the KL early stop is checked "
            "(1 lets PPO move a sharp warm start; see shared/rl/ppo.py)"
        ),
    ] = 0,
    top_k: Annotated[int, typer.Option(help="picks per action (0: the whole queue)", min=0)] = 32,
    max_queue: Annotated[int, typer.Option(help="queue slots the model orders", min=1)] = 256,
    base_prior: Annotated[
        float,
        typer.Option(
            help="logit per queue slot in the base policy's order: the model starts as its base "
            "policy and learns departures from it (0: off; see shared/model/config.py)",
            min=0.0,
            max=10.0,
        ),
    ] = 0.0,
    validation_windows: Annotated[
        int, typer.Option(help="greedy validation windows (end of the train part)", min=0)
    ] = 16,
    eval_every: Annotated[int, typer.Option(help="validate every this many epochs", min=1)] = 1,
    test_windows: Annotated[int, typer.Option(help="held-out windows scored for the checkpoint card")] = 20,
    train_fraction: Annotated[
        float, typer.Option(help="chronological split: share of jobs for training")
    ] = 0.9,
    jobs: Annotated[
        int, typer.Option(help="jobs of the embedded workload (without --trace)", min=1)
    ] = 20_000,
    placement: Annotated[
        str | None,
        typer.Option(help="first-fit | best-fit | cp-sat (default: best-fit; the paper setting's first-fit)"),
    ] = None,
    load: Annotated[
        float | None,
        typer.Option(help="rescale arrival times to this offered load (as hylo simulate --load)"),
    ] = None,
    load_definition: Annotated[str, typer.Option(help=LOAD_DEFINITION_HELP)] = DEFAULT_LOAD_DEFINITION,
    max_minutes: Annotated[float | None, typer.Option(help="stop after this many minutes")] = None,
    imitation_epochs: Annotated[
        int,
        typer.Option(
            help="warm start: epochs of supervised imitation of the teacher's order before PPO (0: off)"
        ),
    ] = 0,
    imitation_windows: Annotated[
        int, typer.Option(help="training windows whose teacher decisions the imitation learns from")
    ] = 16,
    imitate: Annotated[
        str | None,
        typer.Option(
            help="the teacher the warm start imitates (a policy name; default: the base policy). "
            "PPO's reward stays measured against --base-policy"
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help=f"output folder: checkpoint/, train_log.csv/json, training_curve.png, run.json, "
            f"{STATE_FILE}, {SCALARS_FILE}, {TENSORBOARD_DIR}/ (default: a new folder "
            f"{DEFAULT_ROOT}/<trace>-<metric>-<UTC time>); refused if it holds files, unless --force"
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="write into an --out that holds files, replacing a run's files there"),
    ] = False,
    resume: Annotated[
        Path | None,
        typer.Option(
            help="continue the run saved in this folder, with its settings (only --epochs, --workers, "
            "--max-minutes and --test-windows may be given anew)"
        ),
    ] = None,
    checkpoint_every: Annotated[
        int,
        typer.Option(
            help="save the training state and a checkpoint every N epochs (0: only at the end and on Ctrl-C)",
            min=0,
        ),
    ] = 5,
    ray: RayFlag = False,
    ray_address: RayAddress = None,
) -> None:
    """Train the learned prioritizer (PPO) against a base policy; write a checkpoint and a log."""
    torch.set_num_threads(1)
    _run(plan_run(ctx), ray_target(ray, ray_address))


def _run(plan: RunPlan, ray_at: str | None) -> None:
    """Check the options, join Ray when asked, load the workload, then train in the run's folder."""
    o = plan.options
    _check_names(o.base_policy, o.sampling, o.feature_set)
    _check_values(o.estimates, o.trace, o.load, o.train_fraction, o.learning_rate)
    try:
        spec = RewardSpec.parse(o.metric)
        cfg = _train_config(o)
    except ValueError as err:
        raise fail(validation_line(err)) from None
    _check_ranges(o.load, o.imitation_epochs, o.imitation_windows, o.imitate, o.epochs, o.placement)
    definition = load_definition_option(o.load_definition, DEFAULT_LOAD_DEFINITION)
    check_folder(plan)
    setup = RunSetup(
        o.base_policy,
        o.metric,
        o.paper,
        o.estimates,
        o.warmup,
        o.sampling,
        o.seed,
        o.jobs,
        o.load,
        o.placement,
        definition,
        feature_set=o.feature_set,
    )
    meta = _resumed_meta(plan, cfg)
    cfg.ray = ray_at
    with computing_on(Parallelism(cfg.workers, cfg.ray)):
        t0 = time.perf_counter()
        # a teacher that orders by the runtime predictions needs them too (the base policy and the
        # feature set are RunSetup's own reasons: ``RunSetup.needs_predictions``)
        teacher_predictions = o.imitate is not None and needs_predictions([o.imitate])
        work, runner = _load_workload(o.trace, o.cluster, setup, spec, teacher_predictions)
        _check_windows(o.trace, work, cfg)
        run = TrainRun(o.trace, o.cluster, setup, spec, cfg, work, runner, o.imitation_epochs)
        out = open_run_folder(plan)
        _train_in_folder(run, plan, out, meta, t0)


def _train_config(o: TrainOptions) -> TrainConfig:
    """The trainer's config from the options (a ``ValueError`` names a bad value)."""
    return TrainConfig(
        epochs=o.epochs,
        windows_per_epoch=o.windows_per_epoch,
        window_size=o.window_size,
        seed=o.seed,
        workers=o.workers,
        validation_windows=o.validation_windows,
        eval_every=o.eval_every,
        train_fraction=o.train_fraction,
        max_minutes=o.max_minutes,
        model=_model_config(o.feature_set, o.max_queue, o.top_k, o.base_prior),
        ppo=PPOConfig(
            learning_rate=o.learning_rate,
            update_epochs=o.update_epochs,
            minibatch_size=o.minibatch_size,
            ent_coef=o.ent_coef,
            gamma=o.gamma,
            gae_lambda=o.gae_lambda,
            target_kl=o.target_kl or None,
            kl_min_epochs=o.kl_min_epochs,
        ),
    )


def _resumed_meta(plan: RunPlan, cfg: TrainConfig) -> dict[str, Any]:
    """What the saved state carries besides the trainer's own (the warm start's record, the
    epochs the run resumed at); resuming a run that has nothing left to do is refused here."""
    state = plan.state
    if state is None:
        return {"resumed_at": [0]} if plan.resuming else {}
    meta = dict(state.meta)
    _charge_warm_start(cfg, meta.get("imitation"))
    if state.finished and not continues(state, cfg):
        raise fail(
            f"--resume {plan.out}: the run finished after epoch {state.epoch} of {cfg.epochs}; to train "
            f"it further pass --epochs above {state.epoch} (and a larger --max-minutes if it stopped on "
            "time), or evaluate it: hylo evaluate --checkpoint "
            f"{plan.out / 'checkpoint' if plan.out else 'checkpoint'}"
        )
    meta["resumed_at"] = [*meta.get("resumed_at", []), state.epoch]
    return meta


def _charge_warm_start(cfg: TrainConfig, imitation_info: dict[str, Any] | None) -> None:
    """--max-minutes bounds the whole training, the warm start included."""
    if cfg.max_minutes is not None and imitation_info is not None:
        cfg.max_minutes = max(cfg.max_minutes - imitation_info["seconds"] / 60, 0.0)


def _train_in_folder(run: TrainRun, plan: RunPlan, out: Path, meta: dict[str, Any], t0: float) -> None:
    """Train, saving as it goes; write the outputs; on Ctrl-C save the last epoch and exit 130."""
    state = plan.state
    log = ScalarLog(out, state.history if state is not None else ())
    saver = EpochSaver(run, out, plan.checkpoint_every, log, meta)
    saver.latest = state  # what Ctrl-C keeps until an epoch ends
    where = "resuming" if plan.resuming else "run folder"
    tb = (
        f"tensorboard --logdir {out / TENSORBOARD_DIR}"
        if log.writer
        else "no TensorBoard: pip install -e '.[tensorboard]'"
    )
    at = f" at epoch {state.epoch} of {run.cfg.epochs}" if state is not None else ""
    line = f"{where}{at}: {out} (scalars per epoch: {out / SCALARS_FILE}; {tb})"
    console.print(escape(line), highlight=False)  # escaped: '.[tensorboard]' is not markup
    try:
        # one set of workers for the epochs and the held-out score (their start-up is seconds)
        with runner_pool(run.runner, Parallelism(run.cfg.workers, run.cfg.ray)) as pool:
            result = _train_with_progress(run, plan.options, state, saver, pool)
            assert result.state is not None  # train keeps the last epoch's state
            saver.latest = result.state
            saver.save_state(result.state)
            _write_outputs(run, result, saver, out, plan.options.test_windows, t0, pool)
            saver.save_state(result.state, finished=True)
    except (KeyboardInterrupt, SystemError) as stop:
        if not is_interrupt(stop):
            raise
        last = stop.state if isinstance(stop, TrainingInterrupted) and stop.state else saver.latest
        raise stop_interrupted(saver, last, out) from None
    finally:
        log.close()


def _model_config(feature_set: str, max_queue: int, top_k: int, base_prior: float) -> ModelConfig:
    """The model's shape: its input widths are the feature set's observation and critic sizes."""
    shape = SamplingConfig(feature_set=feature_set)
    return ModelConfig(
        obs_features=shape.n_observation,
        critic_features=shape.n_critic,
        max_queue=max_queue,
        top_k=top_k or None,
        base_prior=base_prior,
    )


def _check_names(base_policy: str, sampling: str, feature_set: str) -> None:
    """The names checked first, before the reward and the configs are parsed."""
    if base_policy not in POLICY_NAMES:
        raise fail(f"unknown base policy {base_policy!r}; choose from {', '.join(POLICY_NAMES)}")
    if sampling not in ("state", "fixed"):
        raise fail(f"--sampling must be state or fixed, not {sampling!r}")
    if feature_set not in FEATURE_SETS:
        raise fail(f"unknown --feature-set {feature_set!r}; choose from {', '.join(FEATURE_SETS)}")


def _check_values(
    estimates: str,
    trace: str | None,
    load: float | None,
    train_fraction: float,
    learning_rate: float,
) -> None:
    """The values no config checks, before the workload loads (a typo should not cost a load;
    ``--out`` and ``--resume`` are checked before these, ``shared/cli/train_folder.py``)."""
    check_estimates(estimates, trace)
    check_load(load)
    if not 0.0 < train_fraction < 1.0:
        raise fail(
            f"--train-fraction {train_fraction:g}: expected a share strictly between 0 and 1 (e.g. 0.9)"
        )
    if not learning_rate > 0:
        raise fail(f"--learning-rate {learning_rate:g}: expected a rate > 0 (e.g. 3e-4)")


def _check_windows(trace: str | None, work: PreparedWorkload, cfg: TrainConfig) -> None:
    """The training part of the loaded workload holds at least one window (``train`` draws them)."""
    check_jobs(work, trace)
    n = len(work.bound.jobs)
    try:
        fit, _ = split_windows(n, cfg)
    except ValueError as err:
        raise fail(f"{err}: pass a smaller --window-size or --validation-windows 0, or more jobs") from None
    if len(fit) < cfg.window_size:
        raise fail(
            f"--window-size {cfg.window_size}: the training part holds {len(fit):,} jobs (--train-fraction "
            f"{cfg.train_fraction:g} of {n:,}, less the validation windows), fewer than one window; pass a "
            "smaller --window-size, or more jobs (--jobs, a longer trace)"
        )


def _check_ranges(
    load: float | None,
    imitation_epochs: int,
    imitation_windows: int,
    imitate: str | None,
    epochs: int,
    placement: str | None,
) -> None:
    """The ranges and combinations checked once the reward and the configs parse."""
    if load is not None and load <= 0:
        raise fail(f"--load must be > 0, got {load}")
    if imitation_epochs < 0:
        raise fail(f"--imitation-epochs must be >= 0 (0: off), got {imitation_epochs}")
    if imitation_windows < 1:
        raise fail(f"--imitation-windows must be >= 1, got {imitation_windows}")
    if imitate is not None and imitate not in POLICY_NAMES:
        raise fail(f"unknown --imitate policy {imitate!r}; choose from {', '.join(POLICY_NAMES)}")
    if imitate is not None and imitation_epochs == 0:
        raise fail("--imitate names the warm start's teacher: give --imitation-epochs too")
    if epochs < 0:
        raise fail(f"--epochs must be >= 0 (0: the warm start alone), got {epochs}")
    if placement is not None and placement not in ("first-fit", "best-fit", "cp-sat"):
        raise fail(f"--placement must be first-fit, best-fit or cp-sat, not {placement!r}")


def _load_workload(
    trace: str | None, cluster: str | None, setup: RunSetup, spec: RewardSpec, predictions: bool = False
) -> tuple[PreparedWorkload, EpisodeRunner]:
    """Load the trace and its episode runner, and say what the run trains on."""
    from shared.traces import TraceFormatError, TraceNotFoundError

    try:
        work, runner = load_runner(trace, cluster, setup, predictions=predictions)
    except (TraceFormatError, TraceNotFoundError, ValueError) as err:
        raise fail(str(err)) from None
    s = runner.settings
    console.print(
        f"[bold]{escape(work.name)}[/] on [bold]{work.spec.name}[/] ({work.spec.total_gpus:,} GPUs), "
        f"{len(work.bound.jobs):,} jobs; base {setup.base_policy}, reward {spec.describe()}, "
        f"backfill={s.config.backfill}, placement={s.config.placement}, "
        f"estimates={'oracle' if s.config.oracle_runtimes else setup.estimates}, warm-up {s.warmup} jobs, "
        f"features {setup.feature_set} ({s.sampling.n_observation} observed of {len(s.schema.job_features)})"
    )
    return work, runner


def _train_with_progress(
    run: TrainRun, o: TrainOptions, resume: TrainState | None, saver: EpochSaver, pool: RunnerPool
) -> TrainResult:
    """The warm start (when asked, and not resuming) and PPO, under a progress bar with a line per
    epoch; ``saver`` sees every epoch's state."""
    cfg, base_policy, primary = run.cfg, run.setup.base_policy, run.spec.metrics[0]
    progress = progress_bar()
    with progress:
        task = progress.add_task("epochs", total=cfg.epochs, completed=resume.epoch if resume else 0)

        def report(row: dict[str, float]) -> None:
            progress.update(task, completed=int(row["epoch"]))
            if row["epoch"] >= 1:
                val = f", val reward {row['val_reward']:+.3f}" if "val_reward" in row else ""
                progress.console.print(
                    f"epoch {int(row['epoch']):3d}: reward {row['reward']:+.3f}, {primary} agent "
                    f"{row['agent']:.4g} vs {base_policy} {row['base']:.4g}{val}, {int(row['decisions'])} "
                    f"decisions ({row['decisions_per_s']:.0f}/s), kl {row['approx_kl']:.4f}, "
                    f"{row['wall_s']:.0f}s",
                    highlight=False,
                )

        initial_state: dict[str, torch.Tensor] | None = None
        if run.imitation_epochs > 0 and resume is None:
            initial_state, saver.meta["imitation"] = _imitation_warm_start(
                run.runner, cfg, run.imitation_epochs, o.imitation_windows, o.imitate
            )
            _charge_warm_start(cfg, saver.imitation_info)
        return train(
            run.runner,
            cfg,
            progress=report,
            initial_state=initial_state,
            resume=resume,
            on_epoch=saver,
            pool=pool,
        )


def _write_outputs(
    run: TrainRun,
    result: TrainResult,
    saver: EpochSaver,
    out: Path,
    test_windows: int,
    t0: float,
    pool: RunnerPool,
) -> None:
    """The training log (CSV, curve), the held-out score (on ``pool``), the checkpoint, then the
    JSON log."""
    primary, base_policy = run.spec.metrics[0], run.setup.base_policy
    keys = sorted({k for row in result.history for k in row})
    with (out / "train_log.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=keys)
        writer.writeheader()
        writer.writerows(result.history)
    curve = training_curve(result.history, out / "training_curve.png", primary, base_policy)
    held_out = _score_held_out(run, result, test_windows, pool)
    write_checkpoint(run, result, held_out, saver.imitation_info, out, "final")
    log = _train_log(run, result, held_out, saver.meta, time.perf_counter() - t0)
    (out / "train_log.json").write_text(json.dumps(log, indent=2))
    console.print(f"wrote {out / 'checkpoint'}, {out / 'train_log.csv'}, {out / 'train_log.json'}, {curve}")


def _score_held_out(
    run: TrainRun, result: TrainResult, test_windows: int, pool: RunnerPool
) -> dict[str, Any]:
    """The best model's greedy score on windows of the test part, beside the base policy's (the card's)."""
    cfg, runner, base_policy = run.cfg, run.runner, run.setup.base_policy
    windows: list[Window] = []
    if test_windows > 0:
        _, test = chronological_split(len(run.work.bound.jobs), cfg.train_fraction)
        try:
            windows = make_windows(test, cfg.window_size, test_windows, seed=cfg.seed)
        except ValueError as err:
            console.print(f"[yellow]no held-out score for the card: {escape(str(err))}[/]")
            windows = []
    if not windows:
        return {}
    where = Parallelism(cfg.workers, cfg.ray).describe()
    with console.status(f"scoring {len(windows)} held-out windows on {where}"):
        per = evaluate_learned(
            runner, result.best_model, windows, [base_policy], sampled=False, parallel=pool
        )
    held_out = {
        "windows": len(windows),
        "window_size": cfg.window_size,
        "mean_reward": mean_reward(runner, per[GREEDY], per[base_policy]),
        **{f"{m}_{GREEDY}": _clean(mean_metric(per[GREEDY], m)) for m in run.spec.metrics},
        **{f"{m}_{base_policy}": _clean(mean_metric(per[base_policy], m)) for m in run.spec.metrics},
    }
    console.print(f"held-out (greedy, best epoch {result.best_epoch}): {held_out}", highlight=False)
    return held_out


def _train_log(
    run: TrainRun,
    result: TrainResult,
    held_out: dict[str, Any],
    meta: dict[str, Any],
    wall_seconds: float,
) -> dict[str, Any]:
    """``train_log.json``: the run's setup, every epoch's row, the best epoch and the held-out score
    (``wall_seconds``: this command's; ``training_seconds``: the training's, over every session)."""
    cfg, s = run.cfg, run.runner.settings
    return {
        "setup": {
            "trace": run.trace,
            "cluster": run.work.spec.name,
            "base_policy": run.setup.base_policy,
            "feature_set": run.setup.feature_set,
            "metric": run.spec.describe(),
            "sim_config": s.config.model_dump(mode="json"),
            "warmup": s.warmup,
            "seed": cfg.seed,
            "workers": cfg.workers,
            "ray": cfg.ray,
            "epochs": cfg.epochs,
            "windows_per_epoch": cfg.windows_per_epoch,
            "window_size": cfg.window_size,
            "train_fraction": cfg.train_fraction,
            "jobs": run.setup.n_jobs,
            "load": run.setup.target_load,
            "load_definition": run.setup.load_definition,
            "estimates": run.setup.estimates,
            "cluster_arg": run.cluster,
            "ppo": cfg.ppo.model_dump(mode="json"),
            "model": cfg.model.model_dump(mode="json"),
            "imitation_epochs": run.imitation_epochs,
            "imitation": meta.get("imitation"),
        },
        "history": [{k: _clean(v) for k, v in row.items()} for row in result.history],
        "best_epoch": result.best_epoch,
        "held_out": held_out,
        "wall_seconds": wall_seconds,
        "training_seconds": result.wall_seconds,
        "resumed_at_epochs": meta.get("resumed_at", []),
    }


def _imitation_warm_start(
    runner: Any, cfg: TrainConfig, epochs: int, n_windows: int, teacher: str | None
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Imitation of the teacher on windows of the PPO training range (``shared.imitation``)."""
    from shared.imitation import ImitationConfig, imitate

    fit, _ = split_windows(len(runner.workload.jobs), cfg)
    name = teacher or runner.settings.base_policy
    try:
        windows = make_windows(fit, cfg.window_size, n_windows, seed=cfg.seed, overlap=True)
        with console.status(f"imitating {name} on {len(windows)} windows ({epochs} epochs)"):
            res = imitate(
                runner, windows, cfg.model, ImitationConfig(epochs=epochs, seed=cfg.seed, teacher=teacher)
            )
    except ValueError as err:
        raise fail(f"imitation warm start: {err}") from None
    last = res.history[-1]
    console.print(
        f"imitation of {name}: {res.demonstrations} decisions, "
        f"loss per pick {res.history[0]['nll_per_pick']:.3f} -> {last['nll_per_pick']:.3f}, "
        f"{res.wall_seconds:.1f}s",
        highlight=False,
    )
    info: dict[str, Any] = {
        "teacher": name,
        "epochs": epochs,
        "windows": len(windows),
        "demonstrations": res.demonstrations,
        "nll_per_pick_first": _clean(res.history[0]["nll_per_pick"]),
        "nll_per_pick_last": _clean(last["nll_per_pick"]),
        "seconds": res.wall_seconds,
    }
    return res.state, info
