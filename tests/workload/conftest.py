"""Shared fixtures for the workload-generator tests.

Workloads are generated once per session: the
generator is deterministic, so sharing them loses nothing and keeps the suite fast.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.config import get_settings
from shared.domain.cluster import ClusterSpec, load_cluster_spec
from shared.domain.jobs import JobTable
from shared.workload import GeneratorParams, generate_workload

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
