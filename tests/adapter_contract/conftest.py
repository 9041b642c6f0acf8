"""The contract tests run each assertion against every cluster adapter (``harness``, one per system).

The Slurm adapter runs against the real local Slurm that ``tests/adapter_slurm`` starts (its
``slurm`` session fixture, shared here), and skips only where that fixture does (no root, Slurm
not installable). The bus tests use the real NATS server of ``tests/conftest_services.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.adapter_contract.contract_harness import Harness, SimHarness, SlurmHarness
from tests.adapter_slurm.conftest import SlurmCluster, slurm
from tests.conftest_services import bus, nats_url

__all__ = ["bus", "harness", "nats_url", "slurm"]


@pytest.fixture(params=["sim", "slurm"])
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    """A fresh scene on one adapter's external system, cleaned up afterwards."""
    if request.param == "slurm":
        cluster: SlurmCluster = request.getfixturevalue("slurm")
        made: Harness = SlurmHarness(cluster)
    else:
        made = SimHarness()
    try:
        yield made
    finally:
        made.close()
