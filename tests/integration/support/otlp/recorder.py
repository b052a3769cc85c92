"""Records what an OTLP/HTTP exporter sends, for the telemetry tests.

    python recorder.py PORT OUT.jsonl

Accepts POST /v1/traces and /v1/metrics in protobuf (what the collector in front of it, rotel,
forwards, gzipped) or JSON, decodes each with the official OpenTelemetry protobuf definitions
(opentelemetry-proto), and appends one JSON line per request to OUT.jsonl:
{"signal": "traces" | "metrics", "body": <the request as proto3 JSON, ids in lowercase hex>}.
A body that does not decode gets 400 and is recorded as {"signal": ..., "error": ...}.
"""

import base64
import gzip
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

SIGNALS = {
    "/v1/traces": ("traces", ExportTraceServiceRequest, ExportTraceServiceResponse),
    "/v1/metrics": ("metrics", ExportMetricsServiceRequest, ExportMetricsServiceResponse),
}
ID_FIELDS = ("traceId", "spanId", "parentSpanId")
LOCK = threading.Lock()


def ids_to_hex(value):
    """proto3 JSON writes bytes as base64; OTLP's own JSON (and the tests) use hex."""
    if isinstance(value, dict):
        return {
            key: base64.b64decode(item).hex() if key in ID_FIELDS else ids_to_hex(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [ids_to_hex(item) for item in value]
    return value


def ids_to_base64(value):
    if isinstance(value, dict):
        return {
            key: base64.b64encode(bytes.fromhex(item)).decode()
            if key in ID_FIELDS and isinstance(item, str)
            else ids_to_base64(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [ids_to_base64(item) for item in value]
    return value


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        signal, request_type, response_type = SIGNALS.get(self.path, (None, None, None))
        if signal is None:
            self.send_error(404)
            return
        raw = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.headers.get("content-encoding", "") == "gzip":
            raw = gzip.decompress(raw)
        message = request_type()
        try:
            if "json" in self.headers.get("content-type", ""):
                json_format.ParseDict(ids_to_base64(json.loads(raw)), message)
            else:
                message.ParseFromString(raw)
        except Exception as error:  # noqa: BLE001 - any decode failure is the finding
            self.record({"signal": signal, "error": str(error)})
            self.send_error(400, str(error))
            return
        body = ids_to_hex(json_format.MessageToDict(message))
        self.record({"signal": signal, "body": body, "headers": dict(self.headers)})
        reply = response_type().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def record(self, entry):
        with LOCK, open(OUT, "a", encoding="utf-8") as out:
            out.write(json.dumps(entry) + "\n")

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    PORT, OUT = int(sys.argv[1]), sys.argv[2]
    open(OUT, "w", encoding="utf-8").close()
    ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
