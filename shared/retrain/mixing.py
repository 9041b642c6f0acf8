"""Mixing a rebuilt workload with trace files, and the chronological split that holds out its end.

Why traces go *before* the recorded jobs: the held-out part of a retraining run (on which the new
model is gated) must be the cluster's own newest jobs, the closest thing to what the model will
schedule next. Older material, the recorded history of the cluster or a public trace of a similar
one, only adds training windows, so each trace is laid end to end before the recorded jobs, in the
order given, ``gap_s`` seconds after the previous part's last arrival.

``holdout_fraction`` is a fraction of the *recorded* jobs; ``train_fraction_for`` turns it into the
fraction of the mixed table that ``shared.metrics.chronological_split`` (and the gate) use, so the
held-out part holds recorded jobs only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shared.domain.jobs import NUMERIC_FIELDS, CodeBook, JobTable, TraceMeta, TypeSetBook

__all__ = ["mix_tables", "train_fraction_for"]


def mix_tables(recorded: JobTable, traces: Sequence[JobTable], *, gap_s: float = 3600.0) -> JobTable:
    """``traces`` (oldest first), then ``recorded``, on one clock; code tables merged.

    Trace job ids are prefixed with their trace's name (``name/id``) so they cannot collide with the
    cluster's ids; the recorded jobs keep theirs.
    """
    if gap_s < 0:
        raise ValueError(f"gap_s: expected >= 0 seconds, got {gap_s}")
    if not traces:
        return recorded
    users, vcs, qoses = CodeBook(), CodeBook(), CodeBook()
    types = TypeSetBook()
    parts: dict[str, list[np.ndarray]] = {name: [] for name in NUMERIC_FIELDS}
    ids: list[np.ndarray] = []
    start = 0.0
    for k, table in enumerate([*traces, recorded]):
        if len(table) == 0:
            continue
        last = k == len(traces)
        rebased, _ = table.sorted_by_submit().rebased()
        for name in NUMERIC_FIELDS:
            parts[name].append(getattr(rebased, name))
        parts["submit"][-1] = rebased.submit + start
        parts["user"][-1] = np.asarray([users.code(rebased.users[c]) for c in rebased.user], dtype=np.int64)
        parts["vc"][-1] = np.asarray([vcs.code(rebased.vcs[c]) for c in rebased.vc], dtype=np.int64)
        parts["qos"][-1] = np.asarray([qoses.code(rebased.qoses[c]) for c in rebased.qos], dtype=np.int64)
        parts["type_set"][-1] = np.asarray(
            [types.code(rebased.type_sets[c]) for c in rebased.type_set], dtype=np.int64
        )
        prefix = "" if last else f"{rebased.meta.name}/"
        ids.append(np.asarray([f"{prefix}{i}" for i in rebased.ids], dtype=np.str_))
        start = float(parts["submit"][-1][-1]) + gap_s
    fields: dict[str, Any] = {name: np.concatenate(arrs) for name, arrs in parts.items()}
    names = [t.meta.name for t in traces]
    meta = TraceMeta(
        name=f"{recorded.meta.name} after {', '.join(names)}",
        source=recorded.meta.source,
        origin=recorded.meta.origin,
        has_estimates=recorded.meta.has_estimates,
        notes=(f"trace files {names} placed before the recorded jobs, {gap_s:g} s apart",),
    )
    return JobTable(
        ids=np.concatenate(ids),
        type_sets=types.sets,
        users=users.names or ["default"],
        vcs=vcs.names or ["default"],
        qoses=qoses.names or ["normal"],
        meta=meta,
        **fields,
    )


def train_fraction_for(n_total: int, n_recorded: int, holdout_fraction: float) -> float:
    """The ``chronological_split`` fraction that holds out the newest ``holdout_fraction`` of the
    recorded jobs (which are the last ``n_recorded`` of ``n_total``)."""
    if not 0.0 < holdout_fraction < 1.0:
        raise ValueError(f"holdout_fraction: expected a fraction in (0, 1), got {holdout_fraction}")
    if not 0 < n_recorded <= n_total:
        raise ValueError(f"n_recorded must be in 1..{n_total}, got {n_recorded}")
    held = max(1, round(holdout_fraction * n_recorded))
    if held >= n_total:
        raise ValueError(f"holding out {held} of {n_total} jobs leaves nothing to train on")
    return (n_total - held) / n_total
