"""The compiled simulator core against the Python loop: the same schedule, run by run.

    HYLO_TRACES_DIR=... .venv/bin/python bench/sim_equivalence.py                 # default matrix
    .venv/bin/python bench/sim_equivalence.py --workloads philly --policies fcfs,sjf --settings easy

For each (workload, window, policy, setting) both loops simulate the same bound workload; the
run passes when every job has the same start, end, node group, nodes, GPUs per node, physical
GPUs and shared GPU, and the timeline and cycle count are the same. A digest of all of it is
printed for both, with the CPU seconds of each loop. Exit status 1 on any difference (or when the compiled
core declined a run it should take).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shared.policies import POLICY_NAMES, make_policy  # noqa: E402
from shared.scheduling.result import SimResult  # noqa: E402
from shared.sim.config import SimConfig  # noqa: E402
from shared.sim.evaluate import prepare_workload  # noqa: E402
from shared.sim.simulator import Simulator  # noqa: E402

SETTINGS: dict[str, SimConfig] = {
    "easy": SimConfig(),
    "easy-ff": SimConfig(placement="first-fit"),
    "easy-ff-1res": SimConfig(placement="first-fit", max_reservations=1),
    "none": SimConfig(backfill="none"),
    "greedy": SimConfig(backfill="greedy"),
    "paper": SimConfig.paper(),
    "easy-oracle": SimConfig(oracle_runtimes=True),
}
#: every registered policy but the clairvoyant ones (``sjf-oracle``)
POLICIES = [name for name in POLICY_NAMES if not make_policy(name).clairvoyant]


def digest(sim: Simulator, r: SimResult) -> str:
    h = hashlib.sha256()
    for j in sorted(sim.allocations):
        h.update(repr((j, float(r.start[j]), *sim.allocations[j])).encode())
    for a in (r.end, r.nodes_used, r.timeline_t, r.timeline_busy, r.timeline_queued):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(str(r.cycles).encode())
    return h.hexdigest()[:16]


def run(
    w: object, policy: str, cfg: SimConfig, core: str, rng: tuple[int, int] | None
) -> tuple[Simulator, SimResult, float]:
    sim = Simulator(w, make_policy(policy), cfg)  # type: ignore[arg-type]
    sim.core = core
    sim.record_allocations = True
    c0 = time.process_time()
    r = sim.run(rng)
    return sim, r, time.process_time() - c0


def compare(w: object, policy: str, cfg: SimConfig, rng: tuple[int, int] | None) -> tuple[bool, str]:
    sp, rp, tp = run(w, policy, cfg, "python", rng)
    sc, rc, tc = run(w, policy, cfg, "compiled", rng)
    same_start = np.array_equal(rp.start, rc.start, equal_nan=True)
    dp, dc = digest(sp, rp), digest(sc, rc)
    ok = dp == dc
    detail = f"python {dp} {tp:6.2f}s  compiled {dc} {tc:6.2f}s"
    if not ok:
        diff = np.flatnonzero(~((rp.start == rc.start) | (np.isnan(rp.start) & np.isnan(rc.start))))
        detail += f"  starts equal={same_start} first differing job {diff[:5].tolist()} of {len(diff)}"
        alloc_diff = [j for j in sp.allocations if sp.allocations[j] != sc.allocations.get(j)]
        detail += f" alloc diffs {len(alloc_diff)} first {alloc_diff[:3]}"
        detail += f" cycles {rp.cycles}/{rc.cycles} tl {len(rp.timeline_t)}/{len(rc.timeline_t)}"
    return ok, detail


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="philly,openb-gpuspec33,rltune-synthetic,embedded")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--windows", default="", help="job ranges a:b,c:d simulated as well as the whole trace")
    ap.add_argument("--no-whole", action="store_true", help="only the windows")
    args = ap.parse_args()
    failures = 0
    for wl in args.workloads.split(","):
        w = prepare_workload(None if wl == "embedded" else wl, None, n_jobs=20_000, seed=0).bound
        ranges: list[tuple[int, int] | None] = [] if args.no_whole else [None]
        for spec in filter(None, args.windows.split(",")):
            a, b = spec.split(":")
            ranges.append((int(a), min(int(b), len(w.jobs))))
        for rng in ranges:
            for setting in args.settings.split(","):
                for policy in args.policies.split(","):
                    ok, detail = compare(w, policy, SETTINGS[setting], rng)
                    failures += not ok
                    tag = "ok  " if ok else "DIFF"
                    print(f"{tag} {wl:17s} {rng!s:16s} {setting:13s} {policy:12s} {detail}", flush=True)
    print(f"{failures} difference(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
