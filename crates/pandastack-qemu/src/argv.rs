//! The QEMU command line for a `-M microvm` guest.
//!
//! Devices are virtio-mmio only (no PCI, no ACPI); QEMU adds their `virtio_mmio.device=`
//! registrations to the kernel command line itself. The guest agent talks over a virtio-serial
//! port bound to a unix socket; QMP over a second socket controls the process.
//!
//! `-M microvm` has eight virtio-mmio transports and no hotplug. The root disk, the agent
//! channel, the RNG, the balloon and (optionally) the NIC take five; volume slots take at most
//! [`MAX_VOLUME_SLOTS`] of the rest, each a `virtio-blk-device` after every other device, in slot
//! order, so a VM restored with the same number of slots has the same device set.

use std::ffi::OsString;
use std::path::Path;

use pandastack_guest_proto::PORT_NAME;
use pandastack_vm::{volume_serial, Accel, Memory, VmSpec, VolumeDisk};

/// File names inside a VM's run directory.
pub const QMP_SOCKET: &str = "qmp.sock";
pub const AGENT_SOCKET: &str = "agent.sock";
pub const CONSOLE_LOG: &str = "console.log";
pub const QEMU_LOG: &str = "qemu.log";
pub const PID_FILE: &str = "qemu.pid";

/// Volume slots a VM may have: microvm's eight virtio-mmio transports minus the five other
/// devices (root disk, agent channel, RNG, balloon, NIC).
pub const MAX_VOLUME_SLOTS: usize = 3;

/// Block node of volume slot `slot` its device is attached to: a throttle filter in the VM's
/// [`THROTTLE_GROUP`] over the raw format layer `<node>-raw`, itself over the file layer
/// `<node>-file`.
pub fn volume_node(slot: usize) -> String {
    format!("vol{slot}")
}

/// `blockdev-add`/`blockdev-reopen` options of volume slot `slot`'s three nodes (file, raw
/// format on top, the throttle filter on top of that), as JSON. `path` is as QEMU should open
/// it (see [`in_run_dir`]).
pub fn volume_nodes(slot: usize, path: &Path, read_only: bool) -> [serde_json::Value; 3] {
    let node = volume_node(slot);
    let file = format!("{node}-file");
    let raw = format!("{node}-raw");
    [
        serde_json::json!({
            "driver": "file",
            "node-name": file,
            "filename": path.to_string_lossy(),
            "aio": "threads",
            "discard": "unmap",
            "read-only": read_only,
        }),
        serde_json::json!({
            "driver": "raw",
            "node-name": raw,
            "file": file,
            "discard": "unmap",
            "read-only": read_only,
        }),
        serde_json::json!({
            "driver": "throttle",
            "node-name": node,
            "file": raw,
            "throttle-group": THROTTLE_GROUP,
            "read-only": read_only,
        }),
    ]
}

/// Kernel command line used for every cold boot; the spec's `kernel_args` are appended.
pub const BASE_KERNEL_ARGS: &[&str] = &[
    "console=ttyS0",
    "reboot=t",
    "panic=-1",
    "root=/dev/vda",
    "rootfstype=ext4",
    "rw",
    "init=/usr/local/sbin/pandastack-guest",
    "quiet",
    "8250.nr_uarts=1",
    "random.trust_cpu=on",
];

/// How QEMU starts: booting a kernel, or waiting for device state to be loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartMode {
    Boot,
    Incoming,
}

/// Default TCG translation cache size, MiB.
pub const DEFAULT_TCG_TB_SIZE_MIB: u32 = 256;

pub use pandastack_vm::DiskLimits;

/// The id of a VM's one throttle group (`-object throttle-group`): the root disk and every
/// volume are filtered through it, so the VM's [`DiskLimits`] hold for all its disks together.
pub const THROTTLE_GROUP: &str = "disk";

