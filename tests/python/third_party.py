"""A third-party gRPC client of fsd: Python stubs generated from proto/fsd/v1/fsd.proto with
grpcio-tools, over TLS with a client certificate or a bearer token. Driven by
tests/tests/third_party.rs, which starts the daemon and passes a JSON config as argv[1]. Prints
one JSON object (what it saw) on stdout; any failed check raises, so the exit code is non-zero.
"""

import json
import os
import subprocess
import sys


def main():
    cfg = json.loads(sys.argv[1])
    out = cfg["stub_dir"]
    # The stubs are generated now, from the repository's proto, by grpcio-tools' bundled protoc.
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I", cfg["proto_dir"],
         "--python_out", out, "--grpc_python_out", out, "fsd/v1/fsd.proto"],
        check=True,
    )
    sys.path.insert(0, out)

    import grpc
    from google.rpc import error_details_pb2
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
    from grpc_status import rpc_status
    from fsd.v1 import fsd_pb2, fsd_pb2_grpc

    def read(path):
        with open(path, "rb") as f:
            return f.read()

    options = [("grpc.ssl_target_name_override", cfg["server_name"])]
    ca = read(cfg["ca"])
    mtls = grpc.ssl_channel_credentials(ca, read(cfg["key"]), read(cfg["cert"]))
    server_only = grpc.ssl_channel_credentials(ca)
    target = cfg["target"]
    root = cfg["root"]
    seen = {}

    def error_info(err):
        status = rpc_status.from_call(err)
        assert status is not None, f"no grpc-status-details-bin on {err.code()}: {err.details()}"
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                return info
        raise AssertionError("no google.rpc.ErrorInfo in the status details")

    with grpc.secure_channel(target, mtls, options=options) as channel:
        fsd = fsd_pb2_grpc.FsdStub(channel)
        hello = fsd.Hello(fsd_pb2.HelloRequest(), timeout=10)
        seen["protocol_version"] = hello.protocol_version

        path = os.path.join(root, "hello.txt")
        stat = fsd.Stat(fsd_pb2.StatRequest(path=path), timeout=10)
        assert stat.info.type == fsd_pb2.FILE_TYPE_FILE, stat
        seen["stat_size"] = stat.info.size

        text = fsd.ReadText(fsd_pb2.ReadTextRequest(path=path), timeout=10)
        # A whole read adds "~<length>.<digest>" to the metadata part a stat reports.
        assert text.version.split("~")[0] == stat.info.version, (text.version, stat.info.version)
        assert "~" in text.version and "~" not in stat.info.version
        seen["read_text"] = text.text

        guard = fsd_pb2.WriteGuard(replace_if_version=fsd_pb2.ReplaceIfVersion(version=text.version))
        wrote = fsd.WriteText(fsd_pb2.WriteTextRequest(path=path, content="written from python\n", guard=guard), timeout=10)
        assert wrote.operation == fsd_pb2.WRITE_OPERATION_UPDATE, wrote
        seen["write_display_path"] = wrote.target.display_path

        # A refusal: the machine-readable reason rides in google.rpc.ErrorInfo.
        try:
            fsd.ReadText(fsd_pb2.ReadTextRequest(path=os.path.join(root, "missing.txt")), timeout=10)
            raise AssertionError("reading a missing file succeeded")
        except grpc.RpcError as err:
            info = error_info(err)
            seen["missing"] = {"code": err.code().name, "reason": info.reason, "domain": info.domain,
                               "path": info.metadata["path"]}
        # The old version is stale now.
        try:
            fsd.WriteText(fsd_pb2.WriteTextRequest(path=path, content="lost\n", guard=guard), timeout=10)
            raise AssertionError("a stale write succeeded")
        except grpc.RpcError as err:
            seen["stale"] = {"code": err.code().name, "reason": error_info(err).reason}

        # A transaction: a stale operation refuses it whole (naming the operation), then it commits.
        other = os.path.join(root, "other.txt")
        write = lambda p, c: fsd_pb2.TransactOperation(write=fsd_pb2.WriteTextRequest(path=p, content=c))
        stale_edit = fsd_pb2.TransactOperation(edit=fsd_pb2.EditTextRequest(
            path=path, old_string="python", new_string="grpcio", guard=fsd_pb2.EditGuard(version=text.version)))
        try:
            fsd.Transact(fsd_pb2.TransactRequest(operations=[write(other, "other\n"), stale_edit]), timeout=10)
            raise AssertionError("a transaction with a stale operation committed")
        except grpc.RpcError as err:
            info = error_info(err)
            seen["transact_refused"] = {"reason": info.reason, "operation": info.metadata["operation"],
                                        "other_exists": os.path.exists(other)}
        fresh = fsd.ReadText(fsd_pb2.ReadTextRequest(path=path), timeout=10).version
        edit = fsd_pb2.TransactOperation(edit=fsd_pb2.EditTextRequest(
            path=path, old_string="python", new_string="grpcio", guard=fsd_pb2.EditGuard(version=fresh)))
        reply = fsd.Transact(fsd_pb2.TransactRequest(operations=[write(other, "other\n"), edit]), timeout=10)
        seen["transact"] = [r.WhichOneof("kind") for r in reply.results]

        # Request compression is refused, never inflated.
        try:
            fsd.Stat(fsd_pb2.StatRequest(path=path), timeout=10, compression=grpc.Compression.Gzip)
            seen["compressed"] = "accepted"
        except grpc.RpcError as err:
            seen["compressed"] = err.code().name

        health = health_pb2_grpc.HealthStub(channel)
        seen["health"] = {
            name or "(server)": health_pb2.HealthCheckResponse.ServingStatus.Name(
                health.Check(health_pb2.HealthCheckRequest(service=name), timeout=10).status)
            for name in ["", "fsd.v1.Fsd"]
        }

        reflection = ProtoReflectionDescriptorDatabase(channel)
        seen["reflection_services"] = sorted(reflection.get_services())
        seen["reflection_knows_readtext"] = (
            reflection.FindFileContainingSymbol("fsd.v1.Fsd").name == "fsd/v1/fsd.proto")

    # Without a certificate: a bearer token stands in; without either, the call is refused.
    with grpc.secure_channel(target, server_only, options=options) as channel:
        fsd = fsd_pb2_grpc.FsdStub(channel)
        try:
            fsd.Stat(fsd_pb2.StatRequest(path=path), timeout=10)
            raise AssertionError("a call without credentials succeeded")
        except grpc.RpcError as err:
            seen["anonymous"] = {"code": err.code().name, "details": err.details()}
        stat = fsd.Stat(fsd_pb2.StatRequest(path=path), timeout=10,
                        metadata=[("authorization", "Bearer " + cfg["token"])])
        seen["token_stat_size"] = stat.info.size
        health = health_pb2_grpc.HealthStub(channel)
        # Probes need no application credential.
        seen["anonymous_health"] = health_pb2.HealthCheckResponse.ServingStatus.Name(
            health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10).status)

    # The plaintext health-only listener (health_listen), for orchestrator probes: health and
    # nothing else.
    with grpc.insecure_channel(cfg["health_target"]) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        seen["probe_health"] = health_pb2.HealthCheckResponse.ServingStatus.Name(
            health.Check(health_pb2.HealthCheckRequest(service="fsd.v1.Fsd"), timeout=10).status)
        try:
            fsd_pb2_grpc.FsdStub(channel).Hello(fsd_pb2.HelloRequest(), timeout=10)
            seen["probe_fsd"] = "served"
        except grpc.RpcError as err:
            seen["probe_fsd"] = err.code().name

    print(json.dumps(seen))


if __name__ == "__main__":
    main()
