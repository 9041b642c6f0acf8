"""The promotion gate: its rule on per-window numbers worked out by hand, and a gate that passes a
better model by construction, end to end (real simulator, PostgreSQL, NATS, prioritizer holder).

The constructed models: in the paper's setting (no backfill) jobs start strictly in priority order,
so the job at the head of the queue blocks every other until it fits. A linear actor that scores
``+can_schedule_now`` puts the jobs that fit first ("ready first"); one that scores
``-can_schedule_now`` puts a job that does not fit at the head whenever there is one ("blocked
first"), and the cluster idles while jobs wait. Ready-first must beat blocked-first on mean wait, by
far, in every busy window; blocked-first must never beat ready-first.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from pydantic import JsonValue

from services.prioritizer.models import ModelHolder
from shared.features import FeatureSampler
from shared.model import ActorCritic, ModelConfig
from shared.model.checkpoint import save_checkpoint
from shared.registry import GateError, Registry, decide
from shared.registry.gate import evaluate_gate
from shared.rl.setup import RunSetup, load_runner, make_card
from tests.conftest_services import Bus
from tests.registry.registry_helpers import TINY_GATE, announced, migrated, unique_cluster

# -- the rule, on numbers worked out by hand -------------------------------------------------------


def test_a_consistent_gain_above_the_margin_passes() -> None:
    reference = [1000.0, 2000.0, 3000.0, 4000.0]
    candidate = [v - 100.0 for v in reference]  # 100 s less wait in every window
    # mean 2500 -> 2400: +4%; every bootstrap replicate has a difference of exactly 100 s over a
    # reference mean in [1000, 4000], so the interval lies within [+2.5%, +10%]
    result = decide(candidate, reference, metric="wait", reference_label="policy:fcfs", margin=0.02)
    assert result.passed, result.reason
    assert math.isclose(result.rel_improvement, 0.04)
    assert 0.025 <= result.rel_low <= result.rel_high <= 0.10
    assert (result.candidate_mean, result.reference_mean, result.mean_diff) == (2400.0, 2500.0, -100.0)
    assert result.frac_candidate_better == 1.0
    assert result.reason.startswith("passed: wait (lower is better) on 4 held-out windows")
    # the same gain under a 5% margin is refused
    strict = decide(candidate, reference, metric="wait", reference_label="policy:fcfs", margin=0.05)
    assert not strict.passed and strict.reason.endswith("below the required margin of +5.00%")


def test_a_gain_carried_by_luck_is_refused() -> None:
    # mean 1750 vs 2000: +12.5%, but a replicate that draws the 7000 s window twice (26% of them)
    # has a candidate mean >= 3500: the interval reaches far below zero
    result = decide([0.0, 0.0, 0.0, 7000.0], [2000.0] * 4, metric="wait", reference_label="x", margin=0.02)
    assert math.isclose(result.rel_improvement, 0.125)
    assert result.rel_low < 0 and not result.passed
    assert "the confidence interval reaches zero" in result.reason


def test_equal_models_and_nothing_to_improve_are_refused() -> None:
    same = decide([5.0, 7.0, 9.0], [5.0, 7.0, 9.0], metric="bsld", reference_label="x", margin=0.0)
    assert not same.passed and (same.rel_improvement, same.rel_low, same.rel_high) == (0.0, 0.0, 0.0)
    idle = decide([0.0, 0.0], [0.0, 0.0], metric="wait", reference_label="policy:fcfs", margin=0.0)
    assert not idle.passed and "nothing to improve" in idle.reason
    assert "rel_improvement" not in idle.metrics()  # NaN is left out of the stored numbers
    assert idle.to_dict()["rel_improvement"] is None


def test_utilization_is_higher_is_better() -> None:
    # +0.1 in both windows over a mean of 0.55: +18.2%; replicates: 0.1 / [0.5, 0.6] = [+16.7%, +20%]
    result = decide([0.6, 0.7], [0.5, 0.6], metric="utilization", reference_label="x", margin=0.1)
    assert result.passed and not result.lower_is_better
    assert math.isclose(result.rel_improvement, 0.1 / 0.55)
    assert 1 / 6 - 1e-9 <= result.rel_low <= result.rel_high <= 0.2 + 1e-9
    worse = decide([0.5, 0.6], [0.6, 0.7], metric="utilization", reference_label="x", margin=0.0)
    assert not worse.passed and worse.rel_improvement < 0


def test_too_few_windows_are_no_evidence() -> None:
    # one window 50% better: a zero-width interval at +50%, yet one window proves nothing
    one = decide([1.0], [2.0], metric="wait", reference_label="x", margin=0.02, min_windows=5)
    assert (one.rel_improvement, one.rel_low, one.rel_high) == (0.5, 0.5, 0.5)
    assert not one.passed and "only 1 comparable windows, fewer than the 5 required" in one.reason
    assert decide([1.0], [2.0], metric="wait", reference_label="x", margin=0.02).passed


def test_bad_inputs_are_named() -> None:
    with pytest.raises(GateError, match="unknown gate metric 'speed'"):
        decide([1.0], [1.0], metric="speed", reference_label="x", margin=0.0)
    with pytest.raises(GateError, match="got 2 and 1"):
        decide([1.0, 2.0], [1.0], metric="wait", reference_label="x", margin=0.0)


# -- end to end: a better model passes, a worse one does not ---------------------------------------


def linear_checkpoint(folder: Path, weight: float, estimates: str | None = None) -> Path:
    """A checkpoint whose actor scores ``weight * can_schedule_now`` (paper setting: no backfill)."""
    setup = RunSetup(metric="wait", paper=True, warmup=64, n_jobs=2000, sampling="fixed")
    _, runner = load_runner(None, "slurm-testbed", setup)
    names = FeatureSampler(runner.settings.sampling).fixed().observation_names
    torch.manual_seed(0)
    model = ActorCritic(ModelConfig(obs_features=len(names), actor_hidden=(), critic_hidden=(4,)))
    with torch.no_grad():
        layer = model.actor[0]
        assert isinstance(layer, torch.nn.Linear)
        layer.weight.zero_()
        layer.bias.zero_()
        layer.weight[0, names.index("can_schedule_now")] = weight
    extra: dict[str, JsonValue] = {"jobs": 2000, "window_size": 64, "train_fraction": 0.7}
    if estimates is not None:
        extra["estimates"] = estimates
    card = make_card(model, runner, trace="embedded", cluster="slurm-testbed", seed=0, epochs=0, extra=extra)
    save_checkpoint(folder, model, card)
    return folder


@pytest.mark.asyncio
async def test_a_better_model_passes_the_gate_and_is_announced(
    bus: Bus, postgres_url: str, tmp_path: Path
) -> None:
    ready = linear_checkpoint(tmp_path / "ready-first", 10.0)
    blocked = linear_checkpoint(tmp_path / "blocked-first", -10.0)
    engine = await migrated(postgres_url)
    cluster = unique_cluster()
    good, bad = f"{cluster}-ready", f"{cluster}-blocked"
    registry = Registry(engine, bus.publisher, actor="tester", gate=TINY_GATE)
    try:
        await registry.register(blocked, cluster=cluster, version=bad)
        await registry.register(ready, cluster=cluster, version=good)
        await registry.promote(bad, force=True)

        result = await registry.promote(good)
        assert result.promoted and not result.forced and result.previous == bad
        gate = result.gate
        assert gate is not None and gate.passed, gate
        assert gate.reference == f"model:{bad}" and gate.setup["backfill"] == "none"
        assert gate.setup["estimates"] == "noisy"  # the card records none: the trainer's default
        assert gate.rel_low > TINY_GATE.margin  # far better, not just past the margin
        assert 2 * gate.candidate_mean < gate.reference_mean  # blocking the head idles the cluster

        stored = await registry.get(good)
        assert stored is not None and stored.status == "current" and stored.forced is False
        assert stored.reason == gate.reason and stored.metrics is not None and stored.metrics["passed"]
        messages = await announced(bus, cluster)
        assert [(m.version, m.status) for m in messages] == [
            (bad, "current"),
            (good, "current"),
            (bad, "retired"),
        ]
        assert messages[1].metrics["rel_improvement"] == pytest.approx(gate.rel_improvement)
        holder = ModelHolder(expected_schema=None)  # the constructed models use the fixed sampling rule
        holder.load(messages[1])
        assert holder.current is not None and holder.current[0] == good

        # the worse model, now retired, cannot come back through the gate
        back = await registry.promote(bad)
        assert not back.promoted and back.gate is not None and back.gate.rel_improvement < 0
        current = await registry.current(cluster)
        assert current is not None and current.version == good
        events = [(e.version, e.event) for e in await registry.history(cluster=cluster)]
        assert events[-4:] == [
            (good, "gate-passed"),
            (good, "promoted"),
            (bad, "retired"),
            (bad, "gate-refused"),
        ]
        assert len(await announced(bus, cluster)) == 3
    finally:
        await engine.dispose()


def test_the_gate_judges_with_the_cards_estimates_unless_told(tmp_path: Path) -> None:
    """A candidate trained on history estimates is gated on them (as hylo evaluate does);
    HYLO_GATE_ESTIMATES (here the settings field) overrides the card."""
    candidate = linear_checkpoint(tmp_path / "history", 10.0, estimates="history")
    assert evaluate_gate(candidate, None, TINY_GATE).setup["estimates"] == "history"
    told = TINY_GATE.model_copy(update={"estimates": "noisy"})
    assert evaluate_gate(candidate, None, told).setup["estimates"] == "noisy"
