# mypy: disable-error-code="misc,no-untyped-def,no-untyped-call,no-any-return"
"""The simulator's event loop compiled with numba, over named records of numpy arrays.

Why: the Python simulator spends its time in interpreter overhead spread over a dozen small
functions (about 80 us per scheduling cycle on Philly); the same loop compiled runs the whole
trace in a fraction of that. It mirrors ``Simulator.run`` decision for decision (the same
starts, nodes, reservations and timeline; ``bench/sim_equivalence.py`` and
``tests/sim/test_compiled.py`` compare the two), including the points where the Python code
advances the multifactor policy's decayed usage, whose floating-point value depends on them.

The data: the named records of ``records`` (``run`` builds the run's inputs and outputs,
``_new_core`` allocates the loop's own state), held by one ``Core``, which every function of
the loop takes. ``Core`` is a numba structref, passed as one pointer: a tuple of the ~120 arrays
would have its every array's reference count raised and lowered at every call (measured: the
loop ran 5x slower). For the same reason a function reads the arrays it uses once, at its top
(``dead = core.visit.dead``), rather than taking a whole record it reads little of.

The functions, top down:

- ``simulate``: the event loop. At each event time: ``_complete`` (completions), ``_arrive``
  (arrivals), then the shortcuts that decide whether a cycle runs (``_lone_arrival``,
  ``_arrival_fits``) and ``_cycle``;
- ``_cycle``: one scheduling cycle: ``_precheck`` (shapes whose GPUs fit nowhere), ``_keys``
  (the multifactor usage, or asking an external policy), ``_list_heads`` (the visit order),
  ``_visit`` (heads in (key, job) order: ``_next_head``, ``_try_head``, ``_try_reserve``) and
  ``_end_cycle`` (the cycle's reservations and retirements end, static heads move);
- ``_start`` / ``_take``: a job's allocation recorded, taken and given back;
- ``_reserve``: EASY's replay (``_replay``) and the plan's caps (``_repin``);
- the placer (``_place``, ``_gang``, ``_fractional``, ``_place_cpu_only``), small heaps
  (``records.Entries``), the policies' keys (``_key``, ``_advance``, ``_fairshare``).

``shared.sim.compiled.run.unsupported`` says which runs go to the Python simulator instead.

The baseline policies' keys are computed here; a policy that orders the queue in Python (a
learned one: ``shared.policies.capabilities.ExternalCompiled``) is asked for them at each cycle
through a callback in object mode (``_keys``, ``run.run_external``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
from numba import njit, objmode
from numba.core import types
from numba.experimental import structref

from shared.pairwise_sum import pairwise
from shared.scheduling.running import running_insert, running_remove
from shared.sim.compiled.records import (
    CORE_FIELDS,
    CYCLE,
    M_EASY,
    M_GREEDY,
    M_NONE,
    P_EXTERNAL,
    P_MULTIFACTOR,
    P_STATIC,
    P_UNICEP,
    P_WFP3,
    Buffers,
    Caps,
    Entries,
    Free,
    Queue,
    Visit,
)

INF = math.inf
BIG = 1 << 60
#: what the visit does after ``_try_head``: go on, try a reservation for the job, end the cycle
GO_ON, RESERVE, STOP = range(3)


@structref.register
class _CoreType(types.StructRef):
    """numba's type of ``Core``."""

    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


class Core(structref.StructRefProxy):
    """Everything one run of the loop reads and keeps (the fields: ``records.CORE_FIELDS``),
    as a numba structref: compiled functions receive it as one pointer."""


structref.define_proxy(Core, _CoreType, list(CORE_FIELDS))


@njit(cache=True)
def _top_from_hist(hist, g, m):
    """Free whole GPUs on the ``m`` nodes of group g with the most free (``state.top_from_hist``)."""
    total = 0
    for k in range(hist.shape[1] - 1, 0, -1):
        c = hist[g, k]
        if c:
            if c >= m:
                return total + m * k
            total += c * k
            m -= c
    return total


@njit(cache=True)
def _max_whole(hist, g, G):
    """The most free whole GPUs of one node of group g (0: none free)."""
    for k in range(G, 0, -1):
        if hist[g, k]:
            return k
    return 0


