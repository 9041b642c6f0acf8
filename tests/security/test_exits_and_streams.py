"""Supervision-friendly exits and stream limits that fit the server (issue 20, item 6).

Before: a service whose NATS was gone for good exited 0, so a restart-on-failure supervisor never
restarted it; the streams of one subject root reserved 7.25 GiB and, on the shipped 20 GB server, the
third root failed with "insufficient storage". Each test starts its own nats-server.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from services.adapter_sim.stack import free_port
from shared.bus import connect, ensure_streams
from shared.bus.streams import StreamStorageError, stream_plans
from shared.schemas import Subjects
from tests.conftest_services import bus_settings
from tests.security.nats_server import private_nats

ROOT = Path(__file__).parents[2]


def test_a_service_exits_non_zero_with_one_line_when_nats_is_gone_for_good(tmp_path: Path) -> None:
    with private_nats(tmp_path) as (url, server):
        port = free_port()
        env = {
            **os.environ,
            "HYLO_NATS_URL": url,
            "HYLO_SUBJECT_ROOT": f"t{uuid.uuid4().hex[:12]}",
            "HYLO_HTTP_PORT": str(port),
            "HYLO_NATS_GONE_BUDGET_S": "2",
            "HYLO_NATS_MAX_RECONNECT_ATTEMPTS": "-1",  # only the budget decides
            "HYLO_NATS_RECONNECT_WAIT_S": "0.2",
        }
        log = tmp_path / "featurizer.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "services.featurizer"], cwd=ROOT, env=env, stdout=out, stderr=out
            )
            try:
                deadline = time.monotonic() + 60
                while True:
                    assert proc.poll() is None, log.read_text()
                    try:
                        if httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    assert time.monotonic() < deadline, log.read_text()
                    time.sleep(0.1)
                server.kill()  # NATS gone for good
                server.wait(timeout=10)
                status = proc.wait(timeout=60)
            finally:
                if proc.poll() is None:
                    proc.kill()
    text = log.read_text()
    assert status == 3, text
    lines = [line for line in text.splitlines() if "exiting with status 3" in line]
    assert len(lines) == 1, text
    assert "NATS unreachable for 2 s (HYLO_NATS_GONE_BUDGET_S)" in lines[0]


async def _roots(url: str, count: int, **settings: object) -> list[str]:
    """Create the streams of ``count`` fresh subject roots (file storage); returns the roots."""
    config = bus_settings(url, storage="file", **settings)
    nc = await connect(config)
    roots: list[str] = []
    try:
        js = nc.jetstream()
        for _ in range(count):
            root = f"t{uuid.uuid4().hex[:12]}"
            await ensure_streams(js, Subjects(root), config)
            roots.append(root)
    finally:
        await nc.close()
    return roots


@pytest.mark.asyncio
async def test_three_subject_roots_fit_a_small_store_and_the_old_limits_did_not(tmp_path: Path) -> None:
    # a 100 MiB store, each root's streams reserving 32 MiB together
    with private_nats(tmp_path, "  max_file_store: 104857600") as (url, _):
        assert len(await _roots(url, 3, stream_max_bytes=1 << 30, stream_root_max_bytes=32 << 20)) == 3
        with pytest.raises(StreamStorageError, match="HYLO_STREAM_ROOT_MAX_BYTES"):
            await _roots(url, 1, stream_max_bytes=1 << 30, stream_root_max_bytes=32 << 20)
    old = tmp_path / "old"
    old.mkdir()
    # the old limits: each work stream on its own 64 MiB (1 GiB scaled down like the store): not one root
    with private_nats(old, "  max_file_store: 104857600") as (url, _), pytest.raises(StreamStorageError):
        await _roots(url, 1, stream_max_bytes=64 << 20, stream_root_max_bytes=1 << 40)


@pytest.mark.asyncio
async def test_four_subject_roots_fit_the_shipped_server_with_the_default_settings(tmp_path: Path) -> None:
    shipped = (ROOT / "deploy/nats/nats.conf").read_text()
    found = re.search(r"max_file_store:\s*(\S+)", shipped)
    assert found is not None
    config = bus_settings("nats://unused", storage="file")
    per_root = sum(
        plan.config.max_bytes or 0
        for plan in stream_plans(
            Subjects("hylo"),
            config.model_copy(update={"stream_max_bytes": 1 << 30, "dead_max_bytes": 256 << 20}),
        )
    )
    assert per_root <= 4 << 30
    with private_nats(tmp_path, f"  max_file_store: {found.group(1)}") as (url, _):
        roots = await _roots(url, 4, stream_max_bytes=1 << 30, dead_max_bytes=256 << 20)
        assert len(roots) == 4
