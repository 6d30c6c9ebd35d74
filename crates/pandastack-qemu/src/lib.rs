//! QEMU `-M microvm` driver for PandaStack: builds the command line, runs and watches the QEMU
//! process, and controls it over a typed QMP client. It implements [`pandastack_vm::VmDriver`];
//! nothing outside the binary should name this crate.
//!
//! Snapshots use QEMU's migration stream for device state only: guest RAM is a file (mapped
//! shared while baking, copy-on-write private when restoring) and the `x-ignore-shared`
//! capability keeps it out of the stream.

pub mod accel;
pub mod argv;
pub mod cgroup;
pub mod confine;
mod driver;
pub mod landlock;
pub mod process;
pub mod qmp;

pub use argv::{DiskLimits, QemuConfig, DEFAULT_TCG_TB_SIZE_MIB};
pub use cgroup::Cgroups;
pub use confine::VmIdentities;
pub use driver::{QemuDriver, QemuVm};
