"""OpenTelemetry tracing for Hylo processes: one trace per snapshot across every service.

``setup_tracing("prioritizer")`` at start-up, ``shutdown_tracing()`` on exit. Spans are exported over
OTLP only when ``HYLO_OTLP_ENDPOINT`` is set; trace context crosses NATS in message headers
(``shared.bus.tracing``). Prometheus metrics are separate (``/metrics`` of each service).
"""

from shared.telemetry.settings import TelemetrySettings
from shared.telemetry.tracing import (
    build_tracer_provider,
    otlp_exporter,
    setup_tracing,
    shutdown_tracing,
    traces_url,
)

__all__ = [
    "TelemetrySettings",
    "build_tracer_provider",
    "otlp_exporter",
    "setup_tracing",
    "shutdown_tracing",
    "traces_url",
]