/// The `-object` defining a VM's throttle group with `limits`: QEMU's own throttling, so the
/// limit holds whatever the host's cgroup version and whether the guest's writes reach the file
/// through the page cache (`cache=writeback`, which cgroup v1's `blkio` throttling never sees)
/// or not. A total of 0 is left out (unlimited). The group and its filters are the block
/// layer's, not the devices': not part of the device state a restore loads, so the limits (and
/// whether a disk is filtered at all) may differ between save and load.
pub fn throttle_group(limits: &DiskLimits) -> String {
    let mut o = format!("throttle-group,id={THROTTLE_GROUP}");
    if limits.bytes_per_sec > 0 {
        o.push_str(&format!(",x-bps-total={}", limits.bytes_per_sec));
    }
    if limits.iops > 0 {
        o.push_str(&format!(",x-iops-total={}", limits.iops));
    }
    o
}

/// Process-wide QEMU settings.
#[derive(Debug, Clone)]
pub struct QemuConfig {
    pub binary: std::path::PathBuf,
    pub accel: Accel,
    /// TCG translation cache size (`-accel tcg,tb-size=`). Only what a VM's code fills is
    /// resident, so an idle VM stays small; a cache too small for what runs in the guest is
    /// flushed and refilled over and over (at 32 MiB, `npm install` of a Vite project took 2.4x
    /// as long as at 256; measured in docs/vm-runtime.md, "Acceleration").
    pub tcg_tb_size_mib: u32,
    /// Enable QEMU's seccomp sandbox.
    pub seccomp: bool,
    /// Put every VM process in its own cgroup with limits (`None`: leave it where it starts).
    pub cgroups: Option<crate::cgroup::Cgroups>,
    /// Run every VM process as a uid of its own from this pool, chrooted into its run
    /// directory (`None`: as the caller, unconfined). On by default when running as root.
    pub identities: Option<std::sync::Arc<crate::confine::VmIdentities>>,
    /// The size each VM process's own log (`qemu.log`, its stderr) is kept near, in bytes.
    pub log_max_bytes: u64,
    /// How fast a VM may use its disks unless its spec says otherwise
    /// ([`VmSpec::disk_limits`]).
    pub disk_limits: DiskLimits,
}

impl QemuConfig {
    /// Memory a VM process may use for translated code: the translation cache under TCG,
    /// nothing under KVM.
    pub fn translation_cache_mib(&self) -> u32 {
        match self.accel {
            Accel::Kvm => 0,
            Accel::Tcg => self.tcg_tb_size_mib,
        }
    }

    pub fn new(accel: Accel) -> Self {
        Self {
            binary: "qemu-system-x86_64".into(),
            accel,
            tcg_tb_size_mib: DEFAULT_TCG_TB_SIZE_MIB,
            seccomp: true,
            cgroups: None,
            identities: crate::confine::VmIdentities::default_if_root().map(std::sync::Arc::new),
            log_max_bytes: crate::driver::QEMU_LOG_MAX,
            disk_limits: DiskLimits::DEFAULT,
        }
    }
}

fn push(argv: &mut Vec<OsString>, items: &[&str]) {
    argv.extend(items.iter().map(OsString::from));
}

fn path_arg(prefix: &str, path: &Path, suffix: &str) -> OsString {
    let mut s = OsString::from(prefix);
    s.push(path.as_os_str());
    s.push(suffix);
    s
}

/// `path` as QEMU should see it. QEMU runs with the run directory as its working directory and
/// files inside it are named relative to it: a run directory may be renamed while its VM waits
/// for state (a pre-started VM handed to a sandbox), and QEMU reopens the disk by name when the
/// state is loaded.
fn in_run_dir(spec: &VmSpec, path: &Path) -> std::path::PathBuf {
    relative_to(&spec.run_dir, path)
}

/// `path` named relative to `run_dir` when it is directly inside it.
pub(crate) fn relative_to(run_dir: &Path, path: &Path) -> std::path::PathBuf {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) if parent == run_dir => name.into(),
        _ => path.to_owned(),
    }
}

