//! The outer archive: find the manifest (`docker save`'s `manifest.json`, or an OCI layout's
//! `index.json` → manifest, through an image index to linux/amd64), then copy the layer blobs
//! and the config to files named here (`layer-0`, `layer-1`, …). Nothing from the archive names
//! a file on the host.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::{io, OciError};

/// JSON documents (manifests, configs) are small; larger entries are only ever layers.
const MAX_JSON: u64 = 4 << 20;
/// All small members kept in memory together, at most (a tarball of many small files is not an
/// image, and must not fill the server's memory).
const MAX_SMALL_TOTAL: usize = 64 << 20;
/// Layer bytes copied out of the archive, at most (a gzip-compressed archive can expand far
/// beyond its size).
pub(super) const MAX_LAYER_BYTES: u64 = 64 << 30;

/// What the host needs from the archive.
pub(super) struct Extracted {
    pub layers: Vec<PathBuf>,
    pub layer_bytes: u64,
    pub env: Vec<String>,
    pub working_dir: Option<String>,
}

#[derive(Deserialize)]
struct DockerManifest {
    #[serde(rename = "Config")]
    config: String,
    #[serde(rename = "Layers")]
    layers: Vec<String>,
}

#[derive(Deserialize)]
struct Descriptor {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    digest: String,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(Deserialize)]
struct Platform {
    #[serde(default)]
    architecture: String,
    #[serde(default)]
    os: String,
}

#[derive(Deserialize)]
struct Index {
    manifests: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct Manifest {
    config: Descriptor,
    layers: Vec<Descriptor>,
}

#[derive(Deserialize, Default)]
struct ImageConfig {
    #[serde(default)]
    config: Option<RunConfig>,
}

#[derive(Deserialize, Default)]
struct RunConfig {
    #[serde(rename = "Env", default)]
    env: Option<Vec<String>>,
    #[serde(rename = "WorkingDir", default)]
    working_dir: Option<String>,
}

/// A reader of the tarball, gunzipped if it is gzip.
pub(super) fn open_maybe_gzip(path: &Path) -> Result<Box<dyn Read>, OciError> {
    let mut f = BufReader::new(File::open(path).map_err(io(format!("open {}", path.display())))?);
    let magic = {
        use std::io::BufRead;
        f.fill_buf()
            .map_err(io(format!("read {}", path.display())))?
            .get(..4)
            .map(<[u8]>::to_vec)
            .unwrap_or_default()
    };
    if magic.starts_with(&[0x1f, 0x8b]) {
        return Ok(Box::new(flate2::read::MultiGzDecoder::new(f)));
    }
    if magic == [0x28, 0xb5, 0x2f, 0xfd] {
        return Err(OciError::Unsupported(
            "zstd-compressed archives and layers are not supported; use gzip or plain tar".into(),
        ));
    }
    Ok(Box::new(f))
}

/// An archive member name without `./` prefixes.
fn member(name: &Path) -> String {
    let s = name.to_string_lossy();
    let mut s = s.as_ref();
    while let Some(rest) = s.strip_prefix("./") {
        s = rest;
    }
    s.trim_start_matches('/').to_owned()
}

fn blob_path(digest: &str) -> Result<String, OciError> {
    let (alg, hex) = digest
        .split_once(':')
        .ok_or_else(|| OciError::NotAnImage(format!("bad digest {digest:?}")))?;
    if alg.is_empty()
        || hex.is_empty()
        || !alg.bytes().all(|b| b.is_ascii_alphanumeric())
        || !hex.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return Err(OciError::NotAnImage(format!("bad digest {digest:?}")));
    }
    Ok(format!("blobs/{alg}/{hex}"))
}

fn json<T: serde::de::DeserializeOwned>(
    small: &HashMap<String, Vec<u8>>,
    name: &str,
) -> Result<T, OciError> {
    let bytes = small
        .get(name)
        .ok_or_else(|| OciError::NotAnImage(format!("{name} is missing from the tarball")))?;
    serde_json::from_slice(bytes).map_err(|e| OciError::NotAnImage(format!("{name}: {e}")))
}

/// Pass one: every small member's bytes (the JSON documents are among them).
fn small_members(tarball: &Path) -> Result<HashMap<String, Vec<u8>>, OciError> {
    let mut out = HashMap::new();
    let mut total = 0usize;
    let mut archive = tar::Archive::new(open_maybe_gzip(tarball)?);
    let entries = archive
        .entries()
        .map_err(|e| OciError::NotAnImage(e.to_string()))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| OciError::NotAnImage(e.to_string()))?;
        if entry.header().entry_type() != tar::EntryType::Regular || entry.size() > MAX_JSON {
            continue;
        }
        let name = member(&entry.path().map_err(|e| OciError::Tar(e.to_string()))?);
        // Only what can be a JSON document: the two indexes, `*.json`, and blobs (an OCI
        // layout's manifests and config have no extension).
        let wanted = name == "index.json"
            || name == "manifest.json"
            || name.ends_with(".json")
            || name.starts_with("blobs/");
        if !wanted {
            continue;
        }
        let mut buf = Vec::with_capacity(entry.size() as usize);
        entry
            .read_to_end(&mut buf)
            .map_err(|e| OciError::Tar(e.to_string()))?;
        total += buf.len();
        if total > MAX_SMALL_TOTAL {
            return Err(OciError::NotAnImage(
                "more than 64 MiB of small files; an image has a few JSON documents".into(),
            ));
        }
        out.insert(name, buf);
    }
    Ok(out)
}

