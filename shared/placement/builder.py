"""A thin CP-SAT model builder that writes the model proto directly, and its solve call.

Why not the ``cp_model`` API: constructing a ``cp_model.CpModel`` alone costs ~0.5 ms (it installs
deprecated method aliases on every instance), and building expressions through Python operator
overloading costs ~7-11 microseconds per variable or constraint, while the placer's whole budget is
10 ms. Writing integer indices straight into a ``CpModelProto`` and calling ``SolveWrapper`` (what
``CpSolver.solve`` does internally) costs a fraction of that. Literals follow the proto convention:
variable ``v`` is ``v`` and its negation is ``-v - 1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ortools.sat.python import cp_model_helper as cmh

INT_MIN = -(1 << 62)
INT_MAX = 1 << 62


def neg(lit: int) -> int:
    """The negation of a literal."""
    return -lit - 1


def _bool_template() -> Any:
    v: Any = cmh.IntegerVariableProto()
    v.domain.extend((0, 1))
    return v


_BOOL = _bool_template()


class ModelBuilder:
    """Variables and constraints of one CP-SAT model, by index.

    Variables are written into the proto in bulk when it is read (``proto``): a Boolean's entry is
    a copy of one template, so a run of them is one call (each ``add().domain.extend`` costs about
    1.2 us; a model has hundreds of Booleans).
    """

    __slots__ = ("_cons", "_lo", "_proto", "_vars", "_written", "n_cons", "n_vars", "ub")

    def __init__(self) -> None:
        self._proto: Any = cmh.CpModelProto()
        self._vars: Any = self._proto.variables
        self._cons: Any = self._proto.constraints
        self.n_vars = 0
        self.n_cons = 0
        self.ub: list[int] = []  # upper bound of each variable (for quick "can this bind?" tests)
        self._lo: list[int] = []  # lower bound of each variable
        self._written = 0  # variables already in the proto

    @property
    def proto(self) -> Any:
        """The model proto, with every variable created so far written in."""
        lo, ub, vs = self._lo, self.ub, self._vars
        k, n = self._written, self.n_vars
        while k < n:
            if lo[k] == 0 and ub[k] == 1:
                end = k + 1
                while end < n and lo[end] == 0 and ub[end] == 1:
                    end += 1
                vs.extend([_BOOL] * (end - k))
                k = end
            else:
                vs.add().domain.extend((lo[k], ub[k]))
                k += 1
        self._written = n
        return self._proto

    def int_var(self, lo: int, hi: int) -> int:
        self._lo.append(lo)
        self.ub.append(hi)
        self.n_vars += 1
        return self.n_vars - 1

    def bool_var(self) -> int:
        return self.int_var(0, 1)

    def linear(
        self,
        variables: Sequence[int],
        coeffs: Sequence[int],
        lo: int = INT_MIN,
        hi: int = INT_MAX,
        enforce: Sequence[int] = (),
    ) -> None:
        """``lo <= sum(coeffs * variables) <= hi``, only when all ``enforce`` literals are true."""
        c = self._cons.add()
        if enforce:
            c.enforcement_literal.extend(enforce)
        lin = c.linear
        lin.vars.extend(variables)
        lin.coeffs.extend(coeffs)
        lin.domain.extend((lo, hi))
        self.n_cons += 1

    def bool_or(self, literals: Sequence[int]) -> None:
        self._cons.add().bool_or.literals.extend(literals)
        self.n_cons += 1

    def implies(self, a: int, b: int) -> None:
        """``a => b`` for two literals."""
        self.bool_or((neg(a), b))

    def maximize(self, variables: Sequence[int], coeffs: Sequence[int]) -> None:
        """Maximize by minimizing the negated sum (the proto objective is a minimization)."""
        obj = self._proto.objective
        obj.vars.extend(variables)
        obj.coeffs.extend([-c for c in coeffs])

    def hint(self, values: Sequence[int]) -> None:
        """A complete solution hint (one value per variable)."""
        h = self._proto.solution_hint
        h.vars.extend(range(len(values)))
        h.values.extend(values)


@dataclass(slots=True)
class SolveOutcome:
    """What came back from CP-SAT."""

    status: str  # OPTIMAL, FEASIBLE, INFEASIBLE, MODEL_INVALID or UNKNOWN
    values: list[int]
    wall_s: float
    deterministic_time: float


def solve(
    builder: ModelBuilder, *, seed: int, wall_s: float, deterministic_time: float, fix_hint: bool = False
) -> SolveOutcome:
    """Solve on one worker with a fixed seed under both a wall-clock and a deterministic limit.

    ``fix_hint`` fixes every variable to its hint (a test aid: is the hint a feasible solution?).
    """
    p: Any = cmh.SatParameters()
    p.num_workers = 1
    p.random_seed = seed
    p.max_time_in_seconds = wall_s
    p.max_deterministic_time = deterministic_time
    p.log_search_progress = False
    # measured on openb batches (K = 16): presolve, symmetry detection and the LP relaxation cost
    # more than they save on models of a few hundred Booleans that start from a complete hint
    p.cp_model_presolve = False
    p.symmetry_level = 0
    p.linearization_level = 0
    p.fix_variables_to_their_hinted_value = fix_hint
    wrapper: Any = cmh.SolveWrapper()
    wrapper.set_parameters(p)
    r: Any = wrapper.solve(builder.proto)
    status = str(r.status.name)
    values = list(r.solution) if status in ("OPTIMAL", "FEASIBLE") else []
    return SolveOutcome(status, values, float(r.wall_time), float(r.deterministic_time))
