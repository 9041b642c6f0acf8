"""CP-SAT batch placement of the top-K jobs of a ranking (issue 4; ``docs/placement.md``).

Use ``CpSatPlacer(PlacerSettings(...)).place_batch(state, ranked_requests)``: it returns one
``JobDecision`` per job (an ``Alloc`` or ``None``, and a spread flag) with the solve status, times
and objective terms. The caller's ``ClusterState`` is not modified; take the allocations yourself.
"""

from shared.placement.placer import CpSatPlacer, requests_from_arrays
from shared.placement.settings import PlacerSettings, TierWeights
from shared.placement.types import (
    BatchPlacement,
    GroupCost,
    JobDecision,
    JobRequest,
    ObjectiveTerms,
    SolveStatus,
)

__all__ = [
    "BatchPlacement",
    "CpSatPlacer",
    "GroupCost",
    "JobDecision",
    "JobRequest",
    "ObjectiveTerms",
    "PlacerSettings",
    "SolveStatus",
    "TierWeights",
    "requests_from_arrays",
]
