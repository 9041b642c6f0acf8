"""``hylo models list|register|promote|rollback|shadow|history``: the model registry from the command line.

The database comes from ``--database`` (``--database-url``: a SQLite file path or a SQLAlchemy URL)
or ``HYLO_DATABASE_URL``; ``list`` and ``history`` only read, so a SQLite file that does not exist is
an error there, not a new empty registry. NATS from ``HYLO_NATS_URL``
and ``HYLO_SUBJECT_ROOT`` (or the options), the cluster from ``HYLO_REGISTRY_CLUSTER`` (or
``--cluster``), the gate from ``HYLO_GATE_*`` (or the ``promote`` options). Why the registry is
imported inside each command: it pulls in torch and the simulator, which ``hylo --help`` should not
wait for (as ``hylo serve`` does with the services).

Exit codes: 0 done, 1 the gate refused the promotion (the reason is printed and recorded), 2 error.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.markup import escape
from rich.table import Table

from shared.cli.common import DatabaseOpt, console, database_option, existing_database, fail, migrated_engine

if TYPE_CHECKING:
    from shared.registry import GateResult, PromotionResult, Registry, ShadowResult, VersionInfo

T = TypeVar("T")

models_app = typer.Typer(
    name="models",
    help="Model registry: register checkpoints as candidates, promote through the gate, roll back.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

NatsOpt = Annotated[str | None, typer.Option("--nats-url", help="NATS servers (default: HYLO_NATS_URL)")]
RootOpt = Annotated[
    str | None, typer.Option("--subject-root", help="subject namespace (default: HYLO_SUBJECT_ROOT)")
]
ClusterOpt = Annotated[
    str | None,
    typer.Option("--cluster", help="cluster whose models to manage (default: HYLO_REGISTRY_CLUSTER)"),
]
ActorOpt = Annotated[
    str | None, typer.Option("--actor", help="name recorded in the history (default: your login)")
]


def _cluster(cluster: str | None, required: bool = True) -> str | None:
    from shared.registry.settings import RegistrySettings
    from shared.schemas.base import CLUSTER_PATTERN

    name = cluster or RegistrySettings().cluster
    if name is None:
        if required:
            raise fail("no cluster: pass --cluster NAME or set HYLO_REGISTRY_CLUSTER")
        return None
    if not re.match(CLUSTER_PATTERN, name):
        raise fail(
            f"cluster name {name!r}: 1-63 letters, digits, '_' or '-', starting with a letter or digit"
        )
    return name


def _run(
    work: Callable[[Registry], Awaitable[T]],
    *,
    database_url: str | None,
    nats: bool,
    nats_url: str | None = None,
    subject_root: str | None = None,
    actor: str | None = None,
    reads_only: bool = False,
) -> T:
    """Open the store (migrated to the newest schema) and, if ``nats``, the bus; run ``work``.

    ``reads_only``: the command only reads, so a SQLite file must already exist."""
    from shared.registry import Registry, RegistryError
    from shared.registry.settings import RegistrySettings

    url = existing_database(database_url) if reads_only else database_option(database_url)
    who = actor or RegistrySettings().actor

    async def main() -> T:
        engine = await migrated_engine(url)
        client = None
        try:
            publisher = None
            if nats:
                client, publisher = await _connect(nats_url, subject_root)
            registry = Registry(engine, publisher, actor=who)
            try:
                return await work(registry)
            except RegistryError as err:
                raise fail(str(err)) from None
        finally:
            if client is not None:
                await client.close()
            await engine.dispose()

    return asyncio.run(main())


class BusUnreachable(Exception):
    """No NATS server answered (``open_bus``); the message names the URL and the error."""


async def open_bus(nats_url: str | None, subject_root: str | None) -> tuple[Any, Any]:
    """A NATS client and a publisher; creates the streams when the models stream does not exist.

    Raises ``BusUnreachable`` when no server answers, so that a caller that can go on without NATS
    (``hylo retrain --local``) decides what to say."""
    from nats.js.errors import NotFoundError

    from shared.bus import BusSettings, Publisher, connect, ensure_streams
    from shared.bus.signing import SigningSettings
    from shared.bus.streams import stream_name
    from shared.schemas import Subjects

    updates: dict[str, Any] = {"nats_max_reconnect_attempts": 1, "nats_name": "hylo-models"}
    if nats_url is not None:
        updates["nats_url"] = nats_url
    if subject_root is not None:
        updates["subject_root"] = subject_root
    settings = BusSettings().model_copy(update=updates)
    try:
        subjects = Subjects(root=settings.subject_root)
        client = await connect(settings)
    except Exception as err:
        raise BusUnreachable(
            f"cannot reach NATS at {settings.nats_url}: {type(err).__name__}: {err}"
        ) from None
    js = client.jetstream()
    try:
        await js.stream_info(stream_name(subjects, "models"))
    except NotFoundError:  # a fresh deployment: create the streams the services would create
        await ensure_streams(js, subjects, settings)
    # signed with HYLO_MODEL_SIGNING_KEY when set: prioritizers with the key refuse unsigned ones
    return client, Publisher(js, subjects, signer=SigningSettings().signer())


async def _connect(nats_url: str | None, subject_root: str | None) -> tuple[Any, Any]:
    """``open_bus``, or the one-line error when no server answers."""
    try:
        return await open_bus(nats_url, subject_root)
    except BusUnreachable as err:
        raise fail(str(err)) from None


# -- formatting -------------------------------------------------------------------------------------


def _when(value: datetime | None) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def _pct(value: Any) -> str:
    return f"{value:+.1%}" if isinstance(value, int | float) and math.isfinite(value) else "n/a"


def _held_out(metrics: dict[str, Any] | None) -> str:
    """``wait +3.1% [+1.0%, +5.2%] vs model:v1, 20 w`` from a version's stored gate numbers."""
    if not metrics or ("rel_improvement" not in metrics and "metric" not in metrics):
        return ""
    return (
        f"{metrics.get('metric', '?')} {_pct(metrics.get('rel_improvement'))} "
        f"[{_pct(metrics.get('rel_low'))}, {_pct(metrics.get('rel_high'))}] vs "
        f"{metrics.get('reference', '?')}, {int(metrics.get('n_windows', 0))} w"
    )


