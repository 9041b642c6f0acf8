"""Tracing settings: where spans go (``HYLO_OTLP_ENDPOINT``), how, and how many.

Why an explicit Hylo setting and not only OpenTelemetry's ``OTEL_*`` variables: a deployment sets one
``HYLO_*`` family (env or ``hylo.toml``) for everything; an unset endpoint must mean "export nothing"
so that the embedded run and the tests never try to reach a collector that is not there.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from shared.config import HyloBaseSettings

Protocol = Literal["http/protobuf", "grpc"]


class TelemetrySettings(HyloBaseSettings):
    """OpenTelemetry tracing of a Hylo process."""

    otlp_endpoint: str | None = Field(
        default=None,
        description=(
            "OTLP collector base URL, e.g. http://otel-collector:4318 (http/protobuf: /v1/traces is "
            "appended unless the URL already ends with it); unset = spans are not exported"
        ),
        examples=["http://otel-collector:4318"],
    )
    otlp_protocol: Protocol = Field(
        default="http/protobuf",
        description="OTLP transport; grpc needs opentelemetry-exporter-otlp-proto-grpc",
    )
    otlp_headers: dict[str, str] = Field(
        default_factory=dict, description="extra headers sent to the collector (e.g. an API key), JSON"
    )
    otlp_timeout_s: float = Field(default=10.0, gt=0, description="timeout of one export request")
    service_name: str | None = Field(
        default=None, description="overrides the service name a process reports (service.name)"
    )
    trace_console: bool = Field(
        default=False, description="print finished spans to stdout when no OTLP endpoint is set (debugging)"
    )
    trace_sample_ratio: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description="fraction of new traces sampled; a span with a parent follows its parent's decision",
    )

    @field_validator("otlp_endpoint")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"expected an http:// or https:// URL of an OTLP collector, got {value!r}")
        return value
