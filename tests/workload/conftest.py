"""Shared fixtures for the workload-generator tests.

The repository root is put on ``sys.path`` so the tests run with a plain ``pytest tests/workload``
even before the project has packaging metadata. Workloads are generated once per session: the
generator is deterministic, so sharing them loses nothing and keeps the suite fast.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from shared.config import get_settings  # noqa: E402
from shared.domain.cluster import ClusterSpec, load_cluster_spec  # noqa: E402
from shared.domain.jobs import JobTable  # noqa: E402
from shared.workload import GeneratorParams, generate_workload  # noqa: E402

TRACES = get_settings().traces_dir


@pytest.fixture(scope="session")
def embedded() -> ClusterSpec:
    return load_cluster_spec("embedded")


@pytest.fixture(scope="session")
def default_workload(embedded: ClusterSpec) -> JobTable:
    """The embedded default: 20,000 jobs, seed 0, on the embedded cluster's types."""
    return generate_workload(20_000, 0, gpu_types=embedded.gpu_types)


@pytest.fixture(scope="session")
def big_workload() -> JobTable:
    """50,000 jobs on openb's type universe, for the statistical checks."""
    return generate_workload(50_000, 7)


@pytest.fixture(scope="session")
def params() -> GeneratorParams:
    return GeneratorParams()


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    if not (TRACES / "philly" / "pollux_philly.csv").exists():
        pytest.skip("public traces not available (only the development checkout has them)")
    return TRACES
