"""A real OTLP/HTTP receiver for the otel tests (crates/cli/tests/otel.rs).

oteltest's HttpSink (pinned in requirements.txt) on a free loopback port:
it decodes each POST /v1/traces body with the official OTLP protobuf
classes. Each request becomes one JSON line on stdout: the decoded
ExportTraceServiceRequest (protobuf's MessageToDict), its Content-Type and
the raw body as hex (so a test can search the bytes on the wire). The
first line is {"listening": PORT}. It runs until stdin closes.
"""

import json
import logging
import socket
import sys
import time

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from oteltest.sink import HttpSink, _parse_request
from oteltest.sink.handler import RequestHandler


class Ignore(RequestHandler):
    def handle_logs(self, request, headers):
        pass

    def handle_metrics(self, request, headers):
        pass

    def handle_trace(self, request, headers):
        pass


class LinesSink(HttpSink):
    """HttpSink, printing each traces request (decoded by the sink's own
    protobuf/JSON parsing) with its raw bytes."""

    def handle_trace(self, post_data, headers):
        request = _parse_request(post_data, headers, ExportTraceServiceRequest)
        line = {
            "content_type": next(
                (v for k, v in headers.items() if k.lower() == "content-type"), None
            ),
            "raw_hex": post_data.hex(),
            "request": MessageToDict(request),
        }
        print(json.dumps(line), flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    sink = LinesSink(Ignore(), logging.getLogger("otlp_receiver"), port=free_port())
    sink.start()
    while sink.httpd is None:
        time.sleep(0.01)
    print(json.dumps({"listening": sink.port}), flush=True)
    sys.stdin.read()
    sink.stop()


if __name__ == "__main__":
    main()
