"""Writing a ``.npz`` file atomically: the one way Hylo's on-disk caches store arrays.

Why one helper: the parsed-trace cache (``shared.traces.cache``) and the runtime-prediction cache
(``shared.prediction.cache``) both write plain ``.npz`` entries (no pickle, so a cache file cannot
run code) that a reader may open at any moment; a temporary file in the same folder renamed over
the target means a crash or a concurrent reader never sees a half-written entry. ``mkstemp``
creates the file readable by its owner only. Each cache keeps its own policy for a failed write
(the trace cache raises, the prediction cache warns).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt


def save_npz_atomic(target: Path, arrays: Mapping[str, npt.ArrayLike]) -> None:
    """Write ``arrays`` to ``target`` (its folder created if missing) through a temporary file
    renamed over it; the temporary file is removed if anything fails, and the error propagates."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".tmp")
    try:
        payload: dict[str, Any] = {name: np.asarray(values) for name, values in arrays.items()}
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **payload)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
