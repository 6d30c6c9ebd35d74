//! Free-page reporting on and off: the virtio_balloon driver bound to or unbound from the balloon
//! device(s), through sysfs.
//!
//! The balloon device and its feature bits are part of the device state a restore loads, so the
//! host cannot take the reporting feature away from a restored VM; the guest stops reporting by
//! letting go of the device instead. Unbinding runs the driver's remove path (reporting
//! unregistered, device reset); binding probes the device again and renegotiates its features.
//! A built-in driver binds and unbinds through sysfs like a module's.

use std::io;
use std::path::{Path, PathBuf};

use pandastack_guest_proto::v1::FreePageReporting;

/// Where the virtio bus lives in a VM.
pub const VIRTIO_BUS: &str = "/sys/bus/virtio";

/// The driver's name on the virtio bus.
const DRIVER: &str = "virtio_balloon";

/// `VIRTIO_ID_BALLOON`, as `/sys/bus/virtio/devices/*/device` shows it.
const BALLOON_DEVICE_ID: &str = "0x0005";

/// What [`apply`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changed {
    /// Devices the driver was bound to.
    pub bound: Vec<String>,
    /// Devices the driver was unbound from.
    pub unbound: Vec<String>,
}

/// Brings the balloon devices on the virtio bus at `bus` to `want`: for `Off`, the driver is
/// unbound from every device it holds; for `On`, it is bound to every balloon device no driver
/// holds; `Unspecified` changes nothing. Idempotent: a device already as wanted is left alone.
/// Calls run one at a time (two restores' hooks in a row must not both unbind one device).
pub fn apply(bus: &Path, want: FreePageReporting) -> io::Result<Changed> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let driver = bus.join("drivers").join(DRIVER);
    let mut changed = Changed::default();
    match want {
        FreePageReporting::Unspecified => {}
        FreePageReporting::Off => {
            for dev in bound_devices(&driver)? {
                write_name(&driver.join("unbind"), &dev)?;
                changed.unbound.push(dev);
            }
        }
        FreePageReporting::On => {
            for dev in unbound_balloons(bus)? {
                if !driver.is_dir() {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("balloon device {dev}, but no {DRIVER} driver in this kernel"),
                    ));
                }
                write_name(&driver.join("bind"), &dev)?;
                changed.bound.push(dev);
            }
        }
    }
    Ok(changed)
}

