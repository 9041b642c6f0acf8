"""One JetStream stream per subject kind, created or updated to the configured limits.

Why one stream per kind (not one for everything): retention differs by kind. Snapshots keep only the
newest message per cluster subject (``max_msgs_per_subject=1``): when a burst of snapshots arrives
faster than the featurizer reads, the server itself discards the stale ones, so queueing latency stays
bounded (latest-wins at the storage level; the consumer adds a per-replica check, see
``shared.bus.consumer``). Work streams keep a day, bounded in bytes and messages; dead letters keep
two weeks. Every stream has a duplicate window, so a republished message (same ``Nats-Msg-Id``) is
dropped by the server.
"""

from __future__ import annotations

from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import BadRequestError, NotFoundError

from shared.bus.settings import BusSettings
from shared.schemas.subjects import KINDS, Kind, Subjects


def stream_name(subjects: Subjects, kind: Kind) -> str:
    """``HYLO_SNAPSHOTS`` for the default root; tests get ``<ROOT>_<KIND>`` of their own root."""
    return f"{subjects.root}_{kind}".upper().replace("-", "_")


@dataclass(frozen=True)
class StreamPlan:
    """The stream a kind of message is stored in, and its configuration."""

    kind: Kind
    config: StreamConfig


def stream_plans(subjects: Subjects, settings: BusSettings) -> list[StreamPlan]:
    """The configuration of every stream of a namespace."""
    storage = StorageType.FILE if settings.storage == "file" else StorageType.MEMORY
    plans = []
    for kind in KINDS:
        dead = kind == "dead"
        config = StreamConfig(
            name=stream_name(subjects, kind),
            description=f"hylo {kind} ({subjects.all_clusters(kind)})",
            subjects=[subjects.all_clusters(kind)],
            retention=RetentionPolicy.LIMITS,
            storage=storage,
            discard=DiscardPolicy.OLD,
            max_age=settings.dead_max_age_s if dead else settings.stream_max_age_s,
            max_bytes=settings.dead_max_bytes if dead else settings.stream_max_bytes,
            max_msgs=settings.stream_max_msgs,
            max_msgs_per_subject=1 if kind == "snapshots" and settings.snapshots_latest_only else -1,
            duplicate_window=settings.duplicate_window_s,
        )
        plans.append(StreamPlan(kind=kind, config=config))
    return plans


async def ensure_streams(js: JetStreamContext, subjects: Subjects, settings: BusSettings) -> list[str]:
    """Create missing streams and bring existing ones to the configured limits; returns their names."""
    names = []
    for plan in stream_plans(subjects, settings):
        name = plan.config.name
        assert name is not None
        try:
            await js.stream_info(name)
        except NotFoundError:
            try:
                await js.add_stream(plan.config)
            except BadRequestError:  # another service created it meanwhile: align its limits
                await js.update_stream(plan.config)
        else:
            await js.update_stream(plan.config)
        names.append(name)
    return names
