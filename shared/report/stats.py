"""Labels and small helpers of the report's tables and figures.

The numbers themselves arrive aggregated by the database (``shared.report.sql``, held to the numpy
reference in ``tests/report/reference.py``) as ``shared.report.aggregates``; each is shown in a table
and drawn from the same value. Percentiles are numpy's default (linear interpolation between order
statistics).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from shared.report.aggregates import NO_MODEL_YET, TOTAL, FloatArray

__all__ = ["METRIC_TITLES", "NO_MODEL_YET", "TOTAL", "group_order", "percentile"]

METRIC_TITLES = {"wait_s": "wait", "jct_s": "JCT", "bsld": "bounded slowdown"}


def percentile(values: FloatArray | Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), NaN for no values."""
    arr = np.asarray(values, dtype=np.float64)
    return float(np.percentile(arr, q)) if len(arr) else float("nan")


def group_order(labels: Iterable[str], most: int | None = None) -> list[str]:
    """Labels by how often they occur (then by name); with ``most``, the most frequent ``most`` only."""
    counts = Counter(labels)
    ordered = sorted(counts, key=lambda k: (-counts[k], k))
    return ordered if most is None else ordered[:most]
