"""Fixtures for the runtime-predictor tests.

The tests build their own data (a few hundred jobs, ``helpers.py``) so the folder runs in seconds
and needs no public trace; the one test that reads a public trace uses ``traces_dir``, which skips
(with the reason) when the traces folder does not exist, as tests/traces does. Each test gets an empty
parsed-trace cache of its own (``HYLO_CACHE_DIR``), so none writes to the user's cache.
"""

from __future__ import annotations

# the trace tests' fixtures, the same here: a fresh cache per test, and the traces folder or a skip
from tests.traces.conftest import isolated_cache, traces_dir

__all__ = ["isolated_cache", "traces_dir"]
