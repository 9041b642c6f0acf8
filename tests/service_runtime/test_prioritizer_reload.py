"""The prioritizer service hot-reloads models announced on the models subject (real NATS).

A real checkpoint (the Philly run in docs/results) is announced as ``current``: the next matrix is
prioritized by it; announced ``retired``, the base policy decides again; an announcement whose
sha256 does not match the file is refused and changes nothing. The featurizer in front is the real
one, so the model sees the features it was trained on. The prioritizer has no registry here, so it
trusts signed announcements only (``HYLO_MODEL_TRUST=signature``), and the test signs them as the
registry does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from services.adapter_sim.stack import free_port
from services.featurizer.service import DEFINITION as FEATURIZER
from services.prioritizer.models import checkpoint_sha256
from services.prioritizer.service import DEFINITION as PRIORITIZER
from shared.schemas import ModelVersion, PriorityVector, decode
from shared.service import ServiceRuntime, ServiceSettings
from tests.conftest_services import Bus
from tests.schemas.message_factories import SPEC_DOC, snapshot
from tests.shadow.shadow_helpers import signed_publisher, trust_signed

CHECKPOINT = Path(__file__).parents[2] / "docs/results/runs/philly-easy-fcfs-wait/checkpoint"


def announcement(status: str, sha256: str, version: str = "philly-1") -> ModelVersion:
    return ModelVersion(
        cluster="c1",
        correlation_id=f"model-{version}-{status}",
        version=version,
        sha256=sha256,
        uri=str(CHECKPOINT),
        status=status,  # type: ignore[arg-type]
        created_at=datetime.now(UTC),
    )


@pytest.mark.asyncio
async def test_models_are_hot_reloaded_retired_and_bad_ones_refused(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trust_signed(monkeypatch)
    models = signed_publisher(bus.publisher)
    spec = tmp_path / "c1.yaml"
    spec.write_text(json.dumps(SPEC_DOC))
    bus_settings = bus.settings.model_copy(update={"subject_root": bus.subjects.root})
    stop = asyncio.Event()
    tasks, ports = [], {}
    for definition in (FEATURIZER, PRIORITIZER):
        ports[definition.name] = free_port()
        settings = ServiceSettings(
            http_port=ports[definition.name], clusters={"c1": str(spec)}, replica=definition.name
        )
        runtime = ServiceRuntime(definition, settings, bus_settings)
        await runtime.start()
        tasks.append(asyncio.create_task(runtime.run(stop)))
    sub = await bus.nc.subscribe(bus.subjects.of("c1", "priorities"))
    model_url = f"http://127.0.0.1:{ports['prioritizer']}/v1/model"
    sequence = [0]

    async def vector() -> PriorityVector:
        sequence[0] += 1
        snap = snapshot(correlation_id=f"s{sequence[0]}", sequence=sequence[0], n_jobs=6)
        await bus.publisher.publish(snap)
        msg = await sub.next_msg(timeout=30)
        v = decode(PriorityVector, msg.data)
        assert v.correlation_id == snap.correlation_id
        return v

    async def model_version(client: httpx.AsyncClient, expected: str | None) -> None:
        deadline = time.monotonic() + 20
        while (await client.get(model_url)).json()["version"] != expected:
            assert time.monotonic() < deadline, f"/v1/model never showed {expected!r}"
            await asyncio.sleep(0.05)

    sha = checkpoint_sha256(CHECKPOINT)
    try:
        async with httpx.AsyncClient() as client:
            before = await vector()
            assert (before.policy, before.model_version, before.fallback) == ("fcfs", None, "no model loaded")

            await models.publish(announcement("current", sha))
            await model_version(client, "philly-1")
            by_model = await vector()
            assert (by_model.policy, by_model.model_version, by_model.fallback) == ("model", "philly-1", None)

            await models.publish(announcement("retired", sha))
            await model_version(client, None)
            after = await vector()
            assert after.fallback == "no model loaded"

            await models.publish(announcement("current", "0" * 64, version="tampered"))
            await asyncio.sleep(1.0)  # time to (refuse to) load it
            assert (await client.get(model_url)).json()["version"] is None
            refused = await vector()
            assert refused.fallback == "no model loaded"
            assert [
                (await client.get(f"http://127.0.0.1:{p}/readyz")).status_code for p in ports.values()
            ] == [
                200,
                200,
            ]
    finally:
        stop.set()
        for t in tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(t, 15)
