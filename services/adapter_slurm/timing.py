"""Timestamps along the path from a submission to Hylo's priority in Slurm, for profiling it.

Why: the target (submission -> Hylo priority in ``squeue``, p99 <= 300 ms with push events) spans
five hops: the hook's datagram, the poll it triggers (``squeue``/``sinfo``), the snapshot's trip
through featurizer, prioritizer and placer, and the ``scontrol update`` calls. To know which hop to
shorten, the adapter can log when each happened (``HYLO_SLURM_TIMING_LOG=true``; off by default: two
lines per decision). ``bench/slurm_experiment.py`` joins them with its own sbatch and ``squeue``
times, job by job.

The lines (logger ``services.adapter_slurm.timing``, epoch seconds with 4 decimals):

    timing snapshot <correlation id> event=<first push event not yet polled, or -> poll_start=<>
        poll_end=<> published=<>
    timing decision <correlation id> received=<> start=<> lease=<> end=<> updates=<n>
        first=<job id>:<time its scontrol returned>,...

``received`` is when the placement reached the adapter's handler, ``start`` when the adapter had the
lock to apply it, ``lease`` when the fail-safe lease was written, ``end`` when the last update
returned; ``first`` lists the jobs that got their first Hylo priority in that decision.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping

log = logging.getLogger("services.adapter_slurm.timing")

#: polls and decisions remembered until their snapshot is published or their decision applied
REMEMBER = 256


def _t(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


class PathTiming:
    """Collects the hops' times and logs them (everything is a no-op when ``enabled`` is false)."""

    def __init__(self, enabled: bool = False) -> None:
        self.enabled = enabled
        self._lock = threading.Lock()
        self._unpolled_event: float | None = None
        self._polls: OrderedDict[str, tuple[float | None, float, float]] = OrderedDict()
        self._received: OrderedDict[str, float] = OrderedDict()

    def event(self, received_at: float) -> None:
        """A push event arrived (the earliest one since the last poll started is kept)."""
        if not self.enabled:
            return
        with self._lock:
            if self._unpolled_event is None:
                self._unpolled_event = received_at

    def poll_started(self) -> tuple[float | None, float]:
        """(the event this poll answers, or None; now): call when a poll starts reading Slurm."""
        now = time.time()
        if not self.enabled:
            return None, now
        with self._lock:
            event, self._unpolled_event = self._unpolled_event, None
        return event, now

    def polled(self, correlation_id: str, event: float | None, started: float, ended: float) -> None:
        if not self.enabled:
            return
        with self._lock:
            self._polls[correlation_id] = (event, started, ended)
            while len(self._polls) > REMEMBER:
                self._polls.popitem(last=False)

    def published(self, correlation_id: str) -> None:
        """The snapshot of that poll is on the bus: log the poll's line."""
        if not self.enabled:
            return
        now = time.time()
        with self._lock:
            poll = self._polls.pop(correlation_id, None)
        if poll is not None:
            event, started, ended = poll
            log.info(
                "timing snapshot %s event=%s poll_start=%s poll_end=%s published=%s",
                correlation_id,
                _t(event),
                _t(started),
                _t(ended),
                _t(now),
            )

    def received(self, correlation_id: str) -> None:
        """A decision reached the adapter's handler."""
        if not self.enabled:
            return
        with self._lock:
            self._received[correlation_id] = time.time()
            while len(self._received) > REMEMBER:
                self._received.popitem(last=False)

    def applied(
        self,
        correlation_id: str,
        started: float,
        lease: float,
        updates: int,
        first: Mapping[str, float],
    ) -> None:
        """A decision was applied: log its line (``first``: job id -> when its first update returned)."""
        if not self.enabled:
            return
        now = time.time()
        with self._lock:
            received = self._received.pop(correlation_id, None)
        log.info(
            "timing decision %s received=%s start=%s lease=%s end=%s updates=%d first=%s",
            correlation_id,
            _t(received),
            _t(started),
            _t(lease),
            _t(now),
            updates,
            ",".join(f"{job}:{t:.4f}" for job, t in first.items()) or "-",
        )
