"""Public job traces as ``JobTable``s: loaders, validation, cache, estimates and the registry.

Start with ``load_trace("philly")`` (or any name from ``trace_names()``, or a path). Each loader
module documents its column mapping and what it excludes; ``docs/traces.md`` says where every
public trace can be obtained.
"""

from shared.traces.errors import TraceFormatError, TraceNotFoundError
from shared.traces.estimates import ESTIMATE_MODELS, apply_estimates
from shared.traces.model import Exclusion, LoadedTrace
from shared.traces.openb import NodeGroupRow, load_openb, load_openb_nodes
from shared.traces.philly import load_philly
from shared.traces.registry import detect_loader, load_trace, trace_names, trace_path
from shared.traces.rltune import load_rltune
from shared.traces.slurm_workload import load_slurm_workload
from shared.traces.swf import load_swf

__all__ = [
    "ESTIMATE_MODELS",
    "Exclusion",
    "LoadedTrace",
    "NodeGroupRow",
    "TraceFormatError",
    "TraceNotFoundError",
    "apply_estimates",
    "detect_loader",
    "load_openb",
    "load_openb_nodes",
    "load_philly",
    "load_rltune",
    "load_slurm_workload",
    "load_swf",
    "load_trace",
    "trace_names",
    "trace_path",
]