/// Archive members of the layers, in order, with their digests when the layout gives them.
type LayerMembers = Vec<(String, Option<String>)>;

/// The layer members and the config member.
fn plan(small: &HashMap<String, Vec<u8>>) -> Result<(LayerMembers, String), OciError> {
    if small.contains_key("index.json") {
        let index: Index = json(small, "index.json")?;
        let mut desc = index
            .manifests
            .into_iter()
            .next()
            .ok_or_else(|| OciError::NotAnImage("index.json lists no manifest".into()))?;
        // An image index (multi-platform): take linux/amd64, else its first manifest.
        for _ in 0..4 {
            if !(desc.media_type.contains("index") || desc.media_type.contains("manifest.list")) {
                break;
            }
            let inner: Index = json(small, &blob_path(&desc.digest)?)?;
            let mut list = inner.manifests;
            let pick = list
                .iter()
                .position(|m| {
                    m.platform
                        .as_ref()
                        .is_some_and(|p| p.os == "linux" && p.architecture == "amd64")
                })
                .unwrap_or(0);
            if list.is_empty() {
                return Err(OciError::NotAnImage(
                    "an image index lists no manifest".into(),
                ));
            }
            desc = list.swap_remove(pick);
        }
        let manifest: Manifest = json(small, &blob_path(&desc.digest)?)?;
        let mut layers = Vec::new();
        for l in manifest.layers {
            if l.media_type.contains("zstd") {
                return Err(OciError::Unsupported(format!(
                    "layer {} is zstd-compressed; only plain and gzip layers are supported",
                    l.digest
                )));
            }
            layers.push((blob_path(&l.digest)?, Some(l.digest)));
        }
        return Ok((layers, blob_path(&manifest.config.digest)?));
    }
    if small.contains_key("manifest.json") {
        let list: Vec<DockerManifest> = json(small, "manifest.json")?;
        let m = list
            .into_iter()
            .next()
            .ok_or_else(|| OciError::NotAnImage("manifest.json lists no image".into()))?;
        let layers = m
            .layers
            .iter()
            .map(|l| (member(Path::new(l)), None))
            .collect();
        return Ok((layers, member(Path::new(&m.config))));
    }
    Err(OciError::NotAnImage(
        "no manifest.json (docker save) or index.json (OCI layout) in it".into(),
    ))
}

/// Copies the layers to `work/layer-N` (checking digests), reads the config.
pub(super) fn extract(tarball: &Path, work: &Path) -> Result<Extracted, OciError> {
    let small = small_members(tarball)?;
    let (layers, config) = plan(&small)?;
    let cfg: ImageConfig = small
        .get(&config)
        .and_then(|b| serde_json::from_slice(b).ok())
        .unwrap_or_default();
    // Pass two: the layer blobs, streamed to their files. A blob may serve several layers.
    let mut wanted: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, (name, _)) in layers.iter().enumerate() {
        wanted.entry(name.as_str()).or_default().push(i);
    }
    let paths: Vec<PathBuf> = (0..layers.len())
        .map(|i| work.join(format!("layer-{i}")))
        .collect();
    let mut found = vec![false; layers.len()];
    let mut total = 0u64;
    let mut archive = tar::Archive::new(open_maybe_gzip(tarball)?);
    for entry in archive
        .entries()
        .map_err(|e| OciError::Tar(e.to_string()))?
    {
        let mut entry = entry.map_err(|e| OciError::Tar(e.to_string()))?;
        if entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let name = member(&entry.path().map_err(|e| OciError::Tar(e.to_string()))?);
        let Some(idx) = wanted.get(name.as_str()) else {
            continue;
        };
        let first = idx[0];
        let mut out = File::create(&paths[first])
            .map_err(io(format!("create {}", paths[first].display())))?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let n = entry
                .read(&mut buf)
                .map_err(|e| OciError::Tar(e.to_string()))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])
                .map_err(io(format!("write {}", paths[first].display())))?;
            total += n as u64;
            if total > MAX_LAYER_BYTES {
                return Err(OciError::Unsupported(format!(
                    "layers larger than {} GiB in all",
                    MAX_LAYER_BYTES >> 30
                )));
            }
        }
        if let Some(digest) = &layers[first].1 {
            let want = digest.split_once(':').map_or("", |(_, h)| h);
            if digest.starts_with("sha256:") && hex::encode(hasher.finalize()) != want {
                return Err(OciError::Digest {
                    digest: digest.clone(),
                });
            }
        }
        for &i in idx {
            if i != first {
                std::fs::copy(&paths[first], &paths[i])
                    .map_err(io(format!("copy to {}", paths[i].display())))?;
            }
            found[i] = true;
        }
    }
    if let Some(i) = found.iter().position(|f| !f) {
        return Err(OciError::NotAnImage(format!(
            "layer {} is missing from the tarball",
            layers[i].0
        )));
    }
    let run = cfg.config.unwrap_or_default();
    Ok(Extracted {
        layers: paths,
        layer_bytes: total,
        env: run.env.unwrap_or_default(),
        working_dir: run.working_dir.filter(|w| !w.is_empty()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_and_member_names() {
        assert_eq!(blob_path("sha256:abc123").unwrap(), "blobs/sha256/abc123");
        for bad in ["sha256:../x", "abc", ":x", "sha256:", "sh/a:ab"] {
            assert!(blob_path(bad).is_err(), "{bad}");
        }
        assert_eq!(member(Path::new("./a/b")), "a/b");
        assert_eq!(member(Path::new("/manifest.json")), "manifest.json");
    }
}
