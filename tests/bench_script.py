"""Load a ``bench/`` script as a module, for the tests that run a tiny version of it.

Why by file and not ``import bench.<name>``: the scripts are run as files (``python bench/x.py``),
not as a package, and a test must get the same module a user runs. The module is registered under
``<name>_bench`` in ``sys.modules`` first, as dataclasses and pickling need.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_bench(name: str) -> ModuleType:
    """``bench/<name>.py`` as a module named ``<name>_bench``."""
    spec = importlib.util.spec_from_file_location(f"{name}_bench", ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
