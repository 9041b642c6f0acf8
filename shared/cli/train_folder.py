"""Where a ``hylo train`` run writes: a new run-named folder, a folder that is refused when it holds
files, ``--force``, and ``--resume`` (the run's settings read back from its folder).

Why a run never writes into a folder that holds files unless told: the run folder's
``checkpoint/`` is what ``hylo models register`` points the registry at, and a second run into the
same ``--out`` used to replace a registered model's weights silently. Without ``--out`` each run
gets a folder of its own (``hylo-out/train/<trace>-<metric>-<UTC time>``); with ``--out`` an
existing folder that is not empty is refused in one line naming ``--force`` (replace the run files
in it) and ``--resume`` (continue the run in it).

Why ``--resume`` reads the settings from the folder: the run continued must be the run started.
``run.json`` records the training options (``TrainOptions``); options given again on the command
line must equal the recorded ones, except those a resumed run may change
(``MAY_CHANGE_ON_RESUME``); anything else is refused in one line that names each conflict.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer

from shared.cli.checks import check_out
from shared.cli.common import fail
from shared.cli.train_options import CONTROL_OPTIONS, MAY_CHANGE_ON_RESUME, TrainOptions, option_name
from shared.rl.run_log import SCALARS_FILE, TENSORBOARD_DIR
from shared.rl.train_state import STATE_FILE, StateFileError, TrainState, load_state

#: the run's settings, in its folder
RUN_FILE = "run.json"
RUN_FORMAT = 1
#: where runs go without ``--out``
DEFAULT_ROOT = Path("hylo-out/train")
#: what a run writes into its folder (``--force`` removes these, and only these)
RUN_OUTPUTS = (
    RUN_FILE,
    STATE_FILE,
    "checkpoint",
    ".checkpoint.new",
    ".checkpoint.old",
    SCALARS_FILE,
    TENSORBOARD_DIR,
    "train_log.csv",
    "train_log.json",
    "training_curve.png",
)


@dataclass(frozen=True)
class RunPlan:
    """What the command was asked: the run's settings and where its files go."""

    options: TrainOptions
    out: Path | None  # None: a new run-named folder under DEFAULT_ROOT
    force: bool
    checkpoint_every: int
    resuming: bool
    state: TrainState | None  # the saved state to continue from (None: from the start)
    started: dict[str, Any]  # run.json's record of the run so far (resuming), else empty


def plan_run(ctx: typer.Context) -> RunPlan:
    """Read the command's folder options; with ``--resume``, the run's settings from its folder
    (a resume whose settings conflict is refused here, before anything loads)."""
    params = ctx.params
    resume: Path | None = params["resume"]
    every: int = params["checkpoint_every"]
    if resume is not None:
        return _plan_resume(ctx, resume, every)
    return RunPlan(TrainOptions.from_params(params), params["out"], params["force"], every, False, None, {})


def _holds_files(folder: Path) -> bool:
    return folder.is_dir() and any(folder.iterdir())


def check_folder(plan: RunPlan) -> None:
    """A new run's ``--out`` must be a folder (or nothing yet) and hold no files, unless
    ``--force``. Checked after the option values (a bad value is the first thing to say), before
    the workload loads."""
    out = plan.out
    if plan.resuming or out is None:
        return
    check_out(out)
    if plan.force or not _holds_files(out):
        return
    resume = f", --resume {out} to continue the run in it" if (out / RUN_FILE).is_file() else ""
    raise fail(
        f"--out {out}: the folder exists and is not empty (a run's checkpoint there may be a "
        f"registered model); pass --force to replace its run files{resume}, or another --out "
        f"(or none: a new folder under {DEFAULT_ROOT})"
    )


