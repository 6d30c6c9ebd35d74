//! Volumes: durable ext4 disks that outlive sandboxes, their snapshots and their backups.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{field_error, valid_name, FieldError};

/// Largest volume, GiB.
pub const MAX_VOLUME_GB: u32 = 1024;
/// Most volumes one sandbox can mount (the volume slots a template is baked with).
pub const MAX_SANDBOX_VOLUMES: usize = 3;
/// Longest volume name.
pub const MAX_VOLUME_NAME: usize = 63;

/// A volume name: 1-63 of `[a-z0-9-]`, starting with a letter or digit.
pub fn validate_volume_name(field: &str, name: &str) -> Result<(), FieldError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_VOLUME_NAME
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(field_error(
            field,
            "1-63 of [a-z0-9-], starting with a letter or digit",
        ))
    }
}

fn validate_size(field: &str, gb: u32) -> Result<(), FieldError> {
    if gb == 0 || gb > MAX_VOLUME_GB {
        return Err(field_error(field, format!("between 1 and {MAX_VOLUME_GB}")));
    }
    Ok(())
}

/// `POST /v1/volumes`: a new empty volume (`size_gb`), or one restored from a volume snapshot
/// (`from_snapshot`) or a backup (`from_backup`), grown to `size_gb` when that is given and
/// larger.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateVolumeRequest {
    #[schema(pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    pub name: String,
    /// Size in GiB (required for an empty volume).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1024)]
    pub size_gb: Option<u32>,
    /// A volume snapshot id (`vs-…`) of this workspace.
    #[serde(default)]
    #[schema(pattern = "^[A-Za-z0-9_-]{1,32}$")]
    pub from_snapshot: Option<String>,
    /// A backup id (`vb-…`) of this workspace, from the object store.
    #[serde(default)]
    #[schema(pattern = "^[A-Za-z0-9_-]{1,32}$")]
    pub from_backup: Option<String>,
}

impl CreateVolumeRequest {
    pub fn validate(&self) -> Result<(), FieldError> {
        validate_volume_name("name", &self.name)?;
        if let Some(gb) = self.size_gb {
            validate_size("size_gb", gb)?;
        }
        match (&self.from_snapshot, &self.from_backup) {
            (Some(_), Some(_)) => {
                return Err(field_error(
                    "from_backup",
                    "give from_snapshot or from_backup, not both",
                ))
            }
            (None, None) if self.size_gb.is_none() => {
                return Err(field_error("size_gb", "required for an empty volume"))
            }
            _ => {}
        }
        for (field, id) in [
            ("from_snapshot", &self.from_snapshot),
            ("from_backup", &self.from_backup),
        ] {
            if let Some(id) = id {
                if !valid_name(id, 32) {
                    return Err(field_error(field, "not an id"));
                }
            }
        }
        Ok(())
    }
}

/// `PATCH /v1/volumes/{name}`: grow (never shrink) a volume no sandbox has mounted.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchVolumeRequest {
    #[schema(minimum = 1, maximum = 1024)]
    pub size_gb: u32,
}

impl PatchVolumeRequest {
    pub fn validate(&self) -> Result<(), FieldError> {
        validate_size("size_gb", self.size_gb)
    }
}

/// A sandbox that has a volume mounted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct VolumeAttachment {
    pub sandbox_id: String,
    pub path: String,
    /// A read-only attachment mounts a copy of the volume as of the sandbox's create.
    pub read_only: bool,
}

/// A volume resource.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Volume {
    pub id: String,
    pub name: String,
    /// `unavailable` while its host is dead (a cluster's host lost): nothing reaches its file;
    /// make a new volume from one of its backups, or wait for the host to come back.
    #[serde(default)]
    pub state: VolumeState,
    pub size_gb: u32,
    /// The sandbox that has it mounted read-write (at most one), if any.
    pub attached_to: Option<String>,
    /// Every sandbox that has it (or a copy of it, read-only) mounted.
    pub attachments: Vec<VolumeAttachment>,
    /// The volume snapshot or backup it was restored from.
    pub source: Option<String>,
    /// The host its file is on.
    pub host: String,
    /// RFC 3339.
    pub created_at: String,
}

/// Whether a volume can be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum VolumeState {
    #[default]
    Ready,
    /// Its host is dead.
    Unavailable,
}

