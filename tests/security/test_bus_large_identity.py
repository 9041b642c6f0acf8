"""Large messages under per-service identities (issues 20 and 22): an adapter writes a snapshot larger
than the inline limit into the root's object-store bucket, the featurizer reads it back, and an
identity without the bucket's rights (the trainer's) cannot write into it. Against a private
nats-server configured by ``hylo bus credentials``' own output."""

from __future__ import annotations

import asyncio
import subprocess

from shared.bus import Consumer, Delivery, LargePayloads, Publisher, connect
from shared.bus.credentials import CredentialSet
from shared.bus.large import is_reference
from shared.bus.streams import large_bucket, stream_name
from shared.schemas import Limits, QueueSnapshot
from tests.schemas.message_factories import snapshot
from tests.security.test_bus_identity import SUBJECTS, _as, _init, secure_nats

__all__ = ["secure_nats"]


def test_an_adapter_writes_a_large_snapshot_the_featurizer_reads_and_the_trainer_may_not_write(
    secure_nats: tuple[str, CredentialSet, subprocess.Popen[bytes]],
) -> None:
    url, creds, _ = secure_nats
    limits = Limits(max_jobs=5000)

    async def run() -> tuple[bool, list[QueueSnapshot], bool]:
        await _init(url, creds)  # the admin creates the streams and the bucket
        adapter_settings = _as(url, creds, "adapter-a").model_copy(update={"large_payload_bytes": 8192})
        adapter = await connect(adapter_settings)
        js = adapter.jetstream()
        large = LargePayloads(js, SUBJECTS, adapter_settings)
        sent = snapshot(cluster="a", correlation_id="big", n_jobs=2000)
        stored = await Publisher(js, SUBJECTS, limits, large=large).publish(sent)
        await adapter.close()
        admin = await connect(_as(url, creds, "admin"))
        raw = await admin.jetstream().get_msg(stream_name(SUBJECTS, "snapshots"), stored.seq)
        referenced = is_reference(raw.data)
        await admin.close()

        featurizer_settings = _as(url, creds, "featurizer")
        nc = await connect(featurizer_settings)
        seen: list[QueueSnapshot] = []

        async def handle(message: QueueSnapshot, _: Delivery) -> None:
            seen.append(message)

        publisher = Publisher(nc.jetstream(), SUBJECTS, limits)
        consumer = Consumer(
            nc.jetstream(),
            publisher,
            kind="snapshots",
            model=QueueSnapshot,
            durable="featurizer",
            handler=handle,
            settings=featurizer_settings,
        )
        for _ in range(20):
            await consumer.process_batch(timeout_s=0.5)
            if seen:
                break
        await nc.close()

        trainer = await connect(_as(url, creds, "trainer"))
        try:
            await trainer.jetstream().publish(f"$O.{large_bucket(SUBJECTS)}.C.forged", b"x", timeout=0.5)
            trainer_wrote = True
        except Exception:
            trainer_wrote = False
        await trainer.close()
        return referenced, seen, trainer_wrote

    referenced, seen, trainer_wrote = asyncio.run(run())
    assert referenced  # the stream holds a reference, the bucket the snapshot
    assert [s.correlation_id for s in seen] == ["big"] and len(seen[0].pending) == 2000
    assert not trainer_wrote
