//! The host-side sandbox runtime, generic over a [`pandastack_vm::VmDriver`]: bakes a template
//! (cold boot, wait for the guest agent, snapshot), creates sandboxes by restoring that snapshot
//! copy-on-write (reflinked disk, private mapping of the template memory), and gives each
//! sandbox a fresh identity through the guest agent's post-restore hook.
//!
//! It owns files under the data directory and nothing else: no HTTP, no database.

pub mod files;
mod layout;
mod sandbox;
mod template;

pub use layout::DataDir;
pub use sandbox::{CreateError, Sandbox};
pub use template::{BakeError, Shape, Template};

use std::path::PathBuf;
use std::time::Duration;

use pandastack_vm::VmDriver;

/// How long a cold-booted guest may take to bring its agent up (TCG is slow).
pub const COLD_BOOT_TIMEOUT: Duration = Duration::from_secs(180);
/// How long a restored guest may take to answer.
pub const RESTORE_TIMEOUT: Duration = Duration::from_secs(30);

/// Bakes templates and creates sandboxes with one driver and one guest kernel.
pub struct Runtime<D: VmDriver> {
    driver: D,
    data: DataDir,
    kernel: PathBuf,
}

impl<D: VmDriver> Runtime<D> {
    pub fn new(driver: D, data: DataDir, kernel: PathBuf) -> Self {
        Self {
            driver,
            data,
            kernel,
        }
    }

    pub fn driver(&self) -> &D {
        &self.driver
    }

    pub fn data(&self) -> &DataDir {
        &self.data
    }

    pub fn kernel(&self) -> &std::path::Path {
        &self.kernel
    }
}
