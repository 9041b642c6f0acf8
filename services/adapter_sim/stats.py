"""Counters of one simulated-cluster run: what the pipeline decided, and how fast.

Why counted and reported, not logged: the key claim of the simulated adapter is that the schedule
it produces is the pipeline's. A cycle whose decision did not arrive in time fell back to the base
policy; if that happened, the report must say how often, or a comparison against the base policy
would silently measure the base policy against itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np


@dataclass
class AdapterStats:
    """Counts of one run. The simulator thread writes the cycle counters, the bus side the rest."""

    #: snapshots published (one per scheduling cycle)
    snapshots: int = 0
    #: events whose starts a decision of the pipeline made
    decisions_applied: int = 0
    #: events with no decision within the timeout (accelerated mode: none received yet), whose
    #: starts the simulator's own cycle made instead, in the base policy's order
    timeouts: int = 0
    #: snapshots a pipeline stage dead-lettered (no decision could come; base policy for the cycle)
    rejected: int = 0
    #: dead-letter reasons of rejected snapshots (``<stage>: <reason>``, numbers as N) and counts
    rejections: dict[str, int] = field(default_factory=dict)
    #: the last rejection, verbatim (for the error when a run gives up)
    last_rejection: str | None = None
    #: accelerated mode: events given the decision of an earlier snapshot (the newest one in)
    stale_decisions: int = 0
    #: decisions that arrived after their cycle had timed out, or for a snapshot of another run
    late_decisions: int = 0
    #: ranked job ids a decision named that were not pending in its snapshot (ignored)
    unknown_jobs: int = 0
    #: events whose queue was longer than the snapshot cap (the placer did not see the tail)
    truncated_snapshots: int = 0
    #: queued jobs left out of snapshots by the cap, summed over cycles
    truncated_jobs: int = 0
    #: job outcomes published
    outcomes: int = 0
    #: decisions by the ``policy`` that made them (``model``, or the base policy's name)
    policies: dict[str, int] = field(default_factory=dict)
    #: decisions by their ``fallback`` reason (why the base policy decided), when one was given
    fallbacks: dict[str, int] = field(default_factory=dict)
    #: milliseconds from publishing a snapshot to receiving its decision
    latencies_ms: list[float] = field(default_factory=list)

    def reject(self, reason: str) -> None:
        """Count a snapshot a stage dead-lettered, by its reason."""
        self.rejected += 1
        self.last_rejection = reason
        key = re.sub(r"\d+", "N", reason)[:160]
        self.rejections[key] = self.rejections.get(key, 0) + 1

    def latency_ms(self, percentile: float) -> float:
        """A percentile of the decision latency (NaN before any decision)."""
        if not self.latencies_ms:
            return float("nan")
        return float(np.percentile(np.asarray(self.latencies_ms), percentile))

    @property
    def fallback_cycles(self) -> int:
        """Cycles the base policy ordered on the adapter's side (no decision, or a rejected snapshot)."""
        return self.timeouts + self.rejected

    def summary(self) -> dict[str, object]:
        """Plain numbers for a JSON report or a table."""
        return {
            "snapshots": self.snapshots,
            "decisions_applied": self.decisions_applied,
            "timeouts": self.timeouts,
            "rejected": self.rejected,
            "rejections": dict(self.rejections),
            "late_decisions": self.late_decisions,
            "stale_decisions": self.stale_decisions,
            "unknown_jobs": self.unknown_jobs,
            "truncated_snapshots": self.truncated_snapshots,
            "truncated_jobs": self.truncated_jobs,
            "outcomes": self.outcomes,
            "policies": dict(self.policies),
            "fallbacks": dict(self.fallbacks),
            "latency_ms_p50": _finite(self.latency_ms(50)),
            "latency_ms_p99": _finite(self.latency_ms(99)),
        }


def _finite(value: float) -> float | None:
    """None for NaN (strict JSON has no NaN)."""
    return None if value != value else value
