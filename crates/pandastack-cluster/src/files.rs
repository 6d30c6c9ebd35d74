//! Files: a set of new files written all or nothing with their modes, a host's bundle
//! `{ca.pem, cert.pem, key.pem}`, and the [`Identity`] loaded from it.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::ca::{ClusterCa, Issued};
use crate::peer::{Peer, PeerError};
use crate::{CA_CERT, HOST_CERT, HOST_KEY};

/// A file or directory operation that failed.
#[derive(Debug, thiserror::Error)]
#[error("{op} {}", .path.display())]
pub struct FileError {
    pub op: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

fn file_err(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> FileError {
    let path = path.to_owned();
    move |source| FileError { op, path, source }
}

pub(crate) fn read_string(path: &Path) -> Result<String, FileError> {
    std::fs::read_to_string(path).map_err(file_err("read", path))
}

/// Writes each `(name, contents, mode)` into `dir` (made 0700 if missing), all or none: each
/// goes to a temporary file first, gets its mode (exactly, whatever the umask), is synced, and
/// is linked into place without replacing anything; on any failure the files already placed
/// (and `dir`, if this made it) are removed.
pub(crate) fn write_new_set(dir: &Path, files: &[(&str, &[u8], u32)]) -> Result<(), FileError> {
    let made_dir = !dir.is_dir();
    if made_dir {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(file_err("create directory", dir))?;
    }
    let mut placed = Vec::new();
    let result = files.iter().try_for_each(|(name, contents, mode)| {
        let path = dir.join(name);
        write_new(dir, &path, contents, *mode)?;
        placed.push(path);
        Ok(())
    });
    if result.is_err() {
        for path in &placed {
            let _ = std::fs::remove_file(path);
        }
        if made_dir {
            let _ = std::fs::remove_dir(dir);
        }
    }
    result
}

fn write_new(dir: &Path, path: &Path, contents: &[u8], mode: u32) -> Result<(), FileError> {
    let mut tmp = tempfile::Builder::new()
        .prefix(".pandastack-cluster.")
        .permissions(std::fs::Permissions::from_mode(0o600))
        .tempfile_in(dir)
        .map_err(file_err("create a temporary file in", dir))?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .and_then(|()| tmp.write_all(contents))
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(file_err("write", tmp.path()))?;
    tmp.persist_noclobber(path)
        .map_err(|e| file_err("create", path)(e.error))?;
    Ok(())
}

/// Why a bundle could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteBundleError {
    #[error("{} already exists: give a new directory (rotation is not built yet)", .0.display())]
    Exists(PathBuf),
    #[error(transparent)]
    File(#[from] FileError),
}

/// Writes a host's bundle into `dir` (made 0700 if missing): `ca.pem` (0644), `cert.pem`
/// (0644) and `key.pem` (0600), all or none. Refuses a directory holding any of them.
pub fn write_bundle(dir: &Path, issued: &Issued, ca: &ClusterCa) -> Result<(), WriteBundleError> {
    for name in [CA_CERT, HOST_CERT, HOST_KEY] {
        let path = dir.join(name);
        if path.symlink_metadata().is_ok() {
            return Err(WriteBundleError::Exists(path));
        }
    }
    write_new_set(
        dir,
        &[
            (HOST_KEY, issued.key_pem.as_bytes(), 0o600),
            (HOST_CERT, issued.cert_pem.as_bytes(), 0o644),
            (CA_CERT, ca.cert_pem().as_bytes(), 0o644),
        ],
    )?;
    Ok(())
}

/// Why an identity could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadIdentityError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error("{what}: no PEM {kind} in it")]
    Pem {
        what: String,
        kind: &'static str,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("{what}: it names no cluster peer")]
    Peer {
        what: String,
        #[source]
        source: PeerError,
    },
    #[error(
        "{}: its mode is {mode:04o}, readable by others than its owner: `chmod 600` it",
        .path.display()
    )]
    KeyReadableByOthers { path: std::path::PathBuf, mode: u32 },
}

/// A host's identity: the cluster CA it trusts, its certificate and key, and who the
/// certificate says it is.
#[derive(Debug)]
pub struct Identity {
    pub(crate) ca: CertificateDer<'static>,
    pub(crate) cert: CertificateDer<'static>,
    pub(crate) key: PrivateKeyDer<'static>,
    peer: Peer,
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Self {
            ca: self.ca.clone(),
            cert: self.cert.clone(),
            key: self.key.clone_key(),
            peer: self.peer.clone(),
        }
    }
}

