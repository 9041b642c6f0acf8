"""``hylo simulate``: compare scheduling policies on a trace or the embedded workload."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from shared.cli.checks import check_estimates, check_jobs, check_load, check_out, load_model, validation_line
from shared.cli.common import (
    LOAD_DEFINITION_HELP,
    console,
    fail,
    load_definition_option,
    progress_bar,
    write_comparison,
)
from shared.domain.cluster import SpecError
from shared.domain.load import DEFAULT_LOAD_DEFINITION, LoadDefinition, offered_load
from shared.features import FeatureSampler
from shared.metrics import PolicyComparison, Window, WindowMetrics, chronological_split, make_windows
from shared.policies import POLICY_NAMES, baseline_names, make_policy, needs_predictions
from shared.policies.base import Policy
from shared.scheduling.result import SimResult
from shared.sim.config import SimConfig
from shared.sim.evaluate import (
    PolicyFactory,
    PreparedWorkload,
    evaluate_policies,
    prepare_workload,
    window_offered_loads,
)

PLACEMENTS = ("first-fit", "best-fit", "cp-sat")

#: every registered policy but the clairvoyant ones (``sjf-oracle`` reads true runtimes)
DEFAULT_POLICIES = ",".join(name for name in POLICY_NAMES if not make_policy(name).clairvoyant)


def _load(
    trace: str | None,
    cluster: str | None,
    jobs: int,
    seed: int,
    estimates: str,
    node_slack: int,
    load: float | None = None,
    load_definition: LoadDefinition = DEFAULT_LOAD_DEFINITION,
    predictions: bool = False,
) -> PreparedWorkload:
    from shared.traces import TraceFormatError, TraceNotFoundError

    try:
        return prepare_workload(
            trace,
            cluster,
            n_jobs=jobs,
            seed=seed,
            estimates=estimates,
            node_slack=node_slack,
            target_load=load,
            load_definition=load_definition,
            predictions=predictions,
        )
    except (TraceFormatError, TraceNotFoundError, SpecError, ValueError) as err:
        raise fail(str(err)) from None


def _learned(checkpoint: Path) -> tuple[str, PolicyFactory]:
    """The trained prioritizer of ``checkpoint`` as a policy factory (greedy, over its base policy)."""
    from shared.rl.policy import LearnedPolicy

    net, card, schema = load_model(checkpoint, "--model")
    base = card.training.base_policy

    def factory(decides_from: float) -> Policy:
        return LearnedPolicy(
            net,
            make_policy(base),
            mode="greedy",
            warm_until=decides_from,
            sampler=FeatureSampler(schema.sampling),
        )

    return f"learned/{base}", factory


@dataclass(frozen=True)
class _Plan:
    """What the options resolve to, every one checked before the workload loads (a typo should not
    cost a trace load).

    names: the policies, the learned one (``--model``) last; rows: the table's rows, ``policy`` or,
    in a placement ablation, ``policy@placement``; warmup: ``--warmup`` as resolved (``--paper``'s
    cold windows).
    """

    names: list[str]
    placements: list[str]
    rows: list[str]
    config: SimConfig
    warmup: int | None
    factories: dict[str, PolicyFactory]

    @property
    def ablation(self) -> bool:
        return len(self.placements) > 1


def _checked_names(policies: str, backfill: str, split: str, placement: str) -> tuple[list[str], list[str]]:
    """The policy and placement names of the options, each choice option checked."""
    names = [p.strip() for p in policies.split(",") if p.strip()]
    unknown = [p for p in names if p not in POLICY_NAMES]
    if unknown or not names:
        raise fail(f"unknown policy {', '.join(unknown) or '(none)'}; choose from {', '.join(POLICY_NAMES)}")
    if backfill not in ("easy", "greedy", "none"):
        raise fail(f"--backfill must be easy, greedy or none, not {backfill!r}")
    if split not in ("all", "test"):
        raise fail(f"--split must be all or test, not {split!r}")
    placements = [p.strip() for p in placement.split(",") if p.strip()]
    bad = [p for p in placements if p not in PLACEMENTS]
    if bad or not placements:
        raise fail(f"--placement must be from {', '.join(PLACEMENTS)}, not {placement!r}")
    return names, placements


def _sim_config(
    *,
    paper: bool,
    placement: str,
    placements: list[str],
    backfill: str,
    estimates: str,
    max_reservations: int,
    node_slack: int,
    warmup: int | None,
) -> tuple[SimConfig, list[str], int | None]:
    """The simulator's configuration, the placements and the warm-up: ``--paper``'s, or the options'."""
    if paper:
        config = SimConfig.paper()
        warmup = 0 if warmup is None else warmup
        if placement == "best-fit":  # the option's default: the paper's own first-fit
            placements = [config.placement]
        return config, placements, warmup
    try:
        config = SimConfig(
            backfill=backfill,
            placement=placements[0],
            oracle_runtimes=estimates == "oracle",
            max_reservations=max_reservations,
            node_slack=node_slack,
        )
    except ValueError as err:
        raise fail(validation_line(err)) from None
    return config, placements, warmup


