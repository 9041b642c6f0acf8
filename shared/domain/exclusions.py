"""Jobs left out of a run, grouped by reason.

Why exclusions are first-class: a scheduling study that silently loses part of a trace reports
numbers nobody can reproduce. Loaders (rows that are well-formed but unusable) and the binding of a
workload to a cluster (jobs that can never run there) count every left-out job under a reason and
keep a few example ids; the CLI prints them. Where the submit times of the left-out jobs are known
(the loaders and the binding know them), they are kept too, on the clock of the jobs that were
kept, so that an evaluation window can say how many of *its* jobs were left out
(``count_between``) instead of repeating the trace's total in every window.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Exclusion:
    """Jobs (trace rows) left out for one reason, with a few example ids.

    ``submit_s`` holds the submit times of the left-out jobs, sorted, on the kept jobs' clock
    (rebased and rescaled as they are), or is empty when they are unknown (then the jobs belong to
    no window). When given, it has ``count`` entries.
    """

    reason: str
    count: int
    example_ids: list[str]
    submit_s: tuple[float, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        if self.submit_s:
            times = tuple(sorted(float(t) for t in self.submit_s))
            if len(times) != self.count:
                raise ValueError(f"{len(times)} submit times for {self.count} excluded job(s)")
            object.__setattr__(self, "submit_s", times)

    def rebased(self, offset: float) -> Exclusion:
        """The same jobs with ``offset`` taken off every submit time (the kept jobs' rebasing)."""
        return self._with_times(tuple(t - offset for t in self.submit_s))

    def rescaled(self, origin: float, factor: float) -> Exclusion:
        """The same jobs with every submit time ``t`` moved to ``origin + (t - origin) x factor``,
        the arrival rescaling of the kept jobs (``shared.sim.evaluate.rescale_arrivals``)."""
        return self._with_times(tuple(origin + (t - origin) * factor for t in self.submit_s))

    def _with_times(self, times: tuple[float, ...]) -> Exclusion:
        return Exclusion(self.reason, self.count, list(self.example_ids), times) if times else self

    def count_between(self, lo: float, hi: float) -> int:
        """Left-out jobs submitted in ``[lo, hi)`` (0 when their times are unknown)."""
        if not self.submit_s or not hi > lo:
            return 0
        return bisect.bisect_left(self.submit_s, hi) - bisect.bisect_left(self.submit_s, lo)

    def describe(self) -> str:
        examples = f" (e.g. {', '.join(self.example_ids)})" if self.example_ids else ""
        return f"excluded {self.count:,} job(s): {self.reason}{examples}"

    def __str__(self) -> str:
        return self.describe()


def count_between(exclusions: Iterable[Exclusion], lo: float, hi: float) -> int:
    """Left-out jobs of all ``exclusions`` submitted in ``[lo, hi)`` (those with known times)."""
    return sum(e.count_between(lo, hi) for e in exclusions)