STATUS_STYLE = {"current": "bold green", "candidate": "yellow", "retired": "dim", "external": "cyan"}


def _status(v: VersionInfo) -> str:
    """The status, and for a candidate the gate's last verdict on it: ``candidate (refused)``, or
    ``candidate (passed)`` for one the gate passed that was not promoted (no NATS to announce it)."""
    style = STATUS_STYLE.get(v.status)
    text = f"[{style}]{escape(v.status)}[/]" if style else escape(v.status)
    passed = (v.metrics or {}).get("passed")
    if v.status == "candidate" and isinstance(passed, bool):
        text += " [bold green](passed)[/]" if passed else " [bold red](refused)[/]"
    return text + (" [bold cyan](shadow)[/]" if v.shadow else "")


def _versions_table(rows: list[VersionInfo], title: str) -> Table:
    table = Table(title=title)
    for column in ("version", "cluster", "status", "created", "promoted", "held-out metrics", "reason"):
        table.add_column(column, overflow="fold")
    for v in rows:
        promoted = _when(v.promoted_at)
        if promoted and v.promoted_by:
            promoted += f" by {v.promoted_by}" + (" (forced)" if v.forced else "")
        table.add_row(
            escape(v.version),
            escape(v.cluster or ""),
            _status(v),
            _when(v.created_at),
            escape(promoted),
            escape(_held_out(v.metrics)),
            escape(v.reason or ""),
        )
    return table


