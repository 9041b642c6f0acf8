"""Queueing time of a message, added to the latencies a decision carries.

Why: a decision's ``latencies_ms`` holds each stage's own compute time; without the time each
message waited in its stream (transport, JetStream, a busy replica) the sum would understate what
the adapter waits for. ``<stage>_wait`` is measured from JetStream's store timestamp, so across
machines it is as good as their clock synchronization.
"""

from __future__ import annotations

import time
from typing import TypeVar

from shared.bus.consumer import Delivery
from shared.schemas.base import Message

M = TypeVar("M", bound=Message)


def queue_wait_ms(delivery: Delivery, started: float | None = None) -> float:
    """Milliseconds between the message being stored and ``started`` (default: now); 0 if unknown."""
    if delivery.stored_at <= 0:
        return 0.0
    return max(0.0, ((started if started is not None else time.time()) - delivery.stored_at) * 1000.0)


def with_wait(message: M, stage: str, wait_ms: float) -> M:
    """``message`` with ``latencies_ms[f"{stage}_wait"] = wait_ms`` (a copy; messages are frozen)."""
    latencies = dict(getattr(message, "latencies_ms", {}))
    latencies[f"{stage}_wait"] = round(wait_ms, 3)
    return message.model_copy(update={"latencies_ms": latencies})
