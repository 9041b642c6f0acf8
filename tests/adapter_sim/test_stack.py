"""The local pipeline's processes: a real nats-server started and stopped, a broken service named."""

from __future__ import annotations

import asyncio
import socket
import uuid
from pathlib import Path

import pytest

from services.adapter_sim.stack import LocalStack, StackError, nats_server_binary
from shared.bus import BusSettings, connect, ensure_streams
from shared.schemas import Subjects
from tests.conftest_services import drop_streams


def _open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.3):
            return True
    except OSError:
        return False


def test_nats_server_starts_with_jetstream_and_large_payloads(tmp_path: Path) -> None:
    try:
        nats_server_binary()
    except StackError as err:
        pytest.skip(str(err))
    stack = LocalStack(tmp_path)
    url = stack.start_nats()
    port = int(url.rsplit(":", 1)[1])
    try:

        async def probe() -> tuple[int, list[str]]:
            settings = BusSettings(nats_url=url, subject_root="stacktest")
            nc = await connect(settings)
            try:
                names = await ensure_streams(nc.jetstream(), Subjects("stacktest"), settings)
                return nc.max_payload, names
            finally:
                await nc.close()

        max_payload, streams = asyncio.run(probe())
        assert max_payload == 8 << 20
        assert "STACKTEST_SNAPSHOTS" in streams
        assert (tmp_path / "nats").is_dir()  # JetStream stores in the run's folder
    finally:
        stack.stop()
    assert not _open(port)
    assert stack.children == []


def test_a_service_that_exits_is_named_with_its_log(tmp_path: Path) -> None:
    stack = LocalStack(tmp_path)
    stack.start_services({"HYLO_NATS_URL": "nats://127.0.0.1:1"}, names=("no_such_service",))
    try:
        with pytest.raises(StackError, match=r"no_such_service exited with status 1") as info:
            stack.wait_ready(timeout_s=60)
        assert "No module named services.no_such_service" in str(info.value)
    finally:
        stack.stop()


def test_a_service_whose_port_was_taken_is_restarted_elsewhere(tmp_path: Path, nats_url: str) -> None:
    """The race of free ports: another program binds the port first. The service exits with
    'address already in use' and is started again on a new port; readiness is checked against
    that process (its service and replica name), not whatever answers on the old port."""
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    stack = LocalStack(tmp_path)
    env = {
        "HYLO_NATS_URL": nats_url,
        "HYLO_SUBJECT_ROOT": f"t{uuid.uuid4().hex[:10]}",
        "HYLO_STORAGE": "memory",
        "HYLO_CLUSTERS": '{"embedded": "embedded"}',
    }
    try:
        (first,) = stack.start_services(env, names=("featurizer",), ports={"featurizer": taken})
        stack.wait_ready(timeout_s=120)
        (now,) = stack.services()
        assert now.port != taken
        assert now.retries == 1
        assert now.replica == first.replica
        assert "address already in use" in (tmp_path / "featurizer.log").read_text().lower()
    finally:
        stack.stop()
        squatter.close()
        drop_streams(nats_url, env["HYLO_SUBJECT_ROOT"])