impl Identity {
    /// Loads the bundle in `dir` (see [`write_bundle`]).
    /// A key that group or others may read is refused (as ssh refuses one).
    pub fn load(dir: &Path) -> Result<Identity, LoadIdentityError> {
        let [ca, cert, key] = [CA_CERT, HOST_CERT, HOST_KEY].map(|n| dir.join(n));
        let mode = std::fs::metadata(&key)
            .map_err(file_err("read", &key))?
            .permissions()
            .mode()
            & 0o7777;
        if mode & 0o077 != 0 {
            return Err(LoadIdentityError::KeyReadableByOthers { path: key, mode });
        }
        let text = [read_string(&ca)?, read_string(&cert)?, read_string(&key)?];
        Self::parse(
            [&text[0], &text[1], &text[2]],
            [ca, cert, key].map(|p| p.display().to_string()),
        )
    }

    /// An identity from PEM text: the CA's certificate, the host's certificate, its key.
    pub fn from_pem(ca: &str, cert: &str, key: &str) -> Result<Identity, LoadIdentityError> {
        Self::parse(
            [ca, cert, key],
            [CA_CERT, HOST_CERT, HOST_KEY].map(str::to_owned),
        )
    }

    fn parse(pem: [&str; 3], names: [String; 3]) -> Result<Identity, LoadIdentityError> {
        let [ca_name, cert_name, key_name] = names;
        let pem_err = |what: &String, kind| {
            let what = what.clone();
            move |source| LoadIdentityError::Pem { what, kind, source }
        };
        let ca = CertificateDer::from_pem_slice(pem[0].as_bytes())
            .map_err(pem_err(&ca_name, "certificate"))?;
        let cert = CertificateDer::from_pem_slice(pem[1].as_bytes())
            .map_err(pem_err(&cert_name, "certificate"))?;
        let key = PrivateKeyDer::from_pem_slice(pem[2].as_bytes())
            .map_err(pem_err(&key_name, "private key"))?;
        let peer = Peer::from_certificate(&cert).map_err(|source| LoadIdentityError::Peer {
            what: cert_name,
            source,
        })?;
        Ok(Identity {
            ca,
            cert,
            key,
            peer,
        })
    }

    /// Who this identity's certificate says it is.
    pub fn peer(&self) -> &Peer {
        &self.peer
    }

    /// The cluster CA's certificate.
    pub fn ca(&self) -> &CertificateDer<'static> {
        &self.ca
    }

    /// This host's certificate.
    pub fn cert(&self) -> &CertificateDer<'static> {
        &self.cert
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::name::Role;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn files_get_their_modes_and_init_refuses_an_existing_ca() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ca");
        let ca = ClusterCa::init(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("ca.key")), 0o600);
        assert_eq!(mode(&dir.join("ca.pem")), 0o644);
        let key_before = std::fs::read(dir.join("ca.key")).unwrap();
        let e = ClusterCa::init(&dir).err().unwrap();
        assert!(e.to_string().contains("already holds a cluster CA"), "{e}");
        assert_eq!(std::fs::read(dir.join("ca.key")).unwrap(), key_before);
        // Only the two files: no temporary file left behind.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);

        let issued = ca.issue(Role::Server, "r1", &[], 1).unwrap();
        let out = root.path().join("r1");
        write_bundle(&out, &issued, &ca).unwrap();
        assert_eq!(mode(&out.join("key.pem")), 0o600);
        assert_eq!(mode(&out.join("cert.pem")), 0o644);
        assert_eq!(mode(&out.join("ca.pem")), 0o644);
        let id = Identity::load(&out).unwrap();
        assert_eq!(id.peer().to_string(), "server r1");
        let e = write_bundle(&out, &issued, &ca).err().unwrap();
        assert!(matches!(e, WriteBundleError::Exists(_)), "{e:?}");

        // A key others may read is refused, as ssh refuses one.
        let key = out.join("key.pem");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Identity::load(&out).unwrap_err();
        assert!(
            matches!(
                e,
                LoadIdentityError::KeyReadableByOthers { mode: 0o644, .. }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("chmod 600"), "{e}");
    }

    #[test]
    fn a_failed_write_leaves_nothing_behind() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("new");
        // The second file's directory does not exist: placing it fails after the first is placed.
        let e = write_new_set(&dir, &[("a", b"1", 0o600), ("missing/b", b"2", 0o600)]).unwrap_err();
        assert_eq!(e.op, "create");
        assert!(!dir.exists(), "{dir:?} left behind");
    }

    #[test]
    fn a_bundle_without_an_identity_is_refused() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["x.example".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let e = Identity::from_pem(&cert.pem(), &cert.pem(), &key.serialize_pem()).unwrap_err();
        assert!(e.to_string().contains("names no cluster peer"), "{e}");
        let e = Identity::from_pem("junk", &cert.pem(), &key.serialize_pem()).unwrap_err();
        assert!(e.to_string().contains("ca.pem: no PEM certificate"), "{e}");
    }
}
