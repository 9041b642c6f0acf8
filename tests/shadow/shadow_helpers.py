"""What the shadow mode tests share: real checkpoints, announcements, services run as in production."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from services.adapter_sim.stack import free_port
from services.prioritizer.models import checkpoint_sha256
from shared.bus import BusSettings, Publisher
from shared.bus.signing import Signer
from shared.registry import Announcement
from shared.schemas import ModelVersion, Subjects
from shared.service import ServiceDefinition, ServiceRuntime, ServiceSettings
from shared.store.settings import StoreSettings
from tests.schemas.message_factories import SPEC_DOC

RUNS = Path(__file__).parents[2] / "docs/results/runs"
#: two real trained checkpoints of the same feature schema (read-only), trained for different metrics
WAIT_MODEL = RUNS / "philly-easy-fcfs-wait/checkpoint"
BSLD_MODEL = RUNS / "philly-easy-fcfs-bsld/checkpoint"


def announcement(
    version: str, checkpoint: Path, status: str, *, shadow: bool = False, cluster: str = "c1", tag: str = ""
) -> ModelVersion:
    """A ModelVersion announcement as the registry publishes it (``Announcement``: its message id
    carries the correlation id, which ``tag`` makes unique, so a repeated status is not dropped)."""
    return Announcement.model_validate(
        {
            "cluster": cluster,
            "correlation_id": f"a-{version}-{status}-{int(shadow)}{tag}",
            "version": version,
            "sha256": checkpoint_sha256(checkpoint),
            "uri": str(checkpoint),
            "status": status,
            "created_at": datetime.now(UTC),
            "shadow": shadow,
        }
    )


#: the key these tests' prioritizers trust (``HYLO_MODEL_TRUST=signature``): they have no registry,
#: so only announcements signed with it are adopted (``services/prioritizer/trust.py``)
SIGNING_KEY = "shadow-tests-signing-key-0123456789"


def trust_signed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prioritizers started after this adopt announcements signed with ``SIGNING_KEY`` only."""
    monkeypatch.setenv("HYLO_MODEL_TRUST", "signature")
    monkeypatch.setenv("HYLO_MODEL_SIGNING_KEY", SIGNING_KEY)


def signed_publisher(publisher: Publisher) -> Publisher:
    """``publisher`` that signs model announcements with ``SIGNING_KEY``, as the registry does."""
    return Publisher(publisher.js, publisher.subjects, publisher.limits, signer=Signer(SIGNING_KEY.encode()))


def spec_file(tmp_path: Path) -> Path:
    spec = tmp_path / "c1.yaml"
    spec.write_text(json.dumps(SPEC_DOC))  # JSON is YAML
    return spec


@dataclass
class Services:
    """Service runtimes started in this process on one subject root; ``ports`` by service name."""

    ports: dict[str, int] = field(default_factory=dict)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)


@contextlib.asynccontextmanager
async def running(
    definitions: Sequence[ServiceDefinition],
    bus_settings: BusSettings,
    subjects: Subjects,
    spec: Path,
    *,
    database_url: str | None = None,
    suffix: str = "",
) -> AsyncIterator[Services]:
    """Start each service as its runtime does in production; stop them all on exit."""
    services = Services()
    settings_for_root = bus_settings.model_copy(update={"subject_root": subjects.root})
    try:
        for definition in definitions:
            port = free_port()
            services.ports[definition.name] = port
            settings = ServiceSettings(
                http_port=port, clusters={"c1": str(spec)}, replica=f"{definition.name}{suffix}"
            )
            store = StoreSettings(database_url=database_url) if database_url else None
            runtime = ServiceRuntime(definition, settings, settings_for_root, store)
            await runtime.start()
            services.tasks.append(asyncio.create_task(runtime.run(services.stop)))
        yield services
    finally:
        services.stop.set()
        for task in services.tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 15)