/// A volume snapshot: the volume's content as of one instant, on the volume's host.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct VolumeSnapshot {
    pub id: String,
    pub volume: String,
    pub size_gb: u32,
    /// Whether a sandbox's file system on the volume was frozen for the copy (else the volume
    /// was not mounted read-write by a running sandbox, and nothing was writing to it).
    pub frozen: bool,
    pub created_at: String,
}

/// Where a backup is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BackupState {
    /// Its snapshot is taken; the upload is queued or under way.
    Uploading,
    /// Every chunk and the manifest are in the object store: it can be restored anywhere.
    Done,
    /// The upload failed for good (`error` says why).
    Failed,
}

impl BackupState {
    pub fn as_str(self) -> &'static str {
        match self {
            BackupState::Uploading => "uploading",
            BackupState::Done => "done",
            BackupState::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "uploading" => BackupState::Uploading,
            "done" => BackupState::Done,
            "failed" => BackupState::Failed,
            _ => return None,
        })
    }
}

/// A volume backup: a snapshot of the volume uploaded to the object store (only the chunks
/// not stored already).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct VolumeBackup {
    pub id: String,
    pub volume: String,
    pub size_gb: u32,
    pub state: BackupState,
    /// Bytes this backup sent (chunks earlier backups had stored are not sent again).
    pub bytes_uploaded: Option<u64>,
    /// Chunks of the volume with data; holes are not stored.
    pub chunks: Option<u64>,
    pub error: Option<String>,
    pub created_at: String,
    pub finished_at: Option<String>,
}

/// One volume to mount in a new sandbox (`POST /v1/sandboxes` `volumes`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxVolume {
    /// A volume of this workspace.
    #[schema(pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    pub name: String,
    /// Absolute mount point inside the sandbox (created if missing).
    pub path: String,
    /// Mount a copy of the volume as of now, read-only (any number of sandboxes may); else the
    /// volume itself, read-write (one sandbox at a time).
    #[serde(default)]
    pub read_only: bool,
}

/// Paths a volume may not be mounted over.
const RESERVED_MOUNTS: &[&str] = &[
    "/", "/proc", "/sys", "/dev", "/run", "/tmp", "/etc", "/usr", "/bin", "/sbin", "/lib",
    "/lib64", "/boot", "/var",
];

