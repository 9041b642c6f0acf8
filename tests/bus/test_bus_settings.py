"""Bus settings: read from HYLO_* environment variables, secrets kept out of reprs."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import nats.errors
import pytest
from pydantic import SecretStr

from shared.bus import BusSettings, connect
from shared.bus.settings import message_limits
from shared.schemas.limits import DEFAULT_LIMITS
from tests.conftest_services import VENV_BIN, _wait_port, free_port


def test_settings_come_from_hylo_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYLO_NATS_URL", "nats://a:4222,nats://b:4222")
    monkeypatch.setenv("HYLO_NATS_TOKEN", "s3cret")
    monkeypatch.setenv("HYLO_MAX_DELIVER", "9")
    s = BusSettings()
    assert s.nats_url == "nats://a:4222,nats://b:4222" and s.max_deliver == 9
    assert s.nats_token is not None and s.nats_token.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(s)


def test_message_limits_are_settings_not_capped_by_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """A site with big queues raises HYLO_MAX_JOBS (issue 22, item 1); every decoder's limits come
    from message_limits. The server's max_payload no longer caps the message size: a bigger message
    travels through the object store (shared.bus.large), whole up to HYLO_MAX_MESSAGE_BYTES."""
    monkeypatch.setenv("HYLO_MAX_JOBS", "20000")
    monkeypatch.setenv("HYLO_MAX_TABLE_BYTES", "33554432")
    monkeypatch.setenv("HYLO_MAX_MESSAGE_BYTES", str(64 << 20))
    limits = message_limits(BusSettings(), max_payload=8 << 20)
    assert limits.max_jobs == 20_000 and limits.max_table_bytes == 32 << 20
    assert limits.max_message_bytes == 64 << 20
    assert message_limits(BusSettings(max_jobs=7), max_payload=1 << 30).max_jobs == 7
    defaults = message_limits(BusSettings(), max_payload=1 << 30)
    assert defaults.max_running == DEFAULT_LIMITS.max_running
    assert defaults.max_inflate_ratio == DEFAULT_LIMITS.max_inflate_ratio


@pytest.mark.asyncio
async def test_connect_passes_the_token(tmp_path: Path) -> None:
    binary = VENV_BIN / "nats-server"
    if not binary.exists():
        pytest.skip(f"no nats-server binary at {binary}")
    port = free_port()
    proc = subprocess.Popen(
        [str(binary), "-a", "127.0.0.1", "-p", str(port), "--auth", "s3cret"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_port(port, proc, "nats-server")
        url = f"nats://127.0.0.1:{port}"
        nc = await connect(BusSettings(nats_url=url, nats_token=SecretStr("s3cret"), nats_name="token-test"))
        assert nc.is_connected
        await nc.close()
        with pytest.raises(nats.errors.Error):  # refused, in bounded time
            bad = BusSettings(
                nats_url=url,
                nats_token=SecretStr("wrong"),
                nats_max_reconnect_attempts=1,
                nats_reconnect_wait_s=0,
            )
            await asyncio.wait_for(connect(bad), 10)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
