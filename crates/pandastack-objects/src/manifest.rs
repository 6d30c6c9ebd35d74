//! Chunk hashes and manifests: what a stored file is made of.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Default chunk size of [`crate::Objects::upload_file`]: 4 MiB.
pub const DEFAULT_CHUNK_SIZE: u64 = 4 << 20;
/// Smallest chunk size: 4 KiB (the block size holes are made of).
pub const MIN_CHUNK_SIZE: u64 = 4 << 10;
/// Largest chunk size: 64 MiB (memory use is a few chunks per transfer).
pub const MAX_CHUNK_SIZE: u64 = 64 << 20;

/// The SHA-256 of a chunk's bytes: its name in the store. Written as 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkHash([u8; 32]);

impl ChunkHash {
    /// The hash of `data`.
    pub fn of(data: &[u8]) -> Self {
        Self(Sha256::digest(data).into())
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for ChunkHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for ChunkHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChunkHash({self})")
    }
}

/// Parsing a [`ChunkHash`] failed: not 64 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a sha256 hash (64 lowercase hex digits): {0:?}")]
pub struct ParseHashError(String);

impl FromStr for ChunkHash {
    type Err = ParseHashError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ParseHashError(s.to_owned());
        if s.len() != 64 || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out).map_err(|_| bad())?;
        Ok(Self(out))
    }
}

impl Serialize for ChunkHash {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for ChunkHash {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One chunk of a file: stored bytes, or a hole (all zero, never stored). In JSON a hole is
/// `null` and data is its hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Option<ChunkHash>", into = "Option<ChunkHash>")]
pub enum ChunkRef {
    /// Every byte is zero; downloads leave it unallocated.
    Hole,
    /// The chunk with this hash.
    Data(ChunkHash),
}

impl From<Option<ChunkHash>> for ChunkRef {
    fn from(h: Option<ChunkHash>) -> Self {
        h.map_or(Self::Hole, Self::Data)
    }
}

impl From<ChunkRef> for Option<ChunkHash> {
    fn from(c: ChunkRef) -> Self {
        match c {
            ChunkRef::Hole => None,
            ChunkRef::Data(h) => Some(h),
        }
    }
}

/// A file as a list of fixed-size chunks. Chunk `i` covers bytes `i * chunk_size ..
/// min((i + 1) * chunk_size, length)`; only the last may be shorter. The same file content and
/// chunk size always give the same manifest (no timestamps), so writing it again is idempotent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version ([`Manifest::VERSION`]); a reader refuses versions it does not know.
    pub version: u32,
    pub chunk_size: u64,
    /// File length in bytes.
    pub length: u64,
    /// In file order; `length.div_ceil(chunk_size)` entries.
    pub chunks: Vec<ChunkRef>,
}

impl Manifest {
    /// The format written by this version.
    pub const VERSION: u32 = 1;

    /// Checks the version, the chunk size and that the chunk list covers exactly `length`.
    pub fn validate(&self) -> Result<(), String> {
        if self.version != Self::VERSION {
            return Err(format!(
                "version {} (this build reads version {})",
                self.version,
                Self::VERSION
            ));
        }
        if check_chunk_size(self.chunk_size).is_err() {
            return Err(format!("chunk size {}", self.chunk_size));
        }
        let want = self.length.div_ceil(self.chunk_size);
        if self.chunks.len() as u64 != want {
            return Err(format!(
                "{} chunks for {} bytes in chunks of {} (want {want})",
                self.chunks.len(),
                self.length,
                self.chunk_size
            ));
        }
        Ok(())
    }

    /// Offset and length of chunk `i`.
    pub fn range(&self, i: usize) -> (u64, u64) {
        let off = i as u64 * self.chunk_size;
        (off, self.chunk_size.min(self.length.saturating_sub(off)))
    }

    /// The hashes of the stored chunks (in file order, repeats included).
    pub fn data_chunks(&self) -> impl Iterator<Item = ChunkHash> + '_ {
        self.chunks.iter().filter_map(|c| match c {
            ChunkRef::Data(h) => Some(*h),
            ChunkRef::Hole => None,
        })
    }
}

pub(crate) fn check_chunk_size(size: u64) -> Result<(), crate::ObjectsError> {
    if (MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&size) && size & (MIN_CHUNK_SIZE - 1) == 0 {
        Ok(())
    } else {
        Err(crate::ObjectsError::InvalidChunkSize(size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_text() {
        let h = ChunkHash::of(b"");
        assert_eq!(
            h.to_string(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(h.to_string().parse::<ChunkHash>().unwrap(), h);
        for bad in [
            "",
            "E3B0",
            &"g".repeat(64),
            &"A".repeat(64),
            &"0".repeat(63),
        ] {
            assert!(bad.parse::<ChunkHash>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn manifest_json() {
        let m = Manifest {
            version: Manifest::VERSION,
            chunk_size: MIN_CHUNK_SIZE,
            length: MIN_CHUNK_SIZE + 1,
            chunks: vec![ChunkRef::Hole, ChunkRef::Data(ChunkHash::of(b"x"))],
        };
        m.validate().unwrap();
        let j = serde_json::to_value(&m).unwrap();
        assert_eq!(j["chunks"][0], serde_json::Value::Null);
        assert_eq!(j["chunks"][1], ChunkHash::of(b"x").to_string());
        assert_eq!(serde_json::from_value::<Manifest>(j).unwrap(), m);
        assert_eq!(m.range(1), (MIN_CHUNK_SIZE, 1));

        let mut short = m.clone();
        short.chunks.pop();
        assert!(short.validate().is_err());
        let mut newer = m.clone();
        newer.version = 2;
        assert!(newer.validate().is_err());
        let mut odd = m;
        odd.chunk_size = 5000;
        assert!(odd.validate().is_err());
    }
}
