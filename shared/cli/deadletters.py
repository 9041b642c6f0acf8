"""``hylo deadletters replay``: store what the recorder dead-lettered, once the database is back.

The recorder retries a write for ``HYLO_RETRY_WINDOW_S`` (15 minutes) while the database is
unavailable; a record still unstored then goes to the dead letters (``<root>.v1.<cluster>.dead``)
rather than being dropped. This command reads them and re-applies each through the recorder's own
insert-or-ignore writes (``services.placer.deadletters``): a record already stored adds nothing, so
the command can be run as often as wanted. ``--dry-run`` lists the letters and whether each can be
replayed, without writing.

NATS comes from ``HYLO_NATS_URL`` and ``HYLO_SUBJECT_ROOT`` (or the options), the database from
``--database`` (``--database-url``: a SQLite file path or a SQLAlchemy URL) or ``HYLO_DATABASE_URL``.
Exit codes: 0 every letter of the recorder was stored or rejected on purpose, 1 some could not be
replayed (their originals are gone from the bus; they are listed), 2 error (NATS or the database
unreachable).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from shared.cli.common import DatabaseOpt, console, database_option, fail

if TYPE_CHECKING:
    from services.placer.deadletters import Letter, ReplaySummary

deadletters_app = typer.Typer(
    name="deadletters",
    help="Dead letters: re-apply the records the recorder could not store.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@deadletters_app.callback()
def _group() -> None:
    """Dead letters (``<root>.v1.<cluster>.dead``)."""


ClusterOpt = Annotated[
    str | None, typer.Option("--cluster", help="only this cluster's dead letters (default: all)")
]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="list what would be replayed; write nothing")]
NatsOpt = Annotated[str | None, typer.Option("--nats-url", help="NATS servers (default: HYLO_NATS_URL)")]
RootOpt = Annotated[
    str | None, typer.Option("--subject-root", help="subject namespace (default: HYLO_SUBJECT_ROOT)")
]


@deadletters_app.command("replay")
def replay_command(
    cluster: ClusterOpt = None,
    dry_run: DryRunOpt = False,
    nats_url: NatsOpt = None,
    subject_root: RootOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Re-apply the recorder's dead letters (decisions, jobs, outcomes, model versions, shadow
    priorities) to the database; idempotent: a record already stored adds nothing."""
    from shared.schemas.base import CLUSTER_PATTERN

    if cluster is not None and not re.match(CLUSTER_PATTERN, cluster):
        raise fail(
            f"cluster name {cluster!r}: 1-63 letters, digits, '_' or '-', starting with a letter or digit"
        )
    table = Table(title="dead letters of the recorder" + (" (dry run)" if dry_run else ""))
    for column in ("dead seq", "stage", "cluster", "correlation id", "failed at", "reason", "replay"):
        table.add_column(column, overflow="fold")

    def row(item: Letter) -> None:
        letter = item.letter
        table.add_row(
            str(item.seq),
            letter.stage,
            letter.cluster,
            letter.correlation_id or "",
            letter.failed_at.strftime("%Y-%m-%d %H:%M:%S"),
            escape(letter.reason[:120]),
            escape(item.status if item.status != "stored" else f"stored ({item.rows:,} rows)"),
        )

    summary = asyncio.run(_replay(cluster, dry_run, nats_url, subject_root, database_url, row))
    if summary.letters:
        console.print(table)
    console.print(summary.line(dry_run), soft_wrap=True)
    if summary.unreplayable:
        raise typer.Exit(code=1)


async def _replay(
    cluster: str | None,
    dry_run: bool,
    nats_url: str | None,
    subject_root: str | None,
    database_url: str | None,
    on_letter: Callable[[Letter], None],
) -> ReplaySummary:
    from services.placer.deadletters import replay_dead_letters
    from shared.bus import BusSettings, connect
    from shared.bus.settings import message_limits
    from shared.cli.common import migrated_engine
    from shared.schemas.subjects import Subjects

    updates: dict[str, Any] = {"nats_max_reconnect_attempts": 1, "nats_name": "hylo-deadletters"}
    if nats_url is not None:
        updates["nats_url"] = nats_url
    if subject_root is not None:
        updates["subject_root"] = subject_root
    bus = BusSettings().model_copy(update=updates)
    engine = None if dry_run else await migrated_engine(database_option(database_url))
    try:
        try:
            nc = await connect(bus)
        except Exception as err:
            raise fail(f"cannot reach NATS at {bus.nats_url}: {type(err).__name__}: {err}") from None
        try:
            limits = message_limits(bus, nc.max_payload)
            return await replay_dead_letters(
                nc.jetstream(), Subjects(bus.subject_root), engine, limits, cluster, on_letter
            )
        except typer.Exit:
            raise
        except Exception as err:  # the store went away again mid-replay: what is stored stays
            raise fail(
                f"replay stopped: {type(err).__name__}: {err} (run it again: it is idempotent)"
            ) from None
        finally:
            await nc.close()
    finally:
        if engine is not None:
            await engine.dispose()
