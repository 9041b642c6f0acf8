"""Size limits of messages: settings (``HYLO_MAX_JOBS`` and friends), passed to validation through
pydantic's validation context.

Why settings: Slurm sites hold 10^4 to 10^5 pending jobs, and a limit fixed in code dead-lettered
every snapshot above it (issue 22: 5,000 and 20,000 pending jobs were refused as "more than the limit
of 4096"). The limits are ``LimitSettings`` (``HYLO_*`` variables, else ``hylo.toml``, else the
defaults below), read once per process by ``configured_limits``; ``BusSettings`` extends the class,
so the services, the replay and the CLI read the same values (``shared.bus.settings.message_limits``).
A message over a limit is still refused while it is parsed, with a reason naming the limit and the
setting that raises it (``check_count``): a hostile 1,000,000-job snapshot must be refused, not
featurized.

Why a context and not module constants read by the validators: one process may decode under other
limits than its settings (tests, the benches), so ``decode`` passes the limits it was given to the
validators, which read them with ``limits_of``; without a context they fall back to
``configured_limits()``.

A message's byte size does not bound what decoding it allocates: a packed float table may be deflated
(``shared.schemas.packed``), and 1 MB of deflated zeros inflates to 1 GB. So a table's header (rows,
cols, dtype) is checked against ``max_jobs``, ``max_table_bytes`` and ``max_inflate_ratio`` before its
bytes are inflated or allocated, and inflating never produces more than the header declared: a lying
header costs at most the bound, never what it claims.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo

from shared.config import HyloBaseSettings

LIMITS_KEY = "hylo_limits"

#: NATS' default max_payload; a message above the server's goes through the object store
#: (``shared.bus.large``), so it no longer bounds a message
NATS_DEFAULT_MAX_PAYLOAD = 1024 * 1024
#: deflate (RFC 1951) cannot expand its input more than 1032 times (a 258-byte match costs at least
#: two bits), so a deflated table whose header declares more is a lie, whatever the level it used
DEFLATE_MAX_RATIO = 1032

#: the defaults, in one place: ``Limits`` and ``LimitSettings`` both start from them
DEFAULT_MAX_MESSAGE_BYTES = 64 << 20
DEFAULT_MAX_JOBS = 100_000
DEFAULT_MAX_RUNNING = 200_000
DEFAULT_MAX_NODES = 100_000
DEFAULT_MAX_TABLE_BYTES = 64 << 20

#: the setting that raises each limit, named in the reason of a refusal
SETTING_OF = {
    "max_message_bytes": "HYLO_MAX_MESSAGE_BYTES",
    "max_jobs": "HYLO_MAX_JOBS",
    "max_running": "HYLO_MAX_RUNNING",
    "max_nodes": "HYLO_MAX_NODES",
    "max_table_bytes": "HYLO_MAX_TABLE_BYTES",
    "max_inflate_ratio": "HYLO_MAX_INFLATE_RATIO",
}

_MESSAGE_BYTES_HELP = (
    "largest message, whole: one above the NATS server's max_payload travels through the JetStream "
    "object store (shared.bus.large), so this bounds what a reader reassembles and parses"
)
_JOBS_HELP = "pending jobs per snapshot (and rows of every message downstream of it)"
_TABLE_HELP = (
    "decoded bytes of one packed float table (rows x cols x itemsize, from its header, checked before "
    "inflating); the largest honest one under the default limits, 100,000 jobs x 64 features x 8 "
    "bytes, is 51.2 MB"
)
_RATIO_HELP = (
    "declared bytes of a deflated table per deflated byte; Hylo's own level-1 tables stay under 230, "
    "and no deflate stream exceeds 1032"
)


#: each limit's bound and help, once: ``Limits`` (what messages are validated under) and
#: ``LimitSettings`` (where the values come from) declare the same fields with them
MessageBytes = Annotated[int, Field(ge=1024, description=_MESSAGE_BYTES_HELP)]
JobCount = Annotated[int, Field(ge=1, description=_JOBS_HELP)]
RunningCount = Annotated[int, Field(ge=1, description="running jobs per snapshot")]
NodeCount = Annotated[int, Field(ge=1, description="node states per snapshot")]
TableBytes = Annotated[int, Field(ge=1024, description=_TABLE_HELP)]
InflateRatio = Annotated[int, Field(ge=1, description=_RATIO_HELP)]


class Limits(BaseModel):
    """Upper bounds on a message's size; every count is checked with a message naming the field."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_message_bytes: MessageBytes = DEFAULT_MAX_MESSAGE_BYTES
    max_jobs: JobCount = DEFAULT_MAX_JOBS
    max_running: RunningCount = DEFAULT_MAX_RUNNING
    max_nodes: NodeCount = DEFAULT_MAX_NODES
    max_table_bytes: TableBytes = DEFAULT_MAX_TABLE_BYTES
    max_inflate_ratio: InflateRatio = DEFLATE_MAX_RATIO

    def context(self) -> dict[str, Any]:
        """The validation context that makes models check against these limits."""
        return {LIMITS_KEY: self}


class LimitSettings(HyloBaseSettings):
    """The message limits as settings: ``HYLO_MAX_MESSAGE_BYTES``, ``HYLO_MAX_JOBS``,
    ``HYLO_MAX_RUNNING``, ``HYLO_MAX_NODES``, ``HYLO_MAX_TABLE_BYTES``, ``HYLO_MAX_INFLATE_RATIO``
    (or the same keys in ``hylo.toml``). ``BusSettings`` extends it."""

    max_message_bytes: MessageBytes = DEFAULT_MAX_MESSAGE_BYTES
    max_jobs: JobCount = DEFAULT_MAX_JOBS
    max_running: RunningCount = DEFAULT_MAX_RUNNING
    max_nodes: NodeCount = DEFAULT_MAX_NODES
    max_table_bytes: TableBytes = DEFAULT_MAX_TABLE_BYTES
    max_inflate_ratio: InflateRatio = DEFLATE_MAX_RATIO

    def limits(self) -> Limits:
        """These settings as the ``Limits`` messages are validated under."""
        return Limits(**{name: getattr(self, name) for name in Limits.model_fields})


#: the defaults as a value (what ``Limits()`` holds); validation without a context reads the
#: settings instead (``configured_limits``)
DEFAULT_LIMITS = Limits()


@lru_cache(maxsize=1)
def configured_limits() -> Limits:
    """The limits of this process's settings (read once; ``configured_limits.cache_clear()`` reads
    them again): what validation without a context, and every ``limits=None`` default, uses."""
    return LimitSettings().limits()


def limits_or_configured(limits: Limits | None) -> Limits:
    """``limits``, else the configured ones."""
    return limits if limits is not None else configured_limits()


def limits_of(info: ValidationInfo) -> Limits:
    """The limits in effect for one validation call: the context's, else the configured ones."""
    ctx = info.context
    if isinstance(ctx, dict):
        found = ctx.get(LIMITS_KEY)
        if isinstance(found, Limits):
            return found
    return configured_limits()


def check_count(name: str, count: int, limit: int, field: str = "max_jobs") -> None:
    """Raise a ValueError naming the entries, the limit and the setting that raises it when
    ``count`` exceeds ``limit`` (``field``: which of ``Limits``' fields ``limit`` is)."""
    if count > limit:
        raise ValueError(
            f"{name} holds {count} entries, more than the limit of {limit} "
            f"({field}; raise it with {SETTING_OF.get(field, field)})"
        )
