"""The CPU time of every step between a snapshot and its decision, in one process (issue 5).

    .venv/bin/python bench/pipeline_steps.py                      # steady, 1,024 pending, 21 samples
    .venv/bin/python bench/pipeline_steps.py --scenario burst --size 256 --samples 11

Why in one process: on a shared 2-core machine the pipeline bench's wall-clock figures move with the
other processes' load, while a step's thread CPU time hardly does. Each step runs exactly the code
its service runs on the message it receives (the same encode and decode under the same limits, the
same stage objects, in the same order), timed with ``time.thread_time``; the median over the samples
is printed. The snapshots are ``bench/pipeline.py``'s (its ``busy_snapshot_source`` and
``snapshot_of``), so the steps are those of its latency table.

Steps marked "on the path" run one after another between publishing the snapshot and receiving the
decision; the others run in the deciding placer beside them (its snapshot while the featurizer
works, its matrix while the prioritizer works) and only cost time when they compete for a core.
What this does not measure: moving the messages through NATS (publish, store, deliver, read) and a
process waiting for a core; ``bench/pipeline.py`` measures the whole.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from pipeline import SCENARIOS, busy_snapshot_source, snapshot_of  # noqa: E402

from services.featurizer.stage import FeaturizerStage  # noqa: E402
from services.placer.stage import PlacerStage  # noqa: E402
from services.prioritizer.stage import PrioritizerStage  # noqa: E402
from shared.schemas import FeatureMatrix, PlacementDecision, PriorityVector, QueueSnapshot  # noqa: E402
from shared.schemas.codec import RECEIVED, decode, encode  # noqa: E402
from shared.schemas.limits import Limits  # noqa: E402
from shared.schemas.messages import MatrixRef  # noqa: E402
from shared.service.clusters import load_specs  # noqa: E402
from shared.service.latency import with_wait  # noqa: E402

T = TypeVar("T")
console = Console()

#: (step, service, on the path from snapshot to decision)
STEPS: list[tuple[str, str, bool]] = [
    ("encode the snapshot", "adapter", True),
    ("decode the snapshot", "featurizer", True),
    ("featurize (views, features, the matrix)", "featurizer", True),
    ("encode the matrix", "featurizer", True),
    ("decode the matrix", "prioritizer", True),
    ("prioritize", "prioritizer", True),
    ("encode the vector", "prioritizer", True),
    ("decode the snapshot ahead", "placer", False),
    ("prepare the snapshot", "placer", False),
    ("decode the matrix ahead", "placer", False),
    ("decode the vector", "placer", True),
    ("place", "placer", True),
    ("encode the decision", "placer", True),
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", default="openb-gpuspec33")
    p.add_argument("--cluster", default="alibaba-openb")
    p.add_argument("--scenario", default="steady", choices=sorted(SCENARIOS))
    p.add_argument("--size", type=int, default=1024, help="pending jobs")
    p.add_argument("--samples", type=int, default=21)
    p.add_argument("--placement", default="cp-sat", choices=["cp-sat", "best-fit"])
    args = p.parse_args()

    src = busy_snapshot_source(args.trace, args.cluster, args.scenario)
    spec_name = args.cluster if src[4] == args.trace else "embedded"
    specs = load_specs({"k0": spec_name})
    limits = Limits(max_message_bytes=8 << 20)
    featurizer = FeaturizerStage(specs)
    prioritizer = PrioritizerStage(specs=specs, limits=limits)
    placer = PlacerStage(specs, placement=args.placement)
    gc.collect()
    gc.freeze()  # as the services do (shared.service.runtime.serve)
    gc.set_threshold(100_000, 50, 100)
    times: dict[str, list[float]] = {name: [] for name, _, _ in STEPS}
    sizes: dict[str, int] = {}

    def timed(step: str, fn: Callable[[], T]) -> T:
        t0 = time.thread_time()
        out = fn()
        times[step].append((time.thread_time() - t0) * 1e3)
        return out

    async def prioritize(matrix: FeatureMatrix) -> PriorityVector:
        t0 = time.thread_time()
        vector = await prioritizer.handle(matrix)
        times["prioritize"].append((time.thread_time() - t0) * 1e3)
        return vector

    async def one(i: int) -> None:
        snap = snapshot_of(src, args.size, "k0", 1000 + i, offset=i * 7)
        raw = timed("encode the snapshot", lambda: encode(snap, limits))
        got = timed("decode the snapshot", lambda: decode(QueueSnapshot, raw, limits))
        matrix = timed("featurize (views, features, the matrix)", lambda: featurizer.handle(got, 1))
        matrix = with_wait(matrix, "featurize", 0.0)
        matrix_raw = timed("encode the matrix", lambda: encode(matrix, limits))
        received = timed("decode the matrix", lambda: decode(FeatureMatrix, matrix_raw, limits))
        vector = with_wait(await prioritize(received), "prioritize", 0.0)

        def named() -> bytes:  # as the prioritizer service sends it: the matrix by reference
            ref = MatrixRef(seq=1 + i, sha256=RECEIVED.digest_of(received) or "")
            return encode(vector.model_copy(update={"matrix_ref": ref}), limits)

        vector_raw = timed("encode the vector", named)
        # the deciding placer: its own copies of the snapshot and of the matrix, decoded ahead
        snap_p = timed("decode the snapshot ahead", lambda: decode(QueueSnapshot, raw, limits))
        prepared = timed("prepare the snapshot", lambda: placer.prepare(snap_p))

        # as ``shared.bus.ahead.DecodeAhead`` does: decode, then the digest a vector names it by
        def ahead() -> None:
            RECEIVED.digest_of(decode(FeatureMatrix, matrix_raw, limits))

        timed("decode the matrix ahead", ahead)
        vector_p = timed("decode the vector", lambda: decode(PriorityVector, vector_raw, limits))
        decision: Any = timed("place", lambda: placer.handle(vector_p, snap_p, None, prepared))
        decision = with_wait(decision, "place", 0.0)
        decision_raw = timed("encode the decision", lambda: encode(decision, limits))
        decode(PlacementDecision, decision_raw, limits)  # the adapter's (not timed)
        sizes.update(snapshot=len(raw), matrix=len(matrix_raw), vector=len(vector_raw))
        sizes.update(decision=len(decision_raw))
        sizes["placed"] = sum(1 for c in decision.placements.node_count if c)

    async def run() -> None:
        for i in range(args.samples + 2):  # two warm-up samples
            await one(i)

    asyncio.run(run())
    table = Table(
        title=f"thread CPU per step (median of {args.samples}), {args.scenario}, {args.size:,} pending, "
        f"{src[4]} on {spec_name}, {sizes['placed']} placed"
    )
    for col in ("step", "service", "ms", "on the path"):
        table.add_column(col)
    path = 0.0
    for name, service, on_path in STEPS:
        ms = statistics.median(times[name][2:])
        path += ms if on_path else 0.0
        table.add_row(name, service, f"{ms:.2f}", "yes" if on_path else "beside it")
    table.add_row("sum on the path", "", f"{path:.2f}", "")
    console.print(table)
    kb = ", ".join(f"{k} {v / 1e3:.0f} kB" for k, v in sizes.items() if k != "placed")
    console.print(f"message sizes: {kb}")


if __name__ == "__main__":
    main()