/// The arguments for volume slot `slot` backed by `disk`: its two block nodes (JSON, so no
/// path needs escaping) and its device. The device set must match across save and load; the
/// nodes' files and read-only flags may differ.
fn volume_args(
    spec: &VmSpec,
    slot: usize,
    disk: &VolumeDisk,
    confined: Option<&Confined>,
) -> Vec<OsString> {
    let mut argv = Vec::new();
    let fds = confined.and_then(|c| c.volume_fds.get(slot).copied().flatten());
    let path = match fds {
        Some(fds) => {
            for fd in fds {
                argv.push("-add-fd".into());
                argv.push(format!("fd={fd},set={}", fdset(slot)).into());
            }
            fdset_path(slot)
        }
        None => in_run_dir(spec, &disk.path),
    };
    for node in volume_nodes(slot, &path, disk.read_only) {
        argv.push("-blockdev".into());
        argv.push(node.to_string().into());
    }
    argv.push("-device".into());
    argv.push(
        format!(
            "virtio-blk-device,drive={},serial={}",
            volume_node(slot),
            volume_serial(slot)
        )
        .into(),
    );
    argv
}

/// The fd set (`-add-fd`) holding volume slot `slot`'s file when it is outside a confined VM's
/// run directory.
fn fdset(slot: usize) -> usize {
    slot + 1
}

/// How a confined VM names the file of volume slot `slot` held in its fd set.
pub(crate) fn fdset_path(slot: usize) -> std::path::PathBuf {
    format!("/dev/fdset/{}", fdset(slot)).into()
}

/// A VM process that runs as its own uid, confined to its run directory (see
/// [`crate::confine`]).
#[derive(Debug, Clone, Default)]
pub struct Confined {
    pub uid: u32,
    /// Runs as its uid from its first instruction under a Landlock rule set, so it can create
    /// nothing in its (root's) run directory and open nothing outside it: its sockets are
    /// bound by the host and inherited, and the files outside its run directory it opens at
    /// start (a kernel, a template's memory) are inherited and named `/proc/self/fd/N`.
    /// Without: it starts as root and chroots into its run directory itself.
    pub landlock: Option<Inherited>,
    /// Per volume slot whose file is outside the run directory (where the chrooted process
    /// cannot name it): that file opened read-write and read-only by the host, inherited by
    /// QEMU and named through an fd set, so a reopen in either mode needs no path.
    pub volume_fds: Vec<Option<[std::os::fd::RawFd; 2]>>,
}

/// What a Landlock-confined VM process inherits instead of opening or creating by name.
#[derive(Debug, Clone, Default)]
pub struct Inherited {
    /// Listening sockets for QMP and the guest agent channel.
    pub qmp: std::os::fd::RawFd,
    pub agent: std::os::fd::RawFd,
    /// The kernel (cold boot) when outside the run directory.
    pub kernel: Option<std::os::fd::RawFd>,
    /// The memory file when outside the run directory.
    pub memory: Option<std::os::fd::RawFd>,
    /// The queue of its TAP, attached by the host in the slot's namespace.
    pub tap: Option<std::os::fd::RawFd>,
}

/// How a process names its inherited descriptor `fd` when a path is wanted.
fn proc_fd(fd: std::os::fd::RawFd) -> std::path::PathBuf {
    format!("/proc/self/fd/{fd}").into()
}

