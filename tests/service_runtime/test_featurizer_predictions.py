"""The featurizer service learns runtimes from the outcomes on a real bus: after outcomes are
published, the next snapshot's views carry the live predictor's (finite, model-made) predictions."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.adapter_sim.stack import free_port
from services.featurizer.service import DEFINITION as FEATURIZER
from shared.schemas import JobOutcome, PendingJob, PendingJobs
from shared.service import ServiceRuntime, ServiceSettings
from shared.store.settings import StoreSettings
from tests.bus.bus_helpers import read_all
from tests.conftest_services import Bus
from tests.schemas.message_factories import snapshot
from tests.service_runtime.runtime_helpers import spec_and_store


def jobs(prefix: str, n: int, start: float) -> PendingJobs:
    return PendingJobs.of(
        [
            PendingJob(
                job_id=f"{prefix}{i}",
                submit_s=start + i,
                gpus=1 + i % 2,
                est_runtime_s=3_600.0,
                user=f"u{i % 3}",
                partition="a",
            )
            for i in range(n)
        ]
    )


async def status(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as client:
        got = await client.get(f"{url}/v1/predictor")
        got.raise_for_status()
        body: dict[str, Any] = got.json()
        return body


async def until(url: str, check: Any, timeout: float = 30.0) -> dict[str, Any]:
    for _ in range(int(timeout / 0.1)):
        with contextlib.suppress(httpx.TransportError, KeyError):
            body = await status(url)
            if check(body):
                return body
        await asyncio.sleep(0.1)
    raise AssertionError(f"not reached in {timeout} s: {await status(url)}")


@pytest.mark.asyncio
async def test_outcomes_on_the_bus_fill_the_next_snapshots_predictions(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {
        "LIVE": "true",  # opt-in (off by default)
        "MIN_TRAIN": "12",
        "MAX_ITER": "5",
        "BAND_ITER": "5",
        "MIN_SAMPLES_LEAF": "2",
    }.items():
        monkeypatch.setenv(f"HYLO_PREDICTOR_{name}", value)
    spec, _ = await spec_and_store(tmp_path, "featurizer")
    port = free_port()
    settings = ServiceSettings(http_port=port, clusters={"c1": str(spec)}, replica="featurizer")
    bus_settings = bus.settings.model_copy(update={"subject_root": bus.subjects.root})
    runtime = ServiceRuntime(
        FEATURIZER, settings, bus_settings, StoreSettings(database_url="sqlite+aiosqlite:///:memory:")
    )
    await runtime.start()
    stop = asyncio.Event()
    task = asyncio.create_task(runtime.run(stop))
    url = f"http://127.0.0.1:{port}"
    try:
        first = snapshot(correlation_id="s1", sequence=1).model_copy(update={"pending": jobs("j", 16, 0.0)})
        await bus.publisher.publish(first)
        await read_all(bus.js, bus.subjects.all_clusters("features"), expected=1)
        cold = await until(url, lambda b: b["clusters"]["c1"]["last_snapshot"]["jobs"] > 0)
        c1 = cold["clusters"]["c1"]
        assert c1["predictor"]["fits"] == 0 and c1["predictor"]["predicted_by_source"] == {
            "user estimate": 16
        }
        for i in range(16):  # each job ran a multiple of 10 minutes by its user
            start = 50.0 + i
            end = start + 600.0 * (1 + i % 3)
            outcome = JobOutcome(
                cluster="c1",
                correlation_id="s1",
                job_id=f"j{i}",
                submit_s=float(i),
                start_s=start,
                end_s=end,
                gpus=1,
            )
            await bus.publisher.publish(outcome)
        await until(url, lambda b: b["clusters"]["c1"]["predictor"]["fits"] >= 1)
        second = snapshot(correlation_id="s2", sequence=2).model_copy(
            update={"pending": jobs("k", 6, 5_000.0)}
        )
        await bus.publisher.publish(second)
        body = await until(
            url, lambda b: set(b["clusters"]["c1"]["last_snapshot"]["predicted_s_first"]) >= {"k0"}
        )
        last = body["clusters"]["c1"]["last_snapshot"]
        assert last["jobs"] == 6 and last["finite_predictions"] == 6
        assert body["clusters"]["c1"]["predictor"]["predicted_by_source"]["model"] == 6
        assert all(v != 3_600.0 for v in last["predicted_s_first"].values())  # not the estimate
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)
