"""The trainer service: retrains a cluster's prioritizer on demand, on a schedule, or on drift.

- ``POST /v1/retrain`` starts a run (``services.trainer.run``) in the background and answers 202
  with its id, or 409 when a run is already going (one at a time: runs are CPU-bound and each
  fine-tunes the model the previous one may have promoted);
- ``GET /v1/status`` says what is running, the last runs' reports (newest first), the last drift
  check and when the next scheduled run and drift check are due;
- a **schedule** (``HYLO_TRAINER_INTERVAL_S`` > 0) starts a run every interval;
- the **drift check** (``HYLO_TRAINER_DRIFT_CHECK_S`` > 0) compares, every interval, the jobs the
  current model was trained on (its card's ``data_window``) with the jobs submitted in the last
  ``drift_recent_s`` seconds (``shared.retrain.drift``), and starts a run when the PSI reaches
  ``drift_threshold``. A cluster without a current model, or a model whose card has no data window
  (trained by hand), gives no verdict: the schedule or an API call retrains it.

The service has no bus route: it reads the store, and publishes only through the registry (a
promotion's ``ModelVersion`` on ``models``). ``/healthz``, ``/readyz`` (NATS and the database) and
``/metrics`` come from the shared runtime and are open; the two routes above are behind the API
guard (``shared.service.api_auth``, ``HYLO_API_*``): ``POST /v1/retrain`` needs a token of scope
``admin`` (a run costs minutes of CPU and may promote a model), ``GET /v1/status`` one of scope
``read``, and both are rate-limited per client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Depends, HTTPException
from prometheus_client import Counter, Gauge
from pydantic import BaseModel, Field
from sqlalchemy.ext.asyncio import AsyncEngine

from services.trainer.run import RetrainReport, new_run_id, retrain_once
from services.trainer.settings import TrainerSettings
from shared.bus.publisher import Publisher
from shared.registry import Registry
from shared.retrain import DriftResult, latest_submit, queue_drift
from shared.service import ServiceContext, ServiceDefinition, Wiring
from shared.service.api_auth import ApiGuard
from shared.store import upgrade

log = logging.getLogger("hylo.trainer")

HISTORY = 20  # reports kept for /v1/status


class RetrainRequest(BaseModel):
    reason: str = Field(default="api", max_length=200, description="recorded as the run's trigger")


class RetrainAccepted(BaseModel):
    run_id: str
    cluster: str
    trigger: str


class TrainerStatus(BaseModel):
    cluster: str
    running: dict[str, Any] | None
    runs: list[dict[str, Any]]
    last_drift: dict[str, Any] | None
    next_run_in_s: float | None
    next_drift_check_in_s: float | None


@dataclass
class Trainer:
    """The service's state: one run at a time, the recent reports, the last drift verdict."""

    engine: AsyncEngine
    publisher: Publisher | None
    settings: TrainerSettings
    cluster: str
    spec_arg: str
    base_policy: str
    reports: deque[RetrainReport] = field(default_factory=lambda: deque(maxlen=HISTORY))
    running: RetrainReport | None = None
    task: asyncio.Task[RetrainReport] | None = None
    last_drift: dict[str, Any] | None = None
    next_run_at: float | None = None
    next_drift_at: float | None = None
    on_report: Callable[[RetrainReport], None] | None = None
    on_drift: Callable[[DriftResult], None] | None = None

    def start(self, trigger: str) -> RetrainReport | None:
        """Start a run in the background; None if one is already running."""
        if self.running is not None:
            return None
        report = RetrainReport(run_id=new_run_id(), cluster=self.cluster, trigger=trigger)
        self.running = report
        self.task = asyncio.create_task(self._run(report), name=f"retrain-{report.run_id}")
        return report

    async def _run(self, report: RetrainReport) -> RetrainReport:
        log.info("retrain %s (%s) started", report.run_id, report.trigger)
        try:
            await retrain_once(
                self.engine,
                self.publisher,
                self.settings,
                cluster=self.cluster,
                spec_arg=self.spec_arg,
                base_policy=self.base_policy,
                trigger=report.trigger,
                report=report,
            )
        except Exception as err:  # a bug must not kill the service; the report says what happened
            log.exception("retrain %s crashed", report.run_id)
            report.status, report.reason = "failed", f"{type(err).__name__}: {err}"
        finally:
            if report.status == "running":  # cancelled (the service is stopping)
                report.status, report.reason = "cancelled", "the service stopped during the run"
            self.running = None
            self.reports.appendleft(report)
            if self.on_report is not None:
                self.on_report(report)
        log.info("retrain %s: %s (%s)", report.run_id, report.status, report.reason)
        return report

    async def check_drift(self) -> DriftResult | None:
        """The drift verdict between the current model's data window and the recent jobs."""
        current = await Registry(self.engine).current(self.cluster)
        now = time.time()
        if current is None:
            self.last_drift = {"at": now, "drifted": False, "reason": "no current model to compare with"}
            return None
        window = (current.card.get("training") or {}).get("extra", {}).get("data_window")
        newest = await latest_submit(self.engine, self.cluster)
        if not (isinstance(window, list) and len(window) == 2) or newest is None:
            reason = (
                "the current model's card has no data_window" if newest is not None else "no finished jobs"
            )
            self.last_drift = {"at": now, "drifted": False, "reason": reason}
            return None
        reference = (float(window[0]), float(window[1]) + 1e-9)  # inclusive of its last submit
        recent = (max(newest - self.settings.drift_recent_s, reference[1]), None)
        result = await queue_drift(
            self.engine,
            self.cluster,
            reference=reference,
            recent=recent,
            threshold=self.settings.drift_threshold,
            min_jobs=self.settings.drift_min_jobs,
        )
        self.last_drift = {"at": now, "model": current.version, **_json_safe(result.to_dict())}
        if self.on_drift is not None:
            self.on_drift(result)
        return result

    async def schedule_loop(self) -> None:
        interval = self.settings.interval_s
        while True:
            self.next_run_at = time.monotonic() + interval
            await asyncio.sleep(interval)
            if self.start("schedule") is None:
                log.info("scheduled retrain skipped: a run is in progress")

    async def drift_loop(self) -> None:
        interval = self.settings.drift_check_s
        while True:
            self.next_drift_at = time.monotonic() + interval
            await asyncio.sleep(interval)
            try:
                result = await self.check_drift()
            except Exception as err:  # the database may be down for a while: try again next time
                log.warning("drift check failed: %s: %s", type(err).__name__, err)
                continue
            if result is not None and result.drifted and self.start("drift") is None:
                log.info("drift detected but a run is in progress")

    def status(self) -> TrainerStatus:
        now = time.monotonic()
        return TrainerStatus(
            cluster=self.cluster,
            running=_json_safe(self.running.to_dict()) if self.running else None,
            runs=[_json_safe(r.to_dict()) for r in self.reports],
            last_drift=self.last_drift,
            next_run_in_s=max(0.0, self.next_run_at - now) if self.next_run_at is not None else None,
            next_drift_check_in_s=max(0.0, self.next_drift_at - now)
            if self.next_drift_at is not None
            else None,
        )


