"""The error a pipeline stage raises for a message that is valid JSON but cannot be used.

Why a class of its own: a snapshot of an unknown cluster, or one whose nodes contradict the cluster
spec, fails the same way on every retry, so the service runtime must dead-letter it (with the
reason) instead of nak'ing it for redelivery. Every stage (featurizer, prioritizer, placer) raises
``StageError`` for exactly those cases and nothing else; any other exception is a fault of the
service (retried, then dead-lettered after ``max_deliver`` attempts).
"""

from __future__ import annotations

__all__ = ["StageError"]

#: DeadLetter.reason and the messages' Reason fields hold at most this many characters
MAX_REASON = 1024


class StageError(ValueError):
    """An unusable input message; ``reason`` is one line for the dead-letter record."""

    def __init__(self, reason: str) -> None:
        line = " ".join(str(reason).split()) or "unusable message"
        if len(line) > MAX_REASON:
            line = line[: MAX_REASON - 3] + "..."
        super().__init__(line)
        self.reason = line
