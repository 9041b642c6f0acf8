"""Every error the query API returns is one readable line naming the parameter and what was expected.

Why custom handlers: FastAPI's default 422 body is a list of pydantic error dicts, and an unhandled
database error is a 500 with a traceback in the log and nothing useful for the client. Here a bad
parameter says which one, where, what was expected and what came; a missing row is a 404 that says
what was looked for; an unreachable or unmigrated database is a 503, never a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException

from shared.query.schemas import ErrorBody, ParamError

log = logging.getLogger(__name__)

#: what a parameter must look like, said in words instead of a regular expression
EXPECTED = {
    "cluster": "a cluster name: 1-63 letters, digits, '-' or '_', starting with a letter or digit",
    "job_id": "a job id: 1-128 printable characters without whitespace",
    "correlation_id": "a correlation id: 1-64 letters, digits, '-' or '_'",
    "version": "a model version: 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
}


Responses = dict[int | str, dict[str, Any]]

NOT_FOUND: Responses = {404: {"model": ErrorBody, "description": "no such cluster, job or model version"}}
BAD_INPUT: Responses = {422: {"model": ErrorBody, "description": "a parameter is invalid; `detail` names it"}}
UNAVAILABLE: Responses = {
    503: {"model": ErrorBody, "description": "the database is unreachable or not migrated"}
}


class BadParameter(Exception):
    """A parameter that passed type checks but is still unusable (a foreign cursor, until < since)."""

    def __init__(self, parameter: str, problem: str, got: Any = None, location: str = "query") -> None:
        super().__init__(f"{location} parameter '{parameter}': {problem}")
        self.error = ParamError(parameter=parameter, location=location, problem=problem, got=got)


def check_window(since: float | None, until: float | None) -> None:
    """``until`` must come after ``since`` when both are given (the window is ``[since, until)``)."""
    if since is not None and until is not None and until <= since:
        raise BadParameter("until", f"expected a time after since={since}", got=until)


def _param_errors(raw: Sequence[Any]) -> list[ParamError]:
    out = []
    for err in raw:
        loc = [str(part) for part in err.get("loc", ())]
        location = loc[0] if loc else "request"
        parameter = ".".join(loc[1:]) or location
        problem = str(err.get("msg", "invalid value"))
        if err.get("type") == "string_pattern_mismatch" and parameter in EXPECTED:
            problem = f"expected {EXPECTED[parameter]}"
        got = err.get("input")
        out.append(ParamError(parameter=parameter, location=location, problem=problem, got=got))
    return out


def _line(errors: list[ParamError]) -> str:
    parts = []
    for e in errors:
        got = "" if e.got is None else f" (got {e.got!r})"
        parts.append(f"{e.location} parameter '{e.parameter}': {e.problem}{got}")
    return "; ".join(parts)


def _json(status: int, body: ErrorBody) -> JSONResponse:
    return JSONResponse(status_code=status, content=body.model_dump(mode="json"))


async def on_validation(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = _param_errors(exc.errors())
    return _json(422, ErrorBody(detail=_line(errors), errors=errors))


async def on_bad_parameter(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, BadParameter)
    return _json(422, ErrorBody(detail=_line([exc.error]), errors=[exc.error]))


async def on_http(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    return JSONResponse(
        status_code=exc.status_code,
        content=ErrorBody(detail=str(exc.detail)).model_dump(mode="json"),
        headers=exc.headers,
    )


async def on_database(request: Request, exc: Exception) -> JSONResponse:
    """The database is down, unreachable or not migrated: the client can retry; the log has the cause."""
    log.error("database error on %s %s: %s", request.method, request.url.path, exc, exc_info=exc)
    kind = type(getattr(exc, "orig", None) or exc).__name__
    detail = f"database unavailable or not migrated ({kind}); the query service log has the cause"
    return _json(503, ErrorBody(detail=detail))


def install(app: FastAPI) -> None:
    """Register the handlers above on ``app``."""
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(BadParameter, on_bad_parameter)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(DBAPIError, on_database)
    app.add_exception_handler(OSError, on_database)