def _json_safe(value: Any) -> Any:
    """Non-finite floats become None: JSON has no NaN or infinity."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def choose_cluster(settings: TrainerSettings, clusters: dict[str, str]) -> tuple[str, str]:
    """(cluster name, its spec preset or file) from ``HYLO_TRAINER_CLUSTER`` and ``HYLO_CLUSTERS``."""
    name = settings.cluster or next(iter(clusters), None)
    if name is None or name not in clusters:
        raise ValueError(
            f"trainer cluster {name!r} is not in HYLO_CLUSTERS ({sorted(clusters)}); "
            "set HYLO_TRAINER_CLUSTER to one of them"
        )
    return name, clusters[name]


def trainer_router(trainer: Trainer, guard: ApiGuard) -> APIRouter:
    """``POST /v1/retrain`` (scope admin) and ``GET /v1/status`` (scope read) of ``trainer``."""
    router = APIRouter(responses=guard.responses())

    @router.post(
        "/v1/retrain",
        status_code=202,
        response_model=RetrainAccepted,
        summary="Start a retraining run (scope admin)",
        dependencies=[Depends(guard.require("admin"))],
    )
    async def retrain(request: RetrainRequest | None = None) -> RetrainAccepted:
        trigger = (request.reason if request else "api") or "api"
        report = trainer.start(trigger)
        if report is None:
            running = trainer.running
            raise HTTPException(409, f"a run is in progress: {running.run_id if running else '?'}")
        return RetrainAccepted(run_id=report.run_id, cluster=trainer.cluster, trigger=trigger)

    @router.get(
        "/v1/status",
        response_model=TrainerStatus,
        summary="Running run, recent runs, drift (scope read)",
        dependencies=[Depends(guard.require("read"))],
    )
    async def status() -> TrainerStatus:
        return trainer.status()

    return router


async def build(ctx: ServiceContext) -> Wiring:
    settings = TrainerSettings()
    assert ctx.engine is not None  # needs_store
    await upgrade(ctx.engine)
    cluster, spec_arg = choose_cluster(settings, ctx.settings.clusters)
    trainer = Trainer(ctx.engine, ctx.publisher, settings, cluster, spec_arg, ctx.settings.base_policy)
    runs = Counter(
        "hylo_trainer_runs",
        "Retraining runs finished, by trigger and outcome",
        ["service", "trigger", "status"],
        registry=ctx.metrics.registry,
    )
    drift_psi = Gauge(
        "hylo_trainer_drift_psi",
        "Last drift check: PSI of each queue distribution (recent vs the current model's data)",
        ["service", "feature"],
        registry=ctx.metrics.registry,
    )
    trainer.on_report = lambda r: runs.labels(ctx.name, r.trigger, r.status).inc()

    def record_drift(result: DriftResult) -> None:
        for feature, value in result.per_feature.items():
            drift_psi.labels(ctx.name, feature).set(value)

    trainer.on_drift = record_drift
    loops: list[asyncio.Task[None]] = []
    if settings.interval_s > 0:
        loops.append(asyncio.create_task(trainer.schedule_loop(), name="trainer-schedule"))
    if settings.drift_check_s > 0:
        loops.append(asyncio.create_task(trainer.drift_loop(), name="trainer-drift"))

    # the runtime's guard: it refused to start before anything connected if the API would be open
    router = trainer_router(trainer, ctx.guard)

    async def on_stop() -> None:
        for task in loops:
            task.cancel()
        if trainer.task is not None and not trainer.task.done():
            # a run holds a worker thread that cannot be interrupted; its result is lost, and the
            # candidate it may have registered stays a candidate
            trainer.task.cancel()
        for loop in loops:
            with contextlib.suppress(BaseException):
                await loop
        if trainer.task is not None:
            with contextlib.suppress(BaseException):
                await trainer.task

    return Wiring(routes=[], router=router, router_guarded=True, on_stop=on_stop)


DEFINITION = ServiceDefinition(
    name="trainer",
    default_port=8106,
    build=build,
    needs_store=True,
    description="retrains the prioritizer from recorded outcomes; gated promotion through the registry",
)