@njit(cache=True)
def _nodes_needed(gpus, G):
    """The fewest nodes of G GPUs that hold ``gpus`` (``binding.nodes_needed``)."""
    if gpus <= 0:
        return 1
    if G > 0:
        return -(-gpus // G)
    return 10**9


# ----------------------------------------------------------------------------------------------
# cluster state (``records.Free``: the live state ``core.free``, or ``core.scratch`` in a
# reservation's replay) and placement (``shared.scheduling.placement``: first-fit and best-fit
# over whole GPUs, gangs, GPU shares and CPU-only jobs). ``core.caps`` holds this cycle's
# reservations; ``applies[g]`` says whether group g's caps apply to the job being placed.


@njit(cache=True)
def _free_mask(gpu_milli, i, G, w):
    """The first ``w`` fully free physical GPUs of node i, as a bit mask (``Placer._gpu_ids``)."""
    mask = 0
    for b in range(G):
        if w == 0:
            break
        if gpu_milli[i, b] == 1000:
            mask |= 1 << b
            w -= 1
    return mask


@njit(cache=True)
def _refresh(g, i, G, free):
    """Node i's free whole GPUs and largest free share from its per-GPU row (``_refresh_node``)."""
    gpu_milli, whole, hist = free.gpu_milli, free.whole, free.hist
    count = 0
    top = 0
    for b in range(G):
        v = gpu_milli[i, b]
        if v == 1000:
            count += 1
        if v > top:
            top = v
    old = whole[i]
    if old != count:
        hist[g, old] -= 1
        hist[g, count] += 1
        free.group_whole[g] += count - old
        whole[i] = count
    free.top_share[i] = top if G else 0


@njit(cache=True)
def _take(core, free, j, sign):
    """Take (sign -1) or give back (sign +1) on ``free`` job j's allocation as recorded in
    ``core.allocs`` and ``core.out`` (``GroupState.take``/``give``)."""
    out = core.out
    g, cnt, frac = out.group[j], out.nodes_used[j], out.shared_gpu[j]
    a = core.allocs
    p0 = a.ptr[j]
    nodes, ws, cs, ms, masks = a.node, a.whole, a.cpus, a.mem, a.mask
    milli = core.jobs[j].milli
    G = core.cluster.gpus[g]
    tracked = core.cluster.track[g]
    whole, cpus, mem, hist, gpu_milli = free.whole, free.cpus, free.mem, free.hist, free.gpu_milli
    for z in range(p0, p0 + cnt):
        i = nodes[z]
        cpus[i] += sign * cs[z]
        mem[i] += sign * ms[z]
        if not tracked:
            w = ws[z]
            if w:
                old = whole[i]
                new = old + sign * w
                hist[g, old] -= 1
                hist[g, new] += 1
                whole[i] = new
                free.group_whole[g] += sign * w
            continue
        mask = masks[z]
        if mask:
            for b in range(G):
                if (mask >> b) & 1:
                    gpu_milli[i, b] = 0 if sign < 0 else 1000
        if frac >= 0:
            gpu_milli[i, frac] += sign * milli
        _refresh(g, i, G, free)


@njit(cache=True)
def _gang(core, job, g, capped, free):
    """``Placer._gang`` of ``job`` in group g into the gang arrays of ``core.buf``; returns the
    node count (0: no fit)."""
    gpus, c, mm = job.gpus, job.cpus, job.mem
    best, slack = core.cfg.best_fit, core.cfg.slack
    usable, chosen, tn, tw = core.buf.usable, core.buf.order, core.buf.gang_node, core.buf.gang_whole
    gang_cpus, gang_mem, gang_mask = core.buf.gang_cpus, core.buf.gang_mem, core.buf.gang_mask
    capw, capc, capm = core.caps.whole, core.caps.cpus, core.caps.mem
    whole, cpus, mem = free.whole, free.cpus, free.mem
    G = core.cluster.gpus[g]
    n = core.cluster.nodes[g]
    base = core.cluster.base[g]
    need = -(-gpus // G) if G > 0 else n + 1
    max_nodes = min(need + slack, n)
    if need > max_nodes or _top_from_hist(free.hist, g, max_nodes) < gpus:
        return 0
    for t in range(n):
        i = base + t
        w = whole[i]
        cc = cpus[i]
        mv = mem[i]
        if capped:
            w = min(w, capw[i])
            cc = min(cc, capc[i])
            mv = min(mv, capm[i])
        u = w
        if c:
            u = min(u, cc * gpus // c)
        if mm:
            u = min(u, mv * gpus // mm)
        usable[t] = u
    # the stable descending order's first max_nodes entries: by usable, then by node id
    top = 0
    total = 0
    for v in range(G, -1, -1):
        if top >= max_nodes:
            break
        for t in range(n):
            if usable[t] == v:
                chosen[top] = t
                top += 1
                total += v
                if top >= max_nodes:
                    break
    if total < gpus:
        return 0
    cnt = 0
    rem = gpus
    if not best:
        # first-fit: lowest node ids first, as long as the gang stays within max_nodes
        for t in range(n):
            u = usable[t]
            if u > 0:
                take = min(u, rem)
                tn[cnt] = t
                tw[cnt] = take
                cnt += 1
                rem -= take
                if rem == 0 or cnt == max_nodes:
                    break
        if rem:
            cnt = 0
            rem = gpus
    if cnt == 0:
        # best-fit: fullest nodes first; the last piece goes to the tightest node that holds it
        for q in range(top):
            t = chosen[q]
            u = usable[t]
            if u >= rem:
                pick = -1
                for s in range(n):
                    if usable[s] >= rem:
                        taken = False
                        for z in range(cnt):
                            if tn[z] == s:
                                taken = True
                                break
                        if not taken and (pick < 0 or usable[s] < usable[pick]):
                            pick = s
                tn[cnt] = pick
                tw[cnt] = rem
                cnt += 1
                rem = 0
                break
            tn[cnt] = t
            tw[cnt] = u
            cnt += 1
            rem -= u
        if rem or cnt > max_nodes:
            return 0
    tracked = core.cluster.track[g]
    for z in range(cnt):
        i = tn[z] + base
        tn[z] = i
        gang_cpus[z] = -(-c * tw[z] // gpus)
        gang_mem[z] = -(-mm * tw[z] // gpus)
        gang_mask[z] = _free_mask(free.gpu_milli, i, G, tw[z]) if tracked else 0
    return cnt


@njit(cache=True)
def _set_out(buf, z, i, w, c, mm, mask):
    """Entry z of the placement: node i, w whole GPUs, c milli-CPUs, mm MiB, the GPU mask."""
    buf.node[z] = i
    buf.whole[z] = w
    buf.cpus[z] = c
    buf.mem[z] = mm
    buf.mask[z] = mask


@njit(cache=True)
def _fractional(core, job, applies, free):
    """``Placer._fractional``: a share of one physical GPU for ``job``; (group, 1) with the node
    in ``core.buf`` and the GPU in ``buf.shared[0]``, or (-1, 0)."""
    milli, c, mm, cls = job.milli, job.cpus, job.mem, job.gclass
    cl, buf, caps = core.cluster, core.buf, core.caps
    C, M, GF = free.cpus, free.mem, free.gpu_milli
    bg = -1
    bestv = 0
    bi = -1
    bgpu = -1
    if not core.cfg.best_fit:
        for q in range(cl.class_ptr[cls], cl.class_ptr[cls + 1]):
            g = cl.class_groups[q]
            cap = applies[g]
            for t in range(cl.nodes[g]):
                i = cl.base[g] + t
                cc = C[i]
                mv = M[i]
                if cap:
                    if caps.blocked[i]:
                        continue
                    cc = min(cc, caps.cpus[i])
                    mv = min(mv, caps.mem[i])
                if free.top_share[i] >= milli and cc >= c and mv >= mm:
                    for b in range(cl.gpus[g]):
                        if GF[i, b] >= milli:
                            _set_out(buf, 0, i, 0, c, mm, 0)
                            buf.shared[0] = b
                            return g, 1
        return -1, 0
    n_later = 0
    later = buf.later
    for q in range(cl.class_ptr[cls], cl.class_ptr[cls + 1]):
        g = cl.class_groups[q]
        cap = applies[g]
        G = cl.gpus[g]
        # the partly used GPU with the least free that holds the share (lowest node, GPU on ties)
        hv = 1 << 60
        hi_ = -1
        hg = -1
        for t in range(cl.nodes[g]):
            i = cl.base[g] + t
            if C[i] < c or M[i] < mm or (cap and caps.blocked[i]):
                continue
            for b in range(G):
                v = GF[i, b]
                if v >= milli and 0 < v < 1000 and v < hv:
                    hv = v
                    hi_ = i
                    hg = b
        if hi_ < 0:
            later[n_later] = q
            n_later += 1
            continue
        if bg < 0 or hv - milli < bestv:
            bg = g
            bestv = hv - milli
            bi = hi_
            bgpu = hg
    if n_later and (bg < 0 or bestv >= 1000 - milli):
        for z in range(n_later):
            g = cl.class_groups[later[z]]
            cap = applies[g]
            first = -1
            for t in range(cl.nodes[g]):
                i = cl.base[g] + t
                if free.whole[i] >= 1 and C[i] >= c and M[i] >= mm and not (cap and caps.blocked[i]):
                    first = i
                    break
            if first >= 0 and (bg < 0 or 1000 - milli < bestv):
                for b in range(cl.gpus[g]):
                    if GF[first, b] == 1000:
                        bg = g
                        bestv = 1000 - milli
                        bi = first
                        bgpu = b
                        break
    if bg < 0:
        return -1, 0
    _set_out(buf, 0, bi, 0, c, mm, 0)
    buf.shared[0] = bgpu
    return bg, 1


@njit(cache=True)
def _place_cpu_only(core, job, applies, free):
    """``Placer.place`` of a job without GPUs: one node with its CPUs and memory (best-fit: the
    fewest free CPUs); (group, 1) with the node in ``core.buf``, or (-1, 0)."""
    c, mm, cls = job.cpus, job.mem, job.gclass
    best = core.cfg.best_fit
    cptr, cgroups, base, nodes = (
        core.cluster.class_ptr,
        core.cluster.class_groups,
        core.cluster.base,
        core.cluster.nodes,
    )
    capc, capm = core.caps.cpus, core.caps.mem
    cpus, mem = free.cpus, free.mem
    bg = -1
    bestv = 0
    bi = -1
    for q in range(cptr[cls], cptr[cls + 1]):
        g = cgroups[q]
        cap = applies[g]
        for t in range(nodes[g]):
            i = base[g] + t
            cc = cpus[i]
            mv = mem[i]
            if cap:
                cc = min(cc, capc[i])
                mv = min(mv, capm[i])
            if cc >= c and mv >= mm:
                if not best:
                    _set_out(core.buf, 0, i, 0, c, mm, 0)
                    return g, 1
                if bg < 0 or cc < bestv:
                    bg = g
                    bestv = cc
                    bi = i
    if bg < 0:
        return -1, 0
    _set_out(core.buf, 0, bi, 0, c, mm, 0)
    return bg, 1


@njit(cache=True)
def _place(core, job, applies, free):
    """``Placer.place`` of ``job`` (a JOB record) on ``free``: the group of the allocation
    written to the placement arrays of ``core.buf`` (nodes, whole GPUs, CPUs, memory, GPU masks;
    the shared GPU in ``buf.shared[0]``, -1 if none) and its node count, or (-1, 0)."""
    gpus, milli, c, mm, cls = job.gpus, job.milli, job.cpus, job.mem, job.gclass
    buf = core.buf
    buf.shared[0] = -1
    if gpus == 0:
        return _place_cpu_only(core, job, applies, free)
    if milli < 1000:
        return _fractional(core, job, applies, free)
    best, slack = core.cfg.best_fit, core.cfg.slack
    cptr, cgroups, base_of, nodes = (
        core.cluster.class_ptr,
        core.cluster.class_groups,
        core.cluster.base,
        core.cluster.nodes,
    )
    gpus_of, track = core.cluster.gpus, core.cluster.track
    capw, capc, capm = core.caps.whole, core.caps.cpus, core.caps.mem
    whole, cpus, mem = free.whole, free.cpus, free.mem
    bg = -1
    bcnt = 0
    bs1 = 0
    bs2 = 0
    for q in range(cptr[cls], cptr[cls + 1]):
        g = cgroups[q]
        cap = applies[g]
        G = gpus_of[g]
        base = base_of[g]
        if gpus <= G and _max_whole(free.hist, g, G) >= gpus:
            pick = -1
            pw = 0
            for t in range(nodes[g]):
                i = base + t
                w = whole[i]
                cc = cpus[i]
                mv = mem[i]
                if cap:
                    w = min(w, capw[i])
                    cc = min(cc, capc[i])
                    mv = min(mv, capm[i])
                if w >= gpus and cc >= c and mv >= mm:
                    if not best:
                        mask = _free_mask(free.gpu_milli, i, G, gpus) if track[g] else 0
                        _set_out(buf, 0, i, gpus, c, mm, mask)
                        return g, 1
                    if pick < 0 or w < pw:
                        pick = i
                        pw = w
            if pick >= 0:
                s2 = pw - gpus
                if bg < 0 or bs1 > 1 or (bs1 == 1 and s2 < bs2):
                    bg = g
                    bcnt = 1
                    bs1 = 1
                    bs2 = s2
                    mask = _free_mask(free.gpu_milli, pick, G, gpus) if track[g] else 0
                    _set_out(buf, 0, pick, gpus, c, mm, mask)
                continue
        if (gpus > G or (slack > 0 and gpus >= 2)) and free.group_whole[g] >= gpus:
            cnt = _gang(core, job, g, cap, free)
            if cnt and (not best or bg < 0 or cnt < bs1 or (cnt == bs1 and bs2 > 0)):
                bg = g
                bcnt = cnt
                bs1 = cnt
                bs2 = 0
                for z in range(cnt):
                    _set_out(
                        buf,
                        z,
                        buf.gang_node[z],
                        buf.gang_whole[z],
                        buf.gang_cpus[z],
                        buf.gang_mem[z],
                        buf.gang_mask[z],
                    )
                if not best:
                    return g, cnt
    return bg, bcnt


@njit(cache=True)
def _share_fits(core, milli, cls):
    """``placement.share_fits``: some GPU of the groups of class cls has ``milli`` free (no CPUs,
    memory, caps): a whole free GPU, or ``visit.partial[g]``, the largest share free on a partly
    used GPU."""
    cl, group_whole, partial = core.cluster, core.free.group_whole, core.visit.partial
    for q in range(cl.class_ptr[cls], cl.class_ptr[cls + 1]):
        g = cl.class_groups[q]
        if group_whole[g] > 0 or partial[g] >= milli:
            return True
    return False


@njit(cache=True)
def _largest_partial(core, g):
    """Group g's largest free share on a partly used GPU (0: none) into ``visit.partial[g]``."""
    cl, gpu_milli = core.cluster, core.free.gpu_milli
    top = 0
    for t in range(cl.nodes[g]):
        i = cl.base[g] + t
        for b in range(cl.gpus[g]):
            v = gpu_milli[i, b]
            if 0 < v < 1000 and v > top:
                top = v
    core.visit.partial[g] = top


# ----------------------------------------------------------------------------------------------
# (key, job, order class) entries (``records.Entries``): heaps and sorted lists on (key, job)


@njit(cache=True)
def _less(ka, ja, kb, jb):
    """(ka, ja) < (kb, jb): the order of every heap and sorted list here (ties by job)."""
    return ka < kb or (ka == kb and ja < jb)


@njit(cache=True)
def _swap(e, p, q):
    """Swap entries p and q."""
    e.key[p], e.key[q] = e.key[q], e.key[p]
    e.job[p], e.job[q] = e.job[q], e.job[p]
    e.cls[p], e.cls[q] = e.cls[q], e.cls[p]


@njit(cache=True)
def _hpush(e, n, k, j, b):
    """Push (k, j, b) onto the min-heap of the first n entries; returns the new size."""
    p = n
    e.key[p] = k
    e.job[p] = j
    e.cls[p] = b
    while p > 0:
        u = (p - 1) >> 1
        if _less(e.key[p], e.job[p], e.key[u], e.job[u]):
            _swap(e, p, u)
            p = u
        else:
            break
    return n + 1


@njit(cache=True)
def _hsift(e, n, p):
    """Sift entry p down in the min-heap of the first n entries."""
    while True:
        a = 2 * p + 1
        if a >= n:
            return
        b = a + 1
        m = a
        if b < n and _less(e.key[b], e.job[b], e.key[a], e.job[a]):
            m = b
        if _less(e.key[m], e.job[m], e.key[p], e.job[p]):
            _swap(e, p, m)
            p = m
        else:
            return


@njit(cache=True)
def _hpop(e, n):
    """Remove the smallest entry (left at index n - 1 on return); returns the new size."""
    n -= 1
    _swap(e, 0, n)
    _hsift(e, n, 0)
    return n


@njit(cache=True)
def _heapify(e, n):
    """Make the first n entries a min-heap."""
    for p in range(n // 2 - 1, -1, -1):
        _hsift(e, n, p)


@njit(cache=True)
def _msift(e, n, p):
    """Sift down in a max-heap on (key, job)."""
    while True:
        a = 2 * p + 1
        if a >= n:
            return
        m = a
        if a + 1 < n and _less(e.key[a], e.job[a], e.key[a + 1], e.job[a + 1]):
            m = a + 1
        if _less(e.key[p], e.job[p], e.key[m], e.job[m]):
            _swap(e, p, m)
            p = m
        else:
            return


@njit(cache=True)
def _list_more(core):
    """Push onto the visit heap the ``cyc.want`` smallest (key, job) entries of the keyed heads
    (``visit.heads``) above the bound (``cyc.bound_*``; none set: none listed yet), move the
    bound to the largest of them, and count them off ``cyc.n_unlisted``. Why: with thousands of
    class heads and clock-dependent keys a cycle usually visits a few of them (a committed head
    that does not fit), and heapifying them all every cycle cost more than the Python loop's
    chunked listing."""
    cyc = core.visit.counts[0]
    heads, heap, sel = core.visit.heads, core.visit.heap, core.visit.select
    want = cyc.want
    m = 0
    for e in range(cyc.n_heads):
        k = heads.key[e]
        j = heads.job[e]
        if cyc.bound_set and not _less(cyc.bound_key, cyc.bound_job, k, j):
            continue
        if m < want:
            # insert into the max-heap of the selection
            p = m
            sel.key[p] = k
            sel.job[p] = j
            sel.cls[p] = heads.cls[e]
            m += 1
            while p > 0:
                u = (p - 1) >> 1
                if _less(sel.key[u], sel.job[u], sel.key[p], sel.job[p]):
                    _swap(sel, p, u)
                    p = u
                else:
                    break
        elif _less(k, j, sel.key[0], sel.job[0]):
            sel.key[0] = k
            sel.job[0] = j
            sel.cls[0] = heads.cls[e]
            _msift(sel, m, 0)
    if m:
        cyc.bound_key = sel.key[0]
        cyc.bound_job = sel.job[0]
        cyc.bound_set = True
    hn = cyc.n_heap
    for q in range(m):
        hn = _hpush(heap, hn, sel.key[q], sel.job[q], sel.cls[q])
    cyc.n_heap = hn
    cyc.n_unlisted -= m
    cyc.want = want * 2


@njit(cache=True)
def _sorted_insert(e, ns, k, j, b):
    """Insert (k, j, b) into the first ns entries, sorted by (key, job); returns the new length."""
    lo_ = _sorted_find(e, ns, k, j)
    for s in range(ns, lo_, -1):
        e.key[s] = e.key[s - 1]
        e.job[s] = e.job[s - 1]
        e.cls[s] = e.cls[s - 1]
    e.key[lo_] = k
    e.job[lo_] = j
    e.cls[lo_] = b
    return ns + 1


@njit(cache=True)
def _sorted_find(e, ns, k, j):
    """Where (k, j) is, or would go, in the first ns entries sorted by (key, job)."""
    lo_ = 0
    hi_ = ns
    while lo_ < hi_:
        mid = (lo_ + hi_) >> 1
        if _less(e.key[mid], e.job[mid], k, j):
            lo_ = mid + 1
        else:
            hi_ = mid
    return lo_


@njit(cache=True)
def _sorted_remove(e, ns, k, j):
    """Remove (k, j) from the first ns entries sorted by (key, job); returns the new length."""
    lo_ = _sorted_find(e, ns, k, j)
    for s in range(lo_, ns - 1):
        e.key[s] = e.key[s + 1]
        e.job[s] = e.job[s + 1]
        e.cls[s] = e.cls[s + 1]
    return ns - 1


# ----------------------------------------------------------------------------------------------
# the policies' keys; the multifactor policy's usage (``SlurmMultifactor._advance`` and its
# fair-share factor)


@njit(cache=True)
def _advance(fair, now):
    """Decay the users' usage to ``now`` (``SlurmMultifactor._advance``)."""
    p = fair.params[0]
    dt = now - p.last
    if dt > 0:
        lam = p.lam
        decay = math.exp(-lam * dt)
        usage, running = fair.usage, fair.running
        for u in range(len(usage)):
            usage[u] = usage[u] * decay + running[u] * (1.0 - decay) / lam
        p.last = now
        p.version += 1.0


@njit(cache=True)
def _fairshare(fair):
    """``w.fairshare x 2^(-U/S)`` per user into ``fair.weight`` (2.0 read from the parameters so
    that LLVM keeps the ``pow`` call that Python's ``math.pow`` makes instead of rewriting it as
    ``exp2``)."""
    p = fair.params[0]
    usage, fsw = fair.usage, fair.weight
    total = pairwise(usage, 0, len(usage))
    wfs = p.w_fairshare
    if total <= 0:
        for u in range(len(usage)):
            fsw[u] = wfs * 1.0
        return
    two = p.two
    share = p.share
    for u in range(len(usage)):
        fsw[u] = wfs * math.pow(two, -(usage[u] / total) / share)


@njit(cache=True)
def _key(core, j, now):
    """Job j's key at ``now`` (the policy's ``keys``; smaller first)."""
    kind = core.cfg.kind
    job = core.jobs[j]
    if kind == P_STATIC:
        return job.key
    if kind == P_EXTERNAL:
        return job.ext_key
    w = max(now - job.submit, 0.0)
    if kind == P_WFP3:
        r = w / job.wfp3_est
        return -(r * r * r) * job.wfp3_width
    if kind == P_UNICEP:
        return -w / job.unicep_denom
    p = core.fair.params[0]
    age = min(w, p.max_age) * p.age_per_s
    return -math.floor(age + job.mf_static + core.fair.weight[job.user])


# ----------------------------------------------------------------------------------------------
# starting and ending jobs


@njit(cache=True)
def _start(core, j, g, cnt, now):
    """``start_job``: record the placement in ``core.buf`` (group g, ``cnt`` nodes) as job j's
    allocation and take it, and update the queue, the completion heap, the estimated-end order,
    the order class's head, the busy GPUs, and what the policy tracks (an external policy's
    running jobs, the multifactor usage). Returns the head of j's order class before the start."""
    job = core.jobs[j]
    loop = core.out.counts[0]
    buf = core.buf
    frac = buf.shared[0]
    a = core.allocs
    p0 = a.ptr[j]
    busy = 0
    for z in range(cnt):
        a.node[p0 + z] = buf.node[z]
        a.whole[p0 + z] = buf.whole[z]
        a.cpus[p0 + z] = buf.cpus[z]
        a.mem[p0 + z] = buf.mem[z]
        a.mask[p0 + z] = buf.mask[z]
        busy += buf.whole[z] * 1000
    if frac >= 0:
        busy += job.milli
    out = core.out
    out.nodes_used[j] = cnt
    out.group[j] = g
    out.shared_gpu[j] = frac
    _take(core, core.free, j, -1)
    core.queue.queued[j] = False
    out.start[j] = now
    out.end[j] = now + job.runtime
    loop.n_ends = _hpush(core.ends, loop.n_ends, out.end[j], j, 0)
    # insert into the release order (estimated end, then start order): after every entry with an
    # end up to j's, since j started after all of them
    e_j = now + job.est
    rk, rj = core.by_est.key, core.by_est.job
    s = loop.n_running
    while s > 0 and e_j < rk[s - 1]:
        rk[s] = rk[s - 1]
        rj[s] = rj[s - 1]
        s -= 1
    rk[s] = e_j
    rj[s] = j
    loop.n_running += 1
    core.queue.shape_jobs[job.shape] -= 1
    b = job.order
    before = core.queue.head[b]
    if before == j:
        _next_head_of(core, b)
        if core.queue.head[b] < 0:
            core.queue.shape_heads[job.shape] -= 1
    loop.n_queued -= 1
    loop.busy_milli += busy
    kind = core.cfg.kind
    if kind == P_EXTERNAL:
        _note_start(core, j, g, now)
    elif kind == P_MULTIFACTOR:
        _advance(core.fair, now)
        core.fair.running[job.user] += job.mf_demand
    return before


@njit(cache=True)
def _next_head_of(core, b):
    """Order class b's head started: its next queued job that has arrived becomes the head, or
    the class leaves the active list."""
    loop = core.out.counts[0]
    queued, first, head = core.queue.queued, core.queue.first, core.queue.head
    active, active_at = core.queue.active, core.queue.active_at
    ptr, jobs_of = core.orders.ptr, core.orders.jobs
    i_next = loop.next_job
    h = first[b] + 1
    end = ptr[b + 1]
    while h < end and jobs_of[h] < i_next and not queued[jobs_of[h]]:
        h += 1
    first[b] = h
    if h < end and jobs_of[h] < i_next:
        head[b] = jobs_of[h]
    else:
        head[b] = -1
        n_act = loop.n_active
        last = active[n_act - 1]
        active[active_at[b]] = last
        active_at[last] = active_at[b]
        active_at[b] = -1
        loop.n_active = n_act - 1


@njit(cache=True)
def _note_start(core, j, g, now):
    """For an external policy: log the start of job j in group g (the events since the last
    call) and insert it into the running jobs it reads."""
    x = core.ext
    ask = x.ask[0]
    x.event_job[ask.n_events] = j
    x.event_time[ask.n_events] = now
    ask.n_events += 1
    running_insert(x.run_job, x.run_group, x.run_end, ask.n_running, j + ask.lo, g, now + core.jobs[j].est)
    ask.n_running += 1


@njit(cache=True)
def _note_end(core, r, now, e_r):
    """For an external policy: log the end of job r (estimated end ``e_r``) and drop it from
    the running jobs it reads."""
    x = core.ext
    ask = x.ask[0]
    x.event_job[ask.n_events] = -r - 1
    x.event_time[ask.n_events] = now
    ask.n_events += 1
    running_remove(x.run_job, x.run_group, x.run_end, ask.n_running, r + ask.lo, e_r)
    ask.n_running -= 1


@njit(cache=True)
def _complete(core, now):
    """Every running job whose true end is up to ``now`` ends (completion-heap order): its
    allocation goes back, it leaves the estimated-end order, and the policy's tracking follows.
    Returns whether any ended."""
    loop = core.out.counts[0]
    ends = core.ends
    start, nodes_used, shared_gpu = core.out.start, core.out.nodes_used, core.out.shared_gpu
    a_ptr, a_whole = core.allocs.ptr, core.allocs.whole
    rk, rj = core.by_est.key, core.by_est.job
    kind = core.cfg.kind
    released = False
    while loop.n_ends and ends.key[0] <= now:
        loop.n_ends = _hpop(ends, loop.n_ends)
        r = ends.job[loop.n_ends]
        job = core.jobs[r]
        _take(core, core.free, r, 1)
        p0 = a_ptr[r]
        for z in range(nodes_used[r]):
            loop.busy_milli -= a_whole[p0 + z] * 1000
        if shared_gpu[r] >= 0:
            loop.busy_milli -= job.milli
        # drop r from the release order: the first entry of its estimated end, then past the
        # other jobs with that end (started before or after it)
        e_r = start[r] + job.est
        rn = loop.n_running
        lo_s = np.searchsorted(rk[:rn], e_r)
        while rj[lo_s] != r:
            lo_s += 1
        for s in range(lo_s, rn - 1):
            rk[s] = rk[s + 1]
            rj[s] = rj[s + 1]
        loop.n_running = rn - 1
        released = True
        if kind == P_EXTERNAL:
            _note_end(core, r, now, e_r)
        if kind == P_MULTIFACTOR:
            _advance(core.fair, now)
            core.fair.running[job.user] -= job.mf_demand
    return released


@njit(cache=True)
def _arrive(core, now):
    """Every job submitted up to ``now`` joins the queue; a job whose order class had none
    queued becomes its head (kept sorted with static keys)."""
    loop, jobs = core.out.counts[0], core.jobs
    queued, shape_jobs, shape_heads = core.queue.queued, core.queue.shape_jobs, core.queue.shape_heads
    head, active, active_at = core.queue.head, core.queue.active, core.queue.active_at
    static = core.cfg.kind == P_STATIC
    i = loop.next_job
    n = len(jobs)
    while i < n and jobs[i].submit <= now:
        queued[i] = True
        loop.n_queued += 1
        k = jobs[i].shape
        shape_jobs[k] += 1
        b = jobs[i].order
        if head[b] < 0:
            head[b] = i
            active[loop.n_active] = b
            active_at[b] = loop.n_active
            loop.n_active += 1
            shape_heads[k] += 1
            if static:
                loop.n_sorted = _sorted_insert(core.queue.sorted, loop.n_sorted, jobs[i].key, i, b)
        i += 1
    loop.next_job = i


@njit(cache=True)
def _move_sorted_head(core, b, before):
    """Static keys: order class b's head was ``before`` (-1: none); put its head now in its
    place in the sorted heads."""
    loop, jobs = core.out.counts[0], core.jobs
    after = core.queue.head[b]
    if before != after:
        if before >= 0:
            loop.n_sorted = _sorted_remove(core.queue.sorted, loop.n_sorted, jobs[before].key, before)
        if after >= 0:
            loop.n_sorted = _sorted_insert(core.queue.sorted, loop.n_sorted, jobs[after].key, after, b)


@njit(cache=True)
def _lone_arrival(core, j, now, released):
    """The queue is one new arrival, j: a cycle would try it alone, with no reservation (the
    Python loop's lone-arrival start). Counts the cycle the Python loop would run."""
    loop = core.out.counts[0]
    g, cnt = _place(core, core.jobs[j], core.caps.never, core.free)
    if g >= 0:
        before = _start(core, j, g, cnt, now)
        if core.cfg.kind == P_STATIC:
            _move_sorted_head(core, core.jobs[j].order, before)
        loop.all_blocked = True
        loop.cycles += 1
    elif released or not loop.all_blocked:
        loop.all_blocked = core.cfg.mode != M_NONE
        loop.cycles += 1


@njit(cache=True)
def _arrival_fits(core, first_new):
    """Nothing was freed and every queued job failed on the free state at the last cycle: a
    cycle can start something only if a new arrival (jobs ``first_new`` on) fits now."""
    for k in range(first_new, core.out.counts[0].next_job):
        g, _ = _place(core, core.jobs[k], core.caps.never, core.free)
        if g >= 0:
            return True
    return False


# ----------------------------------------------------------------------------------------------
# the scheduling cycle


@njit(cache=True)
def _precheck(core):
    """Mark the shapes whose GPUs fit nowhere now (``visit.blocked``; a long queue only, as the
    Python loop's pre-check, which saves keying and visiting jobs that cannot start). Returns the
    cycle's result when every queued job is blocked (1: all blocked, 0: without backfill), else -1."""
    cyc, loop = core.visit.counts[0], core.out.counts[0]
    blocked, shape_jobs = core.visit.blocked, core.queue.shape_jobs
    s_gpus, s_milli, s_gclass = core.shapes.gpus, core.shapes.milli, core.shapes.gclass
    cptr, cgroups, nodes, gpus_of = (
        core.cluster.class_ptr,
        core.cluster.class_groups,
        core.cluster.nodes,
        core.cluster.gpus,
    )
    hist, group_whole = core.free.hist, core.free.group_whole
    slack = core.cfg.slack
    cyc.any_blocked = False
    if loop.n_queued <= 32:
        blocked[:] = False
        return -1
    n_bl = 0
    parts_known = False
    for k in range(len(s_gpus)):
        blocked[k] = False
        if shape_jobs[k] == 0:
            continue
        gp = s_gpus[k]
        gc = s_gclass[k]
        fits = True
        if gp > 0 and s_milli[k] < 1000:
            if not parts_known:
                # the state does not change during the pre-check: once per cycle
                for g in range(len(nodes)):
                    if core.cluster.track[g]:
                        _largest_partial(core, g)
                parts_known = True
            fits = _share_fits(core, s_milli[k], gc)
        elif gp > 0:
            fits = False
            for q in range(cptr[gc], cptr[gc + 1]):
                g = cgroups[q]
                G = gpus_of[g]
                if gp <= G and _max_whole(hist, g, G) >= gp:
                    fits = True
                    break
                if (gp > G or (slack > 0 and gp >= 2)) and group_whole[g] >= gp:
                    need = -(-gp // G) if G else nodes[g] + 1
                    mx = min(need + slack, nodes[g])
                    if need <= mx and _top_from_hist(hist, g, mx) >= gp:
                        fits = True
                        break
        if not fits:
            blocked[k] = True
            cyc.any_blocked = True
            n_bl += shape_jobs[k]
    if n_bl >= loop.n_queued:
        return 1 if core.cfg.mode != M_NONE else 0
    return -1


@njit(cache=True)
def _call_back(handle):
    """``_ask(handle)`` in object mode, in a function of its own. Why not inline in the loop:
    numba hands an object-mode block its lifted code as a pickle, copied into a new bytes object
    at every entry, and the pickle of a block lifted from a big function is large (its bytecode
    and constants; about 0.5 MB from the former one-piece loop), 10-30 us a call: most of a
    training decision's time in the loop. Lifted from this function it is a few kB."""
    with objmode():
        _ask(handle)


@njit(cache=True)
def _keys(core, now, handle):
    """What the Python loop does when it keys the queue: the multifactor policy decays its usage
    (and recomputes the fair-share weights when the usage changed); an external policy is asked
    for the keys of the whole queue, in arrival order (every queued job heads its own order
    class), as the Python loop's ``policy.keys(queue, now)``, unless its static hint keys apply
    (before ``ask_from``, or a queue of one job). An exception in the callback ends the run."""
    kind = core.cfg.kind
    if kind == P_MULTIFACTOR:
        fair = core.fair
        _advance(fair, now)
        p = fair.params[0]
        if p.version != p.weight_version:
            _fairshare(fair)
            p.weight_version = p.version
    elif kind == P_EXTERNAL:
        queue, head, active, jobs = core.ext.queue, core.queue.head, core.queue.active, core.jobs
        ask = core.ext.ask[0]
        m = 0
        for a in range(core.out.counts[0].n_active):
            queue[m] = head[active[a]]
            m += 1
        queue[:m].sort()
        if ask.static_keys and (m < 2 or now < ask.ask_from):
            for e in range(m):
                jobs[queue[e]].ext_key = jobs[queue[e]].key
        else:
            ask.queue_len = m
            ask.now = now
            _call_back(handle)
            ask.n_events = 0


@njit(cache=True)
def _list_heads(core, now):
    """The cycle's visit order: the heads of classes of shapes that fit somewhere, and of the
    shapes that fit nowhere only the first (key, job) per class of eligible groups (order class
    -1: it may reserve, nothing else). Static keys read the sorted heads as they are (counted
    here); clock-dependent keys key every head now, and beyond ``2 x head_chunk`` of them put
    them on the visit heap in doubling chunks (``_list_more``)."""
    cyc, jobs, cfg = core.visit.counts[0], core.jobs, core.cfg
    blocked, in_order, first_seen = core.visit.blocked, core.visit.in_order, core.visit.first_seen
    first_key, first_job = core.visit.first_key, core.visit.first_job
    head, active, shape_heads = core.queue.head, core.queue.active, core.queue.shape_heads
    heads, heap = core.visit.heads, core.visit.heap
    static = cfg.kind == P_STATIC
    any_blocked = cyc.any_blocked
    n_all = 0
    for a in range(core.out.counts[0].n_active if not static else 0):
        b = active[a]
        j = head[b]
        kj = _key(core, j, now)
        k = jobs[j].shape
        if any_blocked and blocked[k]:
            gc = jobs[j].gclass
            if first_job[gc] < 0 or _less(kj, j, first_key[gc], first_job[gc]):
                first_key[gc] = kj
                first_job[gc] = j
            continue
        heads.key[n_all] = kj
        heads.job[n_all] = j
        heads.cls[n_all] = b
        n_all += 1
        in_order[k] += 1
    # entries left whose shape is not retired whole: the visit ends at 0 (the rest would all be
    # passed over)
    live = n_all
    hn = 0
    cyc.n_unlisted = 0
    cyc.want = cfg.head_chunk
    cyc.bound_set = False
    if n_all > 2 * cfg.head_chunk:
        cyc.n_unlisted = n_all  # listed in doubling chunks of the smallest (key, job)
    else:
        for e in range(n_all):
            heap.key[e] = heads.key[e]
            heap.job[e] = heads.job[e]
            heap.cls[e] = heads.cls[e]
        hn = n_all
    if static:
        # the sorted heads: those of shapes that fit somewhere, and one per class of eligible
        # groups of the shapes that fit nowhere
        for k in range(len(shape_heads)):
            if shape_heads[k]:
                if any_blocked and blocked[k]:
                    gc = core.shapes.gclass[k]
                    if cfg.mode != M_GREEDY and not first_seen[gc]:
                        first_seen[gc] = True
                        live += 1
                else:
                    in_order[k] = shape_heads[k]
                    live += shape_heads[k]
        first_seen[:] = False
    if any_blocked and not static:
        for gc in range(len(first_job)):
            if first_job[gc] >= 0:
                if cfg.mode != M_GREEDY:
                    heap.key[hn] = first_key[gc]
                    heap.job[hn] = first_job[gc]
                    heap.cls[hn] = -1
                    hn += 1
                    live += 1
                first_job[gc] = -1
    _heapify(heap, hn)
    cyc.n_heads = n_all
    cyc.n_heap = hn
    cyc.live = live
    cyc.at_sorted = 0


@njit(cache=True)
def _next_head(core):
    """The next entry to visit, (job, order class; -1: the first job of a class of eligible
    groups whose shape fits nowhere): the smaller (key, job) of the next sorted head (static
    keys; blocked shapes' heads passed over but the first per class of eligible groups) and the
    top of the visit heap, which is first topped up from the unlisted heads when they may hold
    a smaller one."""
    cyc, jobs = core.visit.counts[0], core.jobs
    blocked, first_seen = core.visit.blocked, core.visit.first_seen
    heap = core.visit.heap
    from_sorted = False
    if core.cfg.kind == P_STATIC:
        not_greedy = core.cfg.mode != M_GREEDY
        ns = core.out.counts[0].n_sorted
        sk, sj = core.queue.sorted.key, core.queue.sorted.job
        p_s = cyc.at_sorted
        while p_s < ns:
            k = jobs[sj[p_s]].shape
            if cyc.any_blocked and blocked[k]:
                if not_greedy and not first_seen[jobs[sj[p_s]].gclass]:
                    break
                p_s += 1
                continue
            break
        from_sorted = p_s < ns and (cyc.n_heap == 0 or _less(sk[p_s], sj[p_s], heap.key[0], heap.job[0]))
        if from_sorted:
            j = sj[p_s]
            b = core.queue.sorted.cls[p_s]
            cyc.at_sorted = p_s + 1
            if cyc.any_blocked and blocked[jobs[j].shape]:
                first_seen[jobs[j].gclass] = True
                b = -1
            return j, b
        cyc.at_sorted = p_s
    if cyc.n_unlisted and (
        cyc.n_heap == 0 or not cyc.bound_set or _less(cyc.bound_key, cyc.bound_job, heap.key[0], heap.job[0])
    ):
        _list_more(core)
    cyc.n_heap = _hpop(heap, cyc.n_heap)
    return heap.job[cyc.n_heap], heap.cls[cyc.n_heap]


@njit(cache=True)
def _retired(core, job):
    """A failure recorded for ``job``'s shape in this cycle retires it: it asks at least the
    CPUs and memory of a job that failed and runs longer than that failure's threshold."""
    rec_next, rec_cpus, rec_mem, rec_thr = (
        core.visit.rec_next,
        core.visit.rec_cpus,
        core.visit.rec_mem,
        core.visit.rec_thr,
    )
    r = core.visit.rec_head[job.shape]
    while r >= 0:
        if job.cpus >= rec_cpus[r] and job.mem >= rec_mem[r] and job.est > rec_thr[r]:
            return True
        r = rec_next[r]
    return False


@njit(cache=True)
def _push_next(core, j, b, now):
    """Job j, the head of order class b, was visited and its class goes on: the class's next
    queued job (arrived, after j) joins the visit heap with its key."""
    cyc = core.visit.counts[0]
    queued, ptr, jobs_of = core.queue.queued, core.orders.ptr, core.orders.jobs
    i_next = core.out.counts[0].next_job
    h = core.orders.pos[j] + 1
    end = ptr[b + 1]
    while h < end and jobs_of[h] < i_next and not queued[jobs_of[h]]:
        h += 1
    if h < end and jobs_of[h] < i_next:
        j2 = jobs_of[h]
        cyc.n_heap = _hpush(core.visit.heap, cyc.n_heap, _key(core, j2, now), j2, b)
        core.visit.in_order[core.jobs[j2].shape] += 1
        cyc.live += 1


@njit(cache=True)
def _try_head(core, j, b, now):
    """Try to start job j (head of order class b) now, under the caps of the reservations made
    this cycle where it would still run at their time. On a start, the caps it uses shrink and
    its class goes on. On a failure the job is recorded so that it retires the later jobs of
    its shape that ask as much (or, failing on the free state alone with its shape's least CPUs
    and memory, retires the whole shape); its class goes on only where the failure does not
    retire its next job too. Returns GO_ON, RESERVE (EASY: j failed on the free state, reserve
    for it) or STOP (no backfill: the cycle ends at its first failure)."""
    cyc, cfg = core.visit.counts[0], core.cfg
    when, applies = core.caps.when, core.caps.applies
    cgroups = core.cluster.class_groups
    job = core.jobs[j]
    gc = job.gclass
    k = job.shape
    g0, g1 = core.cluster.class_ptr[gc], core.cluster.class_ptr[gc + 1]
    finish = now + job.est
    any_cap = False
    for q in range(g0, g1):
        g = cgroups[q]
        f = finish > when[g]
        applies[g] = f
        any_cap = any_cap or f
    g, cnt = _place(core, job, applies, core.free)
    if g >= 0:
        if applies[g]:
            _use_caps(core, cnt)
        for q in range(g0, g1):
            applies[cgroups[q]] = False
        before = _start(core, j, g, cnt, now)
        if cfg.kind == P_STATIC and not core.queue.touched[b]:
            core.queue.touched[b] = True
            core.queue.head_before[b] = before
            core.queue.touched_list[cyc.n_touched] = b
            cyc.n_touched += 1
        _push_next(core, j, b, now)
        return GO_ON
    if cfg.mode == M_NONE:
        for q in range(g0, g1):
            applies[cgroups[q]] = False
        return STOP
    step = GO_ON
    thr = -INF
    if any_cap:
        # it failed under caps: it may start once the reservations' time has passed
        cyc.soft = True
        for q in range(g0, g1):
            g2 = cgroups[q]
            if applies[g2]:
                thr = max(thr, when[g2])
                applies[g2] = False
        thr -= now
    elif cfg.mode == M_EASY:
        step = RESERVE
    if not any_cap and job.cpus <= core.shapes.min_cpus[k] and job.mem <= core.shapes.min_mem[k]:
        core.visit.dead[k] = True  # the failure retires its whole shape
        cyc.live -= core.visit.in_order[k]
    else:
        r = cyc.n_rec
        core.visit.rec_cpus[r] = job.cpus
        core.visit.rec_mem[r] = job.mem
        core.visit.rec_thr[r] = thr
        core.visit.rec_next[r] = core.visit.rec_head[k]
        core.visit.rec_head[k] = r
        cyc.n_rec = r + 1
        if not (job.est > thr):
            _push_next(core, j, b, now)
    return step


@njit(cache=True)
def _use_caps(core, cnt):
    """The placement in ``core.buf`` (``cnt`` nodes) starts under reservation caps: what it takes
    comes off the caps of its nodes (a share counts as a whole GPU)."""
    node, whole, cpus, mem = core.buf.node, core.buf.whole, core.buf.cpus, core.buf.mem
    capw, capc, capm = core.caps.whole, core.caps.cpus, core.caps.mem
    extra = 1 if core.buf.shared[0] >= 0 else 0
    for z in range(cnt):
        nd = node[z]
        capw[nd] -= whole[z] + extra
        capc[nd] -= cpus[z]
        capm[nd] -= mem[z]


@njit(cache=True)
def _try_reserve(core, j, now):
    """``try_reserve(j)``: one reservation per pool of groups (a pool: the groups of a class of
    eligible groups; none where one of them is covered already), up to ``max_res`` a cycle."""
    cyc, covered, cgroups = core.visit.counts[0], core.caps.covered, core.cluster.class_groups
    gc = core.jobs[j].gclass
    g0, g1 = core.cluster.class_ptr[gc], core.cluster.class_ptr[gc + 1]
    if cyc.n_res >= core.cfg.max_res:
        return
    for q in range(g0, g1):
        if covered[cgroups[q]]:
            return
    cyc.n_res += 1
    for q in range(g0, g1):
        covered[cgroups[q]] = True
    _reserve(core, j, now)


@njit(cache=True)
def _visit(core, now):
    """Visit the cycle's order (``_list_heads``) in (key, job) order until no entry is left
    whose shape is not retired whole: retired jobs are passed over, the others tried
    (``_try_head``), and a job that fails on the free state (or the first of a class of
    eligible groups whose shape fits nowhere) may reserve. Returns 0 when the cycle ended at a
    failure without backfill, else -1 (the result is decided by ``_cycle``)."""
    cyc, jobs = core.visit.counts[0], core.jobs
    dead, in_order = core.visit.dead, core.visit.in_order
    none = core.cfg.mode == M_NONE
    while cyc.live > 0:
        j, b = _next_head(core)
        if b < 0:
            # the first job of a class of eligible groups whose shape fits nowhere
            cyc.live -= 1
            if none:
                return 0
            _try_reserve(core, j, now)
            continue
        k = jobs[j].shape
        in_order[k] -= 1
        if dead[k]:
            continue
        cyc.live -= 1
        if _retired(core, jobs[j]):
            continue  # and with it the rest of its class
        step = _try_head(core, j, b, now)
        if step == STOP:
            return 0
        if step == RESERVE:
            _try_reserve(core, j, now)
    return -1


@njit(cache=True)
def _end_cycle(core):
    """The cycle's reservations and retirements end with it; with static keys, the order
    classes whose head changed move it in the sorted heads (kept as they were during the
    visit, which read them in order)."""
    cyc, loop, jobs = core.visit.counts[0], core.out.counts[0], core.jobs
    if cyc.n_res:
        caps, base, nodes = core.caps, core.cluster.base, core.cluster.nodes
        for g in range(len(nodes)):
            caps.covered[g] = False
            if caps.when[g] < INF:
                caps.when[g] = INF
                for t in range(nodes[g]):
                    i = base[g] + t
                    caps.whole[i] = BIG
                    caps.cpus[i] = BIG
                    caps.mem[i] = BIG
                    caps.blocked[i] = False
    core.visit.dead[:] = False
    core.visit.rec_head[:] = -1
    core.visit.in_order[:] = 0
    core.visit.first_seen[:] = False
    touched, head_before, touched_list, head = (
        core.queue.touched,
        core.queue.head_before,
        core.queue.touched_list,
        core.queue.head,
    )
    for a in range(cyc.n_touched):
        b = touched_list[a]
        touched[b] = False
        before = head_before[b]
        after = head[b]
        if before != after:
            if before >= 0:
                loop.n_sorted = _sorted_remove(core.queue.sorted, loop.n_sorted, jobs[before].key, before)
            if after >= 0:
                loop.n_sorted = _sorted_insert(core.queue.sorted, loop.n_sorted, jobs[after].key, after, b)


@njit(cache=True)
def _cycle(core, now, handle):
    """One scheduling cycle (the Python loop's ``Cycle.run`` in ``shared.sim.cycle``); returns
    whether it left every queued job unable to start on the free state (the next event may then
    skip a cycle)."""
    cyc = core.visit.counts[0]
    result = _precheck(core)  # all_blocked of this cycle, once known (0/1)
    if result < 0:
        _keys(core, now, handle)
        _list_heads(core, now)
        cyc.n_res = 0
        cyc.soft = False
        cyc.n_rec = 0
        cyc.n_touched = 0
        result = _visit(core, now)
        _end_cycle(core)
        if result < 0:
            loop = core.out.counts[0]
            result = 1 if (loop.n_queued == 0 or (core.cfg.mode != M_NONE and not cyc.soft)) else 0
    return result == 1


# ----------------------------------------------------------------------------------------------
# EASY reservations


@njit(cache=True)
def _copy_to_scratch(core, gc):
    """Copy the free state of the groups of class gc to the scratch state (marking them in
    ``caps.in_set``); returns the fewest GPUs per node among them."""
    cl, free, sc = core.cluster, core.free, core.scratch
    track = cl.track
    minG = 1 << 60
    for q in range(cl.class_ptr[gc], cl.class_ptr[gc + 1]):
        g = cl.class_groups[q]
        minG = min(minG, cl.gpus[g])
        core.caps.in_set[g] = True
        for t in range(cl.nodes[g]):
            i = cl.base[g] + t
            sc.whole[i] = free.whole[i]
            sc.cpus[i] = free.cpus[i]
            sc.mem[i] = free.mem[i]
            if track[g]:
                sc.top_share[i] = free.top_share[i]
                for b in range(cl.gpus[g]):
                    sc.gpu_milli[i, b] = free.gpu_milli[i, b]
        for v in range(free.hist.shape[1]):
            sc.hist[g, v] = free.hist[g, v]
        sc.group_whole[g] = free.group_whole[g]
    return minG


@njit(cache=True)
def _replay(core, j, minG):
    """Release the running jobs of j's groups in release order (estimated end, then the order
    they started) on the scratch state until j fits there (the fit tests of the Python replay
    first: a release can only make room where it released something). Returns (group, node
    count, position in the release order of the release that made room), or (-1, 0, ...) when
    j never fits."""
    job = core.jobs[j]
    sc, cfg = core.scratch, core.cfg
    group, nodes_used, by_est = core.out.group, core.out.nodes_used, core.by_est.job
    in_set, track, gpus_of = core.caps.in_set, core.cluster.track, core.cluster.gpus
    a_ptr, p_node = core.allocs.ptr, core.allocs.node
    need, m, c, mm = job.gpus, job.milli, job.cpus, job.mem
    single = need > 0 and (m < 1000 or need <= minG)
    node_test = single and m == 1000 and cfg.slack == 0
    share_test = need > 0 and m < 1000
    n_running = core.out.counts[0].n_running
    for s in range(n_running):
        r = by_est[s]
        g = group[r]
        if not in_set[g]:
            continue
        p0 = a_ptr[r]
        rc = nodes_used[r]
        _take(core, sc, r, 1)
        if node_test:
            ok = False
            for z in range(rc):
                i = p_node[p0 + z]
                if sc.whole[i] >= need and sc.cpus[i] >= c and sc.mem[i] >= mm:
                    ok = True
                    break
            if not ok:
                continue
        elif share_test:
            # a share fits only where a release left room on one GPU (nothing fit before)
            ok = False
            if track[g]:
                for z in range(rc):
                    i = p_node[p0 + z]
                    if sc.top_share[i] >= m and sc.cpus[i] >= c and sc.mem[i] >= mm:
                        ok = True
                        break
            if not ok:
                continue
        elif (
            need
            and m == 1000
            and _top_from_hist(sc.hist, g, _nodes_needed(need, gpus_of[g]) + cfg.slack) < need
        ):
            continue
        found_g, cnt = _place(core, job, core.caps.never, sc)
        if found_g >= 0:
            return found_g, cnt, s
    return -1, 0, n_running


@njit(cache=True)
def _reserve(core, j, now):
    """``Simulator``'s ``replay``: release the running jobs in release order (estimated end,
    then start order) on a scratch copy of j's groups until j fits (``_replay``); record the
    plan's caps and time in ``core.caps`` (nothing when j never fits). Later jobs may take on the
    plan's nodes only what leaves the plan room at its time (``cap_plan``)."""
    cl, sc, caps, buf, out = core.cluster, core.scratch, core.caps, core.buf, core.out
    gc = core.jobs[j].gclass
    minG = _copy_to_scratch(core, gc)
    g, cnt, s_fit = _replay(core, j, minG)
    for q in range(cl.class_ptr[gc], cl.class_ptr[gc + 1]):
        caps.in_set[cl.class_groups[q]] = False
    if g < 0:
        return
    when = max(core.by_est.key[s_fit], now)
    frac = buf.shared[0]
    if not cl.track[g]:
        # pins and caps read the group's state at ``when``: every running job whose estimated
        # end is up to then released (``Simulator``'s ``at_time``)
        for s in range(s_fit + 1, out.counts[0].n_running):
            if core.by_est.key[s] > when:
                break
            r = core.by_est.job[s]
            if out.group[r] == g:
                _take(core, sc, r, 1)
        _repin(core, g, cnt)
    for t in range(cl.nodes[g]):
        i = cl.base[g] + t
        caps.whole[i] = BIG
        caps.cpus[i] = BIG
        caps.mem[i] = BIG
        caps.blocked[i] = False
    for z in range(cnt):
        i = buf.node[z]
        extra = 1 if frac >= 0 and cl.track[g] and sc.gpu_milli[i, frac] == 1000 else 0
        caps.whole[i] = sc.whole[i] - buf.whole[z] - extra
        caps.cpus[i] = sc.cpus[i] - buf.cpus[z]
        caps.mem[i] = sc.mem[i] - buf.mem[z]
        caps.blocked[i] = True
    caps.when[g] = when


@njit(cache=True)
def _overlap(i, w, c, free, sc):
    """What a take of w GPUs (c CPUs when w is 0) on node i overlaps of the node's free now."""
    if w:
        return max(0, w - (sc.whole[i] - free.whole[i]))
    return max(0, c - (sc.cpus[i] - free.cpus[i]))


@njit(cache=True)
def _repin(core, g, cnt):
    """``shared.sim.pinning.repin`` on the plan ``buf.node[:cnt]`` (takes ``buf.whole``,
    ``buf.cpus``, ``buf.mem``) of group g, in place: ``core.free`` holds the free state now,
    ``core.scratch`` the state at the reservation time.

    Only a node that running jobs release something on by then can have less overlap than a plan
    node (elsewhere a take overlaps in full), so candidates are listed once, in id order, and a
    candidate with no overlap ends a search (nothing beats it, and it has the lowest id)."""
    onode, ow, oc, om = core.buf.node, core.buf.whole, core.buf.cpus, core.buf.mem
    free, sc = core.free, core.scratch
    base = core.cluster.base[g]
    n = core.cluster.nodes[g]
    span = free.whole.shape[0] + 1
    keys = np.empty(cnt, dtype=np.int64)
    worst = 0
    for z in range(cnt):
        ov = _overlap(onode[z], ow[z], oc[z], free, sc)
        worst = max(worst, ov)
        keys[z] = ov * span + onode[z]
    if worst == 0:
        return
    visit = np.argsort(-keys)  # overlap, largest first, then the highest id (keys are distinct)
    mark = np.zeros(n, dtype=np.bool_)
    for y in range(cnt):
        mark[onode[y] - base] = True
    cand = np.empty(n, dtype=np.int64)
    n_cand = 0
    for t in range(n):
        i = base + t
        if sc.whole[i] > free.whole[i] or sc.cpus[i] > free.cpus[i]:
            cand[n_cand] = i
            n_cand += 1
    for v in range(cnt):
        z = visit[v]
        ov = _overlap(onode[z], ow[z], oc[z], free, sc)
        if ov == 0:
            break
        w, c, m = ow[z], oc[z], om[z]
        best_ov = ov
        best_i = -1
        for q in range(n_cand):
            i = cand[q]
            if mark[i - base]:
                continue
            if sc.whole[i] >= w and sc.cpus[i] >= c and sc.mem[i] >= m:
                o = _overlap(i, w, c, free, sc)
                if o < best_ov:
                    best_ov = o
                    best_i = i
                    if o == 0:
                        break
        if best_i >= 0:
            mark[onode[z] - base] = False
            mark[best_i - base] = True
            onode[z] = best_i


# ----------------------------------------------------------------------------------------------
# the event loop


#: the callbacks of the runs in progress that ask Python for keys, by handle (``_call_back``)
_ASKING: dict[int, Callable[[], None]] = {}
_HANDLES = itertools.count(1)


def asking(callback: Callable[[], None]) -> int:
    """Register ``callback`` for a run of ``simulate``; the handle to pass it (``done`` after)."""
    handle = next(_HANDLES)
    _ASKING[handle] = callback
    return handle


def done(handle: int) -> None:
    """Forget the callback of a finished (or abandoned) run."""
    _ASKING.pop(handle, None)


def _ask(handle: int) -> None:
    """Called from compiled code (object mode): the run's callback writes the keys."""
    _ASKING[handle]()


@njit(cache=True)
def _entries(n):
    """Room for n (key, job, class) entries."""
    return Entries(np.empty(n), np.empty(n, np.int64), np.empty(n, np.int64))


@njit(cache=True)
def _new_core(jobs, cluster, shapes, orders, cfg, fair, free, allocs, out, ext):
    """The run's ``Core``: the records ``run`` built, and the loop's own state, allocated here
    (the idle cluster in ``free`` and its scratch copy, the reservations' caps, the placer's
    buffers, the completion heap and the estimated-end order, the queue by order class, and the
    cycle's scratch)."""
    n = len(jobs)
    cl = cluster
    ng = len(cl.nodes)
    for g in range(ng):
        for t in range(cl.nodes[g]):
            i = cl.base[g] + t
            free.whole[i] = cl.gpus[g]
            free.cpus[i] = cl.cpus[g]
            free.mem[i] = cl.mem[g]
            free.top_share[i] = 1000 if cl.gpus[g] else 0
        free.hist[g, cl.gpus[g]] = cl.nodes[g]
        free.group_whole[g] = cl.nodes[g] * cl.gpus[g]
    N = len(free.whole)
    scratch = Free(
        free.whole.copy(),
        free.cpus.copy(),
        free.mem.copy(),
        free.hist.copy(),
        free.group_whole.copy(),
        free.gpu_milli.copy(),
        free.top_share.copy(),
    )
    caps = Caps(
        np.full(N, BIG, np.int64),
        np.full(N, BIG, np.int64),
        np.full(N, BIG, np.int64),
        np.zeros(N, np.bool_),
        np.full(ng, INF),
        np.zeros(ng, np.bool_),
        np.zeros(ng, np.bool_),
        np.zeros(ng, np.bool_),
        np.zeros(ng, np.bool_),
    )
    span = max(1, cl.nodes.max())
    buf = Buffers(
        np.empty(span, np.int64),
        np.empty(span, np.int64),
        np.empty(span, np.int64),
        np.empty(span, np.int64),
        np.empty(span, np.int64),
        np.empty(span, np.int64),
        np.empty(span, np.int64),
        np.empty(span, np.int64),
        np.empty(span, np.int64),
        np.empty(span, np.int64),
        np.empty(span, np.int64),
        np.empty(span, np.int64),
        np.full(1, -1, np.int64),
        np.empty(ng + 1, np.int64),
    )
    nb = len(orders.ptr) - 1
    n_shapes = len(shapes.gpus)
    queue = Queue(
        np.zeros(n, np.bool_),
        np.zeros(n_shapes, np.int64),
        np.zeros(n_shapes, np.int64),
        orders.ptr[:-1].copy(),
        np.full(nb, -1, np.int64),
        np.empty(nb, np.int64),
        np.full(nb, -1, np.int64),
        _entries(nb + 1),
        np.zeros(nb, np.bool_),
        np.empty(nb, np.int64),
        np.empty(nb, np.int64),
    )
    n_gc = len(cl.class_ptr) - 1
    visit = Visit(
        np.zeros(1, CYCLE),
        np.zeros(n_shapes, np.bool_),
        np.zeros(n_shapes, np.bool_),
        np.zeros(n_shapes, np.int64),
        np.full(n_shapes, -1, np.int64),
        np.empty(n + 8, np.int64),
        np.empty(n + 8, np.int64),
        np.empty(n + 8, np.int64),
        np.empty(n + 8),
        np.full(n_gc, INF),
        np.full(n_gc, -1, np.int64),
        np.zeros(n_gc, np.bool_),
        _entries(n + nb + 8),
        _entries(nb + 1),
        _entries(nb + 1),
        np.zeros(ng, np.int64),
    )
    by_est = Entries(np.empty(n + 1), np.empty(n + 1, np.int64), np.empty(0, np.int64))
    ends = _entries(n + 1)
    return Core(
        jobs,
        cl,
        shapes,
        orders,
        cfg,
        fair,
        free,
        scratch,
        caps,
        buf,
        allocs,
        out,
        ends,
        by_est,
        queue,
        visit,
        ext,
    )


@njit(cache=True)
def simulate(jobs, cluster, shapes, orders, cfg, fair, free, allocs, out, ext, handle):
    """Simulate the run's jobs (``records``; built by ``run._Prepared``) into ``out``, ``allocs``
    and ``free``: at each event time (the next arrival or true end), completions, arrivals, and a
    scheduling cycle unless a shortcut of the Python loop shows it would change nothing.

    With ``cfg.kind == P_EXTERNAL``, at every cycle that orders the queue it lists the queued
    jobs in ``ext`` (their indices in arrival order, the clock, the starts and ends since the
    last call, and the running jobs sorted by estimated end) and calls back into Python (the
    callback registered under ``handle``), which writes their keys into ``jobs.ext_key``; an
    exception there ends the run and propagates (``_keys``)."""
    core = _new_core(jobs, cluster, shapes, orders, cfg, fair, free, allocs, out, ext)
    loop = out.counts[0]
    n = len(jobs)
    loop.next_job = 0
    while True:
        t_arr = jobs[loop.next_job].submit if loop.next_job < n else INF
        t_end = core.ends.key[0] if loop.n_ends else INF
        now = t_arr if t_arr < t_end else t_end
        if now == INF:
            break
        released = _complete(core, now)
        first_new = loop.next_job
        _arrive(core, now)
        if loop.n_queued == 1 and loop.next_job - first_new == 1:
            _lone_arrival(core, first_new, now, released)
        elif loop.n_queued and (released or not loop.all_blocked or _arrival_fits(core, first_new)):
            # (with nothing freed and every queued job failing on the free state at the last
            # cycle, only a new arrival can start)
            loop.cycles += 1
            loop.all_blocked = _cycle(core, now, handle)
        k = loop.n_timeline
        out.timeline_t[k] = now
        out.timeline_busy[k] = loop.busy_milli / 1000
        out.timeline_queued[k] = loop.n_queued
        loop.n_timeline = k + 1
        if loop.n_ends == 0 and loop.next_job >= n and loop.n_queued:
            loop.error = loop.n_queued
            break
