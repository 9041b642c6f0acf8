# mypy: disable-error-code="misc,no-untyped-def,no-untyped-call,no-any-return"
"""The simulator's event loop compiled with numba, over flat numpy arrays.

Why: the Python simulator spends its time in interpreter overhead spread over a dozen small
functions (about 80 us per scheduling cycle on Philly); the same loop compiled runs the whole
trace in a fraction of that. It mirrors ``Simulator.run`` decision for decision (the same
starts, nodes, reservations and timeline; ``bench/sim_equivalence.py`` and
``tests/sim/test_compiled.py`` compare the two), including the points where the Python code
advances the multifactor policy's decayed usage, whose floating-point value depends on them.

Layout (built by ``shared.sim.compiled.run``):
- jobs: ``jf`` float64 columns (submit, runtime, estimate, policy columns), ``ji`` int64 columns
  (GPUs, milli-GPUs, CPUs, memory, shape, class of eligible groups, order class, user);
- node groups: ``gbase``/``gn``/``gG`` (first node, nodes, GPUs per node), nodes numbered
  globally; the eligible groups of a class as CSR (``cg_ptr``, ``cg_idx``, in the binding's order,
  which decides ties between groups);
- state: free whole GPUs / milli-CPUs / MiB per node, a free-GPU histogram per group, and in
  groups that track GPU shares (``track``) the free milli-GPUs of every physical GPU.

``shared.sim.compiled.run.unsupported`` says which runs go to the Python simulator instead.

The baseline policies' keys are computed here; a policy that orders the queue in Python (a
learned one, ``Policy.external_compiled``) is asked for them at each cycle through a callback in
object mode (``simulate``, ``run.run_external``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
from numba import njit, objmode

from shared.pairwise_sum import pairwise
from shared.scheduling.running import running_insert, running_remove

INF = math.inf
BIG = 1 << 60

# job float columns
# (F_EXT: the key an external policy gave the job in the current cycle)
F_SUBMIT, F_RUNTIME, F_EST, F_KEY, F_EST1, F_WIDTH, F_DENOM, F_MFSTATIC, F_DEMAND, F_EXT = range(10)
# job int columns
I_GPUS, I_MILLI, I_CPU, I_MEM, I_SHAPE, I_GCLASS, I_BUCKET, I_USER = range(8)
# policy kinds
# (P_EXTERNAL: keys from Python at every cycle, the loop calling back to ask for them)
P_STATIC, P_WFP3, P_UNICEP, P_MULTIFACTOR, P_EXTERNAL = range(5)
# backfill modes
M_EASY, M_GREEDY, M_NONE = range(3)


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
    for k in range(G, 0, -1):
        if hist[g, k]:
            return k
    return 0


@njit(cache=True)
def _nodes_needed(gpus, G):
    if gpus <= 0:
        return 1
    if G > 0:
        return -(-gpus // G)
    return 10**9


# ----------------------------------------------------------------------------------------------
# placement (``shared.scheduling.placement``: first-fit and best-fit over whole GPUs and CPU-only jobs)


# ----------------------------------------------------------------------------------------------
# cluster state: S = (W, C, M, hist, freew, GF, MF) -- free whole GPUs, milli-CPUs and MiB per
# node, the free-GPU histogram and free whole GPUs per group, free milli-GPUs per physical GPU
# and the largest of them per node (the last two only in groups that track shares)
# geo = (gbase, gn, gG, track); caps = (capw, capc, capm, capblk) of this cycle's reservations


@njit(cache=True)
def _free_mask(GF, i, G, w):
    """The first ``w`` fully free physical GPUs of node i, as a bit mask (``Placer._gpu_ids``)."""
    mask = 0
    for b in range(G):
        if w == 0:
            break
        if GF[i, b] == 1000:
            mask |= 1 << b
            w -= 1
    return mask


@njit(cache=True)
def _refresh(g, i, G, S):
    """Node i's free whole GPUs and largest free share from its per-GPU row (``_refresh_node``)."""
    W, hist, freew, GF, MF = S[0], S[3], S[4], S[5], S[6]
    count = 0
    top = 0
    for b in range(G):
        v = GF[i, b]
        if v == 1000:
            count += 1
        if v > top:
            top = v
    old = W[i]
    if old != count:
        hist[g, old] -= 1
        hist[g, count] += 1
        freew[g] += count - old
        W[i] = count
    MF[i] = top if G else 0


@njit(cache=True)
def _take(g, cnt, nodes, ws, cs, ms, masks, frac, milli, geo, S, sign):
    """Take (sign -1) or give back (sign +1) an allocation's resources (``GroupState.take``/``give``)."""
    W, C, M, hist, freew, GF = S[0], S[1], S[2], S[3], S[4], S[5]
    G = geo[2][g]
    tracked = geo[3][g]
    for z in range(cnt):
        i = nodes[z]
        C[i] += sign * cs[z]
        M[i] += sign * ms[z]
        if not tracked:
            w = ws[z]
            if w:
                old = W[i]
                new = old + sign * w
                hist[g, old] -= 1
                hist[g, new] += 1
                W[i] = new
                freew[g] += sign * w
            continue
        mask = masks[z]
        if mask:
            for b in range(G):
                if (mask >> b) & 1:
                    GF[i, b] = 0 if sign < 0 else 1000
        if frac >= 0:
            GF[i, frac] += sign * milli
        _refresh(g, i, G, S)


