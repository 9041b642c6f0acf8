"""Seeded synthetic GPU-cluster workloads: the embedded default when no trace is at hand.

Why a generator: the public traces live outside the project and may not be copied into it, so a
user's fresh machine has none. ``generate_workload`` draws a workload whose statistics were
measured on the Philly and Alibaba openb traces (see ``params`` for each default's source and
``python -m shared.workload.calibrate`` to measure them again).
"""

from __future__ import annotations

from shared.workload.feasibility import fits_cluster, offered_load
from shared.workload.generator import generate_for_cluster, generate_workload
from shared.workload.params import (
    DurationClass,
    GeneratorParams,
    LogNormalComponent,
    RequestShape,
    WeightedTypeSet,
)

__all__ = [
    "DurationClass",
    "GeneratorParams",
    "LogNormalComponent",
    "RequestShape",
    "WeightedTypeSet",
    "fits_cluster",
    "generate_for_cluster",
    "generate_workload",
    "offered_load",
]
