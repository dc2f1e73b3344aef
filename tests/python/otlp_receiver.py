"""An OTLP/gRPC trace receiver for tests/tests/traces.rs, built from PyPI's `opentelemetry-proto`
(the OTLP protobufs and their gRPC service) and grpcio: no collector binary is needed.

    otlp_receiver.py OUT

Listens on 127.0.0.1 on a free port, prints `listening PORT` on standard output once it serves,
and appends every span it is sent to OUT as one JSON object per line (ids in lowercase hex, the
parent's empty for a root span, the kind as OTLP's number, attributes as a flat object), flushed
at once. Runs until its standard input closes.
"""

import json
import sys
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, out):
        self.out = out

    def Export(self, request, context):
        for resource_spans in request.resource_spans:
            resource = {a.key: value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    record = {
                        "service": resource.get("service.name"),
                        "scope": scope_spans.scope.name,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "name": span.name,
                        "kind": span.kind,
                        "start": span.start_time_unix_nano,
                        "end": span.end_time_unix_nano,
                        "attributes": {a.key: value(a.value) for a in span.attributes},
                    }
                    self.out.write(json.dumps(record) + "\n")
        self.out.flush()
        return trace_service_pb2.ExportTraceServiceResponse()


def main():
    out = open(sys.argv[1], "a")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Receiver(out), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"listening {port}", flush=True)
    sys.stdin.read()
    server.stop(0)


if __name__ == "__main__":
    main()
