//! The protocol between the host and `pandastack-guest`, the agent that runs as PID 1 in every
//! guest: gRPC services (generated from `proto/guest.proto`), the line that opens each session on
//! the virtio-serial port, and the host side of the connection.
//!
//! This crate holds definitions and transport only; it must not know about QEMU, templates or the
//! public API.

pub mod listing;
pub mod session;

pub mod host;

mod port;
pub use port::{connect_port, PortStream};

/// Generated protobuf messages and gRPC clients/servers (package `pandastack.guest.v1`).
#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("pandastack.guest.v1");
}

/// Protocol version spoken by this build; carried in `HealthResponse.protocol_version`.
pub const PROTOCOL_VERSION: u32 = 1;

/// Name of the virtio-serial port the agent serves on (`/sys/class/virtio-ports/*/name`).
pub const PORT_NAME: &str = "org.pandastack.agent";
