"""W3C trace context in NATS headers, so one snapshot is one trace across every service.

Why the global propagator: OpenTelemetry's ``propagate`` module reads ``OTEL_PROPAGATORS`` (W3C
``traceparent``/``tracestate`` plus baggage by default), so deployments can change the format without
code changes; NATS headers are a plain str -> str mapping, exactly a propagation carrier.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import propagate
from opentelemetry.context import Context


def inject_headers(headers: dict[str, str]) -> dict[str, str]:
    """Add the current span's context to ``headers`` (in place) and return them."""
    propagate.inject(headers)
    return headers


def extract_context(headers: Mapping[str, str] | None) -> Context:
    """The context carried by a message's headers (an empty context when there is none)."""
    return propagate.extract(dict(headers or {}))
