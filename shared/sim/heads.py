"""The first queued job of every order class, kept between scheduling cycles.

Why: with a long queue a cycle visits only the heads of order classes (``Policy.order_classes``),
a few hundred jobs. Sorting them afresh every cycle (numpy calls on small arrays, lists rebuilt)
cost more than the visit itself on a trace like Philly, where nearly every cycle starts one job.
A head changes only when a job arrives in an empty class or the head starts, so the simulator
keeps the heads here: per shape how many there are (every policy), and, for a policy whose keys
do not move with the clock, the heads already sorted by (key, job), which a cycle copies as a
ready-made heap.
"""

from __future__ import annotations

from bisect import bisect_left, insort

#: (key, job, class, position of the job in its class's arrival list)
Entry = tuple[float, int, int, int]


class Heads:
    """Heads of the order classes per shape: how many, and (static keys only) sorted entries.

    Per shape, because a cycle passes over the shapes that fit nowhere and drops a shape whole
    once a failure retires it: sorted per shape, a cycle merges only the shapes it visits and
    touches only the entries it visits, a handful of a few hundred.
    """

    __slots__ = ("by_shape", "per_shape", "sorted")

    def __init__(self, keep_sorted: bool) -> None:
        self.sorted = keep_sorted
        self.by_shape: dict[int, list[Entry]] = {}  # shape -> its heads by (key, job); if ``sorted``
        self.per_shape: dict[int, int] = {}  # shape -> heads of that shape (none: absent)

    def add(self, key: float, job: int, cls: int, pos: int, shape: int) -> None:
        """Job ``job`` became the head of class ``cls``."""
        if self.sorted:
            insort(self.by_shape.setdefault(shape, []), (key, job, cls, pos))
        self.per_shape[shape] = self.per_shape.get(shape, 0) + 1

    def remove(self, key: float, job: int, shape: int) -> None:
        """Head ``job`` left the queue (it started)."""
        left = self.per_shape[shape] - 1
        if left:
            self.per_shape[shape] = left
        else:
            del self.per_shape[shape]
        if self.sorted:
            entries = self.by_shape[shape]
            k = bisect_left(entries, (key, job))
            if k == len(entries) or entries[k][1] != job:
                raise KeyError(f"job {job} is not a head")
            del entries[k]
            if not entries:
                del self.by_shape[shape]