def _gate_table(gate: GateResult) -> Table:
    table = Table(title=f"promotion gate: {gate.metric} on {gate.n_windows} held-out windows")
    for column in ("", "mean", "improvement", f"{gate.ci:.0%} CI", "margin", "verdict"):
        table.add_column(column, justify="right")
    table.add_row("reference " + escape(gate.reference), f"{gate.reference_mean:.4g}", "", "", "", "")
    table.add_row(
        "candidate",
        f"{gate.candidate_mean:.4g}",
        _pct(gate.rel_improvement),
        f"[{_pct(gate.rel_low)}, {_pct(gate.rel_high)}]",
        _pct(gate.margin),
        "[bold green]passed[/]" if gate.passed else "[bold red]refused[/]",
    )
    return table


def _report(result: PromotionResult) -> None:
    if result.gate is not None:
        console.print(_gate_table(result.gate))
    if not result.promoted:
        console.print(f"[bold red]not promoted:[/] {escape(result.gate.reason if result.gate else '')}")
        console.print(f"{escape(result.version)} stays a candidate; the reason is recorded")
        raise typer.Exit(code=1)
    how = " (forced, no gate)" if result.forced else ""
    previous = f"; {escape(result.previous)} retired" if result.previous else ""
    console.print(
        f"[bold green]{escape(result.version)} is current[/] for cluster {escape(result.cluster)}{how}"
        f"{previous}; announced on the models subject ({len(result.published)} message(s))"
    )


# -- commands ---------------------------------------------------------------------------------------


@models_app.command("list")
def list_command(
    cluster: ClusterOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """List model versions, newest first: status, times, held-out gate results, reason."""
    name = _cluster(cluster, required=False)

    async def work(registry: Registry) -> list[VersionInfo]:
        return await registry.versions(name)

    rows = _run(work, database_url=database_url, nats=False, reads_only=True)
    if not rows:
        console.print(f"no model versions{f' for cluster {escape(name)}' if name else ''}")
        return
    console.print(_versions_table(rows, f"model versions{f' of {name}' if name else ''}"))


@models_app.command("register")
def register_command(
    checkpoint: Annotated[Path, typer.Argument(help="checkpoint folder (card.json + weights.pt)")],
    version: Annotated[
        str | None, typer.Option("--version", help="version name (default: m-<sha256 prefix>)")
    ] = None,
    cluster: ClusterOpt = None,
    database_url: DatabaseOpt = None,
    actor: ActorOpt = None,
) -> None:
    """Register a checkpoint as a candidate (verified as a prioritizer would load it)."""
    name = _cluster(cluster)
    assert name is not None

    async def work(registry: Registry) -> tuple[VersionInfo, bool]:
        return await registry.register(checkpoint, cluster=name, version=version)

    info, new = _run(work, database_url=database_url, nats=False, actor=actor)
    what = "registered" if new else "already registered (unchanged)"
    console.print(
        f"{escape(info.version)} {what}: status {info.status}, cluster {escape(name)}, "
        f"sha256 {info.sha256[:12]}..., {escape(info.uri)}"
    )


@models_app.command("promote")
def promote_command(
    version: Annotated[str, typer.Argument(help="the candidate to make current")],
    force: Annotated[
        bool, typer.Option("--force", help="promote without the gate (recorded as forced)")
    ] = False,
    windows: Annotated[int | None, typer.Option(help="gate: held-out windows")] = None,
    window_size: Annotated[int | None, typer.Option(help="gate: jobs per window")] = None,
    margin: Annotated[float | None, typer.Option(help="gate: relative improvement required")] = None,
    metric: Annotated[str | None, typer.Option(help="gate: wait | jct | bsld | utilization")] = None,
    trace: Annotated[str | None, typer.Option(help="gate: trace ('embedded' = generated)")] = None,
    gate_cluster: Annotated[
        str | None, typer.Option("--gate-cluster", help="gate: cluster preset or spec file to simulate")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="gate: seed of the windows and the bootstrap")] = None,
    database_url: DatabaseOpt = None,
    nats_url: NatsOpt = None,
    subject_root: RootOpt = None,
    actor: ActorOpt = None,
) -> None:
    """Promote a candidate if it beats the current model (or the base policy) on held-out windows.

    It must improve the gate's metric by the margin with a paired-bootstrap interval above zero;
    otherwise it stays a candidate and the reason is recorded (exit code 1).
    """
    from pydantic import ValidationError

    from shared.registry import GateSettings

    options: dict[str, Any] = {
        "windows": windows,
        "window_size": window_size,
        "margin": margin,
        "metric": metric,
        "trace": trace,
        "cluster": gate_cluster,
        "seed": seed,
    }
    try:
        gate = GateSettings(**{k: v for k, v in options.items() if v is not None})
    except ValidationError as err:
        raise fail(f"gate settings: {err}") from None

    async def work(registry: Registry) -> PromotionResult:
        if not force:
            console.print(f"running the promotion gate for {escape(version)} ...")
        return await registry.promote(version, force=force, gate=gate)

    result = _run(
        work, database_url=database_url, nats=True, nats_url=nats_url, subject_root=subject_root, actor=actor
    )
    _report(result)


