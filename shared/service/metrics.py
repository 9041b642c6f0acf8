"""Prometheus metrics of one service process, served as text on ``/metrics``.

Why a registry per runtime (not the global default): tests run several services in one process,
and each must report only its own numbers. Consumer counters are read from the consumers' own
``ConsumerStats`` at scrape time, so the hot path does no extra bookkeeping.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from shared.bus.consumer import Consumer

#: seconds; decisions are expected in milliseconds, the tail up to seconds
LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)


class _ConsumerCollector(Collector):
    def __init__(self, service: str) -> None:
        self.service = service
        self.consumers: list[Consumer] = []  # type: ignore[type-arg]

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "hylo_messages", "Messages per consumer and outcome", labels=["service", "route", "outcome"]
        )
        reasons = CounterMetricFamily(
            "hylo_dead_letters", "Dead-lettered messages by reason", labels=["service", "route", "reason"]
        )
        for c in self.consumers:
            s = c.stats
            for outcome, value in (
                ("handled", s.handled),
                ("stale", s.skipped_stale),
                ("dead", s.dead_lettered),
                ("error", s.handler_errors),
                ("retried", s.retried),  # sent back with a delay: a dependency (the store) was down
            ):
                family.add_metric([self.service, c.group, outcome], value)
            for reason, value in s.reasons.items():
                reasons.add_metric([self.service, c.group, reason], value)
        yield family
        yield reasons


class ServiceMetrics:
    """The metrics every service exports, plus a registry for its own."""

    def __init__(self, service: str) -> None:
        self.service = service
        self.registry = CollectorRegistry()
        self._consumers = _ConsumerCollector(service)
        self.registry.register(self._consumers)
        self.handle_seconds = Histogram(
            "hylo_handle_seconds",
            "Time to handle one message (handler plus publishing its output)",
            ["service", "route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.decision_seconds = Histogram(
            "hylo_decision_latency_seconds",
            "Snapshot to decision: sum of the stage latencies carried by each decision",
            ["service", "cluster"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.fallbacks = Counter(
            "hylo_fallbacks",
            "Decisions taken by the base policy instead of the model, by reason class",
            ["service", "reason"],
            registry=self.registry,
        )
        self.ready = Gauge("hylo_ready", "1 when /readyz passes", ["service"], registry=self.registry)

    def watch(self, consumer: Consumer) -> None:  # type: ignore[type-arg]
        """Export ``consumer``'s counters."""
        self._consumers.consumers.append(consumer)

    def render(self) -> bytes:
        return generate_latest(self.registry)
