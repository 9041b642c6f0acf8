"""Lower the CPU priority of a process doing side work, so the decision path gets the cores first.

Why: on a small machine (the issue's benchmark runs on 2 cores) every pipeline process shares the
cores with the side work: a recording placer (``HYLO_PLACER_ROLE=record``) spends more CPU per
1,024-row decision than the whole decision path does. Side work that runs at a higher nice value
only takes the cores the path leaves idle while both want them, and all of them otherwise.

Linux gives every thread its own nice value (``setpriority(PRIO_PROCESS, tid)`` reaches one thread,
not the process, despite its name); threads started later inherit their creator's. So the value is
raised on every thread the process has when it is called (the asyncio loop's, a database driver's
worker, ...), and those created afterwards inherit it from the main thread. Raising a nice value
needs no privilege; lowering it again would, so this is done once, at start.
"""

from __future__ import annotations

import logging
import os

__all__ = ["lower_priority"]

log = logging.getLogger("hylo.niceness")

MAX_NICE = 19


def _threads() -> list[int]:
    """The ids of this process's threads (Linux), or ``[0]`` (the calling one) elsewhere."""
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def lower_priority(increment: int) -> int:
    """Raise the nice value of every thread of this process by ``increment`` (capped at 19).

    Returns the main thread's nice value afterwards (the current one for ``increment <= 0`` or where
    priorities cannot be changed: a failure is logged, never raised; side work at normal priority
    is still correct).
    """
    if increment <= 0 or not hasattr(os, "setpriority"):
        return os.nice(0) if hasattr(os, "nice") else 0
    for tid in _threads():
        try:
            now = os.getpriority(os.PRIO_PROCESS, tid)
            os.setpriority(os.PRIO_PROCESS, tid, min(MAX_NICE, now + increment))
        except OSError as err:  # a thread that ended meanwhile, or a sandbox that forbids it
            log.debug("could not lower the priority of thread %d: %s", tid, err)
    return os.getpriority(os.PRIO_PROCESS, 0)
