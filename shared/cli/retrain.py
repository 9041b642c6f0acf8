"""``hylo retrain``: one retraining run of the trainer service, on demand.

By default it asks the running trainer service (``POST /v1/retrain`` on ``--url``) and, with
``--wait`` (the default), follows ``GET /v1/status`` until the run is over. ``--local`` runs the
same run in this process instead (``services.trainer.run.retrain_once``), against the database
(``--database``/``--database-url``: a SQLite file path or a SQLAlchemy URL; default
``HYLO_DATABASE_URL``; a SQLite file must exist: the run rebuilds its workload from it) and NATS
(``HYLO_NATS_URL`` or ``--nats-url``), with the trainer's settings (``HYLO_TRAINER_*``) and the
cluster map (``HYLO_CLUSTERS``).

NATS is needed only to announce a promotion. Where none answers at ``HYLO_NATS_URL`` and
``--nats-url`` was not given (the usual case after ``hylo run``, which stops the server it started),
the run goes on without it: the candidate is trained, registered and gated, and the verdict is kept
on it (``passed``: not promoted, ``hylo models promote VERSION --nats-url ...`` can do that later;
or ``refused``, with the gate's reason). A ``--nats-url`` given and not answering is an error.

When the service has API tokens (docs/security.md), ``--token`` (or ``HYLO_API_TOKEN``) is sent as
``Authorization: Bearer``: the run needs a token of scope ``admin``.

Exit codes: 0 a new model was promoted; 1 the run finished without a promotion (the gate refused
the candidate or passed it with no NATS to announce it on, or there were too few jobs: the reason
is printed); 2 an error (the service is unreachable, a run is already going, the run failed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Annotated, Any

import typer
from rich.markup import escape

from shared.cli.common import DatabaseOpt, console, existing_database, fail, migrated_engine

__all__ = ["retrain_command"]

DEFAULT_URL = "http://127.0.0.1:8106"


def _print_report(report: dict[str, Any]) -> int:
    status = report.get("status")
    colour = {"promoted": "green", "passed": "yellow", "refused": "yellow", "skipped": "yellow"}.get(
        str(status), "red"
    )
    console.print(
        f"run [bold]{escape(str(report.get('run_id')))}[/] ({escape(str(report.get('trigger')))}) on "
        f"{escape(str(report.get('cluster')))}: [{colour}]{escape(str(status))}[/]",
        highlight=False,
    )
    if report.get("reason"):
        console.print(f"  {escape(str(report['reason']))}", highlight=False, soft_wrap=True)
    for key in ("version", "fine_tuned_from", "recorded_jobs", "workload_jobs", "checkpoint", "seconds"):
        if report.get(key) is not None:
            console.print(f"  {key}: {escape(str(report[key]))}", highlight=False)
    for note in report.get("notes") or []:
        console.print(f"  note: {escape(str(note))}", highlight=False)
    return 0 if status == "promoted" else 1 if status in ("passed", "refused", "skipped") else 2


def _remote(url: str, reason: str, wait: bool, timeout_s: float, token: str | None) -> int:
    import httpx

    base = url.rstrip("/")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with httpx.Client(timeout=10, headers=headers) as client:
            answer = client.post(f"{base}/v1/retrain", json={"reason": reason})
            if answer.status_code in (401, 403):
                detail = answer.text[:300]
                with contextlib.suppress(ValueError):
                    detail = str(answer.json().get("detail", detail))
                raise fail(
                    f"the trainer at {base} refused the request ({answer.status_code}: {detail}); pass "
                    "--token or set HYLO_API_TOKEN to a token of scope admin (hylo tokens create)"
                )
            if answer.status_code == 409:
                raise fail(f"the trainer at {base} is busy: {answer.json().get('detail', answer.text)}")
            if answer.status_code != 202:
                raise fail(f"the trainer at {base} answered {answer.status_code}: {answer.text[:300]}")
            run_id = answer.json()["run_id"]
            console.print(f"run {escape(run_id)} started on {escape(base)}", highlight=False)
            if not wait:
                return 0
            deadline = time.monotonic() + timeout_s
            with console.status(f"waiting for run {run_id}"):
                while time.monotonic() < deadline:
                    status = client.get(f"{base}/v1/status").json()
                    done = [r for r in status.get("runs", []) if r.get("run_id") == run_id]
                    if done:
                        return _print_report(done[0])
                    time.sleep(1.0)
    except httpx.HTTPError as err:
        raise fail(f"cannot reach the trainer at {base}: {type(err).__name__}: {err}") from None
    raise fail(f"run {run_id} did not finish within {timeout_s:g} s (see {base}/v1/status)")


def _local(
    cluster: str | None, reason: str, database_url: str | None, nats_url: str | None, subject_root: str | None
) -> int:
    from services.trainer.run import retrain_once
    from services.trainer.service import choose_cluster
    from services.trainer.settings import TrainerSettings
    from shared.service import ServiceSettings

    try:
        settings = TrainerSettings()
        if cluster is not None:
            settings = settings.model_copy(update={"cluster": cluster})
        service = ServiceSettings()
        name, spec_arg = choose_cluster(settings, service.clusters)
    except ValueError as err:
        raise fail(str(err)) from None
    url = existing_database(database_url)

    async def main() -> dict[str, Any]:
        engine = await migrated_engine(url)
        client = None
        try:
            client, publisher = await _optional_bus(nats_url, subject_root)
            with console.status(f"retraining the prioritizer of {name}"):
                report = await retrain_once(
                    engine,
                    publisher,
                    settings,
                    cluster=name,
                    spec_arg=spec_arg,
                    base_policy=service.base_policy,
                    trigger=reason,
                )
            return report.to_dict()
        finally:
            if client is not None:
                await client.close()
            await engine.dispose()

    return _print_report(asyncio.run(main()))


async def _optional_bus(nats_url: str | None, subject_root: str | None) -> tuple[Any, Any]:
    """NATS and a publisher, or ``(None, None)`` when no server answers at the default URL (module
    docstring): a ``--nats-url`` given explicitly must answer."""
    from shared.cli.models import BusUnreachable, open_bus  # the connection `hylo models promote` opens

    bus_log = logging.getLogger("hylo.bus")  # its per-attempt warnings would repeat the line below
    level = bus_log.level
    if nats_url is None:
        bus_log.setLevel(logging.ERROR)
    try:
        return await open_bus(nats_url, subject_root)
    except BusUnreachable as err:
        if nats_url is not None:
            raise fail(str(err)) from None
        console.print(
            f"[yellow]{escape(str(err))}: the candidate will be gated and the verdict kept on it, but "
            "a promotion cannot be announced without NATS (pass --nats-url to promote)[/]",
            soft_wrap=True,
        )
        return None, None
    finally:
        bus_log.setLevel(level)


def retrain_command(
    url: Annotated[str, typer.Option(help="the trainer service (ignored with --local)")] = DEFAULT_URL,
    local: Annotated[
        bool, typer.Option("--local", help="run the retraining in this process instead of the service")
    ] = False,
    cluster: Annotated[
        str | None, typer.Option(help="with --local: cluster to retrain (default: HYLO_TRAINER_CLUSTER)")
    ] = None,
    reason: Annotated[str, typer.Option(help="recorded as the run's trigger")] = "cli",
    wait: Annotated[bool, typer.Option(help="wait for the service's run to finish and print it")] = True,
    timeout: Annotated[float, typer.Option(help="seconds to wait for the service's run")] = 3600.0,
    database_url: DatabaseOpt = None,
    nats_url: Annotated[
        str | None, typer.Option("--nats-url", help="with --local (default: HYLO_NATS_URL)")
    ] = None,
    subject_root: Annotated[
        str | None, typer.Option("--subject-root", help="with --local (default: HYLO_SUBJECT_ROOT)")
    ] = None,
    token: Annotated[
        str | None,
        typer.Option("--token", envvar="HYLO_API_TOKEN", help="the service's API token, of scope admin"),
    ] = None,
) -> None:
    """Retrain the prioritizer from recorded outcomes; promote the result only if the gate passes."""
    if timeout <= 0:
        raise fail(f"--timeout must be > 0 seconds, got {timeout}")
    if local:
        code = _local(cluster, reason, database_url, nats_url, subject_root)
    else:
        code = _remote(url, reason, wait, timeout, token)
    raise typer.Exit(code)
