"""The gate sizes its windows to the held-out part it has, and says so in its verdict (issue 21):
a ``hylo run`` of 600 jobs held out 120, and the gate stopped with "fewer than one window of 128"."""

from __future__ import annotations

import pytest

from shared.registry.gate import MIN_WINDOW_SIZE, GateError, decide, fit_windows


def test_windows_that_fit_are_left_as_asked() -> None:
    assert fit_windows(2000, 128, 10) == fit_windows(1280, 128, 10)
    plan = fit_windows(1280, 128, 10)
    assert (plan.size, plan.count, plan.overlap, plan.note) == (128, 10, False, "")
    # overlap asked for and one window fits: as asked (the caller accepts overlapping windows)
    assert fit_windows(300, 128, 10, overlap=True).overlap


@pytest.mark.parametrize(
    ("held_out", "size", "count", "want"),
    [
        (120, 128, 10, (16, 7)),  # the reported case: 7 disjoint windows of 16 instead of none
        (160, 128, 10, (16, 10)),  # 800 jobs of `hylo run`, 20% held out
        (600, 128, 10, (60, 10)),
        (100, 64, 3, (33, 3)),
        (9, 128, 10, (9, 1)),  # fewer jobs than the smallest window: one window, the gate refuses
    ],
)
def test_short_held_out_parts_get_smaller_disjoint_windows(
    held_out: int, size: int, count: int, want: tuple[int, int]
) -> None:
    plan = fit_windows(held_out, size, count)
    assert (plan.size, plan.count) == want
    assert not plan.overlap and plan.size * plan.count <= held_out
    assert plan.size >= min(MIN_WINDOW_SIZE, held_out)
    assert plan.note == (
        f"windows sized to the data: the held-out part holds {held_out} jobs, fewer than {count} "
        f"windows of {size}, so {want[1]} disjoint window(s) of {want[0]} jobs"
    )


def test_an_empty_held_out_part_cannot_be_gated() -> None:
    with pytest.raises(GateError, match="the held-out part is empty"):
        fit_windows(0, 128, 10)


def test_the_note_ends_the_verdicts_reason() -> None:
    note = fit_windows(120, 128, 10).note
    refused = decide(
        [1.0] * 3,
        [1.0] * 3,
        metric="wait",
        reference_label="policy:fcfs",
        margin=0.02,
        min_windows=5,
        note=note,
    )
    assert not refused.passed and refused.reason.endswith(f"; {note}")
    assert "only 3 comparable windows, fewer than the 5 required" in refused.reason
    passed = decide(
        [1.0, 2.0, 3.0, 1.5, 2.5],
        [2.0, 4.0, 6.0, 3.0, 5.0],
        metric="wait",
        reference_label="policy:fcfs",
        margin=0.02,
        note=note,
    )
    assert passed.passed and passed.reason.startswith("passed: ") and passed.reason.endswith(note)
    assert decide([1.0], [2.0], metric="wait", reference_label="x", margin=0.0).reason.count(";") == 1