/// Builds the argument vector (without the binary) for `spec`. Relative paths are relative to
/// `spec.run_dir`, which must be the process's working directory. When `confined`, QEMU drops
/// to that uid and gid and chroots into the run directory once it has opened its devices and
/// files (see [`crate::confine`]).
pub fn build(
    cfg: &QemuConfig,
    spec: &VmSpec,
    mode: StartMode,
    confined: Option<&Confined>,
) -> Vec<OsString> {
    let uid = confined.map(|c| c.uid);
    let inherited = confined.and_then(|c| c.landlock.as_ref());
    let mut argv = Vec::new();
    let mem = spec.memory_mib;
    push(
        &mut argv,
        &[
            "-M",
            "microvm,acpi=off,x-option-roms=off,isa-serial=on,rtc=on,pit=on,pic=on,memory-backend=ram",
            "-nodefaults",
            "-no-user-config",
            "-nographic",
            "-no-reboot",
        ],
    );
    match cfg.accel {
        Accel::Kvm => push(&mut argv, &["-accel", "kvm", "-cpu", "host"]),
        Accel::Tcg => {
            let tcg = format!("tcg,tb-size={}", cfg.tcg_tb_size_mib);
            push(&mut argv, &["-accel", &tcg, "-cpu", "max"]);
        }
    }
    let smp = spec.vcpus.to_string();
    let size = format!("{mem}M");
    push(&mut argv, &["-smp", &smp, "-m", &size]);

    // A private mapping is of a file other VMs map too (a template's memory): QEMU opens it
    // read-only (`readonly=on`) and maps it writable copy-on-write (`rom=off`), so nothing this
    // process does — a guest's free-page report becomes a hole punched into a file-backed RAM
    // block's *file* otherwise — can change that file. QEMU refuses such discards instead (and
    // the guest is asked not to report at all: see the balloon device below).
    let file = match &spec.memory {
        Memory::SharedFile(p) => Some((p, "share=on")),
        Memory::PrivateFile(p) => Some((p, "share=off,readonly=on,rom=off")),
        Memory::Anonymous => None,
    };
    argv.push("-object".into());
    match file {
        Some((path, mapping)) => argv.push(path_arg(
            &format!("memory-backend-file,id=ram,size={mem}M,mem-path="),
            &match inherited.and_then(|i| i.memory) {
                Some(fd) => proc_fd(fd),
                None => in_run_dir(spec, path),
            },
            &format!(",{mapping},prealloc=off"),
        )),
        // Same id as the file backends: the RAM block name must match across save and load.
        None => argv.push(format!("memory-backend-ram,id=ram,size={mem}M").into()),
    }

    if mode == StartMode::Boot {
        argv.push("-kernel".into());
        argv.push(match inherited.and_then(|i| i.kernel) {
            Some(fd) => proc_fd(fd).into(),
            None => spec.kernel.clone().into(),
        });
        let mut cmdline: Vec<String> = BASE_KERNEL_ARGS.iter().map(|s| s.to_string()).collect();
        cmdline.extend(spec.kernel_args.iter().cloned());
        push(&mut argv, &["-append", &cmdline.join(" ")]);
    } else {
        push(&mut argv, &["-incoming", "defer"]);
    }

    // The VM's disk limits, one group for all its disks (see `throttle_group`).
    argv.push("-object".into());
    argv.push(throttle_group(&spec.disk_limits.unwrap_or(cfg.disk_limits)).into());

    // Root disk: a throttle filter in that group over the raw image. `discard=unmap` lets the
    // guest's fstrim punch holes back into the sparse file.
    argv.push("-drive".into());
    argv.push(path_arg(
        &format!(
            "id=root,if=none,driver=throttle,throttle-group={THROTTLE_GROUP},cache=writeback,\
             discard=unmap,file.driver=raw,file.file.driver=file,file.file.aio=threads,\
             file.file.filename="
        ),
        &in_run_dir(spec, &spec.rootfs),
        "",
    ));
    push(&mut argv, &["-device", "virtio-blk-device,drive=root"]);

    // Guest agent channel.
    push(&mut argv, &["-device", "virtio-serial-device,max_ports=2"]);
    argv.push("-chardev".into());
    argv.push(match inherited {
        Some(i) => format!("socket,id=agent,server=on,wait=off,fd={}", i.agent).into(),
        None => path_arg(
            "socket,id=agent,server=on,wait=off,path=",
            Path::new(AGENT_SOCKET),
            "",
        ),
    });
    push(
        &mut argv,
        &[
            "-device",
            &format!("virtserialport,chardev=agent,name={PORT_NAME}"),
        ],
    );

    push(&mut argv, &["-device", "virtio-rng-device"]);
    // Free-page reporting: the guest tells QEMU which memory it freed and QEMU discards it
    // (gives it back to the host). Always offered, on every VM: the device and its features are
    // part of the device state a restore loads, so a restore must start QEMU with the same
    // option as the boot whose state it loads. Whether the guest uses it is decided after each
    // restore: a private (read-only) mapping refuses every discard — each report would only
    // add `ram_block_discard_range: Discarding RAM with readonly files is not supported` to
    // `qemu.log` — so the host asks the guest agent to unbind its balloon driver there, and to
    // bind it again where discards work (`PostRestoreRequest.free_page_reporting`, set by
    // `pandastack-runtime`'s `identity::free_page_reporting`).
    push(
        &mut argv,
        &["-device", "virtio-balloon-device,free-page-reporting=on"],
    );

    if let Some(net) = &spec.net {
        push(
            &mut argv,
            &[
                "-netdev",
                &match inherited.and_then(|i| i.tap) {
                    Some(fd) => format!("tap,id=net0,fd={fd}"),
                    None => format!("tap,id=net0,ifname={},script=no,downscript=no", net.tap),
                },
                "-device",
                &format!("virtio-net-device,netdev=net0,mac={}", net.mac),
            ],
        );
    }

    for (slot, disk) in spec.volumes.iter().enumerate() {
        argv.extend(volume_args(spec, slot, disk, confined));
    }

    // Console to a file, control over QMP.
    argv.push("-chardev".into());
    argv.push(path_arg(
        "file,id=console,path=",
        Path::new(CONSOLE_LOG),
        ",append=on",
    ));
    push(&mut argv, &["-serial", "chardev:console"]);
    match inherited {
        Some(i) => push(
            &mut argv,
            &[
                "-chardev",
                &format!("socket,id=qmp,server=on,wait=off,fd={}", i.qmp),
                "-mon",
                "chardev=qmp,mode=control",
            ],
        ),
        None => {
            argv.push("-qmp".into());
            argv.push(path_arg(
                "unix:",
                Path::new(QMP_SOCKET),
                ",server=on,wait=off",
            ));
        }
    }
    // No `-pidfile`: a confined QEMU is pid 1 of its own pid namespace and would write 1; the
    // driver writes the pid file (`PID_FILE`) with the pid the host knows it by.
    if let (Some(uid), None) = (uid, inherited) {
        argv.push("-run-with".into());
        argv.push(
            format!(
                "chroot={},user={uid}:{uid}",
                crate::confine::opt_escape(&spec.run_dir)
            )
            .into(),
        );
    }
    if cfg.seccomp {
        // A QEMU that chroots drops to the VM's uid after its filter is in place, so set*uid
        // stays allowed when it does: without capabilities and with no_new_privs (which the filter
        // sets) such a process can only give ids away, never gain one.
        let sandbox = if uid.is_some() && inherited.is_none() {
            "on,obsolete=deny,spawn=deny,resourcecontrol=deny"
        } else {
            "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"
        };
        push(&mut argv, &["-sandbox", sandbox]);
    }
    argv
}

