"""The HTTP side of a service: ``/healthz``, ``/readyz``, ``/metrics`` (and the service's own routes).

Why liveness and readiness differ: ``/healthz`` says the process serves HTTP (restart it if not);
``/readyz`` says it can do its work now: the bus is connected, the database answers (for services
that write), its consumers are bound, and it is not shutting down. Orchestrators route traffic and
count healthy replicas by the second.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel

from shared.service.api_docs import install_api_docs
from shared.service.metrics import ServiceMetrics

Check = Callable[[], Awaitable[str | None]]


class Health(BaseModel):
    status: str
    service: str
    replica: str


class Readiness(BaseModel):
    ready: bool
    service: str
    replica: str
    problems: list[str]


def create_app(
    service: str,
    replica: str,
    metrics: ServiceMetrics,
    checks: list[Check],
    timeout_s: float,
    router: APIRouter | None = None,
    description: str = "",
) -> FastAPI:
    """The FastAPI app of one service replica; ``checks`` return None when fine, else a problem."""
    app = FastAPI(
        title=f"hylo {service}",
        description=description or f"Hylo {service} service",
        docs_url=None,  # FastAPI's pages load their assets from a CDN: install_api_docs serves ours
        redoc_url=None,
    )
    install_api_docs(app)

    @app.get("/healthz", response_model=Health, summary="Liveness: the process serves HTTP")
    async def healthz() -> Health:
        return Health(status="ok", service=service, replica=replica)

    @app.get(
        "/readyz",
        response_model=Readiness,
        summary="Readiness: bus connected, database reachable, consumers bound, not stopping",
        responses={503: {"model": Readiness}},
    )
    async def readyz() -> JSONResponse:
        problems = []
        for check in checks:
            try:
                problem = await asyncio.wait_for(check(), timeout_s)
            except TimeoutError:
                problem = f"{getattr(check, '__name__', 'check')}: no answer within {timeout_s} s"
            except Exception as err:  # a failing check is a readiness problem, not a 500
                problem = f"{getattr(check, '__name__', 'check')}: {type(err).__name__}: {err}"
            if problem:
                problems.append(problem)
        ready = not problems
        metrics.ready.labels(service).set(1 if ready else 0)
        body = Readiness(ready=ready, service=service, replica=replica, problems=problems)
        return JSONResponse(body.model_dump(), status_code=200 if ready else 503)

    @app.get("/metrics", summary="Prometheus text exposition", response_class=Response)
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    if router is not None:
        app.include_router(router)
    return app
