"""The placer's walk state and job tuples built ahead (``PlacerStage.prepare``), and the recorder's
lower CPU priority (``services.niceness``, ``HYLO_RECORDER_NICE``).

What is checked: a decision made from a prepared snapshot (its ``WalkState`` and ``_Job`` tuples
built before the priorities arrive) equals the decision of a stage that never prepares, which builds
both inside ``decide`` as before; the prepared parts are used only for the matrix they describe.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from services.featurizer.stage import FeaturizerStage
from services.placer.settings import PlacerServiceSettings
from services.placer.stage import PlacerStage
from shared.placement import PlacerSettings
from shared.placement.walk import WalkState
from shared.schemas import PlacementDecision
from tests.stages.stage_helpers import vector
from tests.stages.test_placer_stage import sim_snapshot

ROOT = Path(__file__).resolve().parents[2]
#: CP-SAT that the wall clock never decides, so two runs must agree
REPRODUCIBLE = PlacerSettings(solve_when_all_fit=False, reproducible=True)


def _same(a: PlacementDecision, b: PlacementDecision) -> None:
    assert a.placements == b.placements
    assert a.placer_status == b.placer_status


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("placement", ["best-fit", "cp-sat"])
def test_prepared_walk_gives_the_fresh_decision(seed: int, placement: str) -> None:
    s, spec = sim_snapshot(seed)
    specs = {"embedded": spec}
    m = FeaturizerStage(specs).handle(s)
    rng = np.random.default_rng(seed)
    for prio in (
        rng.permutation(len(m.job_ids)).astype(float) + 1,
        rng.integers(0, 5, len(m.job_ids)).astype(float),  # many ties: submit time, then row
    ):
        v = vector(m, prio.tolist())
        fresh = PlacerStage(specs, placement=placement, settings=REPRODUCIBLE).handle(v, s)  # type: ignore[arg-type]
        stage = PlacerStage(specs, placement=placement, settings=REPRODUCIBLE)  # type: ignore[arg-type]
        prepared = stage.prepare(s)
        assert prepared.walk is not None and prepared.jobs is not None
        assert prepared.jobs_of(m.jobs) is prepared.jobs  # the featurizer's jobs: used
        ahead = stage.handle(v, s, prepared=prepared)
        assert prepared.used
        assert sum(1 for c in ahead.placements.node_count if c) > 0
        _same(ahead, fresh)


def test_prepared_walk_matches_a_fresh_one() -> None:
    s, spec = sim_snapshot(0)
    prepared = PlacerStage({"embedded": spec}).prepare(s)
    assert prepared.walk is not None and prepared.walk.st is prepared.state.state
    fresh = WalkState(prepared.state.state)
    for a, b in zip(prepared.walk.free_arrays(), fresh.free_arrays(), strict=True):
        assert np.array_equal(a, b)
    assert prepared.walk.partial == fresh.partial and not prepared.walk.pending


def test_prepared_jobs_are_used_only_for_the_same_columns() -> None:
    """A matrix whose jobs carry other GPUs or estimates than the snapshot's: bound afresh, and the
    decision is the fresh one for those jobs."""
    s, spec = sim_snapshot(1)
    specs = {"embedded": spec}
    m = FeaturizerStage(specs).handle(s)
    est = list(m.jobs.est_runtime_s)
    est[0] = est[0] + 1e6  # the top job now runs past every reservation
    changed = m.model_copy(update={"jobs": m.jobs.model_copy(update={"est_runtime_s": tuple(est)})})
    stage = PlacerStage(specs, placement="best-fit")
    prepared = stage.prepare(s)
    assert prepared.jobs_of(changed.jobs) is None
    assert prepared.jobs_of(m.jobs.take([1, 0])) is None  # other jobs (ids differ)
    prio = np.arange(len(m.job_ids), 0, -1).astype(float)
    v = vector(changed, prio.tolist())
    _same(stage.handle(v, s, prepared=prepared), PlacerStage(specs, placement="best-fit").handle(v, s))


def _nice_in_child(code: str, env: dict[str, str] | None = None) -> list[int]:
    """Run ``code`` in a fresh interpreter (a nice value cannot be lowered again) and read the ints
    it prints."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return [int(x) for x in out.stdout.split()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_lower_priority_reaches_every_thread() -> None:
    code = (
        "import os, threading\n"
        "from services.niceness import lower_priority\n"
        "ready, stop, tid = threading.Event(), threading.Event(), []\n"
        "def side():\n"
        "    tid.append(threading.get_native_id()); ready.set(); stop.wait()\n"
        "t = threading.Thread(target=side); t.start(); ready.wait()\n"
        "before = os.getpriority(os.PRIO_PROCESS, 0)\n"
        "after = lower_priority(3)\n"
        "print(before, after, os.getpriority(os.PRIO_PROCESS, tid[0]), lower_priority(0))\n"
        "stop.set(); t.join()\n"
    )
    before, after, thread, unchanged = _nice_in_child(code)
    assert after == min(19, before + 3) == thread == unchanged


def test_recorder_nice_setting() -> None:
    assert PlacerServiceSettings().recorder_nice == 10
    assert _nice_in_child(
        "from services.placer.settings import PlacerServiceSettings\n"
        "print(PlacerServiceSettings().recorder_nice)\n",
        {"HYLO_RECORDER_NICE": "0"},
    ) == [0]
