#!/usr/bin/env python3
"""An OTLP/HTTP metrics receiver for the fleet tests.

    otlp_receiver.py PORT OUT.jsonl

Decodes every POST /v1/metrics body with the OpenTelemetry project's own protobuf
package (PyPI `opentelemetry-proto`, not a hand-written decoder), answers with an
ExportMetricsServiceResponse, and appends one JSON line per request to OUT.jsonl:
the resource's attributes and, per data point, the metric's name, unit and kind, its
attributes, and its value (sums and gauges), or count, sum, bounds and bucket counts
(histograms), or count and quantiles (summaries).
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

OUT = sys.argv[2]
TEMPORALITY = {0: "unspecified", 1: "delta", 2: "cumulative"}


def attrs(kvs):
    return {kv.key: kv.value.string_value for kv in kvs}


def points(metric):
    kind = metric.WhichOneof("data")
    data = getattr(metric, kind)
    for p in data.data_points:
        row = {"name": metric.name, "unit": metric.unit, "kind": kind, "attributes": attrs(p.attributes)}
        if kind in ("sum", "histogram"):
            row["temporality"] = TEMPORALITY[data.aggregation_temporality]
        if kind == "sum":
            row["monotonic"] = data.is_monotonic
        if kind in ("sum", "gauge"):
            row["value"] = p.as_int if p.WhichOneof("value") == "as_int" else p.as_double
        elif kind == "histogram":
            row.update(count=p.count, sum=p.sum, bounds=list(p.explicit_bounds), buckets=list(p.bucket_counts))
        elif kind == "summary":
            row.update(count=p.count, sum=p.sum, quantiles={q.quantile: q.value for q in p.quantile_values})
        yield row


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path != "/v1/metrics" or self.headers.get("Content-Type") != "application/x-protobuf":
            self.send_response(400)
            self.end_headers()
            return
        req = ExportMetricsServiceRequest()
        req.ParseFromString(body)
        for rm in req.resource_metrics:
            line = {"resource": attrs(rm.resource.attributes), "points": []}
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    line["points"].extend(points(m))
            with open(OUT, "a") as f:
                f.write(json.dumps(line) + "\n")
        reply = ExportMetricsServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
