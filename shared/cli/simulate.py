"""``hylo simulate``: compare scheduling policies on a trace or the embedded workload."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from shared.cli.common import console, fail, progress_bar
from shared.domain.cluster import SpecError
from shared.features import FeatureSampler
from shared.metrics import PolicyComparison, WindowMetrics, chronological_split, make_windows
from shared.policies import POLICY_NAMES, make_policy
from shared.policies.base import Policy
from shared.scheduling.result import SimResult
from shared.sim.config import SimConfig
from shared.sim.evaluate import PolicyFactory, PreparedWorkload, evaluate_policies, prepare_workload

PLACEMENTS = ("first-fit", "best-fit", "cp-sat")

DEFAULT_POLICIES = "fcfs,sjf,wfp3,unicep,f1,multifactor"


def _load(
    trace: str | None,
    cluster: str | None,
    jobs: int,
    seed: int,
    estimates: str,
    node_slack: int,
    load: float | None = None,
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
        )
    except (TraceFormatError, TraceNotFoundError, SpecError, ValueError) as err:
        raise fail(str(err)) from None


def _learned(checkpoint: Path) -> tuple[str, PolicyFactory]:
    """The trained prioritizer of ``checkpoint`` as a policy factory (greedy, over its base policy)."""
    from shared.model import CheckpointError
    from shared.rl.policy import LearnedPolicy
    from shared.rl.setup import load_trained

    try:
        net, card, schema = load_trained(checkpoint)
    except (CheckpointError, OSError, ValueError) as err:
        raise fail(f"cannot use checkpoint {checkpoint}: {err}") from None
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
    max_reservations: Annotated[int, typer.Option(help="EASY reservations, 0 = one per pool")] = 0,
    estimates: Annotated[
        str, typer.Option(help="runtime estimates where the trace has none: noisy | history | oracle | trace")
    ] = "noisy",
    windows: Annotated[int, typer.Option(help="number of evaluation windows")] = 20,
    window_size: Annotated[int, typer.Option(help="jobs per window")] = 500,
    warmup: Annotated[
        int | None,
        typer.Option(help="simulate each window alone after this many warm-up jobs (default: one run)"),
    ] = None,
    split: Annotated[str, typer.Option(help="windows from: all | test (last 10%, chronological)")] = "all",
    jobs: Annotated[int, typer.Option(help="jobs of the embedded workload")] = 20_000,
    seed: Annotated[int, typer.Option(help="seed for the workload, estimates and window choice")] = 0,
    node_slack: Annotated[int, typer.Option(help="extra nodes a gang may span")] = 0,
    load: Annotated[
        float | None,
        typer.Option(
            help="rescale arrival gaps so the workload offers this load (e.g. 0.85); default: as is"
        ),
    ] = None,
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
    if paper:
        config = SimConfig.paper()
        warmup = 0 if warmup is None else warmup
        if placement == "best-fit":  # the option's default: the paper's own first-fit
            placements = [config.placement]
    else:
        try:
            config = SimConfig(
                backfill=backfill,
                placement=placements[0],
                oracle_runtimes=estimates == "oracle",
                max_reservations=max_reservations,
                node_slack=node_slack,
            )
        except ValueError as err:
            raise fail(str(err)) from None

    factories: dict[str, PolicyFactory] = {}
    if model is not None:
        learned_name, factory = _learned(model)
        factories[learned_name] = factory
        names.append(learned_name)
    ablation = len(placements) > 1
    rows = [f"{p}@{pl}" if ablation else p for pl in placements for p in names]
    if baseline is not None and baseline not in rows:  # checked before anything runs
        raise fail(f"unknown --baseline {baseline!r}; choose from {', '.join(rows)}")

    t0 = time.perf_counter()
    with console.status("loading workload"):
        work = _load(trace, cluster, jobs, seed, estimates, node_slack, load)
    spec = work.spec
    console.print(
        f"[bold]{work.name}[/] on [bold]{spec.name}[/] "
        f"({spec.total_nodes:,} nodes, {spec.total_gpus:,} GPUs): "
        f"{len(work.bound.jobs):,} jobs, loaded in {time.perf_counter() - t0:.1f}s"
    )
    for e in work.exclusions:
        console.print(f"  [yellow]{escape(e.describe())}[/]", soft_wrap=True)

    n = len(work.bound.jobs)
    _, test = chronological_split(n, 0.9)
    pool = test if split == "test" else range(0, n)
    try:
        chosen = make_windows(pool, window_size, windows, seed=seed)
    except ValueError as err:
        raise fail(str(err)) from None
    console.print(
        f"{len(chosen)} windows of {window_size} jobs from {split} jobs; backfill={config.backfill}, "
        f"placement={config.placement}, estimates={'oracle' if config.oracle_runtimes else estimates}, "
        f"warm-up={'one continuous run' if warmup is None else f'{warmup} jobs per window'}"
    )

    progress = progress_bar()
    per_policy: dict[str, list[WindowMetrics]] = {}
    runs: dict[str, list[SimResult]] = {}
    with progress:
        tasks = {r: progress.add_task(f"{r:20s}", total=len(chosen)) for r in rows}
        for pl in placements:
            cfg_pl = config.model_copy(update={"placement": pl})
            label = {p: f"{p}@{pl}" if ablation else p for p in names}

            def advance(policy: str, done: int, label: dict[str, str] = label) -> None:
                progress.update(tasks[label[policy]], completed=done)

            metrics, results = evaluate_policies(
                work, names, cfg_pl, chosen, warmup=warmup, progress=advance, factories=factories
            )
            for p in names:
                per_policy[label[p]] = [m.model_copy(update={"policy": label[p]}) for m in metrics[p]]
                runs[label[p]] = results[p]

    comparison = PolicyComparison(
        per_policy, baseline=baseline or rows[0], seed=seed, title=f"{work.name} on {spec.name}"
    )
    console.print(comparison.table(compact=True))
    console.print(comparison.load_table())
    out.mkdir(parents=True, exist_ok=True)
    report = comparison.to_dict()
    report["setup"] = {
        "workload": work.name,
        "cluster": spec.name,
        "jobs": n,
        "excluded": [{"reason": e.reason, "count": e.count} for e in work.exclusions],
        "config": config.model_dump(),
        "estimates": estimates,
        "target_load": load,
        "windows": [w.label for w in chosen],
        "warmup": warmup,
        "split": split,
        "seed": seed,
        "sim_seconds": {p: sum(r.wall_seconds for r in rs) for p, rs in runs.items()},
        "placements": placements,
        "placer_stats": {
            p: [r.placer_stats for r in rs] for p, rs in runs.items() if rs and rs[0].placer_stats
        },
    }
    path = out / "simulate.json"
    path.write_text(json.dumps(report, indent=2, default=str))
    console.print(f"wrote {path}")
    if plots:
        for png in comparison.plot(out):
            console.print(f"wrote {png}")