@models_app.command("rollback")
def rollback_command(
    cluster: ClusterOpt = None,
    to: Annotated[
        str | None, typer.Option("--to", help="version to return to (default: the previous)")
    ] = None,
    database_url: DatabaseOpt = None,
    nats_url: NatsOpt = None,
    subject_root: RootOpt = None,
    actor: ActorOpt = None,
) -> None:
    """Make the previous current version current again (no gate); the rollback is recorded."""
    name = _cluster(cluster)
    assert name is not None

    async def work(registry: Registry) -> PromotionResult:
        return await registry.rollback(name, to=to)

    result = _run(
        work, database_url=database_url, nats=True, nats_url=nats_url, subject_root=subject_root, actor=actor
    )
    _report(result)


@models_app.command("shadow")
def shadow_command(
    version: Annotated[str, typer.Argument(help="the candidate to score beside the current model")],
    off: Annotated[bool, typer.Option("--off", help="stop scoring it (take it out of shadow mode)")] = False,
    database_url: DatabaseOpt = None,
    nats_url: NatsOpt = None,
    subject_root: RootOpt = None,
    actor: ActorOpt = None,
) -> None:
    """Shadow mode: every prioritizer scores the live queues with a candidate beside the current model.

    Its priorities are stored (table shadow_priorities, view shadow_vs_applied) but never applied;
    `hylo report` compares them with what was applied. A new shadow replaces the cluster's previous one.
    """

    async def work(registry: Registry) -> ShadowResult:
        return await registry.shadow(version, on=not off)

    result = _run(
        work, database_url=database_url, nats=True, nats_url=nats_url, subject_root=subject_root, actor=actor
    )
    if result.on:
        replaced = f" (replaces {escape(result.replaced)})" if result.replaced else ""
        console.print(
            f"[bold cyan]{escape(result.version)} is in shadow mode[/] on cluster {escape(result.cluster)}"
            f"{replaced}: scored beside the current model, never applied"
        )
    else:
        console.print(f"{escape(result.version)} is out of shadow mode on cluster {escape(result.cluster)}")


@models_app.command("history")
def history_command(
    version: Annotated[str | None, typer.Argument(help="one version (default: all of the cluster)")] = None,
    cluster: ClusterOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Every state change and gate verdict, oldest first, with who and when."""
    name = _cluster(cluster, required=False)

    async def work(registry: Registry) -> list[Any]:
        return await registry.history(version=version, cluster=name)

    events = _run(work, database_url=database_url, nats=False, reads_only=True)
    if not events:
        console.print("no history")
        return
    table = Table(title="model registry history")
    for column in ("at", "version", "event", "status", "by", "reason"):
        table.add_column(column, overflow="fold")
    for e in events:
        change = f"{e.from_status or '-'} -> {e.to_status}"
        by = e.actor + (" (forced)" if e.forced else "")
        table.add_row(_when(e.at), escape(e.version), e.event, change, escape(by), escape(e.reason or ""))
    console.print(table)
