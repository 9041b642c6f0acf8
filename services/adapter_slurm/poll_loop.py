"""The Slurm adapter's clock: the shared ``PollingLoop`` over a ``SlurmAdapter``.

Why a subclass and not the shared loop as it is: only the types and the name differ. Polling every
``interval`` and on demand, the backoff of 1, 2, 4 ... s up to ``retry_max_s`` while Slurm fails
(``problem()`` then says ``slurm: <the failed command>``), the outcomes kept until the bus takes
them, and decisions applied in turn with polls are what every polled cluster adapter needs, so they
live in ``shared/service/adapter_loop.py``.
"""

from __future__ import annotations

from services.adapter_slurm.adapter import DecisionResult, PollResult, SlurmAdapter
from shared.service.adapter_loop import PollingLoop
from shared.service.cluster_adapter import Publish

__all__ = ["PollLoop", "Publish"]


class PollLoop(PollingLoop[PollResult, DecisionResult]):
    """Owns the adapter: polls and decisions take turns (one lock), Slurm calls run in a thread."""

    def __init__(
        self,
        adapter: SlurmAdapter,
        publish: Publish,
        *,
        interval_s: float,
        retry_max_s: float,
        min_gap_s: float = 0.0,
    ) -> None:
        super().__init__(
            adapter,
            publish,
            interval_s=interval_s,
            retry_max_s=retry_max_s,
            min_gap_s=min_gap_s,
            name="slurm",
        )
