"""Data of the model: usage sums per slot, job-slot pairs, per-job variables.

A *slot* is one concrete node of a node class; the k-th slot of a class decodes to the class's k-th
lowest node id. Each slot keeps running linear sums of what the jobs placed on it use. Jobs are added
in rank order, so when job j is added a slot's sums hold exactly the usage of the higher-ranked
jobs (plus the fresh GPU bins opened so far, which only jobs up to j can use): the priority tier
reads them then, without any filtering by rank. A fresh GPU bin counts as used by the jobs ranked
above j only if one of them has a share on it (see ``PlacementModel._opened_above``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.placement.aggregate import NodeClass

Cond = tuple[list[int], list[int], int, int]  # lo <= sum(coeffs * vars) <= hi
BIG = 1 << 62


@dataclass(slots=True)
class LinSum:
    """A growing sum of coefficient x variable, and its largest possible value."""

    vs: list[int] = field(default_factory=list)
    cs: list[int] = field(default_factory=list)
    top: int = 0

    def add(self, var: int, coeff: int, ub: int) -> None:
        self.vs.append(var)
        self.cs.append(coeff)
        self.top += coeff * ub

    def at_least(self, lo: int) -> Cond:
        return (list(self.vs), list(self.cs), lo, BIG)

    def at_most(self, hi: int) -> Cond:
        return (list(self.vs), list(self.cs), -BIG, hi)


@dataclass(slots=True)
class Slot:
    """One concrete node of a class in the model, and the usage sums on it."""

    cls: NodeClass
    label: int  # decodes to cls.nodes[label]
    gpu: LinSum = field(default_factory=LinSum)  # whole GPUs, including fresh bins opened for shares
    whole_use: LinSum = field(default_factory=LinSum)  # whole GPUs of whole-GPU jobs only
    cpu: LinSum = field(default_factory=LinSum)
    mem: LinSum = field(default_factory=LinSum)
    partial: list[LinSum] = field(default_factory=list)  # milli-GPUs per partially used GPU
    fresh: list[int] = field(default_factory=list)  # "fresh bin b is opened" Booleans
    fresh_use: list[LinSum] = field(default_factory=list)  # milli-GPUs per fresh bin
    n_frac: int = 0  # fractional jobs that may use this slot so far
    cap_gpu: LinSum = field(default_factory=LinSum)  # whole GPUs of the capped jobs (reservations)
    cap_cpu: LinSum = field(default_factory=LinSum)
    cap_mem: LinSum = field(default_factory=LinSum)
    empty: int = -1  # Boolean implying: no GPU of the node used after placement
    full: int = -1  # Boolean implying: no whole GPU of the node left

    @property
    def node(self) -> int:
        return self.cls.nodes[self.label]

    @property
    def group(self) -> int:
        return self.cls.group


@dataclass(slots=True)
class Pair:
    """Job ``job`` may use slot ``slot``."""

    job: int
    slot: Slot
    y: int = -1  # Boolean: the job uses the slot (whole-GPU, CPU-only or gang)
    x: int = -1  # gang: whole GPUs on the slot
    cpu: int = -1  # gang: its CPUs there (ceil split), when CPUs can bind
    mem: int = -1
    bins: list[tuple[bool, int, int]] = field(default_factory=list)  # share: (fresh?, bin, Boolean)


@dataclass(slots=True)
class JobVars:
    """Variables of one job of the batch."""

    start: int = -1  # Boolean, -1 when the job fits nowhere alone
    pairs: list[Pair] = field(default_factory=list)
    groups: dict[int, int] = field(default_factory=dict)  # gang: group -> "runs there" Boolean
    min_nodes: dict[int, int] = field(default_factory=dict)
    max_nodes: dict[int, int] = field(default_factory=dict)
    forced: bool = False  # tier (a) made it start