/// Checks the `volumes` of a create: names, unique absolute paths outside the system's own
/// directories, each volume at most once, at most [`MAX_SANDBOX_VOLUMES`].
pub fn validate_sandbox_volumes(volumes: &[SandboxVolume]) -> Result<(), FieldError> {
    if volumes.len() > MAX_SANDBOX_VOLUMES {
        return Err(field_error(
            "volumes",
            format!("at most {MAX_SANDBOX_VOLUMES} volumes"),
        ));
    }
    for (i, v) in volumes.iter().enumerate() {
        validate_volume_name(&format!("volumes[{i}].name"), &v.name)?;
        let field = format!("volumes[{i}].path");
        let p = &v.path;
        if !p.starts_with('/') || p.len() > 1024 || p.contains('\0') {
            return Err(field_error(field, "an absolute path of at most 1024 bytes"));
        }
        if p.split('/').any(|s| s == "." || s == "..")
            || p.contains("//")
            || (p.len() > 1 && p.ends_with('/'))
        {
            return Err(field_error(
                field,
                "a normal path: no '.', '..', '//' or trailing '/'",
            ));
        }
        if RESERVED_MOUNTS.contains(&p.as_str())
            || ["/proc/", "/sys/", "/dev/"]
                .iter()
                .any(|r| p.starts_with(r))
        {
            return Err(field_error(field, "cannot mount over a system directory"));
        }
        for w in &volumes[..i] {
            if w.name == v.name {
                return Err(field_error(
                    format!("volumes[{i}].name"),
                    "each volume at most once",
                ));
            }
            let (a, b) = (w.path.as_str(), p.as_str());
            if a == b || b.starts_with(&format!("{a}/")) || a.starts_with(&format!("{b}/")) {
                return Err(field_error(field, "mount points may not nest or repeat"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vol(name: &str, path: &str) -> SandboxVolume {
        SandboxVolume {
            name: name.into(),
            path: path.into(),
            read_only: false,
        }
    }

    #[test]
    fn names() {
        for ok in ["a", "data", "repo-1", &"x".repeat(63)] {
            validate_volume_name("name", ok).unwrap();
        }
        for bad in ["", "-a", "A", "a_b", "a.b", "a/b", &"x".repeat(64)] {
            assert!(validate_volume_name("name", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn create_requests() {
        let mut r = CreateVolumeRequest {
            name: "data".into(),
            size_gb: Some(1),
            ..Default::default()
        };
        r.validate().unwrap();
        r.size_gb = Some(0);
        assert_eq!(r.validate().unwrap_err().field, "size_gb");
        r.size_gb = None;
        assert_eq!(r.validate().unwrap_err().field, "size_gb");
        r.from_backup = Some("vb-1".into());
        r.validate().unwrap();
        r.from_snapshot = Some("vs-1".into());
        assert_eq!(r.validate().unwrap_err().field, "from_backup");
    }

    #[test]
    fn sandbox_volumes() {
        validate_sandbox_volumes(&[vol("a", "/data"), vol("b", "/home/user/work")]).unwrap();
        for (vs, field) in [
            (vec![vol("a", "data")], "volumes[0].path"),
            (vec![vol("a", "/")], "volumes[0].path"),
            (vec![vol("a", "/proc/x")], "volumes[0].path"),
            (vec![vol("a", "/a/../b")], "volumes[0].path"),
            (vec![vol("a", "/data/")], "volumes[0].path"),
            (vec![vol("a", "/x"), vol("a", "/y")], "volumes[1].name"),
            (vec![vol("a", "/x"), vol("b", "/x/y")], "volumes[1].path"),
            (vec![vol("A", "/x")], "volumes[0].name"),
            (
                vec![
                    vol("a", "/a"),
                    vol("b", "/b"),
                    vol("c", "/c"),
                    vol("d", "/d"),
                ],
                "volumes",
            ),
        ] {
            assert_eq!(
                validate_sandbox_volumes(&vs).unwrap_err().field,
                field,
                "{vs:?}"
            );
        }
    }
}

/// What a workspace uses against its limits, and what it used over a window (`GET /v1/usage`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Usage {
    pub sandboxes: SandboxUsage,
    pub volumes: VolumeUsage,
    pub snapshots: SnapshotUsage,
    pub templates: TemplateUsage,
    pub storage: StorageUsage,
    /// What the workspace used over a window (default: this calendar month, UTC, to now).
    pub metered: crate::MeteredUsage,
}

/// Template builds of a workspace (every version kept, failed ones aside).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TemplateUsage {
    pub builds: u64,
    /// Most builds kept at a time (`limit_reached`, 429, past it).
    pub limit: u64,
    /// Host disk their images take.
    pub bytes: u64,
}

/// Host disk a workspace's snapshots, hibernated sandboxes and template builds take together,
/// against `quota_gb` (`quota_exceeded`, 507, once it is reached: the size of what a snapshot,
/// hibernation or build adds is known only after it exists).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct StorageUsage {
    pub bytes: u64,
    pub quota_gb: u64,
    pub snapshot_bytes: u64,
    pub hibernated_bytes: u64,
    pub template_bytes: u64,
}

/// Sandboxes of a workspace: those not hibernated count against `limit`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SandboxUsage {
    pub running: u64,
    pub hibernated: u64,
    /// Most sandboxes that are not hibernated at a time.
    pub limit: u64,
    /// Most hibernated sandboxes at a time (`limit_reached`, 429, for a hibernate past it; an
    /// idle timeout's hibernation waits, the sandbox running, until there is room).
    pub hibernated_limit: u64,
    /// Most sandbox creates a minute.
    pub creates_per_minute: u64,
}

/// Volumes of a workspace: their total size counts against `quota_gb`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct VolumeUsage {
    pub count: u64,
    pub size_gb: u64,
    pub quota_gb: u64,
    /// Volume snapshots (backups are in the object store and not counted here).
    pub snapshots: u64,
}

/// Sandbox snapshots of a workspace.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SnapshotUsage {
    pub count: u64,
    /// Most snapshots kept at a time (`limit_reached`, 429, for a snapshot or fork past it).
    pub limit: u64,
    /// Host disk their own files take.
    pub bytes: u64,
}
