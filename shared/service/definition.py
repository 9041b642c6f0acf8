"""What a service declares: its routes (input kind -> handler -> output) and what it needs.

Why declarations and not subclasses: a service module then reads as its logic only ("a
QueueSnapshot becomes a FeatureMatrix"), and the runtime can apply the same guarantees (ack after
publish, dead letters, metrics, tracing, shutdown) to every route of every service.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from fastapi import APIRouter
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.bus.consumer import Delivery, FetchMissing, TransientCheck, Verify
from shared.bus.publisher import Publisher
from shared.bus.settings import BusSettings
from shared.domain.cluster import ClusterSpec
from shared.schemas.base import Message
from shared.schemas.subjects import Kind, Subjects
from shared.service.api_auth import ApiGuard
from shared.service.metrics import ServiceMetrics
from shared.service.settings import ServiceSettings
from shared.service.shards import ClusterShards
from shared.store.settings import StoreSettings

M = TypeVar("M", bound=Message)

#: what a handler returns: messages to publish before the input is acked (none, one or several)
Output = Message | Sequence[Message] | None
RouteHandler = Callable[[M, Delivery], Awaitable[Output]]


@dataclass
class Route(Generic[M]):
    """One input of a service.

    ``durable`` is shared by all replicas, so each message goes to one of them (queue-group
    semantics); ``per_replica`` routes (e.g. model announcements that every prioritizer must see)
    get a consumer of their own per replica, removed by the server after ``inactive_threshold_s``.
    ``reject`` lists exceptions that mean "well-formed but unusable": dead-lettered, not retried.
    ``transient`` tells an error that means a dependency is unavailable (the recorders' database):
    the message is retried with back-off for the bus's retry window instead of ``max_deliver`` times.
    """

    kind: Kind
    model: type[M]
    durable: str
    handle: RouteHandler[M]
    latest_wins: bool = False
    per_replica: bool = False
    reject: tuple[type[Exception], ...] = ()
    deliver_policy: DeliverPolicy = DeliverPolicy.ALL
    inactive_threshold_s: float | None = None
    cluster: str | None = None  # only this cluster's messages (an adapter manages one cluster)
    #: fetches a message this route's messages name by reference (``shared.bus.consumer``)
    fetch_missing: FetchMissing | None = None
    #: errors that mean "a dependency is down, wait for it" (``shared.bus.consumer``)
    transient: TransientCheck | None = None
    #: checks who sent a message before it is handled (a signature today, a sender identity once
    #: NATS accounts exist); a refusal is dead-lettered with its reason (``shared.bus.consumer``)
    verify: Verify | None = None
    #: each cluster's messages go to the replica that owns the cluster (``shared.service.shards``;
    #: ``HYLO_SHARD_CLUSTERS``): for routes whose handling profits from work done ahead per cluster
    sharded: bool = False


@dataclass
class ServiceContext:
    """Everything a service's ``build`` may use, opened by the runtime before routes exist."""

    name: str
    replica: str
    settings: ServiceSettings
    bus: BusSettings
    store: StoreSettings
    nc: Client
    js: JetStreamContext
    subjects: Subjects
    publisher: Publisher
    engine: AsyncEngine | None
    metrics: ServiceMetrics
    specs: dict[str, ClusterSpec]
    #: tokens and rate limits of the service's HTTP routes, built by the runtime before anything
    #: connects (``shared.service.api_auth``); a router that guards each route itself uses this one
    guard: ApiGuard
    #: which clusters this replica owns among its stage's replicas (all of them until a sharded
    #: route joins the group): a service works ahead only for the clusters it owns
    shards: ClusterShards


Readiness = Callable[[], Awaitable[str | None]]
"""An extra readiness check: None when ready, else the reason it is not."""


@dataclass
class Wiring:
    """What ``ServiceDefinition.build`` returns: the routes, plus optional HTTP and readiness extras."""

    routes: list[Route[Any]]
    router: APIRouter | None = None
    #: the router checks tokens on each route itself; otherwise the runtime guards all of it by method
    #: (``shared.service.api_auth.ApiGuard.by_method``)
    router_guarded: bool = False
    readiness: list[Readiness] = field(default_factory=list)
    on_stop: Callable[[], Awaitable[None]] | None = None


@dataclass(frozen=True)
class ServiceDefinition:
    """A service: its name, default port, whether it needs the database, and how to build it."""

    name: str
    default_port: int
    build: Callable[[ServiceContext], Awaitable[Wiring]]
    needs_store: bool = False
    description: str = ""
