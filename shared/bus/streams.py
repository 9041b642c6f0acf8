"""One JetStream stream per subject kind, created or updated to the configured limits.

Why one stream per kind (not one for everything): retention differs by kind. Snapshots keep only the
newest message per cluster subject (``max_msgs_per_subject=1``): when a burst of snapshots arrives
faster than the featurizer reads, the server itself discards the stale ones, so queueing latency stays
bounded (latest-wins at the storage level; the consumer adds a per-replica check, see
``shared.bus.consumer``). Work streams keep a day, bounded in bytes and messages; dead letters keep
two weeks. Every stream has a duplicate window, so a republished message (same ``Nats-Msg-Id``) is
dropped by the server.

Why a storage budget per subject root: JetStream reserves a stream's ``max_bytes`` against the
server's ``max_file_store`` (or ``max_memory_store``) when the stream is created, whether or not the
bytes are ever written. With 1 GiB per work stream a root reserved 7.25 GiB, and on the shipped 20 GB
server the third root failed with "insufficient storage" (issue 20). Now all streams of one root
reserve ``stream_root_max_bytes`` together (4 GiB by default: four roots fit the shipped 20 GB),
shared by ``STREAM_SHARES`` (bulky matrices and decisions get most; snapshots keep one message per
cluster, model announcements are tiny), each at most ``stream_max_bytes`` (``dead_max_bytes`` for
dead letters). A server that still cannot reserve them gets an error naming the settings to change.

The root's object-store bucket (``<ROOT>_LARGE``, stream ``OBJ_<ROOT>_LARGE``: messages larger than
one NATS message, ``shared.bus.large``) is one more stream of the root, with its share of the same
budget (``large``, the biggest: it holds the whole snapshots, matrices and decisions of big queues
while their streams hold references). It is created with the others, so ``hylo bus init`` creates
it for identities that may not, and like them it keeps ``stream_max_age_s`` and discards the oldest
bytes when full: an object discarded before a reader got to it is dead-lettered by that reader.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Final, Literal

from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import APIError, BadRequestError, NotFoundError

from shared.bus.connection import connect
from shared.bus.settings import BusSettings
from shared.schemas.subjects import KINDS, Kind, Subjects

#: the object-store bucket of a subject root (``shared.bus.large``), stored beside the kinds' streams
LARGE: Final = "large"
Stored = Kind | Literal["large"]

#: each stream's share of a subject root's storage budget (``BusSettings.stream_root_max_bytes``);
#: the bucket's is the largest: big queues' snapshots, matrices and decisions are stored there whole
STREAM_SHARES: dict[Stored, float] = {
    "snapshots": 0.06,
    "features": 0.18,
    "priorities": 0.08,
    "placements": 0.18,
    "outcomes": 0.08,
    "models": 0.02,
    "shadows": 0.06,
    "dead": 0.09,
    LARGE: 0.25,
}


class StreamStorageError(RuntimeError):
    """The server cannot reserve a stream's storage: its limits and Hylo's budget disagree."""


def stream_max_bytes(kind: Stored, settings: BusSettings) -> int:
    """The ``max_bytes`` of ``kind``'s stream: its share of the root's budget, at most its own cap."""
    cap = settings.dead_max_bytes if kind == "dead" else settings.stream_max_bytes
    return max(1 << 20, min(cap, int(settings.stream_root_max_bytes * STREAM_SHARES[kind])))


def stream_name(subjects: Subjects, kind: Kind) -> str:
    """``HYLO_SNAPSHOTS`` for the default root; tests get ``<ROOT>_<KIND>`` of their own root."""
    return f"{subjects.root}_{kind}".upper().replace("-", "_")


def large_bucket(subjects: Subjects) -> str:
    """The object-store bucket of a subject root: ``HYLO_LARGE`` for the default root."""
    return f"{subjects.root}_{LARGE}".upper().replace("-", "_")


def large_stream(subjects: Subjects) -> str:
    """The stream behind that bucket (the object store's naming: ``OBJ_<bucket>``)."""
    return f"OBJ_{large_bucket(subjects)}"


@dataclass(frozen=True)
class StreamPlan:
    """The stream a kind of message (or the root's object-store bucket) is stored in, and its
    configuration."""

    kind: Stored
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
            max_bytes=stream_max_bytes(kind, settings),
            max_msgs=settings.stream_max_msgs,
            max_msgs_per_subject=1 if kind == "snapshots" and settings.snapshots_latest_only else -1,
            duplicate_window=settings.duplicate_window_s,
            num_replicas=settings.stream_replicas,
        )
        plans.append(StreamPlan(kind=kind, config=config))
    plans.append(StreamPlan(kind=LARGE, config=large_config(subjects, settings)))
    return plans


