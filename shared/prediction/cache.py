"""Runtime-prediction cache: ``.npz`` files keyed by a hash of everything the predictor reads.

Why: ``predict_runtimes`` refits its models in batches over the whole trace (on full HPC2N about
190 fits, five minutes), and its result depends on the trace and the settings alone, never on the
policy simulated, so every ``--estimates predicted`` run on the same trace would pay that again.
The key is the SHA-256 of the exact inputs: the bytes (with dtype and shape) of every JobTable
column the predictor reads (``INPUT_COLUMNS``), the user names (``unknown`` is special), the
trace's time origin (hour-of-day features), every ``PredictorSettings`` field, the predictor's
``PREDICTOR_VERSION`` (bumped whenever its model or features change), scikit-learn's version and
this module's ``CACHE_FORMAT``; not a path, so a copied trace hits and any edited value misses.
Entries are plain ``.npz`` under ``<cache_dir>/predictions/`` (no pickle, so a cache file cannot
run code), written atomically (temporary file + rename); a corrupt or mismatched entry is ignored
and rewritten. ``get_settings().prediction_cache = False`` (``HYLO_PREDICTION_CACHE=0``) turns it
off. This module knows nothing of ``RuntimePredictions``: it stores named arrays, and
``shared.prediction.predictor`` converts.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from shared.config import get_settings
from shared.domain.jobs import JobTable
from shared.npz_files import save_npz_atomic

CACHE_FORMAT = 1
SUBDIR = "predictions"
#: every JobTable column the predictor (features, history, cold start, schedule) reads
INPUT_COLUMNS = (
    "submit",
    "runtime",
    "estimate",
    "logged_wait",
    "gpus",
    "gpu_milli",
    "type_set",
    "cpus_milli",
    "mem_mib",
    "user",
    "vc",
    "qos",
    "group",
    "app",
    "queue",
    "partition",
)
_KEY = "__key__"


def _sklearn_version() -> str:
    """From the package metadata, so a cache hit does not pay for importing scikit-learn."""
    try:
        return metadata.version("scikit-learn")
    except metadata.PackageNotFoundError:
        return "missing"


def table_digest(table: JobTable) -> str:
    """SHA-256 of the predictor's inputs in ``table`` (column bytes, names, dtypes, shapes)."""
    digest = hashlib.sha256()
    for name in INPUT_COLUMNS:
        values = np.ascontiguousarray(getattr(table, name))
        digest.update(f"{name}:{values.dtype.str}:{values.shape}".encode())
        digest.update(values.tobytes())
    digest.update(json.dumps({"users": list(table.users), "origin": repr(table.meta.origin)}).encode())
    return digest.hexdigest()


def cache_key(table: JobTable, settings: Mapping[str, Any], version: int) -> str:
    """A stable hex key of the table's inputs, the settings (all fields) and the versions."""
    payload = {
        "table": table_digest(table),
        "settings": dict(settings),
        "predictor": version,
        "sklearn": _sklearn_version(),
        "format": CACHE_FORMAT,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=repr).encode()).hexdigest()


def cache_file(cache_dir: Path, key: str) -> Path:
    return Path(cache_dir) / SUBDIR / f"{key}.npz"


def enabled(use_cache: bool | None) -> Path | None:
    """The cache folder, or None when caching is off (``use_cache``, else the setting)."""
    settings = get_settings()
    on = settings.prediction_cache if use_cache is None else use_cache
    return settings.cache_dir if on else None


def save_entry(target: Path, key: str, arrays: Mapping[str, npt.ArrayLike]) -> None:
    """Write atomically; an unwritable cache only warns (the predictions are still returned)."""
    try:
        save_npz_atomic(target, {**arrays, _KEY: np.asarray(key)})
    except OSError as err:
        warnings.warn(f"prediction cache not written ({target}): {err}", RuntimeWarning, stacklevel=2)


def load_entry(source: Path, key: str, names: tuple[str, ...]) -> dict[str, npt.NDArray[Any]] | None:
    """The arrays ``names`` of the entry, or None when it is missing, corrupt or for another key."""
    if not source.is_file():
        return None
    try:
        with np.load(source, allow_pickle=False) as npz:
            if str(npz[_KEY][()]) != key:
                return None
            return {name: np.asarray(npz[name]) for name in names}
    except Exception:
        return None
