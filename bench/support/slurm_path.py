"""Where the time from ``sbatch`` to Hylo's priority in ``squeue`` goes, job by job.

The adapter logs its hops with ``HYLO_SLURM_TIMING_LOG=true`` (``services/adapter_slurm/timing.py``);
the bench knows when ``sbatch`` returned and when its ``squeue`` reader first saw the job's Hylo
priority. For each job that got one, the decision that first set it names its snapshot, and so:

- ``to_poll``: sbatch returned -> the poll that saw the job started (the push event, the coalescing
  gap, a poll or decision already holding the adapter's lock; negative when the poll started before
  sbatch returned: the submit hook fires before the job exists);
- ``poll``: squeue and sinfo (and parsing) -> ``publish``: the snapshot onto the bus;
- ``pipeline``: published -> the placement at the adapter (featurizer, prioritizer, placer, NATS);
- ``lock``: the decision waiting for a poll in flight; ``lease``: the fail-safe lease written;
- ``scontrol``: lease -> this job's ``scontrol update`` returned (the updates sent before it);
- ``seen``: -> the bench's next ``squeue`` read that shows it (the measurement's resolution).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

SEGMENTS = ("to_poll", "poll", "publish", "pipeline", "lock", "lease", "scontrol", "seen")
_SNAPSHOT = re.compile(r"timing snapshot (\S+) event=(\S+) poll_start=(\S+) poll_end=(\S+) published=(\S+)")
_DECISION = re.compile(
    r"timing decision (\S+) received=(\S+) start=(\S+) lease=(\S+) end=(\S+) updates=(\d+) first=(\S+)"
)


def _f(text: str) -> float | None:
    return None if text == "-" else float(text)


def read_timing(log: Path) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(snapshot lines by correlation id, first-priority decision by job id) from an adapter log."""
    snapshots: dict[str, dict[str, Any]] = {}
    first: dict[str, dict[str, Any]] = {}
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if (m := _SNAPSHOT.search(line)) is not None:
            snapshots[m[1]] = {
                "event": _f(m[2]),
                "poll_start": _f(m[3]),
                "poll_end": _f(m[4]),
                "published": _f(m[5]),
            }
        elif (m := _DECISION.search(line)) is not None:
            decision = {
                "cid": m[1],
                "received": _f(m[2]),
                "start": _f(m[3]),
                "lease": _f(m[4]),
                "end": _f(m[5]),
                "updates": int(m[6]),
            }
            for item in m[7].split(",") if m[7] != "-" else []:
                job_id, _, done = item.partition(":")
                first.setdefault(job_id, {**decision, "done": float(done)})
    return snapshots, first


def job_paths(log: Path, jobs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per job whose Hylo priority was seen and whose hops are all in the log."""
    snapshots, first = read_timing(log)
    rows = []
    for j in jobs:
        seen, returned = j.get("hylo_priority_seen"), j.get("sbatch_returned")
        d = first.get(str(j["job_id"]))
        if seen is None or returned is None or d is None or d["cid"] not in snapshots:
            continue
        s = snapshots[d["cid"]]
        points = [
            returned,
            s["poll_start"],
            s["poll_end"],
            s["published"],
            d["received"],
            d["start"],
            d["lease"],
            d["done"],
            seen,
        ]
        if any(p is None for p in points):
            continue
        row: dict[str, Any] = {"job_id": j["job_id"], "total": seen - returned, "updates": d["updates"]}
        row.update({k: b - a for k, a, b in zip(SEGMENTS, points[:-1], points[1:], strict=True)})
        row["event_after_sbatch"] = None if s["event"] is None else s["event"] - returned
        rows.append(row)
    return rows


def profile(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """p50, p99 and mean of each segment and of the total, in seconds, over the jobs' rows."""
    out: dict[str, Any] = {"jobs": len(rows)}
    if not rows:
        return out
    for key in (*SEGMENTS, "total", "updates"):
        arr = np.array([r[key] for r in rows], dtype=float)
        out[key] = {
            "p50": round(float(np.percentile(arr, 50)), 4),
            "p99": round(float(np.percentile(arr, 99)), 4),
            "mean": round(float(arr.mean()), 4),
        }
    return out


def profile_table(prof: Mapping[str, Any]) -> str:
    """Markdown: one row per segment (ms)."""
    if not prof.get("jobs"):
        return "(no timed jobs)"
    lines = ["| hop | p50 ms | p99 ms | mean ms |", "|---|---|---|---|"]
    for key in (*SEGMENTS, "total"):
        p = prof[key]
        lines.append(f"| {key} | {p['p50'] * 1000:.0f} | {p['p99'] * 1000:.0f} | {p['mean'] * 1000:.0f} |")
    u = prof["updates"]
    lines.append(f"| (updates in that decision) | {u['p50']:.0f} | {u['p99']:.0f} | {u['mean']:.1f} |")
    return "\n".join(lines)