def _plan(
    *,
    policies: str,
    placement: str,
    backfill: str,
    split: str,
    paper: bool,
    estimates: str,
    max_reservations: int,
    node_slack: int,
    warmup: int | None,
    model: Path | None,
    baseline: str | None,
) -> _Plan:
    """The options resolved and checked, the learned policy's checkpoint loaded."""
    names, placements = _checked_names(policies, backfill, split, placement)
    config, placements, warmup = _sim_config(
        paper=paper,
        placement=placement,
        placements=placements,
        backfill=backfill,
        estimates=estimates,
        max_reservations=max_reservations,
        node_slack=node_slack,
        warmup=warmup,
    )
    factories: dict[str, PolicyFactory] = {}
    if model is not None:
        learned_name, factory = _learned(model)
        factories[learned_name] = factory
        names.append(learned_name)
    ablation = len(placements) > 1
    rows = [f"{p}@{pl}" if ablation else p for pl in placements for p in names]
    if baseline is not None and baseline not in rows:  # checked before anything runs
        raise fail(f"unknown --baseline {baseline!r}; choose from {', '.join(rows)}")
    return _Plan(names, placements, rows, config, warmup, factories)


def _load_and_describe(
    trace: str | None,
    cluster: str | None,
    jobs: int,
    seed: int,
    estimates: str,
    node_slack: int,
    load: float | None,
    load_definition: LoadDefinition = DEFAULT_LOAD_DEFINITION,
    predictions: bool = False,
) -> PreparedWorkload:
    """``_load`` under a status line, then what was loaded and what was left out of it."""
    t0 = time.perf_counter()
    with console.status("loading workload" + (" and predicting runtimes" if predictions else "")):
        work = _load(trace, cluster, jobs, seed, estimates, node_slack, load, load_definition, predictions)
    check_jobs(work, trace)
    spec = work.spec
    console.print(
        f"[bold]{work.name}[/] on [bold]{spec.name}[/] "
        f"({spec.total_nodes:,} nodes, {spec.total_gpus:,} GPUs): "
        f"{len(work.bound.jobs):,} jobs, offered load {offered_load(work.bound.jobs, spec.total_gpus):.3g}, "
        f"loaded in {time.perf_counter() - t0:.1f}s"
    )
    for e in work.exclusions:
        console.print(f"  [yellow]{escape(e.describe())}[/]", soft_wrap=True)
    return work


def _choose_windows(n: int, split: str, window_size: int, windows: int, seed: int) -> list[Window]:
    """The evaluation windows among the ``n`` jobs: from all of them, or from the last 10%."""
    try:
        pool = chronological_split(n, 0.9)[1] if split == "test" else range(0, n)
        return make_windows(pool, window_size, windows, seed=seed)
    except ValueError as err:
        raise fail(
            f"{err} (--split {split} of {n:,} jobs): pass a smaller --window-size or fewer --windows, "
            "or more jobs (--jobs, a longer trace)"
        ) from None


