//! Volumes as a host keeps them: ext4 files of its own, snapshots of them, and their transfer
//! to and from the object store. The control plane names volumes and volume snapshots by id;
//! the host decides where the files are.

/// A volume file the host keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeView {
    pub id: String,
    /// Size of the volume (its disk), bytes.
    pub size_bytes: u64,
    /// Bytes of host disk its file takes (sparse: what was written).
    pub allocated_bytes: u64,
}

/// A volume snapshot the host keeps (a reflink copy of a volume as of one instant).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeSnapshotView {
    pub id: String,
    pub size_bytes: u64,
    /// Milliseconds the copy took, the guest's file system frozen meanwhile (if it had one).
    pub copy_ms: u64,
    /// Whether a running guest's file system was frozen for the copy.
    pub frozen: bool,
}

/// A running sandbox that has a volume mounted read-write: snapshots and read-only copies of
/// the volume freeze its file system there (`fsfreeze`) for the moment of the copy. A paused
/// holder is copied without a freeze (its vCPUs are stopped: the copy is crash-consistent), a
/// hibernated one has no VM; a holder the host does not know is not waited for (the copy is
/// made unfrozen and says so: [`VolumeSnapshotView::frozen`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeHolder {
    pub sandbox_id: String,
    /// Where the guest has the volume mounted.
    pub path: String,
}

/// One volume to mount in a sandbox being created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeMount {
    pub volume_id: String,
    /// Absolute mount point inside the guest (created if missing).
    pub path: String,
    /// Read-only mounts get a copy of the volume as of the create (a reflink in the sandbox's
    /// own directory, removed with it); read-write mounts bind the volume's file itself.
    pub read_only: bool,
    /// The sandbox that has the volume mounted read-write, if any (frozen for a read-only copy).
    pub holder: Option<VolumeHolder>,
    /// Owner of a read-write volume's root directory (`user`, `user:group`, `uid:gid`);
    /// `None` keeps the file system's own.
    pub owner: Option<String>,
}

/// What a volume snapshot's upload to the object store did. The local host uploads in 1 MiB
/// chunks (`pandastack_agent::VOLUME_CHUNK_SIZE`: an incremental backup sends little more than
/// the blocks the guest changed).
#[derive(Debug, Clone)]
pub struct VolumeUpload {
    /// The file as chunks: store it (with a record of the backup) once this returns.
    pub manifest: pandastack_objects::Manifest,
    pub chunks: u64,
    pub holes: u64,
    /// Chunks this upload stored (the others were stored already).
    pub uploaded_chunks: u64,
    pub bytes_uploaded: u64,
}
