//! Compiles `proto/agent.proto` with a pure-Rust protobuf compiler (no `protoc` on the build host).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/agent.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure().bytes(".").compile_fds(fds)?;
    Ok(())
}
