"""Bounded sequence jumps: one message must not be able to move a latest-wins sequence arbitrarily far.

Why: the featurizer keeps only the newest snapshot per cluster and an adapter ignores decisions
older than the newest applied, both by ``sequence``. Issue 20 showed that one forged snapshot with
``sequence=2**62`` made the featurizer skip every later real snapshot as stale (while ``/readyz``
stayed 200), and a forged decision did the same to the Slurm adapter. Until senders are
authenticated (item 1), a sequence that lands more than ``max_jump`` (``HYLO_MAX_SEQUENCE_JUMP``)
away from the newest one adopted is refused (the caller dead-letters it with ``JumpGuard``'s
reason) instead of adopted.

The window must also let a real sender come back after a long pause or with a new numbering (an
adapter that was down for weeks numbers by the clock in ms; a simulated cluster restarts at 0). So
a run of ``rebase_after`` consecutive refused sequences of one key that increase, each within the
window of the previous, is taken as the new numbering: the caller adopts it (and says so in the
log). A single forged message cannot do that; a sender who can keep publishing forged messages can,
which is what item 1 closes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)

#: refused sequences in a row, increasing within the window, that are taken as a new numbering
REBASE_AFTER = 3


class SequenceJump(ValueError):
    """A message's sequence lies beyond the window around the newest adopted one (see module doc)."""


@dataclass(frozen=True)
class Verdict:
    """What to do with one sequence: adopt it (``reason`` None), possibly as a new numbering
    (``rebase``: adopt it even below the newest), or refuse it for ``reason``."""

    reason: str | None = None
    rebase: bool = False


class JumpGuard:
    """The jump rule of the module docstring, per key (a cluster name)."""

    def __init__(self, max_jump: int, rebase_after: int = REBASE_AFTER, what: str = "sequence") -> None:
        if max_jump < 1:
            raise ValueError(f"max_jump must be >= 1, got {max_jump}")
        self.max_jump = max_jump
        self.rebase_after = rebase_after
        self.what = what
        #: key -> (last refused sequence, how many refused in a row formed a run up to it)
        self._runs: dict[str, tuple[int, int]] = {}

    def check(self, key: str, sequence: int, newest: int | None) -> Verdict:
        """May ``sequence`` be adopted for ``key``, whose newest adopted sequence is ``newest``?"""
        if newest is None or abs(sequence - newest) <= self.max_jump:
            self._runs.pop(key, None)
            return Verdict()
        last, count = self._runs.get(key, (None, 0))
        run = count + 1 if last is not None and 0 < sequence - last <= self.max_jump else 1
        if run >= self.rebase_after:
            self._runs.pop(key, None)
            log.warning(
                "%s of %r: %d in a row moved from %d to %d; taken as a new numbering",
                self.what,
                key,
                run,
                newest,
                sequence,
            )
            return Verdict(rebase=True)
        self._runs[key] = (sequence, run)
        direction = "past" if sequence > newest else "below"
        return Verdict(
            reason=f"{self.what} {sequence} lies {abs(sequence - newest)} {direction} the newest adopted "
            f"({newest}) of {key!r}, more than HYLO_MAX_SEQUENCE_JUMP={self.max_jump}"
        )
