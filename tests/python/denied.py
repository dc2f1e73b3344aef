"""A third-party gRPC client (grpcio, stubs generated from proto/fsd/v1/fsd.proto) against
read-denied files and protected names, over the daemon's Unix socket. Driven by
tests/tests/denied_paths.rs, which seeds the workspace (`.env`, a link `innocent.txt` to it,
`.claude/settings.json`, `a.txt`) and passes a JSON config as argv[1]. Prints what it saw as one
JSON object; the Rust side asserts it. A call that succeeds where it must not raises.
"""

import json
import os
import subprocess
import sys


def main():
    cfg = json.loads(sys.argv[1])
    out = cfg["stub_dir"]
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I", cfg["proto_dir"],
         "--python_out", out, "--grpc_python_out", out, "fsd/v1/fsd.proto"],
        check=True,
    )
    sys.path.insert(0, out)

    import grpc
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status
    from fsd.v1 import fsd_pb2, fsd_pb2_grpc

    root = cfg["root"]
    seen = {}

    def refusal(name, call):
        """Runs `call`, which must be refused; records [status, reason, escalation, pattern, name]."""
        try:
            result = call()
            if hasattr(result, "__iter__") and not hasattr(result, "ListFields"):
                for _ in result:
                    pass
            raise AssertionError(f"{name} succeeded")
        except grpc.RpcError as err:
            status = rpc_status.from_call(err)
            assert status is not None, f"{name}: no status details on {err.code()}"
            for detail in status.details:
                if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                    info = error_details_pb2.ErrorInfo()
                    detail.Unpack(info)
                    assert "sk-live" not in err.details(), err.details()
                    assert all("sk-live" not in v for v in info.metadata.values()), info.metadata
                    meta = info.metadata
                    if info.reason == "FS_READ_DENIED":
                        seen[name] = [err.code().name, info.reason, meta.get("escalation"),
                                      meta.get("pattern"), meta.get("name")]
                    else:
                        seen[name] = [err.code().name, info.reason, meta.get("reason")]
                    return
            raise AssertionError(f"{name}: no ErrorInfo")

    env = os.path.join(root, ".env")
    plain = os.path.join(root, "plain.txt")
    # The socket path is no valid HTTP authority; name the host as a local client would.
    options = [("grpc.default_authority", "localhost")]
    with grpc.insecure_channel("unix:" + cfg["socket"], options=options) as channel:
        fsd = fsd_pb2_grpc.FsdStub(channel)
        refusal("read", lambda: fsd.ReadText(fsd_pb2.ReadTextRequest(path=env), timeout=10))
        refusal("read_link", lambda: fsd.ReadText(
            fsd_pb2.ReadTextRequest(path=os.path.join(root, "innocent.txt")), timeout=10))
        refusal("stream", lambda: fsd.StreamText(fsd_pb2.StreamTextRequest(path=env), timeout=10))
        refusal("edit_hit", lambda: fsd.EditText(
            fsd_pb2.EditTextRequest(path=env, old_string="sk-live", new_string="x"), timeout=10))
        refusal("edit_miss", lambda: fsd.EditText(
            fsd_pb2.EditTextRequest(path=env, old_string="nothere", new_string="x"), timeout=10))
        assert seen["edit_hit"] == seen["edit_miss"], seen
        refusal("write", lambda: fsd.WriteText(fsd_pb2.WriteTextRequest(path=env, content="x\n"), timeout=10))
        refusal("move_to_plain", lambda: fsd.MoveFile(
            fsd_pb2.MoveFileRequest(source=env, destination=plain), timeout=10))
        refusal("delete", lambda: fsd.DeleteFile(fsd_pb2.DeleteFileRequest(path=env), timeout=10))
        listing = fsd.ListDir(fsd_pb2.ListDirRequest(path=root), timeout=10)
        entry = next(e for e in listing.entries if e.name == ".env")
        seen["listed"] = [entry.name, entry.HasField("version"), entry.HasField("size")]

        settings = os.path.join(root, ".claude", "settings.json")
        refusal("protected_write", lambda: fsd.WriteText(
            fsd_pb2.WriteTextRequest(path=settings, content="{\"hooks\": {}}\n"), timeout=10))
        refusal("protected_move", lambda: fsd.MoveFile(fsd_pb2.MoveFileRequest(
            source=os.path.join(root, "a.txt"), destination=os.path.join(root, ".cursor", "mcp.json")),
            timeout=10))
        # A link made now, long after the daemon started.
        os.symlink(".claude", os.path.join(root, "late"))
        refusal("late_link_write", lambda: fsd.WriteText(fsd_pb2.WriteTextRequest(
            path=os.path.join(root, "late", "settings.json"), content="{}\n"), timeout=10))

    print(json.dumps(seen))


if __name__ == "__main__":
    main()