def large_config(subjects: Subjects, settings: BusSettings) -> StreamConfig:
    """The bucket's stream: the JetStream object store's layout (chunks on ``$O.<bucket>.C.<nuid>``,
    each object's info on ``$O.<bucket>.M.<name>``, rolled up, direct gets allowed), as nats-py's
    ``create_object_store`` makes it, except that it discards the oldest bytes when full (the object
    store's default refuses new ones, which would stop the pipeline until objects aged out)."""
    bucket = large_bucket(subjects)
    return StreamConfig(
        name=large_stream(subjects),
        description=f"hylo messages larger than one NATS message ({subjects.root})",
        subjects=[f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE if settings.storage == "file" else StorageType.MEMORY,
        discard=DiscardPolicy.OLD,
        max_age=settings.stream_max_age_s,
        max_bytes=stream_max_bytes(LARGE, settings),
        num_replicas=settings.stream_replicas,
        allow_rollup_hdrs=True,
        allow_direct=True,
    )


class StreamsMissing(RuntimeError):
    """Streams this identity may not create did not appear in time (nobody ran ``hylo bus init``)."""


async def wait_for_streams(js: JetStreamContext, subjects: Subjects, settings: BusSettings) -> list[str]:
    """Wait until every stream of the namespace exists (for identities that may not create them).

    Why wait rather than fail at once: in a deployment the admin's one-shot ``hylo bus init`` and the
    services start together; a service that comes up first waits up to ``nats_streams_wait_s``."""
    names = [stream_name(subjects, kind) for kind in KINDS] + [large_stream(subjects)]
    deadline = time.monotonic() + settings.nats_streams_wait_s
    missing = list(names)
    while True:
        for name in list(missing):
            try:
                await js.stream_info(name)
                missing.remove(name)
            except NotFoundError:
                pass
        if not missing:
            return names
        if time.monotonic() >= deadline:
            raise StreamsMissing(
                f"streams {', '.join(missing)} do not exist and this identity may not create them "
                f"(HYLO_NATS_MANAGE_STREAMS=false); waited {settings.nats_streams_wait_s:g} s: run "
                "`hylo bus init` with the admin credentials"
            )
        await asyncio.sleep(0.5)


async def ensure_streams(js: JetStreamContext, subjects: Subjects, settings: BusSettings) -> list[str]:
    """Create missing streams and bring existing ones to the configured limits; returns their names.

    An identity without the right to manage streams (``nats_manage_streams`` false) only waits for
    them: the server would refuse its requests, and a refused request only times out."""
    if not settings.nats_manage_streams:
        return await wait_for_streams(js, subjects, settings)
    names = []
    for plan in stream_plans(subjects, settings):
        name = plan.config.name
        assert name is not None
        try:
            try:
                await js.stream_info(name)
            except NotFoundError:
                try:
                    await js.add_stream(plan.config)
                except BadRequestError as err:  # another service created it meanwhile: align its limits
                    if _insufficient(err):
                        raise
                    await js.update_stream(plan.config)
            else:
                await js.update_stream(plan.config)
        except APIError as err:
            if not _insufficient(err):
                raise
            raise StreamStorageError(
                f"stream {name}: the NATS server cannot reserve {plan.config.max_bytes:,} bytes ({err}); "
                f"the streams of one subject root reserve HYLO_STREAM_ROOT_MAX_BYTES="
                f"{settings.stream_root_max_bytes:,} together: lower it, or raise the server's "
                "jetstream max_file_store (max_memory_store for memory streams) to at least the "
                "number of subject roots times that"
            ) from err
        names.append(name)
    return names


async def create_streams(settings: BusSettings) -> list[str]:
    """Connect with ``settings``, ``ensure_streams`` of its subject root, disconnect.

    Why a helper: the admin's set-up (``hylo bus init``, ``hylo run`` before its services start)
    and the benches and tests that start their own servers all need exactly this, once."""
    client = await connect(settings)
    try:
        return await ensure_streams(client.jetstream(), Subjects(settings.subject_root), settings)
    finally:
        await client.close()


def _insufficient(err: APIError) -> bool:
    """JetStream's "insufficient storage resources" (error code 10047), by code or by text."""
    return getattr(err, "err_code", None) == 10047 or "insufficient" in str(err).lower()
