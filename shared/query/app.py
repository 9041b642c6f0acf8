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
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request, Response
from fastapi.responses import HTMLResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from shared.query import queries
from shared.query.cursor import CursorError, Order, decode_cursor
from shared.query.errors import BadParameter, install
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
from shared.report import NotMigrated, ReportError, UnknownCluster, load_report_data, render_report
from shared.schemas.base import CLUSTER_PATTERN
from shared.store.engine import create_engine
from shared.store.migrate import current_revision, head_revision
from shared.store.settings import StoreSettings

JOB_PATTERN = r"^[^\s\x00-\x1f\x7f]{1,128}$"
CORRELATION_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"

Responses = dict[int | str, dict[str, Any]]

NOT_FOUND: Responses = {404: {"model": ErrorBody, "description": "no such cluster, job or model version"}}
BAD_INPUT: Responses = {422: {"model": ErrorBody, "description": "a parameter is invalid; `detail` names it"}}
UNAVAILABLE: Responses = {
    503: {"model": ErrorBody, "description": "the database is unreachable or not migrated"}
}

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


def _check_window(since: float | None, until: float | None) -> None:
    """``until`` must come after ``since`` when both are given (the window is ``[since, until)``)."""
    if since is not None and until is not None and until <= since:
        raise BadParameter("until", f"expected a time after since={since}", got=until)


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


def _add_cluster_routes(app: FastAPI) -> None:
    """``/v1/clusters``."""

    @app.get("/v1/clusters", tags=["clusters"], summary="clusters in the store", responses=UNAVAILABLE)
    async def clusters(conn: Conn) -> ClusterList:
        rows = await queries.list_clusters(conn)
        return ClusterList(clusters=[ClusterOut.model_validate(r) for r in rows])


def _add_decision_routes(app: FastAPI, settings: QuerySettings) -> None:
    """``/v1/decisions``: its page size limits come from ``settings``."""

    @app.get(
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
        _check_window(since, until)
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


def _add_job_routes(app: FastAPI, settings: QuerySettings) -> None:
    """``/v1/jobs/{cluster}/{job_id}``: its history limit comes from ``settings``."""

    @app.get(
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


def _add_model_routes(app: FastAPI) -> None:
    """``/v1/models`` and ``/v1/models/{version}``."""

    @app.get(
        "/v1/models",
        tags=["models"],
        summary="model versions, newest first",
        responses={**BAD_INPUT, **UNAVAILABLE},
    )
    async def models(
        conn: Conn,
        cluster: ClusterQuery = None,
        status: Annotated[
            Literal["candidate", "current", "retired"] | None, Query(description="only this status")
        ] = None,
    ) -> ModelList:
        rows = await queries.list_models(conn, cluster, status)
        return ModelList(models=[ModelOut.model_validate(r._mapping) for r in rows])

    @app.get(
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


def _add_report_routes(app: FastAPI) -> None:
    """``/v1/report``: the HTML report of a cluster, drawn in a worker thread."""
    # one report is drawn at a time: matplotlib's font cache and settings are shared by threads, and a
    # report keeps a CPU core busy for a second or more
    report_lock = asyncio.Lock()

    @app.get(
        "/v1/report",
        tags=["reports"],
        summary="the HTML report of a cluster",
        description=(
            "One self-contained HTML page (figures are PNG data URIs; the page loads nothing), as written by "
            "`hylo report`: wait, JCT and bounded slowdown per policy / model version and over time, GPU "
            "utilization, decision latency per stage (p50/p99 over time), fallbacks and their reasons per "
            "model version, and model promotions. `since`/`until` cut decisions by snapshot time and jobs by "
            "start time (cluster-clock seconds). Without `cluster`, the only cluster of the store; a store "
            "with no cluster gives a page that says there is no data."
        ),
        response_class=HTMLResponse,
        responses={
            200: {
                "description": "the report page",
                "content": {"text/html": {"example": '<!DOCTYPE html><html lang="en">...</html>'}},
            },
            **NOT_FOUND,
            **BAD_INPUT,
            **UNAVAILABLE,
        },
    )
    async def report(
        request: Request,
        cluster: Annotated[
            str | None,
            Query(
                pattern=CLUSTER_PATTERN,
                description="the cluster (default: the only one; 422 when the store has several)",
                examples=["prod-a"],
            ),
        ] = None,
        since: Annotated[
            float | None,
            Query(allow_inf_nan=False, description="from this cluster-clock time (s), inclusive"),
        ] = None,
        until: Annotated[
            float | None,
            Query(allow_inf_nan=False, description="up to this cluster-clock time (s), exclusive"),
        ] = None,
    ) -> HTMLResponse:
        _check_window(since, until)
        engine: AsyncEngine = request.app.state.engine
        try:
            async with engine.connect() as conn:
                data = await load_report_data(conn, cluster=cluster, since=since, until=until)
        except NotMigrated as err:
            raise HTTPException(503, f"database not migrated: {err}") from None
        except UnknownCluster as err:
            raise HTTPException(404, str(err)) from None
        except ReportError as err:
            raise BadParameter(err.parameter or "cluster", str(err), got=cluster) from None
        async with report_lock:
            page = await asyncio.to_thread(render_report, data)
        return HTMLResponse(page)


def create_app(store: StoreSettings | None = None, settings: QuerySettings | None = None) -> FastAPI:
    """The query API over the store at ``store.database_url``; the engine opens with the app's lifespan."""
    store = store or StoreSettings()
    settings = settings or QuerySettings()
    app = FastAPI(
        title="Hylo query API",
        version="1",
        summary="Read-only access to Hylo's scheduling decisions, job outcomes and model versions.",
        description=(
            "Times named `*_s` are seconds on the cluster's clock; `*_at` are UTC wall-clock timestamps. "
            "Errors are `{detail, errors}` with `detail` naming the parameter and what was expected."
        ),
        openapi_tags=TAGS,
        lifespan=_lifespan(store),
    )
    install(app)
    registry = _metrics(app)
    # registered in this order, which is also the order of the OpenAPI document's paths
    _add_operation_routes(app, settings, registry)
    _add_cluster_routes(app)
    _add_decision_routes(app, settings)
    _add_job_routes(app, settings)
    _add_model_routes(app)
    _add_report_routes(app)
    return app