def _run_placements(
    work: PreparedWorkload, plan: _Plan, chosen: list[Window]
) -> tuple[dict[str, list[WindowMetrics]], dict[str, list[SimResult]]]:
    """Every policy under every placement on the chosen windows, behind one progress bar per row:
    the metrics and the runs by row name."""
    progress = progress_bar()
    per_policy: dict[str, list[WindowMetrics]] = {}
    runs: dict[str, list[SimResult]] = {}
    with progress:
        tasks = {r: progress.add_task(f"{r:20s}", total=len(chosen)) for r in plan.rows}
        for pl in plan.placements:
            cfg_pl = plan.config.model_copy(update={"placement": pl})
            label = {p: f"{p}@{pl}" if plan.ablation else p for p in plan.names}

            def advance(policy: str, done: int, label: dict[str, str] = label) -> None:
                progress.update(tasks[label[policy]], completed=done)

            metrics, results = evaluate_policies(
                work,
                plan.names,
                cfg_pl,
                chosen,
                warmup=plan.warmup,
                progress=advance,
                factories=plan.factories,
            )
            for p in plan.names:
                per_policy[label[p]] = [m.model_copy(update={"policy": label[p]}) for m in metrics[p]]
                runs[label[p]] = results[p]
    return per_policy, runs


def _setup_record(
    work: PreparedWorkload,
    plan: _Plan,
    chosen: list[Window],
    runs: dict[str, list[SimResult]],
    *,
    estimates: str,
    load: float | None,
    load_definition: LoadDefinition,
    offered: list[float],
    split: str,
    seed: int,
) -> dict[str, object]:
    """The report's ``setup``: what was simulated, how, and what the simulations cost.

    ``offered_load``: the workload's (its whole arrival span) and each window's (over its span,
    beside the window's utilization), both ``in-span`` whatever ``load_definition`` rescaled to."""
    return {
        "workload": work.name,
        "cluster": work.spec.name,
        "jobs": len(work.bound.jobs),
        "excluded": [{"reason": e.reason, "count": e.count} for e in work.exclusions],
        "config": plan.config.model_dump(),
        "estimates": estimates,
        "target_load": load,
        "load_definition": load_definition,
        "offered_load": {
            "definition": "in-span",
            "workload": offered_load(work.bound.jobs, work.spec.total_gpus),
            "windows": offered,
        },
        "windows": [w.label for w in chosen],
        "warmup": plan.warmup,
        "split": split,
        "seed": seed,
        "sim_seconds": {p: sum(r.wall_seconds for r in rs) for p, rs in runs.items()},
        "placements": plan.placements,
        "placer_stats": {
            p: [r.placer_stats for r in rs] for p, rs in runs.items() if rs and rs[0].placer_stats
        },
    }


