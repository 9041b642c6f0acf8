"""Jobs left out of a run, grouped by reason.

Why exclusions are first-class: a scheduling study that silently loses part of a trace reports
numbers nobody can reproduce. Loaders (rows that are well-formed but unusable) and the binding of a
workload to a cluster (jobs that can never run there) count every left-out job under a reason and
keep a few example ids; the CLI prints them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Exclusion:
    """Jobs (trace rows) left out for one reason, with a few example ids."""

    reason: str
    count: int
    example_ids: list[str]

    def describe(self) -> str:
        examples = f" (e.g. {', '.join(self.example_ids)})" if self.example_ids else ""
        return f"excluded {self.count:,} job(s): {self.reason}{examples}"

    def __str__(self) -> str:
        return self.describe()