/// The devices the driver holds: the entries of its directory that are links to devices (the
/// others are `bind`, `unbind`, `uevent`, `module`). A kernel without the driver holds none.
fn bound_devices(driver: &Path) -> io::Result<Vec<String>> {
    let entries = match std::fs::read_dir(driver) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(with_path(e, driver)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| with_path(e, driver))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("virtio") && entry.file_type().is_ok_and(|t| t.is_symlink()) {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

/// Balloon devices on the bus that no driver holds.
fn unbound_balloons(bus: &Path) -> io::Result<Vec<String>> {
    let devices = bus.join("devices");
    let entries = match std::fs::read_dir(&devices) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(with_path(e, &devices)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| with_path(e, &devices))?;
        let dev: PathBuf = entry.path();
        let id = std::fs::read_to_string(dev.join("device")).unwrap_or_default();
        if id.trim() == BALLOON_DEVICE_ID && std::fs::symlink_metadata(dev.join("driver")).is_err()
        {
            out.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    out.sort();
    Ok(out)
}

/// Writes a device name to a driver's `bind` or `unbind` file (which exist; they are never
/// created).
fn write_name(file: &Path, dev: &str) -> io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(false)
        .open(file)
        .map_err(|e| with_path(e, file))?;
    f.write_all(dev.as_bytes())
        .map_err(|e| io::Error::new(e.kind(), format!("write {dev} to {}: {e}", file.display())))
}

fn with_path(e: io::Error, p: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A virtio bus as sysfs shows it: `devices/virtioN/device` ids, the balloon driver's
    /// directory with `bind`/`unbind` files and links to the devices it holds.
    struct Bus {
        dir: tempfile::TempDir,
    }

    impl Bus {
        fn new(devices: &[(&str, &str, bool)]) -> Self {
            let dir = tempfile::tempdir().unwrap();
            let driver = dir.path().join("drivers").join(DRIVER);
            std::fs::create_dir_all(&driver).unwrap();
            for f in ["bind", "unbind", "uevent"] {
                std::fs::write(driver.join(f), "").unwrap();
            }
            for (name, id, bound) in devices {
                let dev = dir.path().join("devices").join(name);
                std::fs::create_dir_all(&dev).unwrap();
                std::fs::write(dev.join("device"), format!("{id}\n")).unwrap();
                if *bound {
                    std::os::unix::fs::symlink(&driver, dev.join("driver")).unwrap();
                    std::os::unix::fs::symlink(&dev, driver.join(name)).unwrap();
                }
            }
            Self { dir }
        }

        fn path(&self) -> &Path {
            self.dir.path()
        }

        fn written(&self, file: &str) -> String {
            std::fs::read_to_string(self.path().join("drivers").join(DRIVER).join(file)).unwrap()
        }

        /// Does what the kernel does on a write to `unbind`/`bind`, and clears the file.
        fn settle(&self) {
            let driver = self.path().join("drivers").join(DRIVER);
            let unbind = self.written("unbind");
            if !unbind.is_empty() {
                std::fs::remove_file(driver.join(&unbind)).unwrap();
                std::fs::remove_file(self.path().join("devices").join(&unbind).join("driver"))
                    .unwrap();
            }
            let bind = self.written("bind");
            if !bind.is_empty() {
                let dev = self.path().join("devices").join(&bind);
                std::os::unix::fs::symlink(&driver, dev.join("driver")).unwrap();
                std::os::unix::fs::symlink(&dev, driver.join(&bind)).unwrap();
            }
            std::fs::write(driver.join("unbind"), "").unwrap();
            std::fs::write(driver.join("bind"), "").unwrap();
        }
    }

    #[test]
    fn off_unbinds_on_binds_and_both_are_idempotent() {
        // virtio0: a block device (id 2) held by another driver; virtio3: the balloon.
        let bus = Bus::new(&[("virtio0", "0x0002", false), ("virtio3", "0x0005", true)]);
        assert_eq!(
            apply(bus.path(), FreePageReporting::Unspecified).unwrap(),
            Changed::default()
        );
        // On while bound: nothing to do.
        assert_eq!(
            apply(bus.path(), FreePageReporting::On).unwrap(),
            Changed::default()
        );
        assert_eq!(bus.written("bind"), "");

        let off = apply(bus.path(), FreePageReporting::Off).unwrap();
        assert_eq!(off.unbound, vec!["virtio3"]);
        assert_eq!(bus.written("unbind"), "virtio3");
        bus.settle();
        // Off again: nothing left to unbind.
        assert_eq!(
            apply(bus.path(), FreePageReporting::Off).unwrap(),
            Changed::default()
        );
        assert_eq!(bus.written("unbind"), "");

        // On: only the balloon is bound, not the other unbound device.
        let on = apply(bus.path(), FreePageReporting::On).unwrap();
        assert_eq!(on.bound, vec!["virtio3"]);
        assert_eq!(bus.written("bind"), "virtio3");
        bus.settle();
        assert_eq!(
            apply(bus.path(), FreePageReporting::On).unwrap(),
            Changed::default()
        );
    }

    #[test]
    fn a_kernel_without_the_driver_or_the_bus() {
        let empty = tempfile::tempdir().unwrap();
        for want in [FreePageReporting::Off, FreePageReporting::On] {
            assert_eq!(apply(empty.path(), want).unwrap(), Changed::default());
        }
        // A balloon device but no driver to bind it: an error, not a panic.
        let bus = Bus::new(&[("virtio1", "0x0005", false)]);
        std::fs::remove_dir_all(bus.path().join("drivers")).unwrap();
        assert_eq!(
            apply(bus.path(), FreePageReporting::Off).unwrap(),
            Changed::default()
        );
        let err = apply(bus.path(), FreePageReporting::On).unwrap_err();
        assert!(err.to_string().contains("virtio1"), "{err}");
    }

    #[test]
    fn a_refused_write_is_an_error() {
        let bus = Bus::new(&[("virtio3", "0x0005", true)]);
        std::fs::remove_file(bus.path().join("drivers").join(DRIVER).join("unbind")).unwrap();
        let err = apply(bus.path(), FreePageReporting::Off).unwrap_err();
        assert!(err.to_string().contains("unbind"), "{err}");
    }
}