@njit(cache=True)
def _gang(g, gpus, c, mm, capped, best, slack, geo, S, caps, buf):
    """``Placer._gang`` in group g into ``buf``'s t-arrays; returns the node count (0: no fit)."""
    gbase, gn, gG, track = geo
    W, C, M, hist, GF = S[0], S[1], S[2], S[3], S[5]
    capw, capc, capm = caps[0], caps[1], caps[2]
    usable, chosen, tn, tw, tc, tm, tmask = buf[0], buf[1], buf[2], buf[3], buf[4], buf[5], buf[6]
    G = gG[g]
    n = gn[g]
    base = gbase[g]
    need = -(-gpus // G) if G > 0 else n + 1
    max_nodes = min(need + slack, n)
    if need > max_nodes or _top_from_hist(hist, g, max_nodes) < gpus:
        return 0
    for t in range(n):
        i = base + t
        w = W[i]
        cc = C[i]
        mv = M[i]
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
    for z in range(cnt):
        i = tn[z] + base
        tn[z] = i
        tc[z] = -(-c * tw[z] // gpus)
        tm[z] = -(-mm * tw[z] // gpus)
        tmask[z] = _free_mask(GF, i, G, tw[z]) if track[g] else 0
    return cnt


@njit(cache=True)
def _set_out(buf, z, i, w, c, mm, mask):
    buf[7][z] = i
    buf[8][z] = w
    buf[9][z] = c
    buf[10][z] = mm
    buf[11][z] = mask


@njit(cache=True)
def _fractional(milli, c, mm, cls, cg_ptr, cg_idx, capflag, best, geo, S, caps, buf):
    """``Placer._fractional``: a share of one physical GPU; (group, 1) with the node in ``buf``
    and the GPU in ``buf[12][0]``, or (-1, 0)."""
    gbase, gn, gG = geo[0], geo[1], geo[2]
    W, C, M, GF, MF = S[0], S[1], S[2], S[5], S[6]
    capc, capm, capblk = caps[1], caps[2], caps[3]
    bg = -1
    bestv = 0
    bi = -1
    bgpu = -1
    if not best:
        for q in range(cg_ptr[cls], cg_ptr[cls + 1]):
            g = cg_idx[q]
            cap = capflag[g]
            for t in range(gn[g]):
                i = gbase[g] + t
                cc = C[i]
                mv = M[i]
                if cap:
                    if capblk[i]:
                        continue
                    cc = min(cc, capc[i])
                    mv = min(mv, capm[i])
                if MF[i] >= milli and cc >= c and mv >= mm:
                    for b in range(gG[g]):
                        if GF[i, b] >= milli:
                            _set_out(buf, 0, i, 0, c, mm, 0)
                            buf[12][0] = b
                            return g, 1
        return -1, 0
    n_later = 0
    later = buf[13]
    for q in range(cg_ptr[cls], cg_ptr[cls + 1]):
        g = cg_idx[q]
        cap = capflag[g]
        G = gG[g]
        # the partly used GPU with the least free that holds the share (lowest node, GPU on ties)
        hv = 1 << 60
        hi_ = -1
        hg = -1
        for t in range(gn[g]):
            i = gbase[g] + t
            if C[i] < c or M[i] < mm or (cap and capblk[i]):
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
            g = cg_idx[later[z]]
            cap = capflag[g]
            first = -1
            for t in range(gn[g]):
                i = gbase[g] + t
                if W[i] >= 1 and C[i] >= c and M[i] >= mm and not (cap and capblk[i]):
                    first = i
                    break
            if first >= 0 and (bg < 0 or 1000 - milli < bestv):
                for b in range(gG[g]):
                    if GF[first, b] == 1000:
                        bg = g
                        bestv = 1000 - milli
                        bi = first
                        bgpu = b
                        break
    if bg < 0:
        return -1, 0
    _set_out(buf, 0, bi, 0, c, mm, 0)
    buf[12][0] = bgpu
    return bg, 1


@njit(cache=True)
def _place(gpus, milli, c, mm, cls, cg_ptr, cg_idx, capflag, best, slack, geo, S, caps, buf):
    """``Placer.place``: the group of the allocation written to ``buf``'s out arrays (nodes,
    whole GPUs, CPUs, memory, GPU masks; the shared GPU in ``buf[12][0]``, -1 if none) and its
    node count, or (-1, 0). ``capflag[g]``: group g's reservation caps apply to this job."""
    gbase, gn, gG, track = geo
    W, C, M, hist, freew, GF = S[0], S[1], S[2], S[3], S[4], S[5]
    capw, capc, capm = caps[0], caps[1], caps[2]
    tn, tw, tc, tm, tmask = buf[2], buf[3], buf[4], buf[5], buf[6]
    buf[12][0] = -1
    bg = -1
    bcnt = 0
    bs1 = 0
    bs2 = 0
    if gpus == 0:
        bestv = 0
        bi = -1
        for q in range(cg_ptr[cls], cg_ptr[cls + 1]):
            g = cg_idx[q]
            cap = capflag[g]
            base = gbase[g]
            for t in range(gn[g]):
                i = base + t
                cc = C[i]
                mv = M[i]
                if cap:
                    cc = min(cc, capc[i])
                    mv = min(mv, capm[i])
                if cc >= c and mv >= mm:
                    if not best:
                        _set_out(buf, 0, i, 0, c, mm, 0)
                        return g, 1
                    if bg < 0 or cc < bestv:
                        bg = g
                        bestv = cc
                        bi = i
        if bg < 0:
            return -1, 0
        _set_out(buf, 0, bi, 0, c, mm, 0)
        return bg, 1
    if milli < 1000:
        return _fractional(milli, c, mm, cls, cg_ptr, cg_idx, capflag, best, geo, S, caps, buf)
    for q in range(cg_ptr[cls], cg_ptr[cls + 1]):
        g = cg_idx[q]
        cap = capflag[g]
        G = gG[g]
        base = gbase[g]
        if gpus <= G and _max_whole(hist, g, G) >= gpus:
            pick = -1
            pw = 0
            for t in range(gn[g]):
                i = base + t
                w = W[i]
                cc = C[i]
                mv = M[i]
                if cap:
                    w = min(w, capw[i])
                    cc = min(cc, capc[i])
                    mv = min(mv, capm[i])
                if w >= gpus and cc >= c and mv >= mm:
                    if not best:
                        _set_out(buf, 0, i, gpus, c, mm, _free_mask(GF, i, G, gpus) if track[g] else 0)
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
                    _set_out(buf, 0, pick, gpus, c, mm, _free_mask(GF, pick, G, gpus) if track[g] else 0)
                continue
        if (gpus > G or (slack > 0 and gpus >= 2)) and freew[g] >= gpus:
            cnt = _gang(g, gpus, c, mm, cap, best, slack, geo, S, caps, buf)
            if cnt and (not best or bg < 0 or cnt < bs1 or (cnt == bs1 and bs2 > 0)):
                bg = g
                bcnt = cnt
                bs1 = cnt
                bs2 = 0
                for z in range(cnt):
                    _set_out(buf, z, tn[z], tw[z], tc[z], tm[z], tmask[z])
                if not best:
                    return g, cnt
    return bg, bcnt


@njit(cache=True)
def _share_fits(milli, cls, cg_ptr, cg_idx, freew, gpart):
    """``placement.share_fits``: some GPU of the groups has ``milli`` free (no CPUs, memory,
    caps): a whole free GPU, or ``gpart[g]``, the largest share free on a partly used GPU."""
    for q in range(cg_ptr[cls], cg_ptr[cls + 1]):
        g = cg_idx[q]
        if freew[g] > 0 or gpart[g] >= milli:
            return True
    return False


@njit(cache=True)
def _largest_partial(g, geo, GF, gpart):
    """Group g's largest free share on a partly used GPU (0: none) into ``gpart[g]``."""
    top = 0
    for t in range(geo[1][g]):
        i = geo[0][g] + t
        for b in range(geo[2][g]):
            v = GF[i, b]
            if 0 < v < 1000 and v > top:
                top = v
    gpart[g] = top


# ----------------------------------------------------------------------------------------------
# small heaps on (float key, int job) pairs


@njit(cache=True)
def _less(ka, ja, kb, jb):
    return ka < kb or (ka == kb and ja < jb)


@njit(cache=True)
def _hpush(hk, hj, hb, n, k, j, b):
    p = n
    hk[p] = k
    hj[p] = j
    hb[p] = b
    while p > 0:
        u = (p - 1) >> 1
        if _less(hk[p], hj[p], hk[u], hj[u]):
            hk[p], hk[u] = hk[u], hk[p]
            hj[p], hj[u] = hj[u], hj[p]
            hb[p], hb[u] = hb[u], hb[p]
            p = u
        else:
            break
    return n + 1


@njit(cache=True)
def _hsift(hk, hj, hb, n, p):
    while True:
        a = 2 * p + 1
        if a >= n:
            return
        b = a + 1
        m = a
        if b < n and _less(hk[b], hj[b], hk[a], hj[a]):
            m = b
        if _less(hk[m], hj[m], hk[p], hj[p]):
            hk[p], hk[m] = hk[m], hk[p]
            hj[p], hj[m] = hj[m], hj[p]
            hb[p], hb[m] = hb[m], hb[p]
            p = m
        else:
            return


@njit(cache=True)
def _hpop(hk, hj, hb, n):
    """Remove the smallest entry (left at index n - 1 on return); returns the new size."""
    n -= 1
    hk[0], hk[n] = hk[n], hk[0]
    hj[0], hj[n] = hj[n], hj[0]
    hb[0], hb[n] = hb[n], hb[0]
    _hsift(hk, hj, hb, n, 0)
    return n


@njit(cache=True)
def _heapify(hk, hj, hb, n):
    for p in range(n // 2 - 1, -1, -1):
        _hsift(hk, hj, hb, n, p)


@njit(cache=True)
def _msift(sk, sj, sb, n, p):
    """Sift down in a max-heap on (key, job)."""
    while True:
        a = 2 * p + 1
        if a >= n:
            return
        m = a
        if a + 1 < n and _less(sk[a], sj[a], sk[a + 1], sj[a + 1]):
            m = a + 1
        if _less(sk[p], sj[p], sk[m], sj[m]):
            sk[p], sk[m] = sk[m], sk[p]
            sj[p], sj[m] = sj[m], sj[p]
            sb[p], sb[m] = sb[m], sb[p]
            p = m
        else:
            return


@njit(cache=True)
def _list_more(ck, cj, cb, n_all, bound, want, hk, hj, hb, hn, sk, sj, sb):
    """Push onto the visit heap the ``want`` smallest (key, job) entries of ``ck/cj/cb`` above
    ``bound`` (bound[2] == 0: none listed yet) and move ``bound`` to the largest of them; returns
    (the new heap size, entries pushed). Why: with thousands of class heads and clock-dependent
    keys a cycle usually visits a few of them (a committed head that does not fit), and
    heapifying them all every cycle cost more than the Python loop's chunked listing."""
    m = 0
    for e in range(n_all):
        k = ck[e]
        j = cj[e]
        if bound[2] != 0 and not _less(bound[0], bound[1], k, j):
            continue
        if m < want:
            # insert into the max-heap of the selection
            p = m
            sk[p] = k
            sj[p] = j
            sb[p] = cb[e]
            m += 1
            while p > 0:
                u = (p - 1) >> 1
                if _less(sk[u], sj[u], sk[p], sj[p]):
                    sk[p], sk[u] = sk[u], sk[p]
                    sj[p], sj[u] = sj[u], sj[p]
                    sb[p], sb[u] = sb[u], sb[p]
                    p = u
                else:
                    break
        elif _less(k, j, sk[0], sj[0]):
            sk[0] = k
            sj[0] = j
            sb[0] = cb[e]
            _msift(sk, sj, sb, m, 0)
    if m:
        bound[0] = sk[0]
        bound[1] = sj[0]
        bound[2] = 1
    for q in range(m):
        hn = _hpush(hk, hj, hb, hn, sk[q], sj[q], sb[q])
    return hn, m


# ----------------------------------------------------------------------------------------------
# the multifactor policy's usage (``SlurmMultifactor._advance`` and its fair-share factor)


@njit(cache=True)
def _advance(mf, usage, running, now):
    """mf: [last, lambda, version, share, fairshare weight, age weight / max age, max age, 2.0]."""
    dt = now - mf[0]
    if dt > 0:
        lam = mf[1]
        decay = math.exp(-lam * dt)
        for u in range(len(usage)):
            usage[u] = usage[u] * decay + running[u] * (1.0 - decay) / lam
        mf[0] = now
        mf[2] += 1.0


@njit(cache=True)
def _fairshare(mf, usage, fsw):
    """``w.fairshare x 2^(-U/S)`` per user into ``fsw`` (2.0 read from ``mf`` so that LLVM keeps
    the ``pow`` call that Python's ``math.pow`` makes instead of rewriting it as ``exp2``)."""
    total = pairwise(usage, 0, len(usage))
    wfs = mf[4]
    if total <= 0:
        for u in range(len(usage)):
            fsw[u] = wfs * 1.0
        return
    two = mf[7]
    share = mf[3]
    for u in range(len(usage)):
        fsw[u] = wfs * math.pow(two, -(usage[u] / total) / share)


@njit(cache=True)
def _key(j, now, kind, jf, ji, mf, fsw):
    if kind == P_STATIC:
        return jf[j, F_KEY]
    if kind == P_EXTERNAL:
        return jf[j, F_EXT]
    w = max(now - jf[j, F_SUBMIT], 0.0)
    if kind == P_WFP3:
        r = w / jf[j, F_EST1]
        return -(r * r * r) * jf[j, F_WIDTH]
    if kind == P_UNICEP:
        return -w / jf[j, F_DENOM]
    age = min(w, mf[6]) * mf[5]
    return -math.floor(age + jf[j, F_MFSTATIC] + fsw[ji[j, I_USER]])


# ----------------------------------------------------------------------------------------------
# the event loop

# ----------------------------------------------------------------------------------------------
# the event loop


@njit(cache=True)
def _sorted_insert(sk, sj, sb, ns, k, j, b):
    """Insert (k, j, b) into the arrays sorted by (key, job); returns the new length."""
    lo_ = 0
    hi_ = ns
    while lo_ < hi_:
        mid = (lo_ + hi_) >> 1
        if _less(sk[mid], sj[mid], k, j):
            lo_ = mid + 1
        else:
            hi_ = mid
    for s in range(ns, lo_, -1):
        sk[s] = sk[s - 1]
        sj[s] = sj[s - 1]
        sb[s] = sb[s - 1]
    sk[lo_] = k
    sj[lo_] = j
    sb[lo_] = b
    return ns + 1


@njit(cache=True)
def _sorted_remove(sk, sj, sb, ns, k, j):
    """Remove (k, j) from the arrays sorted by (key, job); returns the new length."""
    lo_ = 0
    hi_ = ns
    while lo_ < hi_:
        mid = (lo_ + hi_) >> 1
        if _less(sk[mid], sj[mid], k, j):
            lo_ = mid + 1
        else:
            hi_ = mid
    for s in range(lo_, ns - 1):
        sk[s] = sk[s + 1]
        sj[s] = sj[s + 1]
        sb[s] = sb[s + 1]
    return ns - 1


@njit(cache=True)
def _start(j, g, cnt, now, i_next, jf, ji, geo, S, buf, st, run, pool, bk):
    """``start_job``: take the allocation in ``buf`` for job j, record it, update the queue, the
    completion heap, the estimated-end order and the order class's head. Returns the busy
    milli-GPUs it adds."""
    start, end, nodes_used, job_group, job_frac, queued, shape_count = st
    ek, ej, eb, rk, rj, ctr = run
    a_ptr, p_node, p_w, p_c, p_m, p_mask = pool
    b_ptr, b_jobs, bpos, bhead, act, act_at = bk
    onode, ow, oc, om, omask = buf[7], buf[8], buf[9], buf[10], buf[11]
    frac = buf[12][0]
    milli = ji[j, I_MILLI]
    p0 = a_ptr[j]
    busy = 0
    for z in range(cnt):
        p_node[p0 + z] = onode[z]
        p_w[p0 + z] = ow[z]
        p_c[p0 + z] = oc[z]
        p_m[p0 + z] = om[z]
        p_mask[p0 + z] = omask[z]
        busy += ow[z] * 1000
    if frac >= 0:
        busy += milli
    _take(g, cnt, onode, ow, oc, om, omask, frac, milli, geo, S, -1)
    queued[j] = False
    start[j] = now
    end[j] = now + jf[j, F_RUNTIME]
    nodes_used[j] = cnt
    job_group[j] = g
    job_frac[j] = frac
    ctr[0] = _hpush(ek, ej, eb, ctr[0], end[j], j, 0)
    e_j = now + jf[j, F_EST]
    rn = ctr[1]
    s = rn
    while s > 0 and _less(e_j, j, rk[s - 1], rj[s - 1]):
        rk[s] = rk[s - 1]
        rj[s] = rj[s - 1]
        s -= 1
    rk[s] = e_j
    rj[s] = j
    ctr[1] = rn + 1
    shape_count[ji[j, I_SHAPE]] -= 1
    b = ji[j, I_BUCKET]
    if bhead[b] == j:
        h = bpos[b] + 1
        while h < b_ptr[b + 1] and b_jobs[h] < i_next and not queued[b_jobs[h]]:
            h += 1
        bpos[b] = h
        if h < b_ptr[b + 1] and b_jobs[h] < i_next:
            bhead[b] = b_jobs[h]
        else:
            bhead[b] = -1
            n_act = ctr[2]
            last = act[n_act - 1]
            act[act_at[b]] = last
            act_at[last] = act_at[b]
            act_at[b] = -1
            ctr[2] = n_act - 1
    return busy


@njit(cache=True)
def _note_start(j, g, now, jf, ext, n_ev):
    """For an external policy: log the start of job j in group g (the events since the last
    call) and insert it into the running jobs; returns the new event count."""
    _, xs, _, ev_j, ev_t, xr_job, xr_group, xr_end = ext
    ev_j[n_ev] = j
    ev_t[n_ev] = now
    running_insert(xr_job, xr_group, xr_end, xs[2], j + xs[3], g, now + jf[j, F_EST])
    xs[2] += 1
    return n_ev + 1


#: the callbacks of the runs in progress that ask Python for keys, by handle (``ask``)
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
def _call_back(handle):
    """``_ask(handle)`` in object mode, in a function of its own. Why not inline in ``simulate``:
    numba hands an object-mode block its lifted code as a pickle, copied into a new bytes object
    at every entry, and the pickle of a block lifted from ``simulate`` is about 0.5 MB (the big
    function's bytecode and constants), 10-30 us a call: most of a training decision's time in
    the loop. Lifted from this function it is a few kB."""
    with objmode():
        _ask(handle)


@njit(cache=True)
def simulate(
    jf,
    ji,
    lo,
    hi,
    cg_ptr,
    cg_idx,
    gbase,
    gn,
    gG,
    gcpu,
    gmem,
    track,
    b_ptr,
    b_jobs,
    b_of_pos,
    shape_gpus,
    shape_milli,
    shape_gclass,
    shape_min_cpu,
    shape_min_mem,
    n_shapes,
    kind,
    mode,
    best,
    slack,
    max_res,
    mf,
    n_users,
    pool_ptr,
    head_chunk,
    out,
    ext,
    handle,
):
    """Simulate jobs lo..hi-1 (see the module docstring) into ``out`` (``run._Prepared``).

    With ``kind == P_EXTERNAL``, at every cycle that orders the queue it lists the queued jobs
    in ``ext`` (their indices in arrival order, the clock, the starts and ends since the last
    call, and the running jobs sorted by estimated end) and calls back into Python (``_ask``,
    the callback registered under ``handle``), which writes their keys into ``jf[:, F_EXT]``;
    an exception there ends the run and propagates. Where the caller gave static keys for it
    (``xs[4]``: in ``jf[:, F_KEY]``), a cycle before ``xf[1]`` or with one queued job takes
    those instead of asking (``_call_back``: object mode costs about a microsecond per call; a
    generator instead doubled the compile time of this function)."""
    start, end, nodes_used, job_group, job_frac, p_node, p_w, p_mask, tl_t, tl_busy, tl_q, stats, S_out = out
    xq, xs, xf, ev_j, ev_t, xr_job, xr_group, xr_end = ext
    external = kind == P_EXTERNAL
    n = jf.shape[0]
    ng = len(gn)
    N = gbase[ng - 1] + gn[ng - 1]
    Gmax = 0
    for g in range(ng):
        Gmax = max(Gmax, gG[g])
    W, C, M, MF = S_out
    hist = np.zeros((ng, Gmax + 1), np.int64)
    freew = np.zeros(ng, np.int64)
    GF = np.full((N, max(Gmax, 1)), 1000, np.int64)
    for g in range(ng):
        for t in range(gn[g]):
            i = gbase[g] + t
            W[i] = gG[g]
            C[i] = gcpu[g]
            M[i] = gmem[g]
            MF[i] = 1000 if gG[g] else 0
        hist[g, gG[g]] = gn[g]
        freew[g] = gn[g] * gG[g]
    geo = (gbase, gn, gG, track)
    S = (W, C, M, hist, freew, GF, MF)
    SS = (W.copy(), C.copy(), M.copy(), hist.copy(), freew.copy(), GF.copy(), MF.copy())
    caps = (
        np.full(N, BIG, np.int64),
        np.full(N, BIG, np.int64),
        np.full(N, BIG, np.int64),
        np.zeros(N, np.bool_),
    )
    capw, capc, capm, capblk = caps
    res_when = np.full(ng, INF)
    covered = np.zeros(ng, np.bool_)
    capflag = np.zeros(ng, np.bool_)
    noflag = np.zeros(ng, np.bool_)
    ingset = np.zeros(ng, np.bool_)
    gpart = np.zeros(ng, np.int64)
    maxspan = 1
    for g in range(ng):
        maxspan = max(maxspan, gn[g])
    buf = (
        np.empty(maxspan, np.int64),  # 0 usable
        np.empty(maxspan, np.int64),  # 1 order of a gang walk
        np.empty(maxspan, np.int64),  # 2-6 a gang: nodes, GPUs, CPUs, memory, GPU masks
        np.empty(maxspan, np.int64),
        np.empty(maxspan, np.int64),
        np.empty(maxspan, np.int64),
        np.empty(maxspan, np.int64),
        np.empty(maxspan, np.int64),  # 7-11 the placement: nodes, GPUs, CPUs, memory, GPU masks
        np.empty(maxspan, np.int64),
        np.empty(maxspan, np.int64),
        np.empty(maxspan, np.int64),
        np.empty(maxspan, np.int64),
        np.full(1, -1, np.int64),  # 12 the shared GPU of a fractional placement
        np.empty(ng + 1, np.int64),  # 13 groups left for a whole free GPU (fractional)
    )
    onode, ow, oc, om = buf[7], buf[8], buf[9], buf[10]

    queued = np.zeros(n, np.bool_)
    shape_count = np.zeros(n_shapes, np.int64)
    st = (start, end, nodes_used, job_group, job_frac, queued, shape_count)
    a_ptr = pool_ptr
    pool_len = pool_ptr[n]
    pool = (a_ptr, p_node, p_w, np.empty(pool_len, np.int64), np.empty(pool_len, np.int64), p_mask)
    p_c, p_m = pool[3], pool[4]
    # completions: a heap on (true end, job); running jobs sorted by (estimated end, job);
    # ctr = [completions, running, classes with a head]
    run = (
        np.empty(n + 1),
        np.empty(n + 1, np.int64),
        np.empty(n + 1, np.int64),
        np.empty(n + 1),
        np.empty(n + 1, np.int64),
        np.zeros(3, np.int64),
    )
    ek, ej, eb, rk, rj, ctr = run

    # order classes: per class its jobs in arrival order (b_jobs[b_ptr[b]:b_ptr[b + 1]]),
    # the position of its first queued job and the head itself (-1: none queued)
    nb = len(b_ptr) - 1
    bpos = b_ptr[:-1].copy()
    bhead = np.full(nb, -1, np.int64)
    act = np.empty(nb, np.int64)  # classes with a head
    act_at = np.full(nb, -1, np.int64)
    bk = (b_ptr, b_jobs, bpos, bhead, act, act_at)
    # static keys: the heads kept sorted by (key, job) between cycles (the Python loop's
    # ``Heads``), so that a cycle reads them in order instead of keying and heapifying them all;
    # starts in a cycle update them when it ends (touched classes and their heads before it)
    static = kind == P_STATIC
    sk = np.empty(nb + 1)
    sj = np.empty(nb + 1, np.int64)
    sb = np.empty(nb + 1, np.int64)
    ns = 0
    shape_heads = np.zeros(n_shapes, np.int64)  # classes with a head, per shape
    touched_b = np.zeros(nb, np.bool_)
    orig_head = np.empty(nb, np.int64)
    touched_list = np.empty(nb, np.int64)
    first_seen = np.zeros(len(cg_ptr) - 1, np.bool_)

    # per-cycle scratch
    blocked = np.zeros(n_shapes, np.bool_)
    dead = np.zeros(n_shapes, np.bool_)
    in_order = np.zeros(n_shapes, np.int64)  # entries of the order per shape
    rec_head = np.full(n_shapes, -1, np.int64)
    rec_next = np.empty(n + 8, np.int64)
    rec_c = np.empty(n + 8, np.int64)
    rec_m = np.empty(n + 8, np.int64)
    rec_t = np.empty(n + 8)
    gfirst_k = np.full(len(cg_ptr) - 1, INF)
    gfirst_j = np.full(len(cg_ptr) - 1, -1, np.int64)
    hk = np.empty(n + nb + 8)
    hj = np.empty(n + nb + 8, np.int64)
    hb = np.empty(n + nb + 8, np.int64)
    # clock-dependent keys: every head keyed (ck/cj/cb), put on the visit heap in chunks (bound:
    # the largest (key, job) listed so far and whether any is); selk/selj/selb select a chunk
    ck = np.empty(nb + 1)
    cj = np.empty(nb + 1, np.int64)
    cb = np.empty(nb + 1, np.int64)
    bound = np.zeros(3)
    selk = np.empty(nb + 1)
    selj = np.empty(nb + 1, np.int64)
    selb = np.empty(nb + 1, np.int64)

    usage = np.zeros(n_users)
    running = np.zeros(n_users)
    fsw = np.zeros(n_users)
    fs_version = -1.0

    n_tl = 0
    n_ev = 0  # starts and ends since the last call (an external policy tracks running jobs)
    busy_milli = 0
    cycles = 0
    nq = 0
    all_blocked = False
    error = 0
    i = lo

    while True:
        t_arr = jf[i, F_SUBMIT] if i < hi else INF
        t_end = ek[0] if ctr[0] else INF
        now = t_arr if t_arr < t_end else t_end
        if now == INF:
            break
        released = False
        while ctr[0] and ek[0] <= now:
            ctr[0] = _hpop(ek, ej, eb, ctr[0])
            r = ej[ctr[0]]
            g = job_group[r]
            p0 = a_ptr[r]
            cnt = nodes_used[r]
            frac = job_frac[r]
            _take(
                g,
                cnt,
                p_node[p0:],
                p_w[p0:],
                p_c[p0:],
                p_m[p0:],
                p_mask[p0:],
                frac,
                ji[r, I_MILLI],
                geo,
                S,
                1,
            )
            for z in range(cnt):
                busy_milli -= p_w[p0 + z] * 1000
            if frac >= 0:
                busy_milli -= ji[r, I_MILLI]
            # drop r from the estimated-end order
            e_r = start[r] + jf[r, F_EST]
            rn = ctr[1]
            lo_s = 0
            hi_s = rn
            while lo_s < hi_s:
                mid = (lo_s + hi_s) >> 1
                if _less(rk[mid], rj[mid], e_r, r):
                    lo_s = mid + 1
                else:
                    hi_s = mid
            for s in range(lo_s, rn - 1):
                rk[s] = rk[s + 1]
                rj[s] = rj[s + 1]
            ctr[1] = rn - 1
            released = True
            if external:
                ev_j[n_ev] = -r - 1
                ev_t[n_ev] = now
                n_ev += 1
                running_remove(xr_job, xr_group, xr_end, xs[2], r + xs[3], e_r)
                xs[2] -= 1
            if kind == P_MULTIFACTOR:
                _advance(mf, usage, running, now)
                running[ji[r, I_USER]] -= jf[r, F_DEMAND]
        first_new = i
        while i < hi and jf[i, F_SUBMIT] <= now:
            queued[i] = True
            nq += 1
            shape_count[ji[i, I_SHAPE]] += 1
            b = ji[i, I_BUCKET]
            if bhead[b] < 0:
                bhead[b] = i
                act[ctr[2]] = b
                act_at[b] = ctr[2]
                ctr[2] += 1
                shape_heads[ji[i, I_SHAPE]] += 1
                if static:
                    ns = _sorted_insert(sk, sj, sb, ns, jf[i, F_KEY], i, b)
            i += 1

        do_cycle = False
        if nq == 1 and i - first_new == 1:
            # the queue is one new arrival: a cycle would try it alone, with no reservation
            j = first_new
            g, cnt = _place(
                ji[j, I_GPUS],
                ji[j, I_MILLI],
                ji[j, I_CPU],
                ji[j, I_MEM],
                ji[j, I_GCLASS],
                cg_ptr,
                cg_idx,
                noflag,
                best,
                slack,
                geo,
                S,
                caps,
                buf,
            )
            if g >= 0:
                b = ji[j, I_BUCKET]
                before = bhead[b]
                busy_milli += _start(j, g, cnt, now, i, jf, ji, geo, S, buf, st, run, pool, bk)
                nq -= 1
                after = bhead[b]
                if before >= 0 and after < 0:
                    shape_heads[ji[j, I_SHAPE]] -= 1
                if static and before != after:
                    if before >= 0:
                        ns = _sorted_remove(sk, sj, sb, ns, jf[before, F_KEY], before)
                    if after >= 0:
                        ns = _sorted_insert(sk, sj, sb, ns, jf[after, F_KEY], after, b)
                if external:
                    n_ev = _note_start(j, g, now, jf, ext, n_ev)
                if kind == P_MULTIFACTOR:
                    _advance(mf, usage, running, now)
                    running[ji[j, I_USER]] += jf[j, F_DEMAND]
                all_blocked = True
                cycles += 1
            elif released or not all_blocked:
                all_blocked = mode != M_NONE
                cycles += 1
        elif nq:
            do_cycle = released or not all_blocked
            if not do_cycle:
                # nothing was freed and every queued job failed on the free state: only a new
                # arrival can start
                for k in range(first_new, i):
                    g, cnt = _place(
                        ji[k, I_GPUS],
                        ji[k, I_MILLI],
                        ji[k, I_CPU],
                        ji[k, I_MEM],
                        ji[k, I_GCLASS],
                        cg_ptr,
                        cg_idx,
                        noflag,
                        best,
                        slack,
                        geo,
                        S,
                        caps,
                        buf,
                    )
                    if g >= 0:
                        do_cycle = True
                        break
        if do_cycle:
            cycles += 1
            result = -1  # all_blocked of this cycle, once known (0/1)
            # shapes whose GPUs fit nowhere (a long queue only, as the Python pre-check)
            any_blocked = False
            if nq > 32:
                n_bl = 0
                parts_known = False
                for k in range(n_shapes):
                    blocked[k] = False
                    if shape_count[k] == 0:
                        continue
                    gp = shape_gpus[k]
                    gc = shape_gclass[k]
                    fits = True
                    if gp > 0 and shape_milli[k] < 1000:
                        if not parts_known:
                            # the state does not change during the pre-check: once per cycle
                            for g in range(ng):
                                if track[g]:
                                    _largest_partial(g, geo, GF, gpart)
                            parts_known = True
                        fits = _share_fits(shape_milli[k], gc, cg_ptr, cg_idx, freew, gpart)
                    elif gp > 0:
                        fits = False
                        for q in range(cg_ptr[gc], cg_ptr[gc + 1]):
                            g = cg_idx[q]
                            G = gG[g]
                            if gp <= G and _max_whole(hist, g, G) >= gp:
                                fits = True
                                break
                            if (gp > G or (slack > 0 and gp >= 2)) and freew[g] >= gp:
                                need = -(-gp // G) if G else gn[g] + 1
                                mx = min(need + slack, gn[g])
                                if need <= mx and _top_from_hist(hist, g, mx) >= gp:
                                    fits = True
                                    break
                    if not fits:
                        blocked[k] = True
                        any_blocked = True
                        n_bl += shape_count[k]
                if n_bl >= nq:
                    result = 1 if mode != M_NONE else 0
            else:
                for k in range(n_shapes):
                    blocked[k] = False
            if result < 0:
                if kind == P_MULTIFACTOR:
                    # the Python loop computes the keys here, which advances the usage
                    _advance(mf, usage, running, now)
                    if mf[2] != fs_version:
                        _fairshare(mf, usage, fsw)
                        fs_version = mf[2]
                elif external:
                    # ask for the keys of the whole queue, in arrival order (every queued job
                    # heads its own order class), as the Python loop's ``policy.keys(queue, now)``
                    m = 0
                    for q in range(ctr[2]):
                        xq[m] = bhead[act[q]]
                        m += 1
                    xq[:m].sort()
                    if xs[4] and (m < 2 or now < xf[1]):
                        for e in range(m):
                            jf[xq[e], F_EXT] = jf[xq[e], F_KEY]
                    else:
                        xs[0] = m
                        xs[1] = n_ev
                        xf[0] = now
                        n_ev = 0
                        _call_back(handle)
                # the order: heads of classes of shapes that fit somewhere, and of the blocked
                # shapes only the first (key, job) per class of eligible groups (b = -1)
                hn = 0
                n_all = 0
                live = 0
                n_touched = 0
                for q in range(ctr[2] if not static else 0):
                    b = act[q]
                    j = bhead[b]
                    kj = _key(j, now, kind, jf, ji, mf, fsw)
                    k = ji[j, I_SHAPE]
                    if any_blocked and blocked[k]:
                        gc = ji[j, I_GCLASS]
                        if gfirst_j[gc] < 0 or _less(kj, j, gfirst_k[gc], gfirst_j[gc]):
                            gfirst_k[gc] = kj
                            gfirst_j[gc] = j
                        continue
                    ck[n_all] = kj
                    cj[n_all] = j
                    cb[n_all] = b
                    n_all += 1
                    in_order[k] += 1
                # entries left whose shape is not retired whole: the visit ends at 0 (the
                # rest would all be passed over)
                live += n_all
                n_unl = 0  # entries of ck/cj/cb not yet on the visit heap
                want = head_chunk
                bound[2] = 0
                if n_all > 2 * head_chunk:
                    n_unl = n_all  # listed in doubling chunks of the smallest (key, job)
                else:
                    for e in range(n_all):
                        hk[e] = ck[e]
                        hj[e] = cj[e]
                        hb[e] = cb[e]
                    hn = n_all
                if static:
                    # the sorted heads: those of shapes that fit somewhere, and one per class
                    # of eligible groups of the shapes that fit nowhere
                    for k in range(n_shapes):
                        if shape_heads[k]:
                            if any_blocked and blocked[k]:
                                gc = shape_gclass[k]
                                if mode != M_GREEDY and not first_seen[gc]:
                                    first_seen[gc] = True
                                    live += 1
                            else:
                                in_order[k] = shape_heads[k]
                                live += shape_heads[k]
                    for gc in range(len(first_seen)):
                        first_seen[gc] = False
                p_s = 0
                if any_blocked and not static:
                    for gc in range(len(gfirst_j)):
                        if gfirst_j[gc] >= 0:
                            if mode != M_GREEDY:
                                hk[hn] = gfirst_k[gc]
                                hj[hn] = gfirst_j[gc]
                                hb[hn] = -1
                                hn += 1
                                live += 1
                            gfirst_j[gc] = -1
                _heapify(hk, hj, hb, hn)
                n_res = 0
                soft = False
                n_rec = 0
                touched_res = 0
                while live > 0:
                    from_sorted = False
                    if static:
                        # the next sorted head, passing over blocked shapes' heads but the first
                        # per class of eligible groups
                        while p_s < ns:
                            k = ji[sj[p_s], I_SHAPE]
                            if any_blocked and blocked[k]:
                                if mode != M_GREEDY and not first_seen[ji[sj[p_s], I_GCLASS]]:
                                    break
                                p_s += 1
                                continue
                            break
                        from_sorted = p_s < ns and (hn == 0 or _less(sk[p_s], sj[p_s], hk[0], hj[0]))
                    if from_sorted:
                        j = sj[p_s]
                        b = sb[p_s]
                        p_s += 1
                        if any_blocked and blocked[ji[j, I_SHAPE]]:
                            first_seen[ji[j, I_GCLASS]] = True
                            b = -1
                    else:
                        if n_unl and (hn == 0 or bound[2] == 0 or _less(bound[0], bound[1], hk[0], hj[0])):
                            hn, got = _list_more(
                                ck, cj, cb, n_all, bound, want, hk, hj, hb, hn, selk, selj, selb
                            )
                            n_unl -= got
                            want *= 2
                        hn = _hpop(hk, hj, hb, hn)
                        j = hj[hn]
                        b = hb[hn]
                    gc = ji[j, I_GCLASS]
                    do_reserve = False
                    if b < 0:
                        # the first job of a group class whose shape fits nowhere
                        live -= 1
                        if mode == M_NONE:
                            result = 0
                            break
                        do_reserve = True
                    else:
                        k = ji[j, I_SHAPE]
                        in_order[k] -= 1
                        if dead[k]:
                            continue
                        live -= 1
                        e_j = jf[j, F_EST]
                        c_j = ji[j, I_CPU]
                        m_j = ji[j, I_MEM]
                        retired = False
                        r_ = rec_head[k]
                        while r_ >= 0:
                            if c_j >= rec_c[r_] and m_j >= rec_m[r_] and e_j > rec_t[r_]:
                                retired = True
                                break
                            r_ = rec_next[r_]
                        if retired:
                            continue  # and with it the rest of its class
                        finish = now + e_j
                        any_cap = False
                        for q in range(cg_ptr[gc], cg_ptr[gc + 1]):
                            g = cg_idx[q]
                            f = finish > res_when[g]
                            capflag[g] = f
                            any_cap = any_cap or f
                        g, cnt = _place(
                            ji[j, I_GPUS],
                            ji[j, I_MILLI],
                            c_j,
                            m_j,
                            gc,
                            cg_ptr,
                            cg_idx,
                            capflag,
                            best,
                            slack,
                            geo,
                            S,
                            caps,
                            buf,
                        )
                        push_next = False
                        if g >= 0:
                            if capflag[g]:
                                extra = 1 if buf[12][0] >= 0 else 0
                                for z in range(cnt):
                                    nd = onode[z]
                                    capw[nd] -= ow[z] + extra
                                    capc[nd] -= oc[z]
                                    capm[nd] -= om[z]
                            for q in range(cg_ptr[gc], cg_ptr[gc + 1]):
                                capflag[cg_idx[q]] = False
                            before = bhead[b]
                            busy_milli += _start(j, g, cnt, now, i, jf, ji, geo, S, buf, st, run, pool, bk)
                            nq -= 1
                            if before >= 0 and bhead[b] < 0:
                                shape_heads[k] -= 1
                            if static and not touched_b[b]:
                                touched_b[b] = True
                                orig_head[b] = before
                                touched_list[n_touched] = b
                                n_touched += 1
                            if external:
                                n_ev = _note_start(j, g, now, jf, ext, n_ev)
                            if kind == P_MULTIFACTOR:
                                _advance(mf, usage, running, now)
                                running[ji[j, I_USER]] += jf[j, F_DEMAND]
                            push_next = True
                        else:
                            if mode == M_NONE:
                                for q in range(cg_ptr[gc], cg_ptr[gc + 1]):
                                    capflag[cg_idx[q]] = False
                                result = 0
                                break
                            if any_cap:
                                soft = True
                                thr = -INF
                                for q in range(cg_ptr[gc], cg_ptr[gc + 1]):
                                    g2 = cg_idx[q]
                                    if capflag[g2]:
                                        thr = max(thr, res_when[g2])
                                        capflag[g2] = False
                                thr -= now
                            else:
                                thr = -INF
                                if mode == M_EASY:
                                    do_reserve = True
                            if not any_cap and c_j <= shape_min_cpu[k] and m_j <= shape_min_mem[k]:
                                dead[k] = True  # the failure retires its whole shape
                                live -= in_order[k]
                            else:
                                rec_c[n_rec] = c_j
                                rec_m[n_rec] = m_j
                                rec_t[n_rec] = thr
                                rec_next[n_rec] = rec_head[k]
                                rec_head[k] = n_rec
                                n_rec += 1
                                push_next = not (e_j > thr)
                        if push_next:
                            # the next queued job of j's order class
                            h = b_of_pos[j] + 1
                            while h < b_ptr[b + 1] and b_jobs[h] < i and not queued[b_jobs[h]]:
                                h += 1
                            if h < b_ptr[b + 1] and b_jobs[h] < i:
                                j2 = b_jobs[h]
                                hn = _hpush(hk, hj, hb, hn, _key(j2, now, kind, jf, ji, mf, fsw), j2, b)
                                in_order[ji[j2, I_SHAPE]] += 1
                                live += 1
                    if do_reserve:
                        # try_reserve(j): one reservation per pool of groups, up to max_res
                        free_pool = n_res < max_res
                        if free_pool:
                            for q in range(cg_ptr[gc], cg_ptr[gc + 1]):
                                if covered[cg_idx[q]]:
                                    free_pool = False
                                    break
                        if free_pool:
                            n_res += 1
                            touched_res += 1
                            for q in range(cg_ptr[gc], cg_ptr[gc + 1]):
                                covered[cg_idx[q]] = True
                            _reserve(
                                j,
                                now,
                                jf,
                                ji,
                                cg_ptr,
                                cg_idx,
                                geo,
                                S,
                                SS,
                                caps,
                                res_when,
                                ingset,
                                noflag,
                                best,
                                slack,
                                run,
                                pool,
                                st,
                                buf,
                            )
                # the cycle's reservations and retirements end with it
                if touched_res:
                    for g in range(ng):
                        covered[g] = False
                        if res_when[g] < INF:
                            res_when[g] = INF
                            for t in range(gn[g]):
                                capw[gbase[g] + t] = BIG
                                capc[gbase[g] + t] = BIG
                                capm[gbase[g] + t] = BIG
                                capblk[gbase[g] + t] = False
                for k in range(n_shapes):
                    dead[k] = False
                    rec_head[k] = -1
                    in_order[k] = 0
                for gc in range(len(first_seen)):
                    first_seen[gc] = False
                for q in range(n_touched):
                    b = touched_list[q]
                    touched_b[b] = False
                    before = orig_head[b]
                    after = bhead[b]
                    if before != after:
                        if before >= 0:
                            ns = _sorted_remove(sk, sj, sb, ns, jf[before, F_KEY], before)
                        if after >= 0:
                            ns = _sorted_insert(sk, sj, sb, ns, jf[after, F_KEY], after, b)
                if result < 0:
                    result = 1 if (nq == 0 or (mode != M_NONE and not soft)) else 0
            all_blocked = result == 1
        tl_t[n_tl] = now
        tl_busy[n_tl] = busy_milli / 1000
        tl_q[n_tl] = nq
        n_tl += 1
        if ctr[0] == 0 and i >= hi and nq:
            error = nq
            break

    stats[0] = cycles
    stats[1] = error
    stats[2] = n_tl


@njit(cache=True)
def _reserve(
    j,
    now,
    jf,
    ji,
    cg_ptr,
    cg_idx,
    geo,
    S,
    SS,
    caps,
    res_when,
    ingset,
    noflag,
    best,
    slack,
    run,
    pool,
    st,
    buf,
):
    """``Simulator``'s ``replay``: release the running jobs in (estimated end, job) order on a
    scratch copy of j's groups until j fits; record the plan's caps and time in ``caps`` and
    ``res_when`` (nothing when j never fits)."""
    gbase, gn, gG, track = geo
    W, C, M, hist, freew, GF, MF = S
    SW, SC, SM, shist, sfree, SGF, SMF = SS
    capw, capc, capm, capblk = caps
    rk, rj, ctr = run[3], run[4], run[5]
    a_ptr, p_node = pool[0], pool[1]
    nodes_used, job_group = st[2], st[3]
    onode, ow, oc, om = buf[7], buf[8], buf[9], buf[10]
    gc = ji[j, I_GCLASS]
    need = ji[j, I_GPUS]
    m = ji[j, I_MILLI]
    c = ji[j, I_CPU]
    mm = ji[j, I_MEM]
    minG = 1 << 60
    for q in range(cg_ptr[gc], cg_ptr[gc + 1]):
        g = cg_idx[q]
        minG = min(minG, gG[g])
        ingset[g] = True
        for t in range(gn[g]):
            i = gbase[g] + t
            SW[i] = W[i]
            SC[i] = C[i]
            SM[i] = M[i]
            if track[g]:
                SMF[i] = MF[i]
                for b in range(gG[g]):
                    SGF[i, b] = GF[i, b]
        for v in range(hist.shape[1]):
            shist[g, v] = hist[g, v]
        sfree[g] = freew[g]
    single = need > 0 and (m < 1000 or need <= minG)
    node_test = single and m == 1000 and slack == 0
    share_test = need > 0 and m < 1000
    found_g = -1
    cnt = 0
    when = INF
    s_fit = ctr[1]
    for s in range(ctr[1]):
        r = rj[s]
        g = job_group[r]
        if not ingset[g]:
            continue
        p0 = a_ptr[r]
        rc = nodes_used[r]
        _release_on(r, ji, geo, SS, st, pool)
        if node_test:
            ok = False
            for z in range(rc):
                i = p_node[p0 + z]
                if SW[i] >= need and SC[i] >= c and SM[i] >= mm:
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
                    if SMF[i] >= m and SC[i] >= c and SM[i] >= mm:
                        ok = True
                        break
            if not ok:
                continue
        elif need and m == 1000 and _top_from_hist(shist, g, _nodes_needed(need, gG[g]) + slack) < need:
            continue
        found_g, cnt = _place(need, m, c, mm, gc, cg_ptr, cg_idx, noflag, best, slack, geo, SS, caps, buf)
        if found_g >= 0:
            when = max(rk[s], now)
            s_fit = s
            break
    for q in range(cg_ptr[gc], cg_ptr[gc + 1]):
        ingset[cg_idx[q]] = False
    if found_g < 0:
        return INF
    # cap_plan: later jobs may take on the plan's nodes only what leaves the plan room at ``when``
    g = found_g
    frac = buf[12][0]
    if not track[g]:
        # pins and caps read the group's state at ``when``: every running job whose estimated
        # end is up to then released (``Simulator``'s ``at_time``)
        for s in range(s_fit + 1, ctr[1]):
            if rk[s] > when:
                break
            r = rj[s]
            if job_group[r] == g:
                _release_on(r, ji, geo, SS, st, pool)
        _repin(g, cnt, onode, ow, oc, om, geo, S, SS)
    for t in range(gn[g]):
        i = gbase[g] + t
        capw[i] = BIG
        capc[i] = BIG
        capm[i] = BIG
        capblk[i] = False
    for z in range(cnt):
        i = onode[z]
        extra = 1 if frac >= 0 and track[g] and SGF[i, frac] == 1000 else 0
        capw[i] = SW[i] - ow[z] - extra
        capc[i] = SC[i] - oc[z]
        capm[i] = SM[i] - om[z]
        capblk[i] = True
    res_when[g] = when
    return when


@njit(cache=True)
def _overlap(i, w, c, W, C, SW, SC):
    """What a take of w GPUs (c CPUs when w is 0) on node i overlaps of the node's free now."""
    if w:
        return max(0, w - (SW[i] - W[i]))
    return max(0, c - (SC[i] - C[i]))


@njit(cache=True)
def _repin(g, cnt, onode, ow, oc, om, geo, S, SS):
    """``shared.sim.pinning.repin`` on the plan ``onode[:cnt]`` (takes ``ow``/``oc``/``om``) of
    group g, in place: S holds the free state now, SS the state at the reservation time.

    Only a node that running jobs release something on by then can have less overlap than a plan
    node (elsewhere a take overlaps in full), so candidates are listed once, in id order, and a
    candidate with no overlap ends a search (nothing beats it, and it has the lowest id)."""
    gbase, gn = geo[0], geo[1]
    W, C = S[0], S[1]
    SW, SC, SM = SS[0], SS[1], SS[2]
    span = W.shape[0] + 1
    keys = np.empty(cnt, dtype=np.int64)
    worst = 0
    for z in range(cnt):
        ov = _overlap(onode[z], ow[z], oc[z], W, C, SW, SC)
        worst = max(worst, ov)
        keys[z] = ov * span + onode[z]
    if worst == 0:
        return
    visit = np.argsort(-keys)  # overlap, largest first, then the highest id (keys are distinct)
    mark = np.zeros(gn[g], dtype=np.bool_)
    for y in range(cnt):
        mark[onode[y] - gbase[g]] = True
    cand = np.empty(gn[g], dtype=np.int64)
    n_cand = 0
    for t in range(gn[g]):
        i = gbase[g] + t
        if SW[i] > W[i] or SC[i] > C[i]:
            cand[n_cand] = i
            n_cand += 1
    for v in range(cnt):
        z = visit[v]
        ov = _overlap(onode[z], ow[z], oc[z], W, C, SW, SC)
        if ov == 0:
            break
        w, c, m = ow[z], oc[z], om[z]
        best_ov = ov
        best_i = -1
        for q in range(n_cand):
            i = cand[q]
            if mark[i - gbase[g]]:
                continue
            if SW[i] >= w and SC[i] >= c and SM[i] >= m:
                o = _overlap(i, w, c, W, C, SW, SC)
                if o < best_ov:
                    best_ov = o
                    best_i = i
                    if o == 0:
                        break
        if best_i >= 0:
            mark[onode[z] - gbase[g]] = False
            mark[best_i - gbase[g]] = True
            onode[z] = best_i


@njit(cache=True)
def _release_on(r, ji, geo, SS, st, pool):
    """Give running job r's allocation back on the scratch state SS (a reservation's replay)."""
    a_ptr, p_node, p_w, p_c, p_m, p_mask = pool
    p0 = a_ptr[r]
    _take(
        st[3][r],
        st[2][r],
        p_node[p0:],
        p_w[p0:],
        p_c[p0:],
        p_m[p0:],
        p_mask[p0:],
        st[4][r],
        ji[r, I_MILLI],
        geo,
        SS,
        1,
    )
