"""The CP-SAT batch placer: warm start, aggregation, model, solve under a time limit, decode.

Every call returns a decision. The best-fit warm start is computed first; it is the solver's hint
and the fallback whenever the solver has no solution in time, fails, or (a bug) returns something
that does not decode to valid allocations. The status says which path was taken.

Determinism: CP-SAT runs on one worker with a fixed seed, and stops at ``deterministic_time``
(counted work, reproducible) or at the wall-clock budget, whichever comes first. A decision is
reproducible from its inputs exactly when the wall clock did not decide it (``deterministic`` in
the result); with ``reproducible=True`` the wall clock never decides (a 1 s safety net only).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence

from shared.domain.jobs import WHOLE_GPU_MILLI
from shared.placement.aggregate import GroupTable, aggregate, job_shape
from shared.placement.assign import HintError, hint_values, tier_values
from shared.placement.builder import solve
from shared.placement.decode import DecodeError, check_allocs, decode
from shared.placement.model import PlacementModel
from shared.placement.settings import PlacerSettings
from shared.placement.symmetry import canonical_hint
from shared.placement.tiers import add_fragmentation, add_lookahead, set_objective
from shared.placement.types import (
    BatchPlacement,
    GroupCost,
    JobDecision,
    JobRequest,
    ObjectiveTerms,
    SolveStatus,
)
from shared.placement.warmstart import best_fit_batch
from shared.scheduling.placement import Caps
from shared.scheduling.state import Alloc, ClusterState

SAFETY_NET_S = 1.0  # wall-clock limit in reproducible mode
MIN_SOLVE_S = 0.0005  # below this much budget left, do not start CP-SAT at all
FINISH_S = 0.0015  # kept back from CP-SAT's budget for decoding, checking and its own stop latency


def build_model(
    state: ClusterState,
    batch: list[JobRequest],
    ahead: list[JobRequest],
    hint: list[Alloc | None],
    settings: PlacerSettings,
    tables: dict[int, GroupTable] | None = None,
    group_costs: Mapping[int, GroupCost] | None = None,
) -> tuple[PlacementModel, list[int]]:
    """The full model of a batch (all tiers) and the warm start as a complete hint.

    The hint is the warm start with identical jobs' nodes possibly exchanged (as the symmetry
    breaks require): the same usage, the same tier values. ``hint`` itself is left as it is.
    """
    if tables is None:
        tables, _ = aggregate(state, batch, ahead, settings.node_slack)
    model = PlacementModel(state, batch, ahead, tables, hint, settings, group_costs)
    if settings.weights.fragmentation:
        add_fragmentation(model)
    if settings.weights.lookahead:
        add_lookahead(model)
    set_objective(model)
    values = hint_values(model, canonical_hint(model, hint))
    model.b.hint(values)
    return model, values


class CpSatPlacer:
    """Places the top-K jobs of a ranking together (see ``docs/placement.md``)."""

    name = "cp-sat"

    def __init__(self, settings: PlacerSettings | None = None) -> None:
        self.settings = settings or PlacerSettings()

    def place_batch(
        self,
        state: ClusterState,
        ranked: Sequence[JobRequest],
        lookahead: Sequence[JobRequest] | None = None,
        group_costs: Mapping[int, GroupCost] | None = None,
        caps: Mapping[int, Caps] | None = None,
    ) -> BatchPlacement:
        """Decisions for ``ranked[:K]`` on ``state`` (not modified).

        ``lookahead`` are the next jobs whose room the placement should keep; by default the
        ``settings.lookahead`` jobs after the top K of ``ranked``. ``group_costs`` prices node
        groups for tier (t) (keep the types that waiting jobs need for them); without it the
        tier is absent and decisions are those of the five-tier model. ``caps`` are the EASY
        reservation caps per group (not modified): a job respects those of its ``capped``
        groups, so every decision is one the simulator's backfill admits.
        """
        t0 = time.perf_counter()
        cfg = self.settings
        batch = list(ranked[: cfg.k])
        ahead = list(lookahead if lookahead is not None else ranked[cfg.k : cfg.k + cfg.lookahead])
        if not cfg.solve_when_all_fit and not (group_costs and cfg.weights.type_reserve):
            # best-fit starting every job of the batch on its fewest nodes is optimal in tiers
            # (a)-(c); without tier (t) only fragmentation and look-ahead are left to the solve
            first = best_fit_batch(state, batch, cfg.node_slack, None, caps)
            if batch and all(
                a is not None and self._extra(state, job, a) == 0 for job, a in zip(batch, first, strict=True)
            ):
                return self._result(state, batch, first, SolveStatus.ALL_FIT, t0)
        tables, fit_groups = aggregate(state, batch, ahead, cfg.node_slack, caps)
        hint = best_fit_batch(state, batch, cfg.node_slack, fit_groups, caps)
        if all(a is None for a in hint):
            return self._result(state, batch, hint, SolveStatus.NOTHING_FITS, t0)
        try:
            model, start = build_model(state, batch, ahead, hint, cfg, tables, group_costs)
        except HintError:
            return self._result(state, batch, hint, SolveStatus.ERROR_FALLBACK, t0)
        left = cfg.time_limit_ms / 1000 - (time.perf_counter() - t0) - FINISH_S
        budget = SAFETY_NET_S if cfg.reproducible else left
        if budget < MIN_SOLVE_S:
            out = self._result(state, batch, hint, SolveStatus.TIMEOUT_FALLBACK, t0, model, start)
            out.deterministic = False
            return out
        res = solve(model.b, seed=cfg.seed, wall_s=budget, deterministic_time=cfg.deterministic_time)
        values = res.values
        allocs: list[Alloc | None] = hint
        if res.status in ("OPTIMAL", "FEASIBLE"):
            status = SolveStatus.OPTIMAL if res.status == "OPTIMAL" else SolveStatus.FEASIBLE
            try:
                allocs = decode(model, values)
                check_allocs(state, batch, allocs, cfg.node_slack)
            except DecodeError:
                status, allocs, values = SolveStatus.ERROR_FALLBACK, hint, start
        elif res.status == "UNKNOWN":
            status, values = SolveStatus.TIMEOUT_FALLBACK, start
        else:
            status, values = SolveStatus.ERROR_FALLBACK, start
        out = self._result(state, batch, allocs, status, t0, model, values)
        out.solve_s = res.wall_s
        wall_hit = not cfg.reproducible and res.wall_s >= 0.95 * budget
        out.deterministic = status == SolveStatus.OPTIMAL or not wall_hit
        return out

    def _result(
        self,
        state: ClusterState,
        batch: list[JobRequest],
        allocs: Sequence[Alloc | None],
        status: SolveStatus,
        t0: float,
        model: PlacementModel | None = None,
        values: Sequence[int] | None = None,
    ) -> BatchPlacement:
        pairs = list(zip(batch, allocs, strict=True))
        decisions = [JobDecision(a, self._spread(state, job, a)) for job, a in pairs]
        terms = ObjectiveTerms(
            started=sum(1 for a in allocs if a is not None),
            extra_nodes=sum(self._extra(state, job, a) for job, a in zip(batch, allocs, strict=True)),
            fragmented_nodes=_fragmented(state, allocs, model),
        )
        if model is not None and values is not None:
            ev = tier_values(model, values)
            terms = ObjectiveTerms(
                started=terms.started,
                priority_violations=ev["violations"],
                weighted_work=ev["b"],
                extra_nodes=terms.extra_nodes,
                fragmented_nodes=terms.fragmented_nodes,
                lookahead_fits=ev["e"],
                type_cost=-ev["t"],
            )
        return BatchPlacement(
            decisions=decisions,
            status=status,
            wall_s=time.perf_counter() - t0,
            terms=terms,
            model_vars=model.b.n_vars if model else 0,
            model_constraints=model.b.n_cons if model else 0,
        )

    def _min_nodes(self, state: ClusterState, job: JobRequest, a: Alloc) -> int:
        gs = state.groups[a.group]
        shape = job_shape(job, gs.G, gs.n, self.settings.node_slack)
        return shape.min_nodes if shape is not None else 1

    def _spread(self, state: ClusterState, job: JobRequest, a: Alloc | None) -> bool:
        return a is not None and len(a.nodes) > self._min_nodes(state, job, a)

    def _extra(self, state: ClusterState, job: JobRequest, a: Alloc | None) -> int:
        return 0 if a is None else max(0, len(a.nodes) - self._min_nodes(state, job, a))


def _fragmented(state: ClusterState, allocs: Sequence[Alloc | None], model: PlacementModel | None) -> int:
    """Nodes of the model (or touched by the allocations) left with 0 < free whole GPUs < GPUs/node."""
    nodes: set[tuple[int, int]] = {(a.group, n) for a in allocs if a is not None for n in a.nodes}
    if model is not None:
        nodes |= {(s.cls.group, s.node) for s in model.slots.values()}
    used: dict[tuple[int, int], int] = {}
    shared_gpus: set[tuple[int, int, int]] = set()  # fully free GPUs that a share now occupies
    for a in allocs:
        if a is None:
            continue
        gs = state.groups[a.group]
        for k, n in enumerate(a.nodes):
            used[(a.group, n)] = used.get((a.group, n), 0) + a.whole[k]
        if a.frac_gpu >= 0 and gs.gfree is not None and gs.gfree[a.nodes[0]][a.frac_gpu] == WHOLE_GPU_MILLI:
            shared_gpus.add((a.group, a.nodes[0], a.frac_gpu))
    for g, n, _ in shared_gpus:
        used[(g, n)] = used.get((g, n), 0) + 1
    count = 0
    for g, n in nodes:
        gs = state.groups[g]
        free = int(gs.whole[n]) - used.get((g, n), 0)
        if gs.G >= 2 and 0 < free < gs.G:
            count += 1
    return count


def requests_from_arrays(
    gpus: Sequence[int],
    milli: Sequence[int],
    cpus: Sequence[int],
    mem: Sequence[int],
    groups: Sequence[tuple[int, ...]],
    estimate: Sequence[float],
    weight: Sequence[float] | None = None,
) -> list[JobRequest]:
    """JobRequests from the simulator's per-job lists (in rank order)."""
    out = []
    for k in range(len(gpus)):
        est = float(estimate[k])
        out.append(
            JobRequest(
                int(gpus[k]),
                int(milli[k]),
                int(cpus[k]),
                int(mem[k]),
                tuple(groups[k]),
                1.0 if weight is None else float(weight[k]),
                est if math.isfinite(est) else 1.0,
            )
        )
    return out
