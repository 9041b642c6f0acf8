"""Forged model announcements are refused (issue 20, item 2), against real NATS and a real registry.

Before: one raw ``ModelVersion`` retired the current model, or made an ungated checkpoint current
on every prioritizer, and the placer's recorder copied that status into the registry (two
``current`` versions, a failing rollback). Now the prioritizer adopts only what the registry says
(or, without a database, only signed announcements) and the recorder never changes a status.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from services.featurizer.service import DEFINITION as FEATURIZER
from services.placer.recorder import apply_record
from services.prioritizer.models import checkpoint_sha256
from services.prioritizer.service import DEFINITION as PRIORITIZER
from shared.bus import Publisher
from shared.bus.signing import Signer
from shared.registry import Registry
from shared.schemas import ModelVersion
from tests.bus.bus_helpers import dead_letters
from tests.conftest_services import Bus
from tests.registry.registry_helpers import migrated
from tests.shadow.shadow_helpers import (
    BSLD_MODEL,
    WAIT_MODEL,
    running,
    signed_publisher,
    spec_file,
    trust_signed,
)


def forged(version: str, checkpoint: Path, status: str, tag: str) -> ModelVersion:
    """A raw announcement, as anyone with access to NATS can publish it."""
    return ModelVersion(
        cluster="c1",
        correlation_id=f"forged-{tag}",
        version=version,
        sha256=checkpoint_sha256(checkpoint),
        uri=str(checkpoint.resolve()),
        status=status,  # type: ignore[arg-type]
        created_at=datetime.now(UTC),
    )


async def model_is(port: int, expected: str | None, settle_s: float = 0.0) -> None:
    """/v1/model names ``expected`` (within 20 s), and still does after ``settle_s``."""
    url = f"http://127.0.0.1:{port}/v1/model"
    async with httpx.AsyncClient() as client:

        async def now() -> object:
            try:
                return (await client.get(url)).json()["version"]
            except httpx.TransportError:  # the HTTP server is still starting
                return "(not serving yet)"

        deadline = time.monotonic() + 20
        while await now() != expected:
            assert time.monotonic() < deadline, f"/v1/model never showed {expected!r}"
            await asyncio.sleep(0.05)
        await asyncio.sleep(settle_s)
        assert await now() == expected


@pytest.mark.asyncio
async def test_registry_mode_refuses_forged_announcements_and_the_registry_keeps_one_current(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYLO_MODEL_CONFIRM_S", "0.5")
    url = f"sqlite+aiosqlite:///{tmp_path / 'registry.db'}"
    engine = await migrated(url)
    registry = Registry(engine, bus.publisher, actor="tests")
    try:
        await registry.register(WAIT_MODEL, cluster="c1", version="m-wait")
        await registry.register(BSLD_MODEL, cluster="c1", version="m-bsld")
        await registry.promote("m-wait", force=True)
        async with running(
            (FEATURIZER, PRIORITIZER), bus.settings, bus.subjects, spec_file(tmp_path), database_url=url
        ) as s:
            port = s.ports["prioritizer"]
            await model_is(port, "m-wait")  # read from the registry at start
            attacks = [
                forged("m-wait", WAIT_MODEL, "retired", "retire"),  # retire the current model
                forged("m-bsld", BSLD_MODEL, "current", "ungated"),  # a registered, ungated candidate
                forged("m-evil", BSLD_MODEL, "current", "unknown"),  # a version the registry never saw
                forged("m-wait", BSLD_MODEL, "current", "swap"),  # the current name on other bytes
            ]
            for message in attacks:
                await bus.publisher.publish(message)
            letters = await dead_letters(bus.js, bus.subjects.all_clusters("dead"), expected=len(attacks))
            reasons = sorted(
                letter.reason for letter in letters if letter.stage.startswith("prioritizer-models")
            )
            assert len(reasons) == 4, reasons
            assert any("registry says current" in r and "announced retired" in r for r in reasons)
            assert any("registry says candidate" in r for r in reasons)
            assert any("not in the registry" in r for r in reasons)
            assert any("sha256" in r and "differs from the registry" in r for r in reasons)
            await model_is(port, "m-wait", settle_s=0.2)

            # the placer's recorder stores the same forged announcements: no status changes
            async with engine.begin() as conn:
                for message in attacks:
                    await apply_record(conn, message)
            async with engine.connect() as conn:
                rows = dict((await conn.execute(text("SELECT version, status FROM model_versions"))).all())
            assert rows == {"m-wait": "current", "m-bsld": "candidate", "m-evil": "candidate"}

            # the registry still works: promote, then roll back, and the prioritizer follows both
            await registry.promote("m-bsld", force=True)
            await model_is(port, "m-bsld")
            result = await registry.rollback("c1")
            assert result.version == "m-wait"
            await model_is(port, "m-wait")
            assert [v.version for v in await registry.versions("c1") if v.status == "current"] == ["m-wait"]
    finally:
        await engine.dispose()


@pytest.mark.asyncio
async def test_signature_mode_refuses_unsigned_badly_signed_and_replayed_announcements(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trust_signed(monkeypatch)
    signed = signed_publisher(bus.publisher)
    other_key = Publisher(bus.js, bus.subjects, bus.limits, signer=Signer(b"not-the-registry-key-at-all"))
    async with running((FEATURIZER, PRIORITIZER), bus.settings, bus.subjects, spec_file(tmp_path)) as s:
        port = s.ports["prioritizer"]
        old = forged("m-bsld", BSLD_MODEL, "current", "old")
        await signed.publish(forged("m-wait", WAIT_MODEL, "current", "real"))
        await model_is(port, "m-wait")
        await bus.publisher.publish(forged("m-bsld", BSLD_MODEL, "current", "unsigned"))
        await other_key.publish(forged("m-other", BSLD_MODEL, "current", "other-key"))
        # an announcement signed before the adopted one, replayed: refused although its signature holds
        subject = bus.subjects.of("c1", "models")
        payload = old.model_dump_json().encode()
        assert signed.signer is not None
        header = signed.signer.sign(subject, payload, signed_at_ns=time.time_ns() - 3_600 * 10**9)
        await bus.js.publish(subject, payload, headers={"Hylo-Signature": header, "Nats-Msg-Id": "replayed"})
        letters = await dead_letters(bus.js, bus.subjects.all_clusters("dead"), expected=3)
        reasons = sorted(letter.reason for letter in letters)
        assert any("unsigned" in r for r in reasons), reasons
        assert any("unknown key" in r for r in reasons), reasons
        assert any("old announcement replayed" in r for r in reasons), reasons
        await model_is(port, "m-wait", settle_s=0.2)
