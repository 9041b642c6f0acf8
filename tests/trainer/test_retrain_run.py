"""A whole retraining run against a real PostgreSQL and NATS JetStream (tiny workload, few epochs):
outcomes in -> workload rebuilt -> imitation (no current model) -> PPO -> candidate registered ->
gate decision recorded (and, when it passes, announced on the models subject)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from services.trainer.run import retrain_once
from services.trainer.settings import TrainerSettings
from shared.registry import GateSettings, Registry
from shared.store import create_engine, upgrade
from tests.conftest_services import Bus
from tests.trainer.trainer_helpers import history, record_history, spec_file

TINY = {
    "epochs": 1,
    "windows_per_epoch": 2,
    "window_size": 64,
    "warmup": 32,
    "imitation_epochs": 2,
    "imitation_windows": 2,
    "gate_windows": 3,
    "min_jobs": 100,
    "holdout_fraction": 0.25,
}
GATE = GateSettings(min_windows=2, n_boot=200)


@pytest.mark.asyncio
async def test_outcomes_in_candidate_registered_and_gated(
    postgres_url: str, bus: Bus, tmp_path: Path
) -> None:
    engine = create_engine(postgres_url)
    await upgrade(engine)
    cluster = f"rt-{uuid.uuid4().hex[:8]}"
    spec = spec_file(tmp_path)
    settings = TrainerSettings(out_dir=tmp_path / "out", **TINY)
    try:
        await record_history(engine, cluster, history(400, seed=1))
        report = await retrain_once(
            engine, bus.publisher, settings, cluster=cluster, spec_arg=str(spec), trigger="test", gate=GATE
        )
        registry = Registry(engine)
        versions = await registry.versions(cluster)
        events = await registry.history(cluster=cluster)
    finally:
        await engine.dispose()
    assert report.status in ("promoted", "refused"), report
    assert report.recorded_jobs == 400 and report.workload_jobs == 400
    assert report.imitation is not None and report.imitation["demonstrations"] > 0  # no current model
    assert report.fine_tuned_from is None
    assert [v.version for v in versions] == [report.version]
    kinds = [e.event for e in events]
    assert kinds[0] == "registered"
    assert ("gate-passed" in kinds) or ("gate-refused" in kinds)
    gate_event = next(e for e in events if e.event.startswith("gate"))
    assert gate_event.detail is not None and gate_event.detail["reference"] == "policy:fcfs"
    assert report.gate is not None and report.gate["reference"] == "policy:fcfs"
    assert report.gate["n_windows"] == 3
    # 100 held-out jobs cannot hold 3 windows of 64 side by side: 3 disjoint windows of 33, said so
    assert report.reason.endswith(
        "windows sized to the data: the held-out part holds 100 jobs, fewer than 3 windows of 64, "
        "so 3 disjoint window(s) of 33 jobs"
    )
    assert report.workload_path is not None and report.workload_path.endswith("workload.npz")
    card = json.loads((Path(report.checkpoint or "") / "card.json").read_text())
    extra = card["training"]["extra"]
    assert card["training"]["trace"] == report.workload_path
    assert extra["data_window"] == report.data_window and extra["run_id"] == report.run_id
    assert extra["train_fraction"] == pytest.approx(0.75)
    if report.status == "promoted":
        assert versions[0].status == "current" and "promoted" in kinds
    else:
        assert versions[0].status == "candidate" and report.reason == versions[0].reason


@pytest.mark.asyncio
async def test_too_few_jobs_is_skipped_with_the_reason(postgres_url: str, tmp_path: Path) -> None:
    engine = create_engine(postgres_url)
    await upgrade(engine)
    cluster = f"rt-{uuid.uuid4().hex[:8]}"
    settings = TrainerSettings(out_dir=tmp_path / "out", **TINY)
    try:
        empty = await retrain_once(engine, None, settings, cluster=cluster, spec_arg=str(spec_file(tmp_path)))
        await record_history(engine, cluster, history(50, seed=2))
        few = await retrain_once(engine, None, settings, cluster=cluster, spec_arg=str(spec_file(tmp_path)))
    finally:
        await engine.dispose()
    assert empty.status == "skipped" and "no finished jobs" in empty.reason
    assert few.status == "skipped" and "50 finished jobs recorded, fewer than min_jobs=100" in few.reason


@pytest.mark.asyncio
async def test_fine_tuning_a_corrupted_current_model_is_refused(
    postgres_url: str, bus: Bus, tmp_path: Path
) -> None:
    """The current model's weights no longer match their sha256: the run fails and says why, and
    nothing new is registered (a prioritizer would refuse that checkpoint too)."""
    engine = create_engine(postgres_url)
    await upgrade(engine)
    cluster = f"rt-{uuid.uuid4().hex[:8]}"
    spec = spec_file(tmp_path)
    settings = TrainerSettings(out_dir=tmp_path / "out", **{**TINY, "imitation_epochs": 0})
    try:
        await record_history(engine, cluster, history(400, seed=7))
        first = await retrain_once(
            engine, bus.publisher, settings, cluster=cluster, spec_arg=str(spec), gate=GATE
        )
        registry = Registry(engine, bus.publisher, actor="test")
        if first.status != "promoted":
            await registry.promote(first.version or "", force=True)
        weights = Path(first.checkpoint or "") / "weights.pt"
        weights.write_bytes(weights.read_bytes()[:-8] + b"corrupt!")
        second = await retrain_once(
            engine, bus.publisher, settings, cluster=cluster, spec_arg=str(spec), gate=GATE
        )
        versions = await registry.versions(cluster)
    finally:
        await engine.dispose()
    assert first.imitation is None  # imitation_epochs=0: PPO from random weights
    assert second.status == "failed", second
    assert f"the current model {first.version!r} cannot be loaded" in second.reason
    assert "sha256" in second.reason
    assert [v.version for v in versions] == [first.version]
