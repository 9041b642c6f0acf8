"""The model registry on a real store (PostgreSQL and SQLite) and a real NATS JetStream.

Register -> gate refusal (a checkpoint against itself) -> forced promotion -> a second forced
promotion retires the first -> rollback restores it; every announcement is read back from the models
stream and loaded by a real prioritizer ``ModelHolder``; a checkpoint changed after registration is
refused.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from services.prioritizer.models import ModelHolder, checkpoint_sha256
from shared.registry import Registry, RegistryError
from tests.conftest_services import Bus
from tests.registry.registry_helpers import (
    BSLD_MODEL,
    TINY_GATE,
    WAIT_MODEL,
    announced,
    migrated,
    unique_cluster,
)


@pytest.mark.asyncio
async def test_register_then_a_checkpoint_never_beats_itself(bus: Bus, url: str, tmp_path: Path) -> None:
    engine = await migrated(url)
    cluster = unique_cluster()
    registry = Registry(engine, bus.publisher, actor="tester", gate=TINY_GATE)
    try:
        first, new = await registry.register(WAIT_MODEL, cluster=cluster, version=f"{cluster}-a")
        assert new
        assert (first.status, first.cluster, first.promoted_at) == ("candidate", cluster, None)
        assert first.sha256 == checkpoint_sha256(WAIT_MODEL)  # the prioritizer's rule
        assert first.uri == str(WAIT_MODEL.resolve())
        assert first.card["training"]["metric"] == "wait"
        again, new_again = await registry.register(WAIT_MODEL, cluster=cluster, version=f"{cluster}-a")
        assert (new_again, again.sha256) == (False, first.sha256)
        with pytest.raises(RegistryError, match="already registered"):
            await registry.register(BSLD_MODEL, cluster=cluster, version=f"{cluster}-a")

        # no current model yet: the first one goes in by force (the gate would compare with FCFS)
        forced = await registry.promote(f"{cluster}-a", force=True)
        assert (forced.promoted, forced.forced, forced.previous, forced.gate) == (True, True, None, None)

        # the same bytes under another name: identical per-window values, improvement exactly 0
        await registry.register(WAIT_MODEL, cluster=cluster, version=f"{cluster}-b")
        refused = await registry.promote(f"{cluster}-b")
        assert not refused.promoted
        gate = refused.gate
        assert gate is not None and not gate.passed
        assert gate.reference == f"model:{cluster}-a"
        assert gate.n_windows == 6 and len(gate.candidate_values) == 6
        assert gate.candidate_values == gate.reference_values
        assert sum(gate.reference_values) > 0  # windows where jobs wait: a real comparison
        assert (gate.rel_improvement, gate.rel_low, gate.rel_high) == (0.0, 0.0, 0.0)
        assert "refused" in gate.reason and "below the required margin of +2.00%" in gate.reason

        stored = await registry.get(f"{cluster}-b")
        assert stored is not None and stored.status == "candidate" and stored.promoted_at is None
        assert stored.reason == gate.reason
        assert stored.metrics is not None
        assert stored.metrics["rel_improvement"] == 0.0 and stored.metrics["passed"] is False
        assert stored.metrics["reference"] == f"model:{cluster}-a"
        current = await registry.current(cluster)
        assert current is not None and current.version == f"{cluster}-a"

        events = [
            (e.version, e.event, e.from_status, e.to_status) for e in await registry.history(cluster=cluster)
        ]
        assert events == [
            (f"{cluster}-a", "registered", None, "candidate"),
            (f"{cluster}-a", "promoted", "candidate", "current"),
            (f"{cluster}-b", "registered", None, "candidate"),
            (f"{cluster}-b", "gate-refused", "candidate", "candidate"),
        ]
        # only the forced promotion was announced; the refusal announces nothing
        messages = await announced(bus, cluster)
        assert [(m.version, m.status) for m in messages] == [(f"{cluster}-a", "current")]
    finally:
        await engine.dispose()


@pytest.mark.asyncio
async def test_promotion_retires_the_previous_and_rollback_restores_it(bus: Bus, url: str) -> None:
    engine = await migrated(url)
    cluster = unique_cluster()
    a, b = f"{cluster}-wait", f"{cluster}-bsld"
    registry = Registry(engine, bus.publisher, actor="tester", gate=TINY_GATE)
    holder = ModelHolder()  # a real prioritizer's model holder, fed what was announced
    try:
        await registry.register(WAIT_MODEL, cluster=cluster, version=a)
        await registry.register(BSLD_MODEL, cluster=cluster, version=b)
        with pytest.raises(RegistryError, match="no current model: nothing to roll back"):
            await registry.rollback(cluster)

        await registry.promote(a, force=True)
        with pytest.raises(RegistryError, match="first model made current"):
            await registry.rollback(cluster)
        second = await registry.promote(b, force=True)
        assert (second.promoted, second.previous) == (True, a)
        assert [p.duplicate for p in second.published] == [False, False]

        got_a, got_b = await registry.get(a), await registry.get(b)
        assert got_a is not None and got_b is not None
        assert (got_a.status, got_b.status) == ("retired", "current")
        assert got_a.retired_at is not None and got_b.promoted_at is not None
        assert (got_b.promoted_by, got_b.forced, got_b.reason) == (
            "tester",
            True,
            "forced by tester (no gate)",
        )

        messages = await announced(bus, cluster)
        assert [(m.version, m.status) for m in messages] == [(a, "current"), (b, "current"), (a, "retired")]
        assert messages[1].sha256 == checkpoint_sha256(BSLD_MODEL) and messages[1].promoted_at is not None
        # the retired announcement keeps the version's promotion time (the placer's recorder stores it)
        assert messages[2].promoted_at is not None
        holder.load(messages[0])
        assert holder.current is not None and holder.current[0] == a
        holder.load(messages[1])
        assert holder.current is not None and holder.current[0] == b
        assert holder.last_error is None

        back = await registry.rollback(cluster)
        assert (back.version, back.previous, back.forced, back.gate) == (a, b, False, None)
        # a was announced "current" seconds ago: without the event id in the message id, JetStream's
        # duplicate window would have dropped this one
        assert [p.duplicate for p in back.published] == [False, False]
        got_a, got_b = await registry.get(a), await registry.get(b)
        assert got_a is not None and got_b is not None
        assert (got_a.status, got_b.status) == ("current", "retired")
        assert got_a.reason == f"rolled back from {b} by tester" and got_a.retired_at is None

        messages = await announced(bus, cluster)
        assert [(m.version, m.status) for m in messages[3:]] == [(a, "current"), (b, "retired")]
        holder.load(messages[3])
        assert holder.current is not None and holder.current[0] == a

        history = await registry.history(cluster=cluster)
        assert [(e.version, e.event, e.to_status) for e in history] == [
            (a, "registered", "candidate"),
            (b, "registered", "candidate"),
            (a, "promoted", "current"),
            (b, "promoted", "current"),
            (a, "retired", "retired"),
            (a, "rolled-back", "current"),
            (b, "retired", "retired"),
        ]
        assert [e.forced for e in history if e.event == "promoted"] == [True, True]
        assert all(e.actor == "tester" for e in history)
        times = [e.at for e in history]
        assert times == sorted(times)
        assert history[5].detail == {"previous": b} and history[6].detail == {"replaced_by": a}

        # rolling back the rollback returns to b (the version a's rollback replaced)
        redo = await registry.rollback(cluster)
        assert (redo.version, redo.previous) == (b, a)
        current = await registry.current(cluster)
        assert current is not None and current.version == b
    finally:
        await engine.dispose()


@pytest.mark.asyncio
async def test_a_checkpoint_changed_after_registration_is_refused(bus: Bus, url: str, tmp_path: Path) -> None:
    engine = await migrated(url)
    cluster = unique_cluster()
    copy = tmp_path / "ckpt"
    shutil.copytree(WAIT_MODEL, copy)
    registry = Registry(engine, bus.publisher, actor="tester", gate=TINY_GATE)
    try:
        await registry.register(copy, cluster=cluster, version=f"{cluster}-x")
        with (copy / "weights.pt").open("ab") as handle:
            handle.write(b"\0")  # the card still names the old weights' sha256
        with pytest.raises(RegistryError, match="sha256"):
            await registry.promote(f"{cluster}-x", force=True)
        info = await registry.get(f"{cluster}-x")
        assert info is not None and info.status == "candidate"
        assert await announced(bus, cluster) == []

        broken = tmp_path / "broken"
        shutil.copytree(WAIT_MODEL, broken)
        (broken / "weights.pt").write_bytes(b"not torch")
        with pytest.raises(RegistryError, match="cannot be used"):
            await registry.register(broken, cluster=cluster, version=f"{cluster}-y")
        assert await registry.get(f"{cluster}-y") is None
        with pytest.raises(RegistryError, match="does not exist"):
            await registry.register(tmp_path / "nowhere", cluster=cluster)
    finally:
        await engine.dispose()