def _plan_resume(ctx: typer.Context, folder: Path, every: int) -> RunPlan:
    """The run in ``folder``: its recorded settings, the ones given now checked against them."""
    for name in ("out", "force"):
        if _given(ctx, name):
            raise fail(f"--resume {folder}: continues in that folder; drop {option_name(name)}")
    check_out(folder, "--resume")
    started = read_run_file(folder)
    stored: dict[str, Any] = started["options"]
    unknown = sorted(set(stored) - set(TrainOptions.names()))
    if unknown:
        raise fail(f"--resume {folder}: {RUN_FILE} records options this hylo does not know: {unknown}")
    merged = {**ctx.params, **stored}
    conflicts = []
    for name in sorted(set(ctx.params) - CONTROL_OPTIONS):
        if not _given(ctx, name):
            continue
        if name in MAY_CHANGE_ON_RESUME or name not in stored:
            merged[name] = ctx.params[name]
        elif ctx.params[name] != stored[name]:
            conflicts.append(f"{option_name(name)} {ctx.params[name]!r} (the run's: {stored[name]!r})")
    if conflicts:
        raise fail(
            f"--resume {folder}: {'; '.join(conflicts)} differ from the run's settings in "
            f"{folder / RUN_FILE}; drop them to continue that run, or start a new run"
        )
    state = _saved_state(folder)
    options = TrainOptions.from_params(merged)
    if state is not None and options.epochs < state.epoch:
        raise fail(
            f"--epochs {options.epochs}: the run in {folder} has trained {state.epoch} epochs; pass "
            f"--epochs {state.epoch} or more"
        )
    return RunPlan(options, folder, False, every, True, state, started)


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether ``name`` was typed on the command line (not its default)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def read_run_file(folder: Path) -> dict[str, Any]:
    """``folder``'s ``run.json``, or a one-line exit saying what the folder is missing."""
    path = folder / RUN_FILE
    if not folder.is_dir():
        raise fail(f"--resume {folder}: no such folder (expected a hylo train run folder)")
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise fail(
            f"--resume {folder}: no {RUN_FILE} in it: not a run folder of this hylo train (runs "
            "started before --resume existed cannot be continued)"
        ) from None
    except (OSError, ValueError) as err:
        raise fail(f"--resume {folder}: cannot read {path}: {err}") from None
    if (
        not isinstance(data, dict)
        or data.get("format") != RUN_FORMAT
        or not isinstance(data.get("options"), dict)
    ):
        raise fail(f"--resume {folder}: {path} is not a run file of format {RUN_FORMAT}")
    return data


def _saved_state(folder: Path) -> TrainState | None:
    """The folder's saved state (None: interrupted before the first epoch ended)."""
    path = folder / STATE_FILE
    if not path.exists():
        return None
    try:
        return load_state(path)
    except StateFileError as err:
        raise fail(f"--resume {folder}: {err}") from None


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_.") or "run"


def run_name(options: TrainOptions, now: datetime) -> str:
    """``<trace>-<metric>-<UTC time>``: a trace path contributes its file name."""
    trace = Path(options.trace).stem if options.trace else "embedded"
    return f"{_slug(trace)}-{_slug(options.metric)}-{now.strftime('%Y%m%dT%H%M%SZ')}"


def _new_folder(root: Path, name: str) -> Path:
    """``root/name``, or ``name-2``, ``name-3``...: created here, so two runs never share one."""
    root.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10_000):
        folder = root / (name if n == 1 else f"{name}-{n}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise fail(f"{root}: no free run folder name for {name}; pass --out")


def open_run_folder(plan: RunPlan) -> Path:
    """Create (or, resuming, reopen) the run's folder and record its settings in ``run.json``."""
    now = datetime.now(UTC)
    if plan.out is None:
        out = _new_folder(DEFAULT_ROOT, run_name(plan.options, now))
    else:
        out = plan.out
        if plan.force and not plan.resuming:
            clear_run_files(out)
        out.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {
        "format": RUN_FORMAT,
        "command": "hylo train",
        "options": plan.options.to_json(),
        "created_at": plan.started.get("created_at", now.isoformat()),
        "resumed": [*plan.started.get("resumed", [])],
    }
    if plan.resuming:
        record["resumed"].append({"at": now.isoformat(), "epoch": plan.state.epoch if plan.state else 0})
    _write_json_atomic(out / RUN_FILE, record)
    return out


def clear_run_files(folder: Path) -> None:
    """``--force``: remove what a run writes (``RUN_OUTPUTS``), leave anything else alone."""
    for name in RUN_OUTPUTS:
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)
