"""Per-workload values: built once, rebuilt when the workload's jobs, shapes or classes are
replaced, kept apart by name, and dropped with the workload."""

from __future__ import annotations

import gc

from shared.scheduling import workload_memo
from shared.scheduling.workload_memo import per_workload
from tests.sim.test_compiled import small_bound


def test_values_are_kept_per_workload_and_name() -> None:
    w = small_bound()
    builds: list[str] = []

    def build(tag: str) -> list[str]:
        builds.append(tag)
        return [tag]

    first = per_workload(w, "a", lambda: build("a"))
    assert per_workload(w, "a", lambda: build("a2")) is first
    assert per_workload(w, "b", lambda: build("b")) == ["b"]
    assert builds == ["a", "b"]
    # shapes replaced (as tests of the simulator do): rebuilt
    w.shape = w.shape.copy()
    assert per_workload(w, "a", lambda: build("a3")) == ["a3"]
    keys = [k for k in workload_memo._MEMO if k[0] == id(w)]
    assert len(keys) == 2
    del w
    gc.collect()
    assert not any(k in workload_memo._MEMO for k in keys)
