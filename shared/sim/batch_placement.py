"""The CP-SAT batch placer inside the Python event loop (``SimConfig.placement="cp-sat"``).

Why a module of its own: under ``"cp-sat"`` a cycle first places the top jobs of its order
together (``BatchPlacement.solve``), then walks its order as usual, taking each batch job's
solved allocation where the EASY reservations made since still admit it (``BatchDecisions``).
Everything else of the cycle is the same as under best-fit; what only CP-SAT needs (the requests,
the prices of tier (t), the re-solves under new reservations, the solver statistics) lives here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from shared.domain.jobs import WHOLE_GPU_MILLI, FloatArray
from shared.scheduling.placement import Caps, alloc_fits
from shared.scheduling.state import I64, Alloc
from shared.sim.reservations import Reserved

if TYPE_CHECKING:
    from shared.placement import CpSatPlacer, GroupCost, JobRequest
    from shared.sim.run_state import RunState
    from shared.sim.simulator import Simulator


class BatchPlacement:
    """The batch placer's calls over one run, and their statistics (``stats``)."""

    def __init__(self, sim: Simulator, rs: RunState, batch_placer: CpSatPlacer) -> None:
        self.rs = rs
        self.batch_placer = batch_placer
        cfg, w = sim.cfg, sim.w
        self.type_reserve = cfg.cpsat_type_reserve
        self.demand_window = cfg.cpsat_demand_window
        self.replan = cfg.cpsat_reservations
        self.demand_np = w.jobs.gpu_demand
        self.share_np = sim.group_share
        self.node_caps = [(g.gpus, g.cpus_milli, g.mem_mib) for g in w.spec.node_groups]
        self.pstats: dict[str, float] = {
            "solves": 0,
            "solve_seconds": 0.0,
            "overridden": 0,
            "replans": 0,
            "held_back": 0,
        }
        self.call_ms: list[float] = []

    def stats(self) -> dict[str, float]:
        """The counters of the run, and the latency of the calls that built a model."""
        return self.pstats | _latency_stats(self.call_ms)

    def group_costs(self) -> dict[int, GroupCost]:
        """Tier (t)'s prices: per group, the GPU demand of the whole queue and of the last
        ``cpsat_demand_window`` arrivals expected to land there (each job spread over its
        eligible groups in proportion to their GPUs, weighted by its inflexibility) per free
        GPU. A job that can only use a few types loads them heavily,
        one that can run anywhere not at all: placing a flexible job on a cheap group keeps
        the scarce types for the jobs that have no alternative, and where no waiting job is
        constrained every price is 0 and the five-tier model decides as before (pricing all
        demand would push jobs to the emptiest groups: measured on Philly, 14% more idle
        GPU-hours than best-fit). CPUs and memory are priced at the same rate per node share,
        so CPU-heavy jobs pay for the node room they take."""
        from shared.placement import GroupCost

        rs = self.rs
        class_np, demand_np, n_classes, i = rs.class_np, self.demand_np, rs.n_classes, rs.i
        q = rs.qbuf[: rs.qn]  # the queue, compacted by the cycle's ``candidates``
        by_class = np.bincount(class_np[q], weights=demand_np[q], minlength=n_classes)
        if self.demand_window:
            # the last arrivals too, started or not: the queue alone forgets a scarce type
            # whenever its jobs happen to be running, and flexible jobs then fill it (one
            # 8-GPU G3-only openb job waited 51 min behind them with the queue alone)
            lo_w = max(rs.lo, i - self.demand_window)
            by_class += np.bincount(class_np[lo_w:i], weights=demand_np[lo_w:i], minlength=n_classes)
        want = by_class @ self.share_np
        out = {}
        for g, (G, cpus, mems) in enumerate(self.node_caps):
            if G == 0 or want[g] <= 0:
                continue
            r = float(want[g]) / max(rs.st.groups[g].free_whole, 1)
            out[g] = GroupCost(r, r * G / cpus if cpus else 0.0, r * G / mems if mems else 0.0)
        return out

    def requests(self, fq: I64, fk: FloatArray) -> list[JobRequest]:
        """The top K startable jobs of this cycle's order, then the look-ahead jobs."""
        from shared.placement import JobRequest

        rs = self.rs
        gpus, milli, cpu, mem, groups_of, est = rs.gpus, rs.milli, rs.cpu, rs.mem, rs.groups_of, rs.est
        settings = self.batch_placer.settings
        cfg_k = settings.k + settings.lookahead
        if len(fq) > cfg_k:
            edge = np.partition(fk, cfg_k - 1)[cfg_k - 1]
            keep = fk <= edge
            fq, fk = fq[keep], fk[keep]
        ranked = fq[np.lexsort((fq, fk))][:cfg_k].tolist()
        k = settings.k
        return [
            JobRequest(
                gpus[j],
                milli[j] if gpus[j] else WHOLE_GPU_MILLI,
                cpu[j],
                mem[j],
                groups_of[j],
                weight=(k - min(r, k - 1)) / k,  # tier (b): higher rank, more weight
                est_runtime=est[j],
                job_id=j,
            )
            for r, j in enumerate(ranked)
        ]

    def place(
        self, batch: list[JobRequest], ahead: list[JobRequest], now: float, reserved: Reserved
    ) -> dict[int, Alloc | None]:
        """CP-SAT's joint placement of ``batch``, under the reservations made so far: a job
        that would still run at a reservation's time respects its caps (as in the walk)."""
        from shared.placement import SolveStatus

        est, pstats = self.rs.est, self.pstats
        caps = {g: c for g, (_, c) in reserved.items()}
        if reserved:
            batch = [
                replace(
                    r,
                    capped=tuple(
                        g for g in r.groups if g in reserved and now + est[r.job_id] > reserved[g][0]
                    ),
                )
                for r in batch
            ]
        res = self.batch_placer.place_batch(
            self.rs.st, batch, ahead, self.group_costs() if self.type_reserve else None, caps or None
        )
        pstats["solves"] += 1
        pstats[f"status_{res.status.value}"] = pstats.get(f"status_{res.status.value}", 0) + 1
        pstats["solve_seconds"] += res.wall_s
        if res.status is not SolveStatus.NOTHING_FITS:  # calls that built a model (latency target)
            self.call_ms.append(res.wall_s * 1e3)
        return {r.job_id: d.alloc for r, d in zip(batch, res.decisions, strict=True)}

    def solve(self, cq: I64, ck: FloatArray, n_free: int, now: float) -> BatchDecisions:
        """The batch of a cycle whose candidates are ``cq`` (the first ``n_free`` startable) with
        keys ``ck``, solved before any reservation is made."""
        out = BatchDecisions(self, now)
        if n_free:
            reqs = self.requests(cq[:n_free], ck[:n_free])
            k = self.batch_placer.settings.k
            out.batch, out.ahead = reqs[:k], reqs[k:]
            out.preset = self.place(out.batch, out.ahead, now, {})
            ids = np.array([r.job_id for r in out.batch], dtype=np.int64)
            hit = np.flatnonzero(np.isin(cq[:n_free], ids))
            out.batch_pos = dict(zip(cq[hit].tolist(), hit.tolist(), strict=True))
        return out


