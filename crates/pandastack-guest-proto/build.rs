//! Compiles `proto/guest.proto` with a pure-Rust protobuf compiler (no `protoc` on the build host).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/guest.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
