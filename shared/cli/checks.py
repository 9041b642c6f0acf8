"""Checks of ``hylo simulate``/``train``/``evaluate`` options made before any work starts.

Why up front: these commands load a trace (Philly: 82k jobs), attach runtime predictions (a minute)
and simulate before an option that could never work shows; a typo then costs minutes and ends in a
traceback from deep inside the simulator (``--estimates trace`` on Philly, a header-only CSV,
``--out`` naming a file). Each check fails with one line naming the option, the value and what
would work.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from shared.cli.common import fail

if TYPE_CHECKING:
    from shared.features import FeatureSchema
    from shared.model import ActorCritic, ModelCard
    from shared.sim.evaluate import PreparedWorkload

#: ``--estimates`` values besides the estimate models: keep the trace's own estimates
TRACE_ESTIMATES = "trace"


def check_estimates(estimates: str, trace: str | None) -> None:
    """``--estimates`` is a known model; ``trace`` only on a trace that carries an estimate per job
    (read from the trace cache: milliseconds, before predictions and simulation)."""
    from shared.traces.estimates import ESTIMATE_MODELS

    choices = (*ESTIMATE_MODELS, TRACE_ESTIMATES)
    if estimates not in choices:
        raise fail(f"--estimates: unknown estimate model {estimates!r}; expected one of {', '.join(choices)}")
    if estimates != TRACE_ESTIMATES or trace is None or trace == "embedded":
        return
    import numpy as np

    from shared.traces import load_trace

    try:
        table = load_trace(trace).table
    except Exception:  # not found or unreadable: the loader's own error comes with the load
        return
    missing = int(np.isnan(table.estimate).sum())
    if missing:
        raise fail(
            f"--estimates trace: {missing:,} of {len(table.estimate):,} jobs of trace {trace!r} carry no "
            f"runtime estimate; choose --estimates {' | '.join(ESTIMATE_MODELS)} (noisy: the default)"
        )


def check_out(out: Path, option: str = "--out") -> None:
    """``--out`` is a folder or can become one (not an existing file), checked before the run."""
    if out.exists() and not out.is_dir():
        raise fail(f"{option} {out}: is a file; expected a folder (created if missing)")


def check_load(load: float | None) -> None:
    """``--load``: a positive offered load when given."""
    if load is not None and not load > 0:
        raise fail(
            f"--load {load:g}: expected an offered load > 0 (e.g. 0.85), or no --load for the own times"
        )


def check_jobs(work: PreparedWorkload, trace: str | None, least: int = 2) -> None:
    """At least ``least`` jobs left to simulate once the trace is loaded and bound."""
    n = len(work.bound.jobs)
    if n >= least:
        return
    what = f"--trace {trace}" if trace else "the embedded workload"
    raise fail(
        f"{what}: {n} job(s) to simulate after loading (at least {least} needed): "
        "the file holds no job rows, or every job was left out (the reasons are listed above)"
    )


def load_model(checkpoint: Path, option: str) -> tuple[ActorCritic, ModelCard, FeatureSchema]:
    """A trained checkpoint, verified; any failure to read it is one line naming ``option``.

    Why every exception: past the card's checks, torch reads the weights, and a damaged file whose
    card hash was rewritten to match raises whatever torch's zip reader or unpickler raises.
    """
    from shared.model import CheckpointError
    from shared.rl.setup import load_trained

    try:
        return load_trained(checkpoint)
    except CheckpointError as err:  # says what is wrong with which file
        raise fail(f"{option}: cannot use checkpoint {checkpoint}: {err}") from None
    except Exception as err:
        raise fail(
            f"{option}: cannot use checkpoint {checkpoint}: its weights cannot be read "
            f"({type(err).__name__}: {err})"
        ) from None


def validation_line(err: Exception) -> str:
    """A pydantic error on an options model (``SimConfig``, ``PPOConfig``, ``TrainConfig``) as the
    options that hold the values: ``--node-slack -1: Input should be ... (SimConfig.node_slack)``."""
    from pydantic import ValidationError

    if not isinstance(err, ValidationError):
        return str(err)
    parts = []
    for item in err.errors():
        field = ".".join(str(p) for p in item["loc"])
        option = "--" + str(item["loc"][0]).replace("_", "-") if item["loc"] else err.title
        parts.append(f"{option} {item.get('input')!r}: {item['msg']} ({err.title}.{field})")
    return "; ".join(parts)
