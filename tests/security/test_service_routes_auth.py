"""Every service's own HTTP routes are guarded like the query API (issue 20, item 5).

The featurizer's ``/v1/predictor``, the prioritizer's ``/v1/model`` and the Slurm adapter's
``POST /v1/poll`` used to be open whatever the API settings said. The runtime now guards a service's
router by method (reads need ``read``, anything else ``admin``), leaves the probes open, and refuses
to start on a non-loopback address without tokens before it connects to anything.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from fastapi import APIRouter

from shared.bus.settings import BusSettings
from shared.service.api_auth import ApiAuthError
from shared.service.api_tokens import add_token
from shared.service.definition import ServiceContext, ServiceDefinition, Wiring
from shared.service.runtime import ServiceRuntime
from shared.service.settings import ServiceSettings
from tests.conftest_services import Bus


async def _build(_: ServiceContext) -> Wiring:
    router = APIRouter()

    @router.get("/v1/state")
    async def state() -> dict[str, str]:
        return {"state": "ok"}

    @router.post("/v1/poke")
    async def poke() -> dict[str, str]:
        return {"poked": "yes"}

    return Wiring(routes=[], router=router)


DEFINITION = ServiceDefinition(name="guarded", default_port=0, build=_build)


@pytest.mark.asyncio
async def test_a_services_own_routes_need_tokens_by_method_and_probes_stay_open(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = tmp_path / "tokens"
    read = add_token(tokens, "grafana", "read")
    admin = add_token(tokens, "ops", "admin")
    monkeypatch.setenv("HYLO_API_TOKENS_FILE", str(tokens))
    settings = ServiceSettings(http_port=0, replica="guarded-1")
    runtime = ServiceRuntime(
        DEFINITION, settings, bus.settings.model_copy(update={"subject_root": bus.subjects.root})
    )
    await runtime.start()
    try:
        transport = httpx.ASGITransport(app=runtime.app())
        async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:

            async def status(method: str, path: str, token: str | None = None) -> int:
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                return (await client.request(method, path, headers=headers)).status_code

            assert await status("GET", "/v1/state") == 401
            assert await status("GET", "/v1/state", "hylo_not-a-token") == 401
            assert await status("GET", "/v1/state", read) == 200
            assert await status("POST", "/v1/poke", read) == 403
            assert await status("POST", "/v1/poke", admin) == 200
            assert await status("GET", "/healthz") == 200
            assert await status("GET", "/metrics") == 200
    finally:
        if runtime.nc is not None:
            await runtime.nc.close()


@pytest.mark.asyncio
async def test_a_service_on_the_network_without_tokens_refuses_before_connecting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HYLO_API_TOKENS_FILE", raising=False)
    monkeypatch.delenv("HYLO_API_AUTH", raising=False)
    # a NATS URL nobody listens on: reaching it would hang or fail differently
    bus = BusSettings(nats_url="nats://127.0.0.1:1", nats_max_reconnect_attempts=0)
    runtime = ServiceRuntime(DEFINITION, ServiceSettings(http_host="0.0.0.0", http_port=0), bus)
    with pytest.raises(ApiAuthError, match="HYLO_API_TOKENS_FILE"):
        await runtime.start()
    assert runtime.nc is None
