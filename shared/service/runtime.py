"""Running one service replica: connect, bind consumers, serve HTTP, stop without losing messages.

Shutdown (SIGTERM/SIGINT, or ``stop`` set by a caller): ``/readyz`` turns false at once; every
consumer finishes the batch in flight (handlers run, outputs are published, inputs acked) and
fetches no more; after ``shutdown_grace_s`` whatever is still unfinished is left unacked, so
JetStream redelivers it to another replica; then the NATS connection is drained, the database
engine disposed and the HTTP server stopped. Nothing acked is lost and nothing unacked is dropped.

Publishing happens inside the handler's delivery, before the ack: a crash between publish and ack
republishes the same ``Nats-Msg-Id``, which the stream's duplicate window discards.

NATS gone for good: a replica whose NATS connection stays down for ``HYLO_NATS_GONE_BUDGET_S`` (or
whose client gave up reconnecting) stops as above and exits with status 3 (``EXIT_DEPENDENCY_GONE``)
after one log line that says so. It used to exit 0, which a restart-on-failure supervisor (systemd
``Restart=on-failure``, compose ``restart: on-failure``) takes as a deliberate stop and never
restarts. Shorter outages are ridden out by the client's reconnects, with nothing lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import time
from collections.abc import Generator, Sequence
from typing import Any

import uvicorn
from fastapi import APIRouter, Depends
from nats.aio.client import Client
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.bus.connection import connect
from shared.bus.consumer import Consumer, Delivery, short
from shared.bus.publisher import Publisher
from shared.bus.settings import BusSettings, message_limits
from shared.bus.signing import SigningSettings
from shared.bus.streams import ensure_streams, stream_name
from shared.schemas.base import Message
from shared.schemas.subjects import Subjects
from shared.service.api_auth import ApiGuard, ApiSecuritySettings, api_guard
from shared.service.app import Check, create_app
from shared.service.clusters import load_specs
from shared.service.definition import Route, ServiceContext, ServiceDefinition, Wiring
from shared.service.metrics import ServiceMetrics
from shared.service.settings import ServiceSettings
from shared.service.shards import ClusterShards, ShardedRoute
from shared.store.engine import create_engine
from shared.store.settings import StoreSettings
from shared.telemetry import TelemetrySettings, setup_tracing, shutdown_tracing

log = logging.getLogger("hylo.service")

#: the exit status of a replica whose NATS connection was gone past its budget
EXIT_DEPENDENCY_GONE = 3


class DependencyGone(RuntimeError):
    """A dependency (NATS) was unavailable past its budget: the replica stopped and must not exit 0."""


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the runtime owns SIGTERM/SIGINT (see module doc)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def default_replica() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class ServiceRuntime:
    """One replica of ``definition``: ``await start()``, then ``await run(stop)``."""

    def __init__(
        self,
        definition: ServiceDefinition,
        settings: ServiceSettings | None = None,
        bus: BusSettings | None = None,
        store: StoreSettings | None = None,
    ) -> None:
        self.definition = definition
        self.settings = settings or ServiceSettings()
        self.bus = bus or BusSettings()
        self.store = store or StoreSettings()
        self.name = definition.name
        self.replica = self.settings.replica or default_replica()
        self.metrics = ServiceMetrics(self.name)
        self.consumers: list[Consumer[Any]] = []
        #: routes with a consumer per cluster (``Route.sharded``), each running its owned clusters'
        self.sharded: list[ShardedRoute] = []
        self.shards: ClusterShards | None = None
        self.nc: Client | None = None
        self.engine: AsyncEngine | None = None
        self.wiring: Wiring | None = None
        self.stopping = False
        self.port: int | None = None
        #: why the replica stopped on its own because NATS was gone (None: it was asked to stop)
        self.gone: str | None = None
        #: tokens and rate limits of the service's own HTTP routes (set by ``start``)
        self.guard: ApiGuard | None = None

    # -- start ----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Load specs, connect the bus (and database), create streams, bind every route."""
        # an HTTP API open to the network refuses to start before anything else happens
        guard = self.guard = api_guard(ApiSecuritySettings(), self.settings.http_host, f"the {self.name}")
        specs = load_specs(self.settings.clusters)
        self.nc = await connect(self.bus)
        js = self.nc.jetstream()
        subjects = Subjects(self.bus.subject_root)
        await ensure_streams(js, subjects, self.bus)
        limits = message_limits(self.bus, self.nc.max_payload)
        # model announcements (the registry, in the trainer) are signed when a key is configured
        publisher = Publisher(js, subjects, limits, signer=SigningSettings().signer())
        if self.definition.needs_store:
            self.engine = create_engine(self.store.database_url, echo=self.store.database_echo)
        shards = self.shards = ClusterShards(
            self.nc,
            subjects,
            self.name,
            specs,
            heartbeat_s=self.bus.shard_heartbeat_s,
            expiry_s=self.bus.shard_expiry_s,
        )
        ctx = ServiceContext(
            name=self.name,
            replica=self.replica,
            settings=self.settings,
            bus=self.bus,
            store=self.store,
            nc=self.nc,
            js=js,
            subjects=subjects,
            publisher=publisher,
            engine=self.engine,
            metrics=self.metrics,
            specs=specs,
            guard=guard,
            shards=shards,
        )
        self.wiring = await self.definition.build(ctx)
        for route in self.wiring.routes:
            if route.sharded and self.bus.shard_clusters and route.cluster is None and not route.per_replica:
                self.sharded.append(self._sharded(route, ctx))
                continue
            consumer = self._consumer(route, ctx)
            await consumer.start()
            self.metrics.watch(consumer)
            self.consumers.append(consumer)
        if self.sharded:
            await shards.join()
            log.info("%s %s: member %s of its stage's replicas", self.name, self.replica, shards.me)
        log.info("%s %s: %d route(s) bound", self.name, self.replica, self._bound())

    def _bound(self) -> int:
        return len(self.consumers) + len(self.sharded)

    def route_names(self) -> set[str]:
        """The routes bound: consumers' durable names, and sharded routes' shared name."""
        return {c.durable for c in self.consumers} | {r.name for r in self.sharded}

    def _sharded(self, route: Route[Any], ctx: ServiceContext) -> ShardedRoute:
        """A consumer per cluster (``<durable>-<cluster>``), run while this replica owns the cluster."""

        def make(cluster: str) -> Consumer[Any]:
            return self._consumer(route, ctx, cluster=cluster)

        return ShardedRoute(
            ctx.shards,
            ctx.js,
            ctx.subjects,
            route.kind,
            make,
            watch=self.metrics.watch,
            name=route.durable,
            sweep_s=self.bus.shard_sweep_s,
        )

    def _consumer(self, route: Route[Any], ctx: ServiceContext, cluster: str | None = None) -> Consumer[Any]:
        """The route's consumer (``cluster``: one cluster's, for a sharded route)."""
        durable = route.durable
        if route.per_replica:
            durable = f"{durable}-{_token(self.replica)}"
        if cluster is not None:
            durable = f"{route.durable}-{cluster}"
        histogram = self.metrics.handle_seconds.labels(self.name, route.durable if cluster else durable)
        publisher = ctx.publisher

        async def handle(message: Message, delivery: Delivery) -> None:
            started = time.perf_counter()
            out = await route.handle(message, delivery)
            for item in _as_list(out):
                await publisher.publish(item)
            histogram.observe(time.perf_counter() - started)

        return Consumer(
            ctx.js,
            publisher,
            kind=route.kind,
            model=route.model,
            durable=durable,
            handler=handle,
            settings=self.bus,
            cluster=cluster or route.cluster,
            latest_wins=route.latest_wins,
            reject=route.reject,
            deliver_policy=route.deliver_policy,
            inactive_threshold_s=route.inactive_threshold_s
            if route.inactive_threshold_s is not None
            else (300.0 if route.per_replica else None),
            fetch_missing=route.fetch_missing,
            transient=route.transient,
            verify=route.verify,
            group=route.durable if cluster else None,
            # below half the ack wait: a message that reaches the inbox just as an idle fetch ends
            # waits for the next fetch, and must not be redelivered meanwhile
            fetch_timeout_s=min(self.bus.shard_fetch_timeout_s, self.bus.ack_wait_s / 2) if cluster else None,
        )

    # -- readiness ------------------------------------------------------------------------------

    async def _bus_ready(self) -> str | None:
        nc = self.nc
        if nc is None or not nc.is_connected:
            return "bus: not connected to NATS"
        return None

    async def _store_ready(self) -> str | None:
        """None while the database answers and every write goes through; else "store unavailable",
        why, and how many messages JetStream holds for the routes that write (``Route.transient``):
        they are being retried with back-off, not lost, and are stored once the database is back."""
        if self.engine is None:
            return None
        problem: str | None = None
        try:
            async with asyncio.timeout(self.settings.ready_timeout_s * 0.8):
                async with self.engine.connect() as conn:
                    await conn.execute(text("SELECT 1"))
        except TimeoutError:
            problem = f"no answer within {self.settings.ready_timeout_s * 0.8:g} s"
        except Exception as err:  # refused, reset, authentication: the store is not there
            problem = short(err)
        if problem is None:
            failing = [c.stats.unavailable for c in self.consumers if c.stats.unavailable is not None]
            if not failing:
                return None
            problem = f"writes fail: {failing[0]}"
        waiting = await self._waiting()
        return f"store unavailable ({problem}), {waiting} messages waiting"

    async def _waiting(self) -> str:
        """Messages not yet stored by the routes that write (pending plus delivered and unacked)."""
        writers = [c for c in self.consumers if c.transient is not None]
        if not writers or self.nc is None:
            return "0"
        js = self.nc.jetstream()

        async def one(c: Consumer[Any]) -> int:
            info = await js.consumer_info(stream_name(c.subjects, c.kind), c.durable)
            return int(info.num_pending or 0) + int(info.num_ack_pending or 0)

        try:
            counts = await asyncio.wait_for(asyncio.gather(*(one(c) for c in writers)), 0.5)
        except Exception:  # the bus is slow or gone too: say so rather than fail the check
            return "an unknown number of"
        return f"{sum(counts):,}"

    async def _running(self) -> str | None:
        if self.stopping:
            return "stopping: finishing in-flight messages"
        if self._bound() != len(self.wiring.routes if self.wiring else []):
            return "consumers not bound yet"
        return None

    def app(self) -> Any:
        checks: list[Check] = [self._running, self._bus_ready, self._store_ready]
        wiring = self.wiring
        if wiring is not None:
            checks.extend(wiring.readiness)
        router = wiring.router if wiring else None
        if router is not None and wiring is not None and not wiring.router_guarded and self.guard is not None:
            guarded = APIRouter(
                dependencies=[Depends(self.guard.by_method())], responses=ApiGuard.responses()
            )
            guarded.include_router(router)
            router = guarded
        return create_app(
            self.name,
            self.replica,
            self.metrics,
            checks,
            self.settings.ready_timeout_s,
            router=router,
            description=self.definition.description,
        )

    # -- run and stop ---------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set, then shut down as the module docstring describes."""
        if self.nc is None:
            await self.start()
        consumers_stop = asyncio.Event()
        tasks = [asyncio.create_task(c.run(consumers_stop), name=c.durable) for c in self.consumers]
        tasks += [asyncio.create_task(r.run(consumers_stop), name=f"shards-{r.kind}") for r in self.sharded]
        port = self.settings.http_port
        if port is None:
            port = self.definition.default_port
        config = uvicorn.Config(
            self.app(), host=self.settings.http_host, port=port, log_level="warning", lifespan="off"
        )
        server = _Server(config)
        server_task = asyncio.create_task(server.serve(), name="http")
        self.port = port
        while not server.started and not server_task.done():
            await asyncio.sleep(0.01)
        if server.started:
            log.info("%s %s serving on %s:%s", self.name, self.replica, self.settings.http_host, port)
        stop_task = asyncio.create_task(stop.wait())
        watch_task = asyncio.create_task(self._watch_bus(), name="bus-watch")
        done, _ = await asyncio.wait(
            {stop_task, server_task, watch_task, *tasks}, return_when=asyncio.FIRST_COMPLETED
        )
        if server_task in done and not stop.is_set():
            exc = server_task.exception()
            log.error("%s: HTTP server stopped (%s); shutting down", self.name, exc)
        if not stop.is_set():
            if watch_task in done:
                self.gone = watch_task.result()
            elif self.nc is not None and self.nc.is_closed:  # a consumer saw the client give up first
                self.gone = "the NATS client closed the connection (reconnect attempts exhausted)"
        watch_task.cancel()
        self.stopping = True
        if self.shards is not None:  # the others take this replica's clusters while it finishes
            with contextlib.suppress(Exception):
                await self.shards.leave()
        consumers_stop.set()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self.settings.shutdown_grace_s)
            for t in pending:  # past the grace period: leave its messages unacked for redelivery
                t.cancel()
        await self.close()
        server.should_exit = True
        stop_task.cancel()
        with contextlib.suppress(Exception):
            await server_task

    async def _watch_bus(self) -> str:
        """Return (why) once NATS is gone for good: the client gave up reconnecting, or the connection
        stayed down for ``nats_gone_budget_s``. Runs until then; cancelled on a requested stop."""
        budget = self.bus.nats_gone_budget_s
        down_since: float | None = None
        while True:
            nc = self.nc
            if nc is None or nc.is_closed:
                return "the NATS client closed the connection (reconnect attempts exhausted)"
            if nc.is_connected:
                down_since = None
            elif down_since is None:
                down_since = time.monotonic()
            elif time.monotonic() - down_since >= budget:
                return f"NATS unreachable for {budget:g} s (HYLO_NATS_GONE_BUDGET_S)"
            await asyncio.sleep(min(0.5, budget / 4))

    async def close(self) -> None:
        """Unbind consumers, run the service's own stop hook, drain NATS, dispose the engine."""
        for c in self.consumers:
            with contextlib.suppress(Exception):
                await c.close()
        for r in self.sharded:
            with contextlib.suppress(Exception):
                await r.close()
        if self.shards is not None:
            with contextlib.suppress(Exception):
                await self.shards.leave()
        if self.wiring is not None and self.wiring.on_stop is not None:
            await self.wiring.on_stop()
        if self.nc is not None and not self.nc.is_closed:
            with contextlib.suppress(Exception):
                if self.gone is None:
                    await self.nc.drain()
                else:  # nothing to drain to: stop the client's reconnect loop
                    await asyncio.wait_for(self.nc.close(), 5.0)
        if self.engine is not None:
            await self.engine.dispose()


