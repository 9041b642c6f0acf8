"""Running a stage's CPU-bound work: on the event loop when it is short, in a worker thread when long.

Why not always a worker thread: handing the work to a thread and the result back costs two thread
wake-ups per message, and on a machine whose cores are busy each wake-up waits for a core (on the
2-core bench machine under load, a median of 3 ms per hop, four hops per decision between the
featurizer and the placer). Work on a snapshot of the openb cluster's size (1,213 nodes, about 7,000
pending and running jobs) takes 5-10 ms in the featurizer and in the placer between bursts; a burst
(hundreds of queued jobs placed at once) costs the placer about 30 ms, plus CP-SAT's time limit
when that placer is configured (its solve runs in the same call). ``/healthz`` answers after that
at worst, well inside any probe's timeout; the decision itself is not slower for it. A snapshot
above ``INLINE_MAX_ROWS`` rows (pending + running jobs + nodes) goes to a worker thread, which
keeps the loop answering while a large cluster's work takes longer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from shared.schemas.snapshot import QueueSnapshot

__all__ = ["INLINE_MAX_ROWS", "run_stage", "snapshot_rows"]

P = ParamSpec("P")
T = TypeVar("T")

#: the largest snapshot (pending + running jobs + nodes) whose stage work runs on the event loop;
#: about 20 ms of featurizing on the bench machine
INLINE_MAX_ROWS = 20_000


def snapshot_rows(snapshot: QueueSnapshot) -> int:
    """The size of ``snapshot`` that stage work scales with: pending and running jobs plus nodes."""
    return len(snapshot.pending) + len(snapshot.running) + len(snapshot.nodes)


async def run_stage(rows: int, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` on the loop if ``rows <= INLINE_MAX_ROWS``, else in a worker thread."""
    if rows <= INLINE_MAX_ROWS:
        return fn(*args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)
