"""One TracerProvider per process, exporting to an OTLP collector only when one is configured.

Why a global provider: ``shared.bus`` (publisher and consumer spans) and any library instrumentation
ask OpenTelemetry's global ``trace.get_tracer``; setting the global provider once at start-up makes
all of them report under the service's name. OpenTelemetry refuses to replace a global provider, so
``setup_tracing`` is idempotent: a second call returns the provider already installed.

Why BatchSpanProcessor: exporting happens on a background thread in batches, so a slow or absent
collector never adds latency to a scheduling decision; ``shutdown_tracing`` flushes what is queued.
"""

from __future__ import annotations

import logging
import threading
from importlib import metadata

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBasedTraceIdRatio

from shared.telemetry.settings import TelemetrySettings

log = logging.getLogger(__name__)

TRACES_PATH = "/v1/traces"
SERVICE_NAMESPACE = "hylo"

_lock = threading.Lock()
_installed: TracerProvider | None = None


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of a collector base URL (``OTEL_EXPORTER_OTLP_ENDPOINT`` semantics)."""
    base = endpoint.rstrip("/")
    return base if base.endswith(TRACES_PATH) else base + TRACES_PATH


def _version() -> str:
    try:
        return metadata.version("hylo")
    except metadata.PackageNotFoundError:
        return "unknown"


def otlp_exporter(settings: TelemetrySettings) -> SpanExporter:
    """The OTLP span exporter for ``settings``; imported lazily: only deployments with a collector need it."""
    if settings.otlp_endpoint is None:
        raise ValueError("HYLO_OTLP_ENDPOINT is not set: there is no collector to export to")
    if settings.otlp_protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[import-not-found]
                OTLPSpanExporter as GrpcExporter,
            )
        except ImportError as err:
            raise RuntimeError(
                "HYLO_OTLP_PROTOCOL=grpc needs the package opentelemetry-exporter-otlp-proto-grpc; "
                "install it or use http/protobuf"
            ) from err
        exporter: SpanExporter = GrpcExporter(
            endpoint=settings.otlp_endpoint,
            headers=dict(settings.otlp_headers),
            timeout=settings.otlp_timeout_s,
        )
        return exporter
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as err:
        raise RuntimeError(
            "HYLO_OTLP_ENDPOINT is set but the package opentelemetry-exporter-otlp-proto-http is not "
            "installed"
        ) from err
    return OTLPSpanExporter(
        endpoint=traces_url(settings.otlp_endpoint),
        headers=dict(settings.otlp_headers),
        timeout=settings.otlp_timeout_s,
    )


def build_tracer_provider(
    service_name: str,
    settings: TelemetrySettings | None = None,
    *,
    processors: list[SpanProcessor] | None = None,
) -> TracerProvider:
    """A provider named after the service, with the exporter ``settings`` ask for; not made global.

    ``processors`` are added after the configured exporter (tests add an in-memory one).
    """
    settings = settings or TelemetrySettings()
    name = settings.service_name or service_name
    resource = Resource.create(
        {"service.name": name, "service.namespace": SERVICE_NAMESPACE, "service.version": _version()}
    )
    provider = TracerProvider(resource=resource, sampler=ParentBasedTraceIdRatio(settings.trace_sample_ratio))
    if settings.otlp_endpoint is not None:
        provider.add_span_processor(BatchSpanProcessor(otlp_exporter(settings)))
        log.info("tracing: %s exports spans to %s (%s)", name, settings.otlp_endpoint, settings.otlp_protocol)
    elif settings.trace_console:
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(service_name=name)))
        log.info("tracing: %s prints spans to stdout", name)
    for processor in processors or []:
        provider.add_span_processor(processor)
    return provider


def setup_tracing(service_name: str, settings: TelemetrySettings | None = None) -> TracerProvider:
    """Install the process's global TracerProvider once and return it (later calls return the same)."""
    global _installed
    with _lock:
        if _installed is not None:
            reported = _installed.resource.attributes.get("service.name")
            if reported != (settings.service_name if settings and settings.service_name else service_name):
                log.warning("tracing already set up as %r; ignoring setup for %r", reported, service_name)
            return _installed
        provider = build_tracer_provider(service_name, settings)
        trace.set_tracer_provider(provider)
        if trace.get_tracer_provider() is not provider:
            # someone else (an auto-instrumentation agent) installed a provider first: keep ours
            # private rather than fight over the global; spans through trace.get_tracer go to theirs
            log.warning("a global TracerProvider was already installed; Hylo's is not the global one")
        _installed = provider
        return provider


def shutdown_tracing(timeout_s: float = 5.0) -> None:
    """Flush queued spans to the exporter and stop it; safe to call when tracing was never set up.

    The installed provider stays the global one (OpenTelemetry cannot unset it) but exports nothing more.
    """
    global _installed
    with _lock:
        provider, _installed = _installed, None
    if provider is not None:
        provider.force_flush(int(timeout_s * 1000))
        provider.shutdown()
