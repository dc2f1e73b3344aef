"""An OTLP/gRPC trace receiver for tests/tests/traces.rs, built from PyPI's `opentelemetry-proto`
(the OTLP protobufs and their gRPC service) and grpcio: no collector binary is needed.

    otlp_receiver.py OUT [--tls CERT KEY] [--client-ca CA] [--require-header NAME VALUE]

Listens on 127.0.0.1 on a free port, prints `listening PORT` on standard output once it serves,
and appends every span it is sent to OUT as one JSON object per line (ids in lowercase hex, the
parent's empty for a root span, the kind as OTLP's number, attributes as a flat object), flushed
at once. Runs until its standard input closes.

With `--tls` it serves TLS with that certificate and key; with `--client-ca` as well it requires
a client certificate signed by that CA. With `--require-header` an export without that metadata
(name lowercase) is refused with UNAUTHENTICATED and its spans are not written.
"""

import argparse
import json
import sys
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, out, required):
        self.out = out
        self.required = required

    def Export(self, request, context):
        if self.required is not None:
            name, expected = self.required
            if dict(context.invocation_metadata()).get(name) != expected:
                context.abort(grpc.StatusCode.UNAUTHENTICATED, f"missing or wrong {name}")
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


def read(path):
    with open(path, "rb") as f:
        return f.read()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    parser.add_argument("--client-ca")
    parser.add_argument("--require-header", nargs=2, metavar=("NAME", "VALUE"))
    args = parser.parse_args()
    out = open(args.out, "a")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    receiver = Receiver(out, args.require_header)
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    if args.tls:
        cert, key = args.tls
        credentials = grpc.ssl_server_credentials(
            [(read(key), read(cert))],
            root_certificates=read(args.client_ca) if args.client_ca else None,
            require_client_auth=bool(args.client_ca),
        )
        port = server.add_secure_port("127.0.0.1:0", credentials)
    else:
        port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"listening {port}", flush=True)
    sys.stdin.read()
    server.stop(0)


if __name__ == "__main__":
    main()
