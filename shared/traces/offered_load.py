"""Offered load of a trace on a cluster: how busy the trace would keep the GPUs on average.

``load = sum(gpu demand x runtime) / (GPU capacity x (last submit - first submit))`` where a
fractional GPU share counts as its fraction. Why this number is stored in every preset: a cluster
sized so that the load is far below 1 never queues (every policy looks the same) and one far above
1 never drains; presets are sized for 0.8-0.9 where a reference trace allows it, and the stored
value lets anyone re-measure and compare (``python -m shared.traces.offered_load PRESET TRACE``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

from shared.domain.cluster import OfferedLoad, load_cluster_spec
from shared.domain.jobs import JobTable
from shared.traces.registry import load_trace

METHOD = (
    "sum(gpu demand x runtime) / (capacity x (last submit - first submit)); fractional GPU shares "
    "count as fractions; jobs excluded at load time are not counted; loader options at their defaults"
)


def offered_load(table: JobTable, capacity_gpus: float) -> float:
    """The offered load of ``table`` on ``capacity_gpus`` GPUs (0 for an empty or instant trace)."""
    if len(table) == 0 or capacity_gpus <= 0:
        return 0.0
    span = float(table.submit.max() - table.submit.min())
    if span <= 0:
        return 0.0
    work = float(np.sum(table.gpu_demand * table.runtime))
    return work / (capacity_gpus * span)


def measure(preset: str, trace: str) -> OfferedLoad:
    """Load ``trace`` (a name or path) and measure it on the preset (a name or spec path)."""
    spec = load_cluster_spec(preset)
    table = load_trace(trace).table
    return OfferedLoad(value=round(offered_load(table, spec.total_gpus), 4), trace=trace, method=METHOD)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("preset", help="cluster preset name or spec file")
    parser.add_argument("trace", help="trace name (see shared.traces.trace_names()) or path")
    args = parser.parse_args(argv)
    result = measure(args.preset, args.trace)
    print("[offered_load]")
    print(f"value = {result.value}")
    print(f'trace = "{result.trace}"')
    print(f'method = "{result.method}"')
    return 0


if __name__ == "__main__":
    sys.exit(main())