@dataclass
class BatchDecisions:
    """One cycle's batch: the solved allocations (``preset``: job -> allocation or None), kept
    admissible as reservations are made (``decide``)."""

    placement: BatchPlacement
    now: float
    preset: dict[int, Alloc | None] = field(default_factory=dict)
    batch: list[JobRequest] = field(default_factory=list)
    ahead: list[JobRequest] = field(default_factory=list)
    batch_pos: dict[int, int] = field(default_factory=dict)  # job -> its position in the candidates
    solved_under: int = 0  # reservations the preset was solved under

    def decide(
        self, j: int, alive: npt.NDArray[np.bool_], caps: dict[int, Caps] | None, reserved: Reserved
    ) -> tuple[Alloc | None, bool]:
        """Batch job j's allocation (None: the walk places it), and whether the batch placer
        holds it back although it fits (then it does not start in this cycle)."""
        bp, preset = self.placement, self.preset
        rs, pstats = bp.rs, bp.pstats
        if bp.replan and len(reserved) != self.solved_under:
            # a reservation was made since the batch was solved: solve the jobs of the batch not
            # yet visited again, under its caps, so that CP-SAT's decisions stay admissible
            # instead of being overridden below
            self.solved_under = len(reserved)
            left = [r for r in self.batch if alive[self.batch_pos[r.job_id]]]
            preset.update(bp.place(left, self.ahead, self.now, reserved))
            pstats["replans"] += 1
        # the batch placer's choice, if reservations made since have not ruled it out
        a = preset[j]
        if a is not None and not alloc_fits(rs.st, a, caps, rs.milli[j]):
            a = None
            pstats["overridden"] += 1
        if a is None and rs.place(j, rs.groups_of[j], caps):
            pstats["held_back"] += 1
            return None, True
        return a, False


def _latency_stats(call_ms: list[float]) -> dict[str, float]:
    """p50/p99/max wall time of the batch placer's calls that built a model, in milliseconds."""
    if not call_ms:
        return {}
    a = np.asarray(call_ms)
    return {
        "call_ms_p50": float(np.percentile(a, 50)),
        "call_ms_p99": float(np.percentile(a, 99)),
        "call_ms_max": float(a.max()),
        "model_calls": float(len(a)),
    }