def simulate_command(
    trace: Annotated[
        str | None,
        typer.Option(
            help="trace name (philly, openb, openb-gpuspec33, rltune-synthetic, hpc2n, slurm-256) "
            "or path; default: the embedded synthetic workload"
        ),
    ] = None,
    cluster: Annotated[
        str | None, typer.Option(help="cluster preset or spec file (default: the trace's)")
    ] = None,
    policies: Annotated[
        str, typer.Option(help=f"comma-separated, from {', '.join(POLICY_NAMES)}")
    ] = DEFAULT_POLICIES,
    placement: Annotated[
        str,
        typer.Option(
            help="first-fit | best-fit | cp-sat, or several comma-separated for a placement ablation "
            "(every policy x every placement, rows named policy@placement)"
        ),
    ] = "best-fit",
    backfill: Annotated[str, typer.Option(help="easy | greedy | none")] = "easy",
    max_reservations: Annotated[int, typer.Option(help="EASY reservations, 0 = one per pool", min=0)] = 0,
    estimates: Annotated[
        str,
        typer.Option(
            help="runtime estimates: noisy | history (where the trace has none) | predicted (every job: "
            "the online runtime predictor, shared.prediction) | oracle | trace"
        ),
    ] = "noisy",
    windows: Annotated[int, typer.Option(help="number of evaluation windows", min=1)] = 20,
    window_size: Annotated[int, typer.Option(help="jobs per window", min=1)] = 500,
    warmup: Annotated[
        int | None,
        typer.Option(
            help="simulate each window alone after this many warm-up jobs (default: one run)", min=0
        ),
    ] = None,
    split: Annotated[str, typer.Option(help="windows from: all | test (last 10%, chronological)")] = "all",
    jobs: Annotated[int, typer.Option(help="jobs of the embedded workload", min=1)] = 20_000,
    seed: Annotated[int, typer.Option(help="seed for the workload, estimates and window choice")] = 0,
    node_slack: Annotated[int, typer.Option(help="extra nodes a gang may span", min=0)] = 0,
    load: Annotated[
        float | None,
        typer.Option(
            help="rescale arrival gaps so the workload offers this load (e.g. 0.85): the utilization "
            "over the arrival span if every job started on arrival; default: as is"
        ),
    ] = None,
    load_definition: Annotated[str, typer.Option(help=LOAD_DEFINITION_HELP)] = DEFAULT_LOAD_DEFINITION,
    paper: Annotated[
        bool,
        typer.Option(
            help="the RLTune paper's setting: no backfill, oracle runtimes, first-fit, cold windows"
        ),
    ] = False,
    baseline: Annotated[
        str | None,
        typer.Option(
            help="row the others are compared to, a policy (policy@placement in an ablation); "
            "default: the first"
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="folder for the JSON report and the PNG plots")] = Path(
        "hylo-out"
    ),
    plots: Annotated[bool, typer.Option(help="draw PNG plots")] = True,
    model: Annotated[
        Path | None,
        typer.Option(
            help="a trained prioritizer checkpoint (hylo train) to compare as one more policy, "
            "'learned/<its base policy>' (greedy), under every placement"
        ),
    ] = None,
) -> None:
    """Simulate base policies on the same windows and print a policy x metric table with 95% CIs."""
    check_estimates(estimates, trace)
    check_load(load)
    check_out(out)
    plan = _plan(
        policies=policies,
        placement=placement,
        backfill=backfill,
        split=split,
        paper=paper,
        estimates=estimates,
        max_reservations=max_reservations,
        node_slack=node_slack,
        warmup=warmup,
        model=model,
        baseline=baseline,
    )
    definition = load_definition_option(load_definition, DEFAULT_LOAD_DEFINITION)
    predicted = needs_predictions(p for p in plan.names if p in POLICY_NAMES)
    work = _load_and_describe(trace, cluster, jobs, seed, estimates, node_slack, load, definition, predicted)
    chosen = _choose_windows(len(work.bound.jobs), split, window_size, windows, seed)
    config = plan.config
    console.print(
        f"{len(chosen)} windows of {window_size} jobs from {split} jobs; backfill={config.backfill}, "
        f"placement={config.placement}, estimates={'oracle' if config.oracle_runtimes else estimates}, "
        f"warm-up={'one continuous run' if plan.warmup is None else f'{plan.warmup} jobs per window'}"
    )
    per_policy, runs = _run_placements(work, plan, chosen)
    admin = set(baseline_names())
    comparison = PolicyComparison(
        per_policy,
        baseline=baseline or plan.rows[0],
        seed=seed,
        title=f"{work.name} on {work.spec.name}",
        baselines=[] if plan.ablation else [p for p in plan.rows if p in admin],
    )
    console.print(comparison.table(compact=True))
    others = [p for p in plan.rows if p not in comparison.baselines]
    best = comparison.best_table(others) if others and comparison.baselines else None
    if best is not None:
        console.print(best)
    offered = window_offered_loads(work, chosen, warmup=plan.warmup)
    console.print(comparison.load_table(offered))
    report = comparison.to_dict()
    report["setup"] = _setup_record(
        work,
        plan,
        chosen,
        runs,
        estimates=estimates,
        load=load,
        load_definition=definition,
        offered=offered,
        split=split,
        seed=seed,
    )
    write_comparison(comparison, report, out, "simulate.json", plots)
