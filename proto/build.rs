//! Compiles `fsd/v1/fsd.proto` with protox (pure Rust), so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=fsd/v1/fsd.proto");
    let fds = protox::compile(["fsd/v1/fsd.proto"], ["."])?;
    tonic_prost_build::configure()
        .bytes(".")
        .compile_fds(fds)?;
    Ok(())
}
