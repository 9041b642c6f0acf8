"""The fail-safe lease: a file the adapter renews with every decision it applies, naming the
priorities it wrote, so that a watchdog outside Hylo can hand those jobs back when Hylo stops deciding.

Why a file renewed by the adapter and read by a separate process (``failsafe.py``): the fail-safe
must work when the adapter itself is dead (SIGKILL, out of memory, a crashed host with the file on
shared storage), so it cannot live only in the adapter; and Slurm has no timer that would expire a
priority set by hand (such a priority stays until the job is released; ``docs/slurm-adapter.md``,
"Fail-safe"). The lease is renewed by every *applied* decision, not by polls: an adapter that keeps
polling while the bus or the pipeline is down is not deciding.

Why each job's written priority is recorded, not only the fact that Hylo touched the job: the
watchdog hands back only a priority that is still Hylo's. A job whose priority someone changed
since (an admin, a user's hold, a previous hand-back) is left alone, and a job handed back once is
not released again at every check, even where multifactor's own values fall inside Hylo's band.
The adapter records the value it is about to write *before* writing it (write-ahead), keeping the
previous value too until a poll shows which one is in place: an adapter killed between the lease
and the ``scontrol update`` still leaves a lease that covers the job.

Why an atomic rename: the watchdog may read while the adapter writes; it sees the old lease or the
new one, never half of one.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from services.adapter_slurm.commands import JOB_ID
from services.adapter_slurm.model import SlurmJob

#: the lease file's format; a reader refuses any other
LEASE_VERSION = 1

#: what a lease records: job id -> the priorities Hylo may have left on it (one, once a poll or a
#: successful update has shown which)
Written = Mapping[str, frozenset[int]]


class LeaseError(RuntimeError):
    """The lease file exists but cannot be read, written, or trusted (the message says which)."""


def lease_owner() -> str:
    """``host:pid`` of this process: who renewed a lease, for the operator reading the watchdog's log."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class Lease:
    """One renewal: which cluster, when (epoch seconds), by whom, and the priorities written."""

    cluster: str
    renewed_at: float
    owner: str
    jobs: Written = field(default_factory=dict)

    def age_s(self, now: float) -> float:
        return now - self.renewed_at

    def expired(self, now: float, after_s: float) -> bool:
        """Not renewed for ``after_s`` seconds. A renewal stamped more than ``after_s`` in the future
        counts as expired too: a clock that jumped must not silence the fail-safe for good."""
        age = self.age_s(now)
        return age >= after_s or age <= -after_s

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": LEASE_VERSION,
                "cluster": self.cluster,
                "renewed_at": self.renewed_at,
                "owner": self.owner,
                "jobs": {job: sorted(values) for job, values in sorted(self.jobs.items())},
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str, source: str) -> Lease:
        """Parse and validate a lease; LeaseError names ``source`` and what is wrong."""
        try:
            data = json.loads(text)
        except ValueError as err:
            raise LeaseError(f"lease {source}: not JSON ({err})") from None
        if not isinstance(data, dict):
            raise LeaseError(f"lease {source}: expected a JSON object")
        if data.get("version") != LEASE_VERSION:
            raise LeaseError(f"lease {source}: version {data.get('version')!r}, expected {LEASE_VERSION}")
        cluster, renewed, owner, jobs = (data.get(k) for k in ("cluster", "renewed_at", "owner", "jobs"))
        if not isinstance(cluster, str) or not isinstance(owner, str):
            raise LeaseError(f"lease {source}: 'cluster' and 'owner' must be strings")
        if isinstance(renewed, bool) or not isinstance(renewed, int | float) or not math.isfinite(renewed):
            raise LeaseError(f"lease {source}: 'renewed_at' must be epoch seconds, got {renewed!r}")
        if not isinstance(jobs, dict):
            raise LeaseError(f"lease {source}: 'jobs' must be an object of job id -> priorities")
        return cls(cluster, float(renewed), owner, {j: _priorities(source, j, v) for j, v in jobs.items()})


def _priorities(source: str, job_id: object, values: object) -> frozenset[int]:
    # the ids become scontrol arguments: a lease someone edited must not smuggle anything in
    if not isinstance(job_id, str) or not JOB_ID.match(job_id):
        raise LeaseError(f"lease {source}: {job_id!r} is not a Slurm job id")
    if not isinstance(values, list) or not values:
        raise LeaseError(f"lease {source}: job {job_id}: expected a non-empty list of priorities")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise LeaseError(f"lease {source}: job {job_id}: priority {v!r} is not a positive integer")
    return frozenset(values)


def read_lease(path: Path, cluster: str) -> Lease | None:
    """The lease at ``path``; None when there is none (no adapter has decided with this path yet).

    LeaseError when the file cannot be read or parsed, or belongs to another cluster (two adapters
    configured with one lease path would overwrite each other's record).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as err:
        raise LeaseError(f"lease {path}: cannot read it ({err})") from None
    lease = Lease.from_json(text, str(path))
    if lease.cluster != cluster:
        raise LeaseError(f"lease {path}: written for cluster {lease.cluster!r}, not {cluster!r}")
    return lease


def write_lease(path: Path, lease: Lease) -> None:
    """Write ``lease`` atomically (temporary file in the same folder, fsync, rename); LeaseError on
    failure, after which the old lease, if any, is still in place."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("w", encoding="utf-8") as fh:
            fh.write(lease.to_json())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise LeaseError(f"lease {path}: cannot write it ({err})") from None


def still_hylos(job: SlurmJob, written: Written) -> bool:
    """The job is waiting, not held, and carries a priority Hylo wrote: handing it back is due."""
    values = written.get(job.job_id)
    return (
        values is not None
        and job.state == "PENDING"
        and not job.held
        and job.priority is not None
        and job.priority in values
    )


def reconcile(written: Written, jobs: Mapping[str, SlurmJob]) -> dict[str, frozenset[int]]:
    """What is still Hylo's after a poll (``jobs``: every job the poll saw, by id).

    Kept: pending jobs whose priority is one Hylo wrote, narrowed to that value. Dropped: jobs gone,
    started or finished (nothing to hand back), held, or whose priority someone else set since
    (an admin, a hand-back): for the adapter they are no longer Hylo's, so the next decision writes
    them afresh instead of keeping a value that is not Hylo's. A job whose priority the poll did not
    show is kept as it was.
    """
    out: dict[str, frozenset[int]] = {}
    for job_id, values in written.items():
        job = jobs.get(job_id)
        if job is None or job.state != "PENDING" or job.held:
            continue
        if job.priority is None:
            out[job_id] = values
        elif job.priority in values:
            out[job_id] = frozenset({job.priority})
    return out
