"""The compiled best-fit scan picks the slot the plain numpy rule picks, on random cluster states.

The rule (what ``WalkState`` computed with numpy before the scan was compiled): among the slots of
the job's groups with the GPUs, CPUs and memory free and not blocked, the least score (free whole
GPUs, or free CPUs for a job of no GPU), ties to the lowest slot; -1 when no slot fits.
"""

from __future__ import annotations

import numpy as np
import pytest

from shared.placement.kernels import least_left, replay_free

BIG = np.iinfo(np.int64).max


def _rule(
    whole: np.ndarray,
    cpu: np.ndarray,
    mem: np.ndarray,
    groups: list[tuple[int, int]],
    blocked: np.ndarray,
    gpus: int,
    cpu_req: int,
    mem_req: int,
) -> int:
    mask = np.zeros(len(whole), dtype=bool)
    for lo, hi in groups:
        mask[lo:hi] = True
    ok = (whole >= gpus) & (cpu >= cpu_req) & (mem >= mem_req) & mask
    if len(blocked):
        ok &= ~blocked
    vals = np.where(ok, whole if gpus > 0 else cpu, BIG)
    p = int(vals.argmin())
    return -1 if vals[p] == BIG else p


@pytest.mark.parametrize("seed", range(20))
def test_least_left_is_the_numpy_rule(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_groups = int(rng.integers(1, 8))
    sizes = rng.integers(1, 40, size=n_groups)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    n = int(offsets[-1])
    for _ in range(50):
        whole = rng.integers(0, 9, size=n).astype(np.int64)
        cpu = rng.choice([0, 500, 4000, 16000, 32000], size=n).astype(np.int64)
        mem = rng.choice([0, 1024, 8192, 65536], size=n).astype(np.int64)
        chosen = np.sort(rng.choice(n_groups, size=int(rng.integers(1, n_groups + 1)), replace=False))
        groups = [(int(offsets[g]), int(offsets[g + 1])) for g in chosen]
        blocked = rng.random(n) < 0.2 if rng.random() < 0.5 else np.zeros(0, dtype=bool)
        gpus = int(rng.choice([0, 1, 1, 2, 4, 8]))
        cpu_req = int(rng.choice([0, 500, 4000, 16000]))
        mem_req = int(rng.choice([0, 1024, 8192]))
        starts = np.array([lo for lo, _ in groups], dtype=np.int64)
        ends = np.array([hi for _, hi in groups], dtype=np.int64)
        got = least_left(whole, cpu, mem, starts, ends, blocked, gpus, cpu_req, mem_req)
        assert got == _rule(whole, cpu, mem, groups, blocked, gpus, cpu_req, mem_req)


def test_nothing_fits_gives_minus_one_and_blocked_slots_are_skipped() -> None:
    one = np.ones(3, dtype=np.int64)
    starts, ends = np.array([0], dtype=np.int64), np.array([3], dtype=np.int64)
    assert least_left(one, one, one, starts, ends, np.zeros(0, dtype=bool), 2, 0, 0) == -1
    blocked = np.array([True, False, False])
    assert least_left(one, one, one, starts, ends, blocked, 1, 0, 0) == 1


def _free_at_rule(t: float, r: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """The placer's numpy replay rule (``_Replay.free_at`` before it was compiled)."""
    n = len(r["now_whole"])
    k = int(np.searchsorted(r["time"], t, side="right"))
    slot = r["slot"][:k]
    rel_n = np.bincount(slot, minlength=n)
    rel_w = np.bincount(slot, weights=r["weight"][:k], minlength=n)
    rel_whole = np.bincount(slot, weights=r["whole"][:k], minlength=n).astype(np.int64)
    any_job = r["total_n"] > 0
    all_done = (rel_n == r["total_n"]) & any_job
    by_weight = r["total_w"] > 0
    frac = np.zeros(n)
    np.divide(rel_w, r["total_w"], out=frac, where=by_weight)
    by_count = ~by_weight
    frac[by_count] = rel_n[by_count] / np.maximum(r["total_n"][by_count], 1)
    used = r["used"]
    back_w = np.where(all_done, used[0], np.minimum(rel_whole, used[0]))
    back_c = np.where(all_done, used[1], np.floor(used[1] * frac).astype(np.int64))
    back_m = np.where(all_done, used[2], np.floor(used[2] * frac).astype(np.int64))
    share = r["now_share"].copy()
    km = int(np.searchsorted(r["m_time"], t, side="right"))
    if km:
        np.maximum.at(share, r["m_slot"][:km], r["m_milli"][:km])
    mine = r["s_time"] <= t
    if mine.any():
        s_slot, res = r["s_slot"][mine], r["s_res"][mine]
        back_w = back_w + np.bincount(s_slot, weights=res[:, 0], minlength=n).astype(np.int64)
        back_c = back_c + np.bincount(s_slot, weights=res[:, 1], minlength=n).astype(np.int64)
        back_m = back_m + np.bincount(s_slot, weights=res[:, 2], minlength=n).astype(np.int64)
        np.maximum.at(share, s_slot, r["s_milli"][mine])
    ok, cap, cap_share = r["usable"], r["cap"], r["cap_share"]
    whole = np.where(ok, np.minimum(cap[0], r["now_whole"] + back_w), 0)
    cpu = np.where(ok, np.minimum(cap[1], r["now_cpu"] + back_c), 0)
    mem = np.where(ok, np.minimum(cap[2], r["now_mem"] + back_m), 0)
    share = np.where(ok, np.where(whole > 0, cap_share, np.minimum(share, cap_share)), 0)
    return whole, cpu, mem, share


@pytest.mark.parametrize("seed", range(20))
def test_replay_free_is_the_numpy_rule(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    e = int(rng.integers(0, 4 * n))
    gpus = rng.choice([0, 1, 4, 8], size=n).astype(np.int64)
    cap = np.stack((gpus, rng.choice([8000, 32000, 96000], size=n), rng.choice([65536, 262144], size=n)))
    used = (cap * rng.random((3, n))).astype(np.int64)
    slot = rng.integers(0, n, size=e).astype(np.int64)
    whole = rng.integers(0, 3, size=e).astype(np.int64)
    milli = np.where(rng.random(e) < 0.3, rng.choice([100, 250, 500], size=e), 0).astype(np.int64)
    whole[milli > 0] = 0
    weight = whole + milli / 1000
    time = np.sort(rng.choice([0.0, 5.0, 10.5, 30.0, 100.0, 1e4], size=e))
    total_w = np.bincount(slot, weights=weight, minlength=n)
    total_n = np.bincount(slot, minlength=n).astype(np.int64)
    shares = np.flatnonzero(milli > 0)
    n_started = int(rng.integers(0, 6))
    r = {
        "time": time,
        "slot": slot,
        "weight": weight,
        "whole": whole,
        "total_w": total_w,
        "total_n": total_n,
        "m_time": time[shares],
        "m_slot": slot[shares],
        "m_milli": milli[shares],
        "s_time": rng.choice([5.0, 12.0, 50.0], size=n_started),
        "s_slot": rng.integers(0, n, size=n_started).astype(np.int64),
        "s_res": np.stack(
            (
                rng.integers(0, 3, n_started),
                rng.integers(0, 4000, n_started),
                rng.integers(0, 9000, n_started),
            ),
            axis=1,
        ).astype(np.int64),
        "s_milli": np.where(rng.random(n_started) < 0.3, 250, 0).astype(np.int64),
        "used": used,
        "now_whole": np.maximum(cap[0] - used[0] - rng.integers(0, 2, n), 0),
        "now_cpu": cap[1] - used[1],
        "now_mem": cap[2] - used[2],
        "now_share": rng.choice([0, 300, 1000], size=n).astype(np.int64),
        "usable": rng.random(n) < 0.9,
        "cap": cap.astype(np.int64),
        "cap_share": np.where(cap[0] > 0, 1000, 0).astype(np.int64),
    }
    for t in (-1.0, 0.0, 5.0, 11.0, 30.0, 99.0, 1e4, 1e5):
        k = int(np.searchsorted(time, t, side="right"))
        km = int(np.searchsorted(r["m_time"], t, side="right"))
        got = replay_free(
            t, k, slot, weight, whole, total_w, total_n, km, r["m_slot"], r["m_milli"], r["s_time"],
            r["s_slot"], r["s_res"], r["s_milli"], used, r["now_whole"], r["now_cpu"], r["now_mem"],
            r["now_share"], r["usable"], r["cap"], r["cap_share"],
        )  # fmt: skip
        for a, b in zip(got, _free_at_rule(t, r), strict=True):
            assert np.array_equal(a, b)
