"""Offered load of a trace on a cluster: how busy the trace would keep the GPUs on average.

The definition is ``shared.domain.load``'s (``in-span``: each job's GPU work up to the last
arrival, over capacity x arrival span; a fractional GPU share counts as its fraction), the one
``--load`` rescales to. Why this number is stored in every preset: a cluster sized so that the
load is far below 1 never queues (every policy looks the same) and one far above 1 never drains;
presets are sized for 0.8-0.9 where a reference trace allows it, and the stored value lets anyone
re-measure and compare (``python -m shared.traces.offered_load PRESET TRACE``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from shared.domain.cluster import OfferedLoad, load_cluster_spec
from shared.domain.load import DEFAULT_LOAD_DEFINITION, DESCRIPTIONS, offered_load
from shared.traces.registry import load_trace

METHOD = (
    f"{DEFAULT_LOAD_DEFINITION}: {DESCRIPTIONS[DEFAULT_LOAD_DEFINITION]}; fractional GPU shares "
    "count as fractions; jobs excluded at load time are not counted; loader options at their defaults"
)

__all__ = ["METHOD", "main", "measure", "offered_load"]


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
