"""``GET /v1/report``: the HTML report of a cluster, within a time budget and a cap on requests.

Why bounded: one report over a large store reads the whole range and draws figures (issue 20: 20 s
and 670 MB per request on 1M decision rows), so unbounded concurrent requests exhaust memory and a
slow one holds its client forever. At most ``report_max_concurrent`` requests are in progress (the
next gets 503 at once, with ``Retry-After``), each answers within ``report_timeout_s`` (504 after,
naming the setting), and figures are drawn one at a time: matplotlib's font cache and settings are
shared by threads, and a report keeps a CPU core busy for a second or more.

A render thread cannot be interrupted: one that outlives its request keeps the drawing lock until it
ends, so the requests behind it wait (within their own budget) instead of drawing beside it. Memory
is thus bounded by ``report_max_concurrent`` loaded reports plus the one being drawn.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.query.errors import BAD_INPUT, NOT_FOUND, UNAVAILABLE, BadParameter, check_window
from shared.query.schemas import ErrorBody
from shared.query.settings import QuerySettings
from shared.report import NotMigrated, ReportError, UnknownCluster, load_report_data, render_report
from shared.schemas.base import CLUSTER_PATTERN

DESCRIPTION = (
    "One self-contained HTML page (figures are PNG data URIs; the page loads nothing), as written by "
    "`hylo report`: wait, JCT and bounded slowdown per policy / model version and over time, GPU "
    "utilization, decision latency per stage (p50/p99 over time), fallbacks and their reasons per "
    "model version, and model promotions. `since`/`until` cut decisions by snapshot time and jobs by "
    "start time (cluster-clock seconds). Without `cluster`, the only cluster of the store; a store "
    "with no cluster gives a page that says there is no data. At most `HYLO_REPORT_MAX_CONCURRENT` "
    "reports are in progress (503 beyond), each within `HYLO_REPORT_TIMEOUT_S` (504 after)."
)


class ReportGate:
    """How many reports are in progress, the drawing lock, and each request's deadline."""

    def __init__(self, most: int, timeout_s: float) -> None:
        self.most = most
        self.timeout_s = timeout_s
        self.in_progress = 0
        self._drawing = asyncio.Lock()

    @asynccontextmanager
    async def admit(self) -> AsyncIterator[float]:
        """A slot for one request, yielding its deadline (loop time); 503 when all are taken."""
        if self.in_progress >= self.most:
            raise HTTPException(
                503,
                f"{self.in_progress} reports are in progress, the most at once "
                "(HYLO_REPORT_MAX_CONCURRENT); try again shortly",
                headers={"Retry-After": "1"},
            )
        self.in_progress += 1
        try:
            yield asyncio.get_running_loop().time() + self.timeout_s
        finally:
            self.in_progress -= 1

    async def draw(self, render: Callable[[], str], deadline: float) -> str:
        """``render()`` in a worker thread, one at a time, answered by ``deadline`` (TimeoutError)."""
        async with asyncio.timeout_at(deadline):
            await self._drawing.acquire()
        try:
            future = asyncio.ensure_future(asyncio.to_thread(render))
        except BaseException:
            self._drawing.release()
            raise
        future.add_done_callback(self._drawn)
        async with asyncio.timeout_at(deadline):
            return await asyncio.shield(future)

    def _drawn(self, future: asyncio.Future[str]) -> None:
        """The thread ended: the next report may draw (an abandoned one's error is read, not raised)."""
        self._drawing.release()
        if not future.cancelled():
            future.exception()


def add_report_routes(router: APIRouter, settings: QuerySettings) -> ReportGate:
    """Add ``/v1/report`` to ``router``; the gate it uses is returned (tests read its state)."""
    gate = ReportGate(settings.report_max_concurrent, settings.report_timeout_s)
    too_long = (
        f"the report took longer than {settings.report_timeout_s:g} s (HYLO_REPORT_TIMEOUT_S); ask for a "
        "shorter since/until window, or raise the setting"
    )

    @router.get(
        "/v1/report",
        tags=["reports"],
        summary="the HTML report of a cluster",
        description=DESCRIPTION,
        response_class=HTMLResponse,
        responses={
            200: {
                "description": "the report page",
                "content": {"text/html": {"example": '<!DOCTYPE html><html lang="en">...</html>'}},
            },
            **NOT_FOUND,
            **BAD_INPUT,
            **UNAVAILABLE,
            504: {"model": ErrorBody, "description": "the report took longer than HYLO_REPORT_TIMEOUT_S"},
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
        check_window(since, until)
        engine: AsyncEngine = request.app.state.engine
        async with gate.admit() as deadline:
            try:
                async with asyncio.timeout_at(deadline), engine.connect() as conn:
                    data = await load_report_data(conn, cluster=cluster, since=since, until=until)
                page = await gate.draw(lambda: render_report(data), deadline)
            except TimeoutError:
                if asyncio.get_running_loop().time() < deadline:  # the database's own timeout
                    raise HTTPException(503, "the database did not answer in time") from None
                raise HTTPException(504, too_long) from None
            except NotMigrated as err:
                raise HTTPException(503, f"database not migrated: {err}") from None
            except UnknownCluster as err:
                raise HTTPException(404, str(err)) from None
            except ReportError as err:
                raise BadParameter(err.parameter or "cluster", str(err), got=cluster) from None
        return HTMLResponse(page)

    return gate
