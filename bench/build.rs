//! Compiles the bench's own echo service with protox (pure Rust), so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/bench/v1/echo.proto");
    let fds = protox::compile(["bench/v1/echo.proto"], ["proto"])?;
    // `bytes` fields as `bytes::Bytes`, as fsd-proto generates them, so payloads cost the same.
    tonic_prost_build::configure().bytes(".").compile_fds(fds)?;
    Ok(())
}
