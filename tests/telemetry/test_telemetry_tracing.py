"""Tracing set-up: one trace across services, spans exported over OTLP/HTTP only when configured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import ValidationError

from shared.bus.tracing import extract_context, inject_headers
from shared.telemetry import TelemetrySettings, build_tracer_provider, traces_url
from tests.telemetry.otlp_receiver import otlp_receiver

ROOT = Path(__file__).resolve().parents[2]


def hop(featurizer: trace.Tracer, prioritizer: trace.Tracer) -> dict[str, str]:
    """The featurizer publishes inside its span; the prioritizer consumes from the headers alone."""
    headers: dict[str, str] = {}
    with featurizer.start_as_current_span("publish features", kind=trace.SpanKind.PRODUCER):
        inject_headers(headers)
    # nothing but the headers crosses between the two services
    with prioritizer.start_as_current_span(
        "consume features", context=extract_context(headers), kind=trace.SpanKind.CONSUMER
    ):
        pass
    return headers


def test_two_services_linked_through_headers_share_one_trace() -> None:
    exporter = InMemorySpanExporter()
    providers = [
        build_tracer_provider(name, TelemetrySettings(), processors=[SimpleSpanProcessor(exporter)])
        for name in ("featurizer", "prioritizer")
    ]
    headers = hop(providers[0].get_tracer("test"), providers[1].get_tracer("test"))

    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"publish features", "consume features"}
    pub, con = spans["publish features"], spans["consume features"]
    assert pub.context is not None and con.context is not None and con.parent is not None
    assert con.context.trace_id == pub.context.trace_id
    assert con.parent.span_id == pub.context.span_id
    assert con.parent.is_remote  # it came through the headers, not the in-process context
    # the W3C header is version-traceid-spanid-flags of the publishing span, flagged sampled
    version, trace_id, span_id, flags = headers["traceparent"].split("-")
    assert (version, trace_id, span_id) == (
        "00",
        f"{pub.context.trace_id:032x}",
        f"{pub.context.span_id:016x}",
    )
    assert int(flags, 16) & 0x01
    assert pub.resource.attributes["service.name"] == "featurizer"
    assert con.resource.attributes["service.name"] == "prioritizer"
    assert con.resource.attributes["service.namespace"] == "hylo"
    for p in providers:
        p.shutdown()


def test_spans_of_two_services_reach_an_otlp_http_receiver() -> None:
    with otlp_receiver() as receiver:
        settings = TelemetrySettings(otlp_endpoint=receiver.url)
        featurizer = build_tracer_provider("featurizer", settings)
        prioritizer = build_tracer_provider("prioritizer", settings)
        hop(featurizer.get_tracer("test"), prioritizer.get_tracer("test"))
        assert featurizer.force_flush(5000) and prioritizer.force_flush(5000)
        featurizer.shutdown()
        prioritizer.shutdown()

    assert receiver.posts, "the collector received nothing"
    assert {p.path for p in receiver.posts} == {"/v1/traces"}
    assert {p.content_type for p in receiver.posts} == {"application/x-protobuf"}
    spans = receiver.spans()
    assert sorted((service, name) for service, name, _, _ in spans) == [
        ("featurizer", "publish features"),
        ("prioritizer", "consume features"),
    ]
    assert len({trace_id for _, _, trace_id, _ in spans}) == 1
    ids = receiver.span_ids()
    parent_of = {name: parent for _, name, _, parent in spans}
    assert parent_of["consume features"] == ids["publish features"]
    assert parent_of["publish features"] == b""  # the root of the trace


def test_endpoint_setting_is_validated_and_resolved() -> None:
    with pytest.raises(ValidationError) as err:
        TelemetrySettings(otlp_endpoint="otel-collector:4318")
    assert "otlp_endpoint" in str(err.value) and "http:// or https:// URL" in str(err.value)
    assert TelemetrySettings(otlp_endpoint="  ").otlp_endpoint is None
    assert traces_url("http://c:4318") == "http://c:4318/v1/traces"
    assert traces_url("http://c:4318/") == "http://c:4318/v1/traces"
    assert traces_url("https://c/otlp/v1/traces") == "https://c/otlp/v1/traces"
    with pytest.raises(ValidationError):
        TelemetrySettings(trace_sample_ratio=1.5)


def test_sample_ratio_zero_drops_new_traces_but_follows_a_sampled_parent() -> None:
    exporter = InMemorySpanExporter()
    head = build_tracer_provider("adapter", TelemetrySettings(), processors=[SimpleSpanProcessor(exporter)])
    tail = build_tracer_provider(
        "placer", TelemetrySettings(trace_sample_ratio=0.0), processors=[SimpleSpanProcessor(exporter)]
    )
    with tail.get_tracer("t").start_as_current_span("unsampled root"):
        pass
    hop(head.get_tracer("t"), tail.get_tracer("t"))
    assert sorted(s.name for s in exporter.get_finished_spans()) == ["consume features", "publish features"]


SCRIPT = textwrap.dedent(
    """
    import json
    from opentelemetry import trace
    from shared.telemetry import setup_tracing, shutdown_tracing

    first = setup_tracing("featurizer")
    second = setup_tracing("featurizer")
    with trace.get_tracer("script").start_as_current_span("global span"):
        pass
    print(json.dumps({"same": first is second, "global": trace.get_tracer_provider() is first}))
    shutdown_tracing()
    shutdown_tracing()  # a second call is harmless
    """
)


def run_script(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A fresh process: the global provider can be installed once per process."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HYLO_", "OTEL_"))}
    clean["HYLO_CONFIG"] = "/nonexistent/hylo.toml"
    return subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_setup_tracing_installs_one_global_provider_exporting_to_the_env_endpoint() -> None:
    with otlp_receiver() as receiver:
        result = run_script({"HYLO_OTLP_ENDPOINT": receiver.url})
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"same": True, "global": True}
    # exported by the batch processor, flushed by shutdown_tracing before the process exited
    assert [(s, n) for s, n, _, _ in receiver.spans()] == [("featurizer", "global span")]


def test_no_endpoint_exports_nothing_and_console_prints_spans() -> None:
    with otlp_receiver() as receiver:
        quiet = run_script({})
        loud = run_script({"HYLO_TRACE_CONSOLE": "1", "HYLO_SERVICE_NAME": "placer-7"})
        assert receiver.posts == []
    assert quiet.stdout.strip().splitlines() == ['{"same": true, "global": true}']
    # the script's own line first, then the span the batch processor printed at shutdown
    first, printed = loud.stdout.split("\n", 1)
    assert json.loads(first) == {"same": True, "global": True}
    span = json.loads(printed)
    assert span["name"] == "global span"
    assert span["resource"]["attributes"]["service.name"] == "placer-7"
