"""The query API: decisions, jobs and model versions of the store, read-only, over HTTP.

Why a separate read-only service: analysts, dashboards and on-call engineers ask "why did this job
get that priority?" without database credentials or SQL; the API answers from the same tables the
services write (``docs/analysts.md``), pages through decisions with stable cursors, and never writes.
The OpenAPI document (``/docs``, ``/openapi.json``) is generated from the response models.

No ``from __future__ import annotations`` here: the page limits in the endpoints' annotations come
from the settings passed to ``create_app``, and FastAPI resolves string annotations against module
globals, where those settings are not.
"""

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Path, Query, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from shared.query import queries
from shared.query.cursor import CursorError, Order, decode_after, decode_cursor, encode_after
from shared.query.errors import BAD_INPUT, NOT_FOUND, UNAVAILABLE, BadParameter, check_window, install
from shared.query.report_route import ReportGate, add_report_routes
from shared.query.schemas import (
    ClusterList,
    ClusterOut,
    DecisionOut,
    DecisionPage,
    ErrorBody,
    Health,
    HistoryEntry,
    JobDetail,
    JobOut,
    ModelDetail,
    ModelList,
    ModelOut,
    ModelOutcomes,
    OutcomeOut,
    Readiness,
)
from shared.query.settings import QuerySettings
from shared.schemas.base import CLUSTER_PATTERN
from shared.service.api_auth import ApiGuard, ApiSecuritySettings, api_guard
from shared.service.api_docs import install_api_docs
from shared.store.engine import create_engine
from shared.store.migrate import current_revision, head_revision
from shared.store.settings import StoreSettings

JOB_PATTERN = r"^[^\s\x00-\x1f\x7f]{1,128}$"
CORRELATION_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"

TAGS = [
    {"name": "decisions", "description": "What was decided, for which job, by which policy or model."},
    {"name": "jobs", "description": "One job: its request, its outcome and every decision about it."},
    {"name": "models", "description": "Prioritizer model versions and how their decisions turned out."},
    {"name": "clusters", "description": "Clusters known to the store."},
    {"name": "reports", "description": "A self-contained HTML report of a cluster (docs/report.md)."},
    {"name": "operations", "description": "Health, readiness and Prometheus metrics."},
]


async def _connection(request: Request) -> AsyncIterator[AsyncConnection]:
    engine: AsyncEngine = request.app.state.engine
    async with engine.connect() as conn:
        yield conn


Conn = Annotated[AsyncConnection, Depends(_connection)]
ListCursor = Annotated[str | None, Query(max_length=512, description="`next_cursor` of the previous page")]
ClusterQuery = Annotated[
    str | None, Query(pattern=CLUSTER_PATTERN, description="only this cluster", examples=["prod-a"])
]


async def _require_cluster(conn: AsyncConnection, cluster: str) -> None:
    if not await queries.cluster_exists(conn, cluster):
        known = await queries.known_clusters(conn)
        listed = ", ".join(known) if known else "none yet"
        raise HTTPException(404, f"unknown cluster {cluster!r} (known: {listed})")


