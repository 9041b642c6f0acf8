"""``hylo evaluate``: a trained checkpoint against every base policy, on held-out windows only."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import torch
import typer
from rich.markup import escape
from rich.table import Table

from shared.cli.checks import check_estimates, check_jobs, check_load, check_out, load_model
from shared.cli.common import (
    LOAD_DEFINITION_HELP,
    console,
    fail,
    load_definition_option,
    progress_bar,
    write_comparison,
)
from shared.cli.ray_options import RayAddress, RayFlag, computing_on
from shared.domain.load import DEFAULT_LOAD_DEFINITION
from shared.features import FeatureSchema
from shared.features.catalog import DEFAULT_FEATURE_SET
from shared.metrics import PolicyComparison, Window, WindowMetrics, chronological_split, make_windows
from shared.model import ActorCritic, ModelCard, TrainingInfo
from shared.policies import POLICY_NAMES, baseline_names, needs_predictions
from shared.rl.episodes import EpisodeRunner
from shared.rl.evaluation import GREEDY, SAMPLED, evaluate_learned, transfer_name
from shared.rl.parallel import Parallelism, ray_target
from shared.rl.setup import (
    RunSetup,
    load_runner,
    trained_estimates,
    trained_load_definition,
)
from shared.sim.evaluate import PreparedWorkload

METRICS = ("wait_mean", "jct_mean", "bsld_mean", "utilization", "idle_frac_while_waiting")


def _load_model(checkpoint: Path, untrained: bool) -> tuple[ActorCritic, ModelCard, FeatureSchema]:
    """The checkpoint's model, card and feature schema; with ``untrained``, the model the trainer
    started from instead of the weights (how much of the result is training's)."""
    model, card, schema = load_model(checkpoint, "--checkpoint")
    if untrained:
        torch.manual_seed(card.training.seed)
        model = ActorCritic(card.model).eval()
    return model, card, schema


def _estimates(estimates: str, trace: str) -> str:
    """``--estimates`` (or the card's) checked against the trace evaluated on."""
    check_estimates(estimates, trace)
    return estimates


def _checked_policies(policies: str, transfer: str, base_policy: str) -> tuple[list[str], list[str]]:
    """The baselines (the model's base policy among them, first if not given; every transfer base
    too) and the transfer bases of the options, every name checked."""
    names = [p.strip() for p in policies.split(",") if p.strip()]
    bases = [p.strip() for p in transfer.split(",") if p.strip()]
    unknown = [p for p in names + bases if p not in POLICY_NAMES]
    if unknown:
        raise fail(f"unknown policy {', '.join(unknown)}; choose from {', '.join(POLICY_NAMES)}")
    if base_policy not in names:
        names.insert(0, base_policy)
    # a transfer base is compared with itself alone, so it runs as a baseline too
    names += [b for b in dict.fromkeys(bases) if b not in names]
    return names, bases


def _run_setup(
    info: TrainingInfo,
    sampling: str,
    *,
    paper: bool | None,
    warmup: int | None,
    estimates: str,
    jobs: int | None,
    load: float | None,
    placement: str | None,
    load_definition: str | None = None,
    feature_set: str = DEFAULT_FEATURE_SET,
) -> RunSetup:
    """How episodes are simulated: each option as given, or else as recorded at training.

    The load, when taken from the card, keeps the definition it was trained under (``capped`` on
    a card that does not say: every card before issue 18); a ``--load`` given here means what
    ``--load`` means today (``in-span``) unless ``--load-definition`` says otherwise."""
    extra = info.extra
    try:
        trained_definition = trained_load_definition(info)
    except ValueError as err:
        raise fail(f"the checkpoint's load_definition: {err}") from None
    definition = load_definition_option(
        load_definition, trained_definition if load is None else DEFAULT_LOAD_DEFINITION
    )
    sim_cfg = extra.get("sim_config")
    trained_paper = isinstance(sim_cfg, dict) and sim_cfg.get("backfill") == "none"
    use_paper = trained_paper if paper is None else paper
    trained_warmup = extra.get("warmup")
    return RunSetup(
        base_policy=info.base_policy,
        metric=info.metric,
        paper=use_paper,
        estimates=estimates,
        warmup=warmup
        if warmup is not None
        else (trained_warmup if isinstance(trained_warmup, int) else None),
        sampling=sampling,
        seed=info.seed,  # the workload (embedded jobs, estimate noise) as trained; --seed picks windows
        n_jobs=jobs or (n_default if isinstance(n_default := extra.get("jobs"), int) else 20_000),
        target_load=load
        if load is not None
        else (tl if isinstance(tl := extra.get("load"), float) else None),
        placement=placement or (pl if isinstance(pl := extra.get("placement"), str) else None),
        load_definition=definition,
        feature_set=feature_set,  # the model's: its features decide whether predictions are attached
    )


def _load(
    trace: str | None, cluster: str | None, info: TrainingInfo, setup: RunSetup, *, predictions: bool
) -> tuple[PreparedWorkload, EpisodeRunner]:
    """The workload and its episode runner: the trace and cluster given, or else the trained ones
    (the trained cluster only with the trained trace)."""
    trace_name = trace or (None if info.trace == "embedded" else info.trace)
    from shared.traces import TraceFormatError, TraceNotFoundError

    try:
        cluster_arg = info.extra.get("cluster_arg")
        trained_cluster = cluster_arg if isinstance(cluster_arg, str) and trace is None else None
        return load_runner(trace_name, cluster or trained_cluster, setup, predictions=predictions)
    except (TraceFormatError, TraceNotFoundError, ValueError) as err:
        raise fail(str(err)) from None


def _held_out_windows(
    n: int, frac: float, size: int, windows: int, seed: int, overlap: bool
) -> tuple[range, list[Window]]:
    """The jobs after the training part of ``n`` (fraction ``frac``), and the windows chosen among them."""
    if not 0.0 < frac < 1.0:
        raise fail(f"--train-fraction {frac:g}: expected a share strictly between 0 and 1 (e.g. 0.9)")
    try:
        _, test = chronological_split(n, frac)
        chosen = make_windows(test, size, windows, seed=seed, overlap=overlap)
    except ValueError as err:
        raise fail(
            f"held-out windows: {err}; pass a smaller --window-size"
            + ("" if overlap else " or --overlap (windows may then share jobs)")
            + ", fewer --windows, or a smaller --train-fraction"
        ) from None
    return test, chosen


def _describe(
    work: PreparedWorkload,
    runner: EpisodeRunner,
    info: TrainingInfo,
    test: range,
    chosen: list[Window],
    size: int,
    windows: int,
) -> None:
    """What is evaluated on what, and a warning when fewer windows fit than were asked for."""
    s = runner.settings
    console.print(
        f"[bold]{escape(work.name)}[/] on [bold]{work.spec.name}[/]: {len(chosen)} held-out windows "
        f"of {size} jobs (jobs {test.start:,}..{test.stop - 1:,}); model trained with base "
        f"{info.base_policy}, metric {info.metric}; backfill={s.config.backfill}, warm-up {s.warmup} jobs"
    )
    if len(chosen) < windows:
        console.print(f"[yellow]only {len(chosen)} windows fit in the test part[/]")


def _run_all(
    runner: EpisodeRunner,
    model: ActorCritic,
    chosen: list[Window],
    names: list[str],
    labels: list[str],
    *,
    sampled: bool,
    bases: list[str],
    seed: int,
    parallel: Parallelism,
) -> dict[str, list[WindowMetrics]]:
    """Every row's per-window metrics, behind one progress bar per row (``labels``, in order),
    computed where ``parallel`` says."""
    progress = progress_bar()
    with progress:
        tasks = {p: progress.add_task(f"{p:18s}", total=len(chosen)) for p in labels}
        per = evaluate_learned(
            runner,
            model,
            chosen,
            names,
            sampled=sampled,
            transfer=bases,
            seed=seed,
            progress=lambda p, k: progress.update(tasks[p], completed=k),
            parallel=parallel,
        )
    return {p: per[p] for p in labels}


def _transfer_rows(
    per: dict[str, list[WindowMetrics]], bases: list[str], seed: int
) -> dict[str, dict[str, dict[str, Any]]]:
    """Per transfer base Y: the learned policy laid over Y against Y alone, paired, per metric."""
    transfer_rows = {}
    for b in bases:
        pair = PolicyComparison(
            {b: per[b], "learned": per[transfer_name(b)]}, baseline=b, metrics=METRICS, seed=seed
        )
        transfer_rows[b] = {m: pair.vs_baseline(m, "learned").to_dict() for m in METRICS}  # type: ignore[union-attr]
    return transfer_rows


def _print_transfer(transfer_rows: dict[str, dict[str, dict[str, Any]]], base_policy: str) -> None:
    """The transfer rows as a table of relative gains (the first three metrics), if there are any."""
    if not transfer_rows:
        return
    table = Table(title=f"transfer: trained with {base_policy}, laid over base Y, vs Y")
    table.add_column("Y")
    for m in METRICS[:3]:
        table.add_column(f"{m} gain [95% CI]", justify="right")
    for b, row in transfer_rows.items():
        table.add_row(
            b,
            *[
                f"{row[m]['rel_improvement']:+.1%} [{row[m]['rel_low']:+.1%}, {row[m]['rel_high']:+.1%}]"
                for m in METRICS[:3]
            ],
        )
    console.print(table)


def _setup_record(
    checkpoint: Path,
    card: ModelCard,
    work: PreparedWorkload,
    runner: EpisodeRunner,
    test: range,
    chosen: list[Window],
    *,
    size: int,
    frac: float,
    overlap: bool,
    seed: int,
    untrained: bool,
    t0: float,
) -> dict[str, Any]:
    """The report's ``setup``: the model, the workload, the windows and the settings evaluated
    under, and the wall time since the workload began loading (``t0``)."""
    s = runner.settings
    return {
        "checkpoint": str(checkpoint),
        "card": json.loads(card.model_dump_json()),
        "workload": work.name,
        "cluster": work.spec.name,
        "test_jobs": [test.start, test.stop],
        "windows": [w.label for w in chosen],
        "window_size": size,
        "train_fraction": frac,
        "overlap": overlap,
        "sim_config": s.config.model_dump(mode="json"),
        "warmup": s.warmup,
        "seed": seed,
        "untrained": untrained,
        "wall_seconds": time.perf_counter() - t0,
    }


def evaluate_command(
    checkpoint: Annotated[Path, typer.Option(help="checkpoint folder written by hylo train")],
    trace: Annotated[str | None, typer.Option(help="trace (default: the checkpoint's)")] = None,
    cluster: Annotated[
        str | None, typer.Option(help="cluster preset or spec file (default: the trace's)")
    ] = None,
    windows: Annotated[int, typer.Option(help="held-out windows (the last 10% of the trace)", min=1)] = 100,
    window_size: Annotated[
        int | None, typer.Option(help="jobs per window (default: as trained)", min=1)
    ] = None,
    policies: Annotated[str, typer.Option(help="baselines, comma-separated")] = ",".join(POLICY_NAMES),
    paper: Annotated[bool | None, typer.Option(help="paper setting (default: as trained)")] = None,
    warmup: Annotated[
        int | None, typer.Option(help="warm-up jobs per window (default: as trained)", min=0)
    ] = None,
    estimates: Annotated[
        str | None,
        typer.Option(
            help="noisy | history | predicted | oracle | trace (default: as trained; noisy for a card "
            "that does not record it)"
        ),
    ] = None,
    sampled: Annotated[bool, typer.Option(help="also evaluate sampled (non-greedy) orderings")] = True,
    transfer: Annotated[
        str, typer.Option(help="base policies to lay the learned policy over (Table 7)")
    ] = "",
    train_fraction: Annotated[
        float | None,
        typer.Option(help="chronological split; windows come from after it (default: as trained)"),
    ] = None,
    jobs: Annotated[
        int | None, typer.Option(help="embedded workload size (default: as trained)", min=1)
    ] = None,
    load: Annotated[
        float | None, typer.Option(help="rescale arrivals to this offered load (default: as trained)")
    ] = None,
    load_definition: Annotated[
        str | None,
        typer.Option(
            help=f"{LOAD_DEFINITION_HELP}; default: as trained when --load is not given "
            "(capped for a checkpoint that does not record it), else in-span"
        ),
    ] = None,
    placement: Annotated[
        str | None, typer.Option(help="first-fit | best-fit | cp-sat (default: as trained)")
    ] = None,
    overlap: Annotated[bool, typer.Option(help="allow overlapping held-out windows (tiny traces)")] = False,
    untrained: Annotated[
        bool, typer.Option(help="control: the trainer's initial model (card's seed) instead of the weights")
    ] = False,
    seed: Annotated[int, typer.Option(help="seed of the window choice, samples and bootstrap")] = 0,
    out: Annotated[Path, typer.Option(help="folder for evaluate.json and the plots")] = Path(
        "hylo-out/evaluate"
    ),
    plots: Annotated[bool, typer.Option(help="draw PNG plots")] = True,
    workers: Annotated[
        int, typer.Option(help="processes (with --ray: Ray workers) simulating windows in parallel", min=1)
    ] = 1,
    ray: RayFlag = False,
    ray_address: RayAddress = None,
) -> None:
    """Evaluate a trained prioritizer on held-out windows against the base policies (paired, 95% CIs)."""
    torch.set_num_threads(1)
    check_load(load)
    check_out(out)
    model, card, schema = _load_model(checkpoint, untrained)
    info = card.training
    extra = info.extra
    names, bases = _checked_policies(policies, transfer, info.base_policy)
    size_default = extra.get("window_size")
    size = window_size or (size_default if isinstance(size_default, int) else 256)
    setup = _run_setup(
        info,
        schema.sampling.mode,
        paper=paper,
        warmup=warmup,
        estimates=_estimates(estimates or trained_estimates(info), trace or info.trace),
        jobs=jobs,
        load=load,
        placement=placement,
        load_definition=load_definition,
        feature_set=schema.sampling.feature_set,
    )
    parallel = Parallelism(workers, ray_target(ray, ray_address))
    t0 = time.perf_counter()
    with computing_on(parallel):  # Ray joined (or refused) before the workload loads
        work, runner = _load(trace, cluster, info, setup, predictions=needs_predictions(names))
        check_jobs(work, trace or info.trace)
        frac_default = extra.get("train_fraction")
        frac = train_fraction or (frac_default if isinstance(frac_default, float) else 0.9)
        test, chosen = _held_out_windows(len(work.bound.jobs), frac, size, windows, seed, overlap)
        _describe(work, runner, info, test, chosen, size, windows)
        labels = names + [GREEDY] + ([SAMPLED] if sampled else []) + [transfer_name(b) for b in bases]
        per = _run_all(
            runner, model, chosen, names, labels, sampled=sampled, bases=bases, seed=seed, parallel=parallel
        )
    comparison = PolicyComparison(
        per,
        baseline=info.base_policy,
        metrics=METRICS,
        seed=seed,
        title=f"learned ({info.base_policy}, {info.metric}) on {work.name}, held-out",
        baselines=[n for n in names if n in baseline_names()],
    )
    console.print(comparison.table(compact=True))
    best = comparison.best_table([p for p in labels if p not in names])
    if best is not None:
        console.print(best)
    report = comparison.to_dict()
    transfer_rows = _transfer_rows(per, bases, seed)
    _print_transfer(transfer_rows, info.base_policy)
    report["setup"] = _setup_record(
        checkpoint,
        card,
        work,
        runner,
        test,
        chosen,
        size=size,
        frac=frac,
        overlap=overlap,
        seed=seed,
        untrained=untrained,
        t0=t0,
    )
    report["setup"]["load"] = {"target": setup.target_load, "definition": setup.load_definition}
    report["setup"]["estimates"] = setup.estimates
    report["setup"]["workers"] = {"count": parallel.workers, "ray": parallel.ray}
    report["transfer"] = transfer_rows
    write_comparison(comparison, report, out, "evaluate.json", plots)
