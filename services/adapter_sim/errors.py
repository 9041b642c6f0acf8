"""Why a simulated-cluster run ended early."""

from __future__ import annotations


class AdapterError(RuntimeError):
    """The simulated cluster cannot work with the pipeline (a publish refused, no decisions at all)."""


class RunStopped(RuntimeError):
    """The run was asked to stop (Ctrl-C, shutdown); raised inside the simulator thread."""
