"""Re-applying the recorder's dead letters: what ``hylo deadletters replay`` does.

Why replay from the original stream and not from the letter: a dead letter keeps a bounded excerpt
of its payload (2,048 characters: a decision of 50 jobs is longer), with the original's stream,
sequence and sha256. The original stays in its work stream for ``HYLO_STREAM_MAX_AGE_S`` (a day),
the letter in the dead stream for two weeks; a letter whose original is gone is replayed from its
excerpt only when the excerpt is the whole payload (the digest says so), and otherwise reported.

Every record goes through ``apply_record``, the recorder's own insert-or-ignore writes, one
transaction per letter: replaying twice, or replaying a record that was stored after all (a
redelivery won the race), adds nothing. Letters are left in the dead stream (it keeps two weeks):
the replay is safe to repeat, and the letters remain the record of what went wrong.

Which letters: those of a recorder durable (``RECORDED``) whose reason is not a rejection (a matrix
of a cluster without a spec is refused again on every try: replaying it would store what the
recorder refuses). Messages that failed validation are reported as undecodable. An original stored
as a reference to the object store (a message larger than one NATS message, ``shared.bus.large``)
is read back from the bucket, which keeps as long as the work streams (or less, when full); one no
longer there is reported.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

from nats.js import JetStreamContext
from sqlalchemy.ext.asyncio import AsyncEngine

from services.placer.recorder import RECORDED, apply_record
from shared.bus.browse import read_stream
from shared.bus.large import LargePayloads, LargePayloadUnavailable
from shared.bus.streams import stream_name
from shared.schemas.base import Message
from shared.schemas.codec import MessageError, decode
from shared.schemas.deadletter import DeadLetter
from shared.schemas.limits import Limits
from shared.schemas.subjects import Subjects

__all__ = ["Letter", "ReplaySummary", "read_dead_letters", "replay_dead_letters"]


@dataclass
class Letter:
    """One dead letter of the recorder and what the replay made of it."""

    seq: int  # in the dead stream
    letter: DeadLetter
    #: ``stored`` (new rows), ``already stored``, ``would replay`` (dry run), or why it was not
    status: str = ""
    rows: int = 0


@dataclass
class ReplaySummary:
    """Counts of one replay, and every letter of the recorder that was looked at."""

    letters: list[Letter] = field(default_factory=list)
    #: dead letters of other stages (the featurizer's, the prioritizer's, ...): not the recorder's
    other_stages: int = 0

    def count(self, status: str) -> int:
        return sum(1 for x in self.letters if x.status == status)

    @property
    def rows(self) -> int:
        return sum(x.rows for x in self.letters)

    @property
    def unreplayable(self) -> list[Letter]:
        """Letters whose record could not be re-applied (lost unless its original turns up)."""
        done = ("stored", "already stored", "would replay", "rejected")
        return [x for x in self.letters if x.status not in done]

    def line(self, dry_run: bool) -> str:
        """The summary line the command prints."""
        n = len(self.letters)
        if dry_run:
            head = f"{n:,} dead letters of the recorder: {self.count('would replay'):,} would be replayed"
        else:
            head = (
                f"{n:,} dead letters of the recorder: {self.count('stored'):,} replayed "
                f"({self.rows:,} rows stored), {self.count('already stored'):,} already stored"
            )
        rejected = self.count("rejected")
        lost = len(self.unreplayable)
        return (
            f"{head}, {rejected:,} rejected by the recorder (not replayed), {lost:,} not replayable; "
            f"{self.other_stages:,} dead letters of other stages left alone"
        )


async def read_dead_letters(
    js: JetStreamContext, subjects: Subjects, cluster: str | None, limits: Limits
) -> list[tuple[int, DeadLetter]]:
    """Every dead letter of ``cluster`` (all clusters if None), oldest first, with its sequence in
    the dead stream (an ephemeral consumer that acks nothing: reading leaves the stream as it was)."""
    subject = subjects.of(cluster, "dead") if cluster is not None else subjects.all_clusters("dead")
    return await read_stream(js, subject, stream_name(subjects, "dead"), DeadLetter, limits)


async def _original(js: JetStreamContext, letter: DeadLetter) -> bytes | str:
    """The dead-lettered payload, whole and checked against its digest; else why it cannot be had."""
    data: bytes | None = None
    if letter.stream and letter.stream_seq:
        with contextlib.suppress(Exception):  # gone (aged out, discarded), or the stream is
            raw = await js.get_msg(letter.stream, letter.stream_seq)
            if raw.data is not None and raw.subject == letter.original_subject:
                data = raw.data
    if data is None or hashlib.sha256(data).hexdigest() != letter.payload_sha256:
        excerpt = letter.payload_excerpt.encode("utf-8")
        if (
            len(excerpt) != letter.payload_bytes
            or hashlib.sha256(excerpt).hexdigest() != letter.payload_sha256
        ):
            return f"gone from {letter.stream or 'its stream'} (sequence {letter.stream_seq})"
        data = excerpt
    return data


async def replay_dead_letters(
    js: JetStreamContext,
    subjects: Subjects,
    engine: AsyncEngine | None,
    limits: Limits,
    cluster: str | None = None,
    on_letter: Callable[[Letter], None] | None = None,
) -> ReplaySummary:
    """Re-apply the recorder's dead letters of ``cluster`` (all if None) through ``apply_record``;
    ``engine=None`` is a dry run (every letter read and checked, nothing written).

    A write that fails raises (the store is still unavailable: run it again later); the letters
    replayed before it stay stored."""
    summary = ReplaySummary()
    for seq, letter in await read_dead_letters(js, subjects, cluster, limits):
        recorded = RECORDED.get(letter.stage)
        if recorded is None:
            summary.other_stages += 1
            continue
        item = Letter(seq=seq, letter=letter)
        summary.letters.append(item)
        item.status = await _replay_one(js, subjects, engine, limits, letter, recorded)
        if item.status.startswith("stored "):
            item.rows = int(item.status.split()[1])
            item.status = "stored" if item.rows else "already stored"
        if on_letter is not None:
            on_letter(item)
    return summary


async def _replay_one(
    js: JetStreamContext,
    subjects: Subjects,
    engine: AsyncEngine | None,
    limits: Limits,
    letter: DeadLetter,
    recorded: tuple[str, type[Message]],
) -> str:
    """What became of one letter: ``stored N`` (N new rows), ``would replay``, or why not."""
    kind, model = recorded
    if letter.reason.startswith("rejected by "):
        return "rejected"
    try:
        _, subject_kind = subjects.parse(letter.original_subject)
    except Exception:
        return f"not a subject of root {subjects.root!r}: {letter.original_subject}"
    if subject_kind != kind:
        return f"a {subject_kind} message, not {kind}"
    data = await _original(js, letter)
    if isinstance(data, str):
        return data
    try:
        data = await LargePayloads(js, subjects).resolve(data, limits.max_message_bytes)
    except (MessageError, LargePayloadUnavailable) as err:
        return f"its payload is unreadable: {str(err)[:200]}"
    try:
        message = decode(model, data, limits)
    except MessageError as err:
        return f"undecodable: {err.reason[:200]}"
    if engine is None:
        return "would replay"
    async with engine.begin() as conn:
        rows = await apply_record(conn, message)
    return f"stored {rows}"