def _as_list(out: Message | Sequence[Message] | None) -> list[Message]:
    if out is None:
        return []
    if isinstance(out, Message):
        return [out]
    return list(out)


def _token(text_: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text_)[:48]


async def serve(definition: ServiceDefinition, settings: ServiceSettings | None = None) -> None:
    """Run one replica until SIGTERM or SIGINT."""
    runtime = ServiceRuntime(definition, settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await runtime.start()
    # Long-lived objects (specs, models, the features' tables) would otherwise be re-scanned by
    # every full collection; freezing them cut the featurizer's p99 from 100+ ms to ~50 ms on openb.
    gc.collect()
    gc.freeze()
    # A decoded openb snapshot is ~10,000 objects: with the default gen-0 threshold (700) every
    # decode runs a dozen collections; 100,000 cut the decode's p50 by a quarter (13 -> 9.8 ms).
    gc.set_threshold(100_000, 50, 100)
    await runtime.run(stop)
    if runtime.gone is not None:
        raise DependencyGone(runtime.gone)


def run_service(definition: ServiceDefinition) -> int:
    """Entry point of ``python -m services.<name>`` and ``hylo serve <name>``; returns the exit code."""
    settings = ServiceSettings()
    logging.basicConfig(
        level=settings.log_level.upper(), format=f"%(asctime)s {definition.name} %(levelname)s %(message)s"
    )
    setup_tracing(definition.name, TelemetrySettings())
    try:
        asyncio.run(serve(definition, settings))
    except DependencyGone as err:  # one line, and a status a restart-on-failure supervisor acts on
        log.error("%s stopped: %s; exiting with status %d", definition.name, err, EXIT_DEPENDENCY_GONE)
        return EXIT_DEPENDENCY_GONE
    except Exception as err:  # start-up failures: one clear line, no traceback
        log.error("%s failed: %s: %s", definition.name, type(err).__name__, err)
        return 1
    finally:
        shutdown_tracing()
    return 0
