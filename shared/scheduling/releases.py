"""Per-node release profiles: when would a node first hold a request, if running jobs end on time.

An EASY reservation asks for the earliest estimated time a blocked job fits. For a job that takes
one node of a group (no GPU shares tracked there), that time is the minimum over nodes of the first
release, in order of estimated end (ties in the order the jobs started), after which the node has
the GPUs, CPUs and memory. Each node's
answer depends only on that node's running jobs and free resources, so it is cached per node and
request and dropped when the node changes: a reservation then costs one cached look-up per node
instead of a replay of every running job, and a cycle recomputes only the nodes that changed.
"""

from __future__ import annotations

from bisect import bisect_left, insort

from shared.scheduling.state import Alloc, GroupState

#: a release's place in the order running jobs are released in: (estimated end, start order), the
#: start order being the job's rank among the run's starts (``RunState.start_job``); unique per
#: running job, and the same order for every job numbering (``docs/simulator.md``, ties)
Point = tuple[float, int]
#: the release after which a node fits, and its free whole GPUs, milli-CPUs and MiB at that point
Fit = tuple[Point, int, int, int]
#: requests per group whose per-node answers are kept between calls (``group_fits``)
GROUP_TABLES = 8


class NodeReleases:
    """Running allocations per node, sorted by ``Point`` (estimated end, start order), with a
    first-fit cache. A release is named by its start order, not its job: ties in estimated end
    are released first started, first released, whatever the jobs' ids."""

    def __init__(self) -> None:
        self._runs: dict[tuple[int, int], list[tuple[float, int, int, int, int]]] = {}
        self._cache: dict[tuple[int, int], dict[tuple[int, int, int], Fit | None]] = {}
        # per group and request, node -> first fit of the nodes not changed since it was computed
        self._group: dict[int, dict[tuple[int, int, int], dict[int, Fit | None]]] = {}
        # per node holding GPUs, its last GPU release (a ``Point``); per group the same as a
        # sorted list of (estimated end, start order, node), for ``kth_drain``
        self._drain: dict[tuple[int, int], Point] = {}
        self._drains: dict[int, list[tuple[float, int, int]]] = {}

    def _changed(self, g: int, i: int) -> None:
        self._cache.pop((g, i), None)
        tables = self._group.get(g)
        if tables:
            for table in tables.values():
                table.pop(i, None)

    def _set_drain(self, g: int, i: int) -> None:
        """Recompute node i's last GPU release after its runs changed."""
        key = (g, i)
        new: Point | None = None
        for e, s, dw, _, _ in reversed(self._runs[key]):
            if dw:
                new = (e, s)
                break
        old = self._drain.get(key)
        if new == old:
            return
        drains = self._drains.setdefault(g, [])
        if old is not None:
            del drains[bisect_left(drains, (old[0], old[1], i))]
            del self._drain[key]
        if new is not None:
            insort(drains, (new[0], new[1], i))
            self._drain[key] = new

    def add(self, order: int, est_end: float, a: Alloc) -> None:
        """A job started on ``a``: ``order`` is its start order (its ``Point`` with ``est_end``)."""
        g = a.group
        for k, i in enumerate(a.nodes):
            key = (g, i)
            insort(self._runs.setdefault(key, []), (est_end, order, a.whole[k], a.cpu[k], a.mem[k]))
            self._changed(g, i)
            if a.whole[k]:
                self._set_drain(g, i)

    def remove(self, order: int, est_end: float, a: Alloc) -> None:
        """The job added with this start order and estimated end ended."""
        g = a.group
        for k, i in enumerate(a.nodes):
            key = (g, i)
            runs = self._runs[key]
            del runs[bisect_left(runs, (est_end, order))]
            self._changed(g, i)
            if a.whole[k]:
                self._set_drain(g, i)

    def first_fit(self, gs: GroupState, i: int, gpus: int, cpu: int, mem: int) -> Fit | None:
        """The first release on node i of ``gs`` after which it holds the request (None: never).

        Like the replay it replaces, a node is tested only right after one of its own releases.
        """
        key = (gs.index, i)
        req = (gpus, cpu, mem)
        cached = self._cache.get(key)
        if cached is not None and req in cached:
            return cached[req]
        w, c, m = int(gs.whole[i]), int(gs.cpu[i]), int(gs.mem[i])
        found: Fit | None = None
        for e, s, dw, dc, dm in self._runs.get(key, ()):
            w += dw
            c += dc
            m += dm
            if w >= gpus and c >= cpu and m >= mem:
                found = ((e, s), w, c, m)
                break
        self._cache.setdefault(key, {})[req] = found
        return found

    def kth_drain(self, gs: GroupState, k: int) -> Point | None:
        """The k-th earliest release (a ``Point``) after which a node of ``gs`` has all its
        GPUs free, if running jobs end in order of estimated end; None when k nodes are free now.

        A gang of k whole nodes (k x GPUs per node, no node slack) first fits, GPU-wise, exactly
        there: the free-GPU histogram then counts k entirely free nodes for the first time. This
        reads from the per-node drain points kept sorted what a replay of its releases finds.
        """
        free_now = len(gs.bucket[gs.G])
        if free_now >= k:
            return None
        e, s, _ = self._drains[gs.index][k - free_now - 1]
        return (e, s)

    def group_fits(self, gs: GroupState, gpus: int, cpu: int, mem: int) -> dict[int, Fit | None]:
        """``first_fit`` of every node of ``gs`` (node -> fit), recomputing only the nodes that
        changed since the last call with this request (read-only for the caller)."""
        tables = self._group.setdefault(gs.index, {})
        req = (gpus, cpu, mem)
        table = tables.get(req)
        if table is None:
            if len(tables) >= GROUP_TABLES:
                del tables[next(iter(tables))]  # the oldest: every node change visits each table
            table = tables[req] = {}
        if len(table) < gs.n:
            for i in range(gs.n):
                if i not in table:
                    table[i] = self.first_fit(gs, i, gpus, cpu, mem)
        return table
