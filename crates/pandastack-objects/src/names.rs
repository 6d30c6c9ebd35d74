//! Names that become parts of object keys, and the keys themselves.
//!
//! Every caller-supplied name (workspace id, manifest kind, manifest id) is checked against a
//! small charset before it is put into a key, so no input can add a `/`, a `..` or an empty
//! segment: bad input is an error, never another workspace's key.

use object_store::path::Path;

use crate::{ChunkHash, ObjectsError};

/// Longest accepted name, in bytes.
pub const MAX_NAME_LEN: usize = 128;

/// Checks a name that becomes one key segment: 1 to [`MAX_NAME_LEN`] bytes of ASCII letters,
/// digits, `.`, `_` and `-`, starting with a letter or digit (so never `.`, `..` or hidden).
pub(crate) fn check(what: &'static str, name: &str) -> Result<(), ObjectsError> {
    let reason = if name.is_empty() {
        "empty"
    } else if name.len() > MAX_NAME_LEN {
        "longer than 128 bytes"
    } else if !name.as_bytes()[0].is_ascii_alphanumeric() {
        "must start with a letter or digit"
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        "may only contain letters, digits, '.', '_' and '-'"
    } else {
        return Ok(());
    };
    Err(ObjectsError::InvalidName {
        what,
        name: name.to_owned(),
        reason,
    })
}

/// Builds keys under an optional prefix (already a valid object_store path, possibly empty).
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
}

impl Keys {
    pub(crate) fn new(prefix: &Path) -> Self {
        let prefix = prefix.as_ref();
        Self {
            prefix: if prefix.is_empty() {
                String::new()
            } else {
                format!("{prefix}/")
            },
        }
    }

    /// `<prefix>/<rest>`; every segment of `rest` was checked by [`check`] or is ours.
    fn key(&self, rest: &str) -> Path {
        Path::from(format!("{}{rest}", self.prefix))
    }

    /// `ws/<ws>/`: everything of one workspace.
    fn workspace(ws: &str) -> Result<String, ObjectsError> {
        check("workspace id", ws)?;
        Ok(format!("ws/{ws}"))
    }

    /// `ws/<ws>/chunks/<first 2 hex>/<sha256 hex>`.
    pub(crate) fn chunk(&self, ws: &str, hash: &ChunkHash) -> Result<Path, ObjectsError> {
        let hex = hash.to_string();
        Ok(self.key(&format!(
            "{}/chunks/{}/{hex}",
            Self::workspace(ws)?,
            &hex[..2]
        )))
    }

    /// `ws/<ws>/chunks`: the directory of a workspace's chunks, for listing.
    pub(crate) fn chunks(&self, ws: &str) -> Result<Path, ObjectsError> {
        Ok(self.key(&format!("{}/chunks", Self::workspace(ws)?)))
    }

    /// `ws`: the directory of every workspace, for listing them.
    pub(crate) fn workspaces(&self) -> Path {
        self.key("ws")
    }

    /// `ws/<ws>/manifests`: every manifest of a workspace, for listing.
    pub(crate) fn all_manifests(&self, ws: &str) -> Result<Path, ObjectsError> {
        Ok(self.key(&format!("{}/manifests", Self::workspace(ws)?)))
    }

    /// `ws/<ws>/manifests/<kind>`, relative to the prefix.
    fn kind(ws: &str, kind: &str) -> Result<String, ObjectsError> {
        check("manifest kind", kind)?;
        Ok(format!("{}/manifests/{kind}", Self::workspace(ws)?))
    }

    /// `ws/<ws>/manifests/<kind>`, for listing.
    pub(crate) fn manifests(&self, ws: &str, kind: &str) -> Result<Path, ObjectsError> {
        Ok(self.key(&Self::kind(ws, kind)?))
    }

    /// `ws/<ws>/manifests/<kind>/<id>.json`.
    pub(crate) fn manifest(&self, ws: &str, kind: &str, id: &str) -> Result<Path, ObjectsError> {
        let dir = Self::kind(ws, kind)?;
        check("manifest id", id)?;
        Ok(self.key(&format!("{dir}/{id}.json")))
    }

    /// `ws/<ws>/records/<kind>`, for listing.
    pub(crate) fn records(&self, ws: &str, kind: &str) -> Result<Path, ObjectsError> {
        check("record kind", kind)?;
        Ok(self.key(&format!("{}/records/{kind}", Self::workspace(ws)?)))
    }

    /// `ws/<ws>/records/<kind>/<id>.json`.
    pub(crate) fn record(&self, ws: &str, kind: &str, id: &str) -> Result<Path, ObjectsError> {
        check("record kind", kind)?;
        check("record id", id)?;
        Ok(self.key(&format!(
            "{}/records/{kind}/{id}.json",
            Self::workspace(ws)?
        )))
    }

    /// `ws/<ws>/blobs/<kind>/<group>`, for listing.
    pub(crate) fn blobs(&self, ws: &str, kind: &str, group: &str) -> Result<Path, ObjectsError> {
        check("blob kind", kind)?;
        check("blob group", group)?;
        Ok(self.key(&format!("{}/blobs/{kind}/{group}", Self::workspace(ws)?)))
    }

    /// `ws/<ws>/blobs/<kind>/<group>/<name>`.
    pub(crate) fn blob(
        &self,
        ws: &str,
        kind: &str,
        group: &str,
        name: &str,
    ) -> Result<Path, ObjectsError> {
        let dir = self.blobs(ws, kind, group)?;
        check("blob name", name)?;
        Ok(Path::from(format!("{dir}/{name}")))
    }

    /// A key outside every workspace, for [`crate::Objects::check`].
    pub(crate) fn probe(&self) -> Path {
        self.key("pandastack-probe")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["ws_0123abcd", "a", "A-b.c_d", &"x".repeat(128)] {
            check("workspace id", ok).unwrap();
        }
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            "/a",
            "a b",
            "é",
            ".hidden",
            "-a",
            "_a",
            "a\0",
            &"x".repeat(129),
        ] {
            assert!(check("workspace id", bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn keys() {
        let h = ChunkHash::of(b"hi");
        let hex = h.to_string();
        let k = Keys::new(&Path::from("a/b"));
        assert_eq!(
            k.chunk("ws1", &h).unwrap().as_ref(),
            format!("a/b/ws/ws1/chunks/{}/{hex}", &hex[..2])
        );
        assert_eq!(
            k.manifest("ws1", "backup", "b1").unwrap().as_ref(),
            "a/b/ws/ws1/manifests/backup/b1.json"
        );
        let k = Keys::new(&Path::from(""));
        assert_eq!(
            k.manifest("ws1", "backup", "b1").unwrap().as_ref(),
            "ws/ws1/manifests/backup/b1.json"
        );
        assert!(k.manifest("ws1", "backup", "../b1").is_err());
        assert!(k.manifest("ws1", "a/b", "b1").is_err());
        assert!(k.chunk("..", &h).is_err());
    }
}
