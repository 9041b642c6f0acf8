"""One local Ray per test module: two CPUs, no dashboard, quiet.

Why a Ray per module and not per test: starting one takes seconds; ``hylo train``/``evaluate``
with ``--ray`` find it already held by the process and use it as it is (``ray_session``), which is
what a library caller's Ray gets too. ``ray`` is imported plainly: it is part of the test
environment (``scripts/bootstrap.sh`` installs ``.[ray]``), and a missing install must fail here,
not skip.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import ray


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        logging_level=logging.ERROR,
        log_to_driver=False,
        object_store_memory=128 * 1024 * 1024,
    )
    try:
        yield
    finally:
        ray.shutdown()