#[cfg(test)]
mod tests {
    use super::*;
    use pandastack_vm::NetAttach;

    fn spec(memory: Memory) -> VmSpec {
        VmSpec {
            id: "sb-1".into(),
            vcpus: 2,
            memory_mib: 512,
            kernel: "/k/vmlinux".into(),
            rootfs: "/r/rootfs.ext4".into(),
            kernel_args: vec!["pandastack.hostname=x".into()],
            memory,
            net: Some(NetAttach {
                tap: "tap0".into(),
                mac: "02:00:00:00:00:01".into(),
                netns: None,
            }),
            volumes: vec![],
            disk_limits: None,
            run_dir: "/run/ps/sb-1".into(),
        }
    }

    fn joined(v: &[OsString]) -> String {
        v.iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn boot_has_kernel_and_shared_memory() {
        let a = joined(&build(
            &QemuConfig::new(Accel::Tcg),
            &spec(Memory::SharedFile("/t/mem".into())),
            StartMode::Boot,
            None,
        ));
        assert!(a.contains("-kernel /k/vmlinux"));
        assert!(a.contains("mem-path=/t/mem,share=on"));
        assert!(a.contains("pandastack.hostname=x"));
        assert!(a.contains("tcg,tb-size=256"));
        assert!(!a.contains("-incoming"));
        assert!(a.contains("ifname=tap0"));
        assert!(a.contains("-sandbox on"));
        assert!(
            a.contains("filename=/r/rootfs.ext4"),
            "outside the run dir: absolute"
        );
        assert!(
            a.contains("path=console.log"),
            "inside the run dir: relative"
        );
    }

    #[test]
    fn every_disk_is_throttled_in_one_group_with_the_specs_limits_or_the_default() {
        let mut cfg = QemuConfig::new(Accel::Tcg);
        let mut spec = spec(Memory::Anonymous);
        let a = joined(&build(&cfg, &spec, StartMode::Incoming, None));
        assert!(
            a.contains(
                "-object throttle-group,id=disk,x-bps-total=134217728,x-iops-total=4096 -drive "
            ),
            "{a}"
        );
        assert!(
            a.contains(
                "id=root,if=none,driver=throttle,throttle-group=disk,cache=writeback,\
                 discard=unmap,file.driver=raw,file.file.driver=file,file.file.aio=threads,\
                 file.file.filename=/r/rootfs.ext4 -device virtio-blk-device,drive=root "
            ),
            "{a}"
        );
        assert!(!a.contains("throttling."), "{a}");
        // The spec's own limits win over the default; 0 is unlimited.
        spec.disk_limits = Some(DiskLimits {
            bytes_per_sec: 1 << 20,
            iops: 0,
        });
        let a = joined(&build(&cfg, &spec, StartMode::Incoming, None));
        assert!(
            a.contains("throttle-group,id=disk,x-bps-total=1048576 "),
            "{a}"
        );
        spec.disk_limits = None;
        cfg.disk_limits = DiskLimits::UNLIMITED;
        let a = joined(&build(&cfg, &spec, StartMode::Incoming, None));
        assert!(a.contains("throttle-group,id=disk -drive"), "{a}");
        // A volume's device is attached to its throttle filter in the same group.
        spec.volumes = vec![VolumeDisk {
            path: "/v/a.ext4".into(),
            read_only: true,
        }];
        let nodes = volume_nodes(0, Path::new("/v/a.ext4"), true);
        assert_eq!(nodes[2]["driver"], "throttle");
        assert_eq!(nodes[2]["node-name"], volume_node(0));
        assert_eq!(nodes[2]["file"], nodes[1]["node-name"]);
        assert_eq!(nodes[1]["file"], nodes[0]["node-name"]);
        assert_eq!(nodes[2]["throttle-group"], THROTTLE_GROUP);
        assert!(nodes.iter().all(|n| n["read-only"] == true));
        let a = joined(&build(&cfg, &spec, StartMode::Incoming, None));
        assert!(a.contains("virtio-blk-device,drive=vol0,serial="), "{a}");
    }

    #[test]
    fn incoming_has_no_kernel_and_private_memory() {
        let a = joined(&build(
            &QemuConfig::new(Accel::Kvm),
            &spec(Memory::PrivateFile("/t/mem".into())),
            StartMode::Incoming,
            None,
        ));
        assert!(!a.contains("-kernel"));
        assert!(a.contains("-incoming defer"));
        assert!(a.contains("mem-path=/t/mem,share=off,readonly=on,rom=off"));
        assert!(a.contains("-accel kvm -cpu host"));
    }

    #[test]
    fn volume_slots_follow_every_other_device_in_slot_order() {
        let mut s = spec(Memory::Anonymous);
        s.volumes = vec![
            VolumeDisk {
                path: "/vols/a,b.ext4".into(),
                read_only: false,
            },
            VolumeDisk {
                path: "/run/ps/sb-1/slot1.img".into(),
                read_only: true,
            },
        ];
        let argv = build(&QemuConfig::new(Accel::Tcg), &s, StartMode::Incoming, None);
        let a = joined(&argv);
        let net = a.find("virtio-net-device").unwrap();
        let vol0 = a.find("drive=vol0,serial=pandastack-vol0").unwrap();
        let vol1 = a.find("drive=vol1,serial=pandastack-vol1").unwrap();
        assert!(net < vol0 && vol0 < vol1, "{a}");
        // The path is one JSON string (a comma in it is no option separator), relative inside
        // the run dir; read-only reaches every node.
        let nodes: Vec<serde_json::Value> = argv
            .windows(2)
            .filter(|w| w[0] == "-blockdev")
            .map(|w| serde_json::from_str(&w[1].to_string_lossy()).unwrap())
            .collect();
        assert_eq!(nodes.len(), 6);
        assert_eq!(nodes[0]["filename"], "/vols/a,b.ext4");
        assert_eq!(nodes[0]["read-only"], false);
        assert_eq!(nodes[1]["file"], "vol0-file");
        assert_eq!(nodes[2]["file"], "vol0-raw");
        assert_eq!(nodes[3]["filename"], "slot1.img");
        assert_eq!(nodes[4]["read-only"], true);
        assert_eq!(nodes[5]["read-only"], true);
        // No slots: the command line is what it was before slots existed.
        assert!(!joined(&build(
            &QemuConfig::new(Accel::Tcg),
            &spec(Memory::Anonymous),
            StartMode::Incoming,
            None
        ))
        .contains("-blockdev"));
    }

    #[test]
    fn anonymous_memory_keeps_the_ram_block_name() {
        let a = joined(&build(
            &QemuConfig::new(Accel::Tcg),
            &spec(Memory::Anonymous),
            StartMode::Incoming,
            None,
        ));
        assert!(a.contains("memory-backend-ram,id=ram,size=512M"));
        assert!(a.contains("memory-backend=ram"));
    }

    #[test]
    fn a_confined_vm_drops_to_its_uid_in_its_run_dir() {
        let mut s = spec(Memory::Anonymous);
        s.run_dir = "/run/ps/a,b".into();
        let a = joined(&build(
            &QemuConfig::new(Accel::Tcg),
            &s,
            StartMode::Incoming,
            Some(&Confined {
                uid: 4_200_007,
                landlock: None,
                volume_fds: vec![None, Some([17, 18])],
            }),
        ));
        assert!(
            a.contains("-run-with chroot=/run/ps/a,,b,user=4200007:4200007"),
            "{a}"
        );
        assert!(a.contains("-sandbox on,obsolete=deny,spawn=deny"), "{a}");
        assert!(!a.contains("elevateprivileges"), "{a}");
        assert!(
            !a.contains("-add-fd"),
            "no volumes, no fd sets (slots follow the spec): {a}"
        );
        let mut v = s.clone();
        v.volumes = vec![
            VolumeDisk {
                path: "/run/ps/a,b/slot0.img".into(),
                read_only: false,
            },
            VolumeDisk {
                path: "/vols/v.ext4".into(),
                read_only: true,
            },
        ];
        let a = joined(&build(
            &QemuConfig::new(Accel::Tcg),
            &v,
            StartMode::Incoming,
            Some(&Confined {
                uid: 1,
                landlock: None,
                volume_fds: vec![None, Some([17, 18])],
            }),
        ));
        assert!(a.contains("-add-fd fd=17,set=2 -add-fd fd=18,set=2"), "{a}");
        assert!(a.contains(r#""filename":"/dev/fdset/2""#), "{a}");
        assert!(a.contains(r#""filename":"slot0.img""#), "{a}");
        let plain = joined(&build(
            &QemuConfig::new(Accel::Tcg),
            &s,
            StartMode::Incoming,
            None,
        ));
        assert!(!plain.contains("-run-with"));
        assert!(plain.contains("elevateprivileges=deny"));
    }

    #[test]
    fn a_landlocked_vm_names_what_it_inherits_and_chroots_nowhere() {
        let s = spec(Memory::PrivateFile("/t/mem".into()));
        let a = joined(&build(
            &QemuConfig::new(Accel::Tcg),
            &s,
            StartMode::Boot,
            Some(&Confined {
                uid: 4_200_007,
                landlock: Some(Inherited {
                    qmp: 20,
                    agent: 21,
                    kernel: Some(22),
                    memory: Some(23),
                    tap: Some(24),
                }),
                volume_fds: vec![],
            }),
        ));
        assert!(!a.contains("-run-with"), "{a}");
        assert!(!a.contains("-pidfile"), "{a}");
        assert!(a.contains("-kernel /proc/self/fd/22"), "{a}");
        assert!(a.contains("mem-path=/proc/self/fd/23,share=off"), "{a}");
        assert!(
            a.contains("-chardev socket,id=agent,server=on,wait=off,fd=21"),
            "{a}"
        );
        assert!(
            a.contains(
                "-chardev socket,id=qmp,server=on,wait=off,fd=20 -mon chardev=qmp,mode=control"
            ),
            "{a}"
        );
        assert!(!a.contains("qmp.sock") && !a.contains("agent.sock"), "{a}");
        assert!(a.contains("-netdev tap,id=net0,fd=24 "), "{a}");
        // It never changes ids: the filter may refuse every set*id call.
        assert!(a.contains("elevateprivileges=deny"), "{a}");
    }
}
