"""``--ray`` and ``--ray-address``, shared by ``hylo train`` and ``hylo evaluate``, and the one-line
refusal when Ray cannot be used.

Why two options and not ``--ray [ADDRESS]``: Typer (0.29) has no option whose value may be left
out, so ``--ray`` alone starts a local Ray and ``--ray-address HOST:PORT`` joins a cluster (and
implies ``--ray``). Where the tasks then run is ``shared.rl.parallel.runner_pool``'s decision.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Annotated

import typer
from rich.markup import escape

from shared.cli.common import console, fail
from shared.rl.parallel import Parallelism, compute_session

RayFlag = Annotated[
    bool,
    typer.Option(
        "--ray",
        help="run the workers as Ray actors (one CPU each) on a local Ray started for this command, "
        "or on the cluster at --ray-address (pip install 'hylo\\[ray]'; docs/ray.md)",
    ),
]
RayAddress = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        metavar="HOST:PORT",
        help="the Ray cluster to run the workers on: its head node's address (ray start --head prints "
        "it), or auto for the Ray already running on this machine; implies --ray",
    ),
]


@contextmanager
def computing_on(parallel: Parallelism) -> Iterator[None]:
    """Hold what ``parallel`` needs for the whole command (on Ray, the connection; one line says
    to what); Ray missing, unreachable or too small is one line and exit 2, before anything loads."""
    from shared.rl.ray_pool import RayUnavailable

    with ExitStack() as stack:
        try:
            line = stack.enter_context(compute_session(parallel))
        except RayUnavailable as err:
            raise fail(str(err)) from None
        if line is not None:
            console.print(f"Ray: {escape(line)}", highlight=False)
        yield
