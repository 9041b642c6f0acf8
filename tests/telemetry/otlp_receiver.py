"""A real OTLP/HTTP endpoint on 127.0.0.1 for tests: records every POST and answers 200.

Why a server and not a fake exporter: the test must show that spans leave the process over HTTP in
the encoding a collector reads (protobuf ``ExportTraceServiceRequest`` at ``/v1/traces``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class Received:
    path: str
    content_type: str
    body: bytes


@dataclass
class Receiver:
    url: str
    posts: list[Received] = field(default_factory=list)

    def spans(self) -> list[tuple[str, str, bytes, bytes]]:
        """(service.name, span name, trace id, parent span id) of every span received at /v1/traces."""
        out = []
        for post in self.posts:
            if post.path != "/v1/traces":
                continue
            request = ExportTraceServiceRequest.FromString(post.body)
            for rs in request.resource_spans:
                attrs = {a.key: a.value.string_value for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        out.append(
                            (attrs.get("service.name", ""), span.name, span.trace_id, span.parent_span_id)
                        )
        return out

    def span_ids(self) -> dict[str, bytes]:
        """span name -> span id."""
        ids = {}
        for post in self.posts:
            request = ExportTraceServiceRequest.FromString(post.body)
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        ids[span.name] = span.span_id
        return ids


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """Serve on a free port of 127.0.0.1 until the block ends."""
    receiver = Receiver(url="")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with lock:
                receiver.posts.append(Received(self.path, self.headers.get("Content-Type", ""), body))
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