def _metrics(app: FastAPI) -> CollectorRegistry:
    """Request counts and latencies per route template, in a registry of this app's own."""
    registry = CollectorRegistry()
    labels = ("method", "route", "status")
    requests = Counter("hylo_query_requests", "HTTP requests served", labels, registry=registry)
    latency = Histogram(
        "hylo_query_request_seconds", "HTTP request latency", ("method", "route"), registry=registry
    )

    @app.middleware("http")
    async def observe(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        start = time.perf_counter()
        response = await call_next(request)
        route = getattr(request.scope.get("route"), "path", "unmatched")
        latency.labels(request.method, route).observe(time.perf_counter() - start)
        requests.labels(request.method, route, str(response.status_code)).inc()
        return response

    return registry


def _lifespan(store: StoreSettings) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: the engine of ``store`` opens with the app and is disposed with it."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # connections are opened per request: the API starts even while the database is still coming
        # up, and /readyz says when it can answer
        app.state.engine = create_engine(store.database_url, echo=store.database_echo)
        try:
            yield
        finally:
            await app.state.engine.dispose()

    return lifespan


def _add_operation_routes(app: FastAPI, settings: QuerySettings, registry: CollectorRegistry) -> None:
    """``/healthz``, ``/readyz`` and ``/metrics``: what the orchestrator and Prometheus ask."""

    @app.get("/healthz", tags=["operations"], summary="the process is alive")
    async def healthz() -> Health:
        return Health()

    @app.get(
        "/readyz",
        tags=["operations"],
        summary="the database answers and is migrated",
        responses={503: {"model": Readiness, "description": "not ready: `database` says why"}},
    )
    async def readyz(request: Request, response: Response) -> Readiness:
        head = head_revision()
        engine: AsyncEngine = request.app.state.engine
        try:
            async with asyncio.timeout(settings.ready_timeout_s):
                revision = await current_revision(engine)
        except Exception as err:  # any failure to reach the database means "not ready", with the reason
            response.status_code = 503
            return Readiness(status="not ready", database=f"unreachable: {type(err).__name__}", head=head)
        if revision is None:
            response.status_code = 503
            return Readiness(status="not ready", database="reachable, not migrated", head=head)
        return Readiness(status="ready", database="reachable", revision=revision, head=head)

    @app.get("/metrics", tags=["operations"], summary="Prometheus metrics", response_class=Response)
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


def _after(cursor: str | None, fields: int) -> list[str] | None:
    if cursor is None:
        return None
    try:
        return decode_after(cursor, fields)
    except CursorError as err:
        raise BadParameter("cursor", str(err), got=cursor) from err


def _add_cluster_routes(router: APIRouter, settings: QuerySettings) -> None:
    """``/v1/clusters``, by name, paged (at most ``settings.query_list_max`` a page)."""

    @router.get(
        "/v1/clusters",
        tags=["clusters"],
        summary="clusters in the store, by name",
        responses={**BAD_INPUT, **UNAVAILABLE},
    )
    async def clusters(
        conn: Conn,
        limit: Annotated[
            int, Query(ge=1, le=settings.query_list_max, description="items per page (HYLO_QUERY_LIST_MAX)")
        ] = settings.query_list_max,
        cursor: ListCursor = None,
    ) -> ClusterList:
        after = _after(cursor, 1)
        rows = await queries.list_clusters(conn, limit, after[0] if after else None)
        nxt = encode_after([rows[limit - 1]["name"]]) if len(rows) > limit else None
        return ClusterList(
            clusters=[ClusterOut.model_validate(r) for r in rows[:limit]], limit=limit, next_cursor=nxt
        )


def _add_decision_routes(router: APIRouter, settings: QuerySettings) -> None:
    """``/v1/decisions``: its page size limits come from ``settings``."""

    @router.get(
        "/v1/decisions",
        tags=["decisions"],
        summary="decision rows, filtered and paged",
        description=(
            "One row per job per decided snapshot, newest first by default. Filter by cluster, job, "
            "snapshot and a window of snapshot time (`since` inclusive, `until` exclusive, cluster-clock "
            "seconds). Page with `next_cursor`: pass it back as `cursor` with the same filters; rows that "
            "arrive meanwhile never shift a page."
        ),
        responses={**NOT_FOUND, **BAD_INPUT, **UNAVAILABLE},
    )
    async def decisions(
        conn: Conn,
        cluster: ClusterQuery = None,
        job_id: Annotated[
            str | None, Query(pattern=JOB_PATTERN, description="only this job", examples=["81234_7"])
        ] = None,
        correlation_id: Annotated[
            str | None, Query(pattern=CORRELATION_PATTERN, description="only this snapshot's decision")
        ] = None,
        since: Annotated[
            float | None,
            Query(allow_inf_nan=False, description="snapshot_time >= since (cluster clock, s)"),
        ] = None,
        until: Annotated[
            float | None,
            Query(allow_inf_nan=False, description="snapshot_time < until (cluster clock, s)"),
        ] = None,
        order: Annotated[Order, Query(description="by snapshot time: desc = newest first")] = "desc",
        limit: Annotated[
            int, Query(ge=1, le=settings.query_page_max, description="rows per page")
        ] = settings.query_page_default,
        cursor: Annotated[
            str | None, Query(max_length=512, description="`next_cursor` of the previous page")
        ] = None,
    ) -> DecisionPage:
        check_window(since, until)
        after = None
        if cursor is not None:
            try:
                after = decode_cursor(cursor, order)
            except CursorError as err:
                raise BadParameter("cursor", str(err), got=cursor) from err
        if cluster is not None:
            await _require_cluster(conn, cluster)
        rows, nxt = await queries.decision_page(
            conn,
            cluster=cluster,
            job_id=job_id,
            correlation_id=correlation_id,
            since=since,
            until=until,
            order=order,
            after=after,
            limit=limit,
        )
        return DecisionPage(
            items=[DecisionOut.model_validate(r._mapping) for r in rows],
            limit=limit,
            next_cursor=nxt.encode() if nxt else None,
        )


def _add_job_routes(router: APIRouter, settings: QuerySettings) -> None:
    """``/v1/jobs/{cluster}/{job_id}``: its history limit comes from ``settings``."""

    @router.get(
        "/v1/jobs/{cluster}/{job_id:path}",
        tags=["jobs"],
        summary="one job: request, outcome and why it got each priority",
        description=(
            "The job as first seen pending, its outcome once finished, and every decision about it (oldest "
            "first) with rank, priority, nodes, mode, policy or model version, fallback reason and the "
            "features that drove the priority. `started_job` marks the decision that started it."
        ),
        responses={**NOT_FOUND, **BAD_INPUT, **UNAVAILABLE},
    )
    async def job(
        conn: Conn,
        cluster: Annotated[str, Path(pattern=CLUSTER_PATTERN, examples=["prod-a"])],
        job_id: Annotated[str, Path(pattern=JOB_PATTERN, examples=["81234_7"])],
        history: Annotated[
            int,
            Query(
                ge=1, le=settings.query_history_max, description="at most this many decisions (the newest)"
            ),
        ] = min(1000, settings.query_history_max),
    ) -> JobDetail:
        await _require_cluster(conn, cluster)
        job = await queries.job_row(conn, cluster, job_id)
        outcome = await queries.outcome_row(conn, cluster, job_id)
        count, rows = await queries.job_history(conn, cluster, job_id, history)
        if job is None and outcome is None and count == 0:
            raise HTTPException(404, f"no job {job_id!r} in cluster {cluster!r}")
        started_by = outcome.correlation_id if outcome is not None else None
        entries = [
            HistoryEntry.model_validate({**r._mapping, "started_job": r.correlation_id == started_by})
            for r in rows
        ]
        job_out = None
        if job is not None:
            job_out = JobOut.model_validate({**job._mapping, "user": job.user_name})
        return JobDetail(
            cluster=cluster,
            job_id=job_id,
            job=job_out,
            outcome=OutcomeOut.model_validate(outcome._mapping) if outcome is not None else None,
            decision_count=count,
            truncated=count > len(entries),
            decisions=entries,
        )


def _add_model_routes(router: APIRouter, settings: QuerySettings) -> None:
    """``/v1/models`` (newest first, paged) and ``/v1/models/{version}``."""

    @router.get(
        "/v1/models",
        tags=["models"],
        summary="model versions, newest first",
        responses={**BAD_INPUT, **UNAVAILABLE},
    )
    async def models(
        conn: Conn,
        cluster: ClusterQuery = None,
        status: Annotated[
            Literal["candidate", "current", "retired", "external"] | None,
            Query(description="only this status"),
        ] = None,
        limit: Annotated[
            int, Query(ge=1, le=settings.query_list_max, description="items per page (HYLO_QUERY_LIST_MAX)")
        ] = settings.query_list_max,
        cursor: ListCursor = None,
    ) -> ModelList:
        after = _after(cursor, 2)
        key = None
        if after is not None:
            try:
                key = (datetime.fromisoformat(after[0]), after[1])
            except ValueError as err:
                raise BadParameter(
                    "cursor", "expected a next_cursor value returned by this API", got=cursor
                ) from err
        rows = await queries.list_models(conn, cluster, status, limit, key)
        nxt = None
        if len(rows) > limit:
            last = rows[limit - 1]
            nxt = encode_after([last.created_at.isoformat(), last.version])
        return ModelList(
            models=[ModelOut.model_validate(r._mapping) for r in rows[:limit]], limit=limit, next_cursor=nxt
        )

    @router.get(
        "/v1/models/{version}",
        tags=["models"],
        summary="one model version: card, use and outcomes",
        responses={**NOT_FOUND, **BAD_INPUT, **UNAVAILABLE},
    )
    async def model(
        conn: Conn, version: Annotated[str, Path(pattern=VERSION_PATTERN, examples=["m-2026-11-20"])]
    ) -> ModelDetail:
        row = await queries.model_row(conn, version)
        if row is None:
            raise HTTPException(404, f"no model version {version!r}")
        count, summary = await queries.model_usage(conn, version)
        values: dict[str, Any] = {**row._mapping, "decision_count": count}
        values["outcomes"] = ModelOutcomes.model_validate(summary) if summary is not None else None
        return ModelDetail.model_validate(values)


def create_app(
    store: StoreSettings | None = None,
    settings: QuerySettings | None = None,
    security: ApiSecuritySettings | None = None,
) -> FastAPI:
    """The query API over the store at ``store.database_url``; the engine opens with the app's lifespan.

    ``security`` (default: ``HYLO_API_*``) decides who may call the data routes; an API that would
    listen on a non-loopback ``settings.http_host`` without tokens raises ``ApiAuthError`` (one line).
    """
    store = store or StoreSettings()
    settings = settings or QuerySettings()
    guard = api_guard(security or ApiSecuritySettings(), settings.http_host, "the query API")
    app = FastAPI(
        title="Hylo query API",
        version="1",
        summary="Read-only access to Hylo's scheduling decisions, job outcomes and model versions.",
        description=(
            "Times named `*_s` are seconds on the cluster's clock; `*_at` are UTC wall-clock timestamps. "
            "Errors are `{detail, errors}` with `detail` naming the parameter and what was expected. "
            "Data routes need a bearer token of scope `read` when the service has tokens "
            "(docs/security.md); `/healthz`, `/readyz` and `/metrics` are open."
        ),
        openapi_tags=TAGS,
        lifespan=_lifespan(store),
        docs_url=None,  # FastAPI's pages load their assets from a CDN: install_api_docs serves ours
        redoc_url=None,
    )
    install_api_docs(app)
    install(app)
    registry = _metrics(app)
    # registered in this order, which is also the order of the OpenAPI document's paths
    _add_operation_routes(app, settings, registry)
    router, app.state.report_gate = _data_router(settings, guard)
    app.include_router(router)
    return app


def _data_router(settings: QuerySettings, guard: ApiGuard) -> tuple[APIRouter, ReportGate]:
    """Every data route, behind ``guard`` (scope read, rate limits), and the report's gate."""
    router = APIRouter(dependencies=[Depends(guard.require("read"))], responses=guard.responses(ErrorBody))
    _add_cluster_routes(router, settings)
    _add_decision_routes(router, settings)
    _add_job_routes(router, settings)
    _add_model_routes(router, settings)
    gate = add_report_routes(router, settings)
    return router, gate
