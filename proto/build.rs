//! Compiles `fsd/v1/fsd.proto` with protox (pure Rust), so no system `protoc` is needed, and keeps
//! the encoded file descriptor set for the daemon's server reflection.

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=fsd/v1/fsd.proto");
    println!("cargo:rerun-if-changed=fsd/v1/approver.proto");
    let fds = protox::compile(["fsd/v1/fsd.proto", "fsd/v1/approver.proto"], ["."])?;
    // Reflection answers from this exact set, so a grpcurl-style client sees what was compiled.
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("fsd_descriptor.bin"), fds.encode_to_vec())?;
    // The generated services decode with `FsdCodec`: a request prost refuses is INVALID_ARGUMENT
    // with an fsd code, not prost's INTERNAL.
    tonic_prost_build::configure().bytes(".").codec_path("crate::codec::FsdCodec").compile_fds(fds)?;
    Ok(())
}
