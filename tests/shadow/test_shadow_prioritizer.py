"""A running prioritizer scores every matrix with a shadow candidate too, and applies only the current model.

Real NATS, the real featurizer and prioritizer (``ServiceRuntime``), real checkpoints. Two stacks run
side by side on two subject roots: stack A has the current model and a shadow candidate, stack B the
same current model and no shadow. The same snapshots go to both; A's PriorityVectors must equal B's
(the shadow changes nothing applied), and A publishes one ShadowPriorities per matrix, aligned with
the matrix's jobs. Taking the shadow out of shadow mode stops them; promoting the shadow to current
makes it the applied model and ends its shadow scoring.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import httpx
import pytest

from services.featurizer.service import DEFINITION as FEATURIZER
from services.prioritizer.service import DEFINITION as PRIORITIZER
from shared.bus import Publisher, ensure_streams
from shared.schemas import PriorityVector, ShadowPriorities, Subjects, decode
from tests.conftest_services import Bus, delete_namespace
from tests.schemas.message_factories import snapshot
from tests.shadow.shadow_helpers import (
    BSLD_MODEL,
    WAIT_MODEL,
    announcement,
    running,
    signed_publisher,
    spec_file,
    trust_signed,
)


async def _model_status(port: int, version: str | None, shadow: str | None) -> None:
    url = f"http://127.0.0.1:{port}/v1/model"
    deadline = time.monotonic() + 30
    async with httpx.AsyncClient() as client:
        while True:
            body = (await client.get(url)).json()
            if (body["version"], body.get("shadow_version")) == (version, shadow):
                return
            assert time.monotonic() < deadline, f"/v1/model shows {body}, expected {version!r}/{shadow!r}"
            await asyncio.sleep(0.05)


@pytest.mark.asyncio
async def test_shadow_scores_every_matrix_and_never_changes_the_applied_vector(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a generous deadline: on two shared cores a missed 50 ms deadline would make the base policy
    # decide in one stack and not the other, which is not what this test is about
    monkeypatch.setenv("HYLO_DEADLINE_MS", "5000")
    trust_signed(monkeypatch)
    models = signed_publisher(bus.publisher)
    spec = spec_file(tmp_path)
    other = Subjects(root=f"t{uuid.uuid4().hex[:12]}")
    await ensure_streams(bus.js, other, bus.settings)
    publisher_b = signed_publisher(Publisher(bus.js, other, bus.limits))
    try:
        async with (
            running((FEATURIZER, PRIORITIZER), bus.settings, bus.subjects, spec, suffix="-a") as a,
            running((FEATURIZER, PRIORITIZER), bus.settings, other, spec, suffix="-b") as b,
        ):
            port_a, port_b = a.ports["prioritizer"], b.ports["prioritizer"]
            vectors_a = await bus.nc.subscribe(bus.subjects.of("c1", "priorities"))
            vectors_b = await bus.nc.subscribe(other.of("c1", "priorities"))
            shadows = await bus.nc.subscribe(bus.subjects.of("c1", "shadows"))

            for publisher in (models, publisher_b):
                await publisher.publish(announcement("m-wait", WAIT_MODEL, "current"))
            await models.publish(announcement("m-bsld", BSLD_MODEL, "candidate", shadow=True))
            await _model_status(port_a, "m-wait", "m-bsld")
            await _model_status(port_b, "m-wait", None)

            sequence = 0

            async def both(n_jobs: int) -> tuple[PriorityVector, PriorityVector]:
                nonlocal sequence
                sequence += 1
                snap = snapshot(correlation_id=f"s{sequence}", sequence=sequence, n_jobs=n_jobs)
                await bus.publisher.publish(snap)
                await publisher_b.publish(snap)
                va = decode(PriorityVector, (await vectors_a.next_msg(timeout=30)).data)
                vb = decode(PriorityVector, (await vectors_b.next_msg(timeout=30)).data)
                assert va.correlation_id == vb.correlation_id == snap.correlation_id
                return va, vb

            applied: list[PriorityVector] = []
            for n_jobs in (6, 9, 4, 12):
                va, vb = await both(n_jobs)
                assert (va.policy, va.model_version, va.fallback) == ("model", "m-wait", None)
                assert (va.policy, va.model_version, va.fallback) == (
                    vb.policy,
                    vb.model_version,
                    vb.fallback,
                )
                assert va.priorities == vb.priorities  # exactly what it is without a shadow
                applied.append(va)

            seen: dict[str, ShadowPriorities] = {}
            for _ in applied:
                s = decode(ShadowPriorities, (await shadows.next_msg(timeout=30)).data)
                seen[s.correlation_id] = s
            assert sorted(seen) == sorted(v.correlation_id for v in applied)
            for v in applied:
                s = seen[v.correlation_id]
                assert s.model_version == "m-bsld" and s.fallback is None
                assert (s.applied_policy, s.applied_model_version) == ("model", "m-wait")
                assert s.job_ids == v.matrix.job_ids and (s.snapshot_time, s.sequence) == (
                    v.matrix.snapshot_time,
                    v.matrix.sequence,
                )
                assert len(s.priorities) == len(v.priorities)
                # the prioritizer's priorities are distinct integers Q..1 (Q = jobs): a permutation
                assert sorted(s.priorities) == [float(k) for k in range(1, len(s.job_ids) + 1)]
            # the two checkpoints were trained for different metrics: on some queue they disagree
            assert any(seen[v.correlation_id].priorities != v.priorities for v in applied)

            # out of shadow mode: no more shadow scores, the applied vector as before
            await models.publish(announcement("m-bsld", BSLD_MODEL, "candidate", tag="-off"))
            await _model_status(port_a, "m-wait", None)
            va, vb = await both(6)
            assert va.priorities == vb.priorities and va.model_version == "m-wait"
            with pytest.raises(TimeoutError):
                await shadows.next_msg(timeout=1.5)

            # a shadow whose checkpoint does not match its sha256 is refused: no shadow, nothing published
            tampered = announcement("m-bad", BSLD_MODEL, "candidate", shadow=True)
            await models.publish(tampered.model_copy(update={"sha256": "0" * 64}))
            await asyncio.sleep(1.0)  # time to (refuse to) load it
            await _model_status(port_a, "m-wait", None)
            va, vb = await both(5)
            assert va.priorities == vb.priorities
            with pytest.raises(TimeoutError):
                await shadows.next_msg(timeout=1.0)

            # back in shadow mode, then promoted: the shadow becomes the applied model, no shadow left
            await models.publish(announcement("m-bsld", BSLD_MODEL, "candidate", shadow=True, tag="-2"))
            await _model_status(port_a, "m-wait", "m-bsld")
            await models.publish(announcement("m-bsld", BSLD_MODEL, "current"))
            await _model_status(port_a, "m-bsld", None)
            va, _ = await both(6)
            assert (va.policy, va.model_version) == ("model", "m-bsld")
            with pytest.raises(TimeoutError):
                await shadows.next_msg(timeout=1.5)
    finally:
        await delete_namespace(bus.js, other.root, bus.settings)
