//! The outer archive: find the manifest (`docker save`'s `manifest.json`, or an OCI layout's
//! `index.json` → manifest, through an image index to linux/amd64), then copy the layer blobs
//! and the config to files named here (`layer-0`, `layer-1`, …). Nothing from the archive names
//! a file on the host: member names are only compared with the names the manifest gives.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Component, Path, PathBuf};

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
/// Links followed from a layer's member name to the member holding its bytes, at most.
const MAX_ALIAS_HOPS: usize = 8;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

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

/// A reader of `path`, gunzipped if it starts with the gzip magic; zstd is refused by name.
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
    if magic.starts_with(&GZIP_MAGIC) {
        return Ok(Box::new(flate2::read::MultiGzDecoder::new(f)));
    }
    if magic == ZSTD_MAGIC {
        return Err(zstd_unsupported(&path.display().to_string()));
    }
    Ok(Box::new(f))
}

fn zstd_unsupported(what: &str) -> OciError {
    OciError::Unsupported(format!(
        "{what} is zstd-compressed: zstd layers are not supported; use gzip or plain tar"
    ))
}

/// An archive member name without `/` and `./` prefixes.
fn member(name: &Path) -> String {
    let s = name.to_string_lossy();
    let mut s = s.as_ref();
    loop {
        let t = s.trim_start_matches('/');
        match t.strip_prefix("./") {
            Some(rest) => s = rest,
            None if t == "." => return String::new(),
            None => return t.to_owned(),
        }
    }
}

/// `dir/target` with `.` and `..` resolved by name; `None` if it climbs out of the archive.
fn resolve_link(dir: &str, target: &Path) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    if !target.is_absolute() {
        parts.extend(dir.split('/').filter(|p| !p.is_empty()).map(str::to_owned));
    }
    for c in target.components() {
        match c {
            Component::Normal(n) => parts.push(n.to_string_lossy().into_owned()),
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// The member name of a blob, from its digest (`sha256:<hex>` → `blobs/sha256/<hex>`).
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

/// The digest a member name states, for `docker save` archives that store layers as
/// `blobs/sha256/<hex>` (Docker 25 and later), so those are verified too.
fn digest_of_member(name: &str) -> Option<String> {
    let hex = name.strip_prefix("blobs/sha256/")?;
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| format!("sha256:{}", hex.to_ascii_lowercase()))
}

/// What pass one keeps: the small members that may be JSON, and the archive's links (`docker
/// save` stores a layer shared by two images once and links to it).
#[derive(Default)]
struct Members {
    small: HashMap<String, Vec<u8>>,
    links: HashMap<String, String>,
}

impl Members {
    /// The member `name` stands for, following links.
    fn resolve(&self, name: &str) -> String {
        let mut name = name.to_owned();
        for _ in 0..MAX_ALIAS_HOPS {
            match self.links.get(&name) {
                Some(target) => name = target.clone(),
                None => break,
            }
        }
        name
    }

    fn json<T: serde::de::DeserializeOwned>(&self, name: &str) -> Result<T, OciError> {
        let bytes = self
            .small
            .get(&self.resolve(name))
            .ok_or_else(|| OciError::NotAnImage(format!("{name} is missing from the tarball")))?;
        serde_json::from_slice(bytes).map_err(|e| OciError::NotAnImage(format!("{name}: {e}")))
    }
}

fn tar_err(e: std::io::Error) -> OciError {
    OciError::Tar(e.to_string())
}

/// Pass one: the JSON-looking small members and the links.
fn small_members(tarball: &Path) -> Result<Members, OciError> {
    let mut out = Members::default();
    let mut total = 0usize;
    let mut archive = tar::Archive::new(open_maybe_gzip(tarball)?);
    let not_tar = |e: std::io::Error| OciError::NotAnImage(format!("not a tar archive ({e})"));
    for entry in archive.entries().map_err(not_tar)? {
        let mut entry = entry.map_err(not_tar)?;
        let name = member(&entry.path().map_err(tar_err)?);
        let kind = entry.header().entry_type();
        if kind == tar::EntryType::Symlink || kind == tar::EntryType::Link {
            let Some(target) = entry.link_name().map_err(tar_err)? else {
                continue;
            };
            // A symlink is relative to its directory; a hard link names a member.
            let dir = match kind {
                tar::EntryType::Symlink => name.rsplit_once('/').map_or("", |(d, _)| d),
                _ => "",
            };
            if let Some(to) = resolve_link(dir, &target) {
                out.links.insert(name, to);
            }
            continue;
        }
        if kind != tar::EntryType::Regular || entry.size() > MAX_JSON {
            continue;
        }
        // Only what can be a JSON document: the two indexes, `*.json`, and blobs whose first
        // byte says JSON (an OCI layout's manifests and config have no extension; its small
        // layers would otherwise count against the memory budget).
        let named_json = name == "index.json" || name == "manifest.json" || name.ends_with(".json");
        if !named_json && !name.starts_with("blobs/") {
            continue;
        }
        let mut buf = Vec::with_capacity(entry.size() as usize);
        let mut head = [0u8; 64];
        let n = entry.read(&mut head).map_err(tar_err)?;
        let first = head[..n].iter().find(|b| !b.is_ascii_whitespace());
        if !named_json && !matches!(first, Some(b'{' | b'[')) {
            continue;
        }
        buf.extend_from_slice(&head[..n]);
        entry.read_to_end(&mut buf).map_err(tar_err)?;
        total += buf.len();
        if total > MAX_SMALL_TOTAL {
            return Err(OciError::NotAnImage(
                "more than 64 MiB of JSON documents; an image has a few small ones".into(),
            ));
        }
        out.small.insert(name, buf);
    }
    Ok(out)
}

/// One layer to copy out: the member holding it and, when known, its digest.
#[derive(Debug, Clone, PartialEq)]
struct LayerRef {
    member: String,
    digest: Option<String>,
}

impl LayerRef {
    /// How errors name it: its digest if known, else its member name.
    fn label(&self) -> &str {
        self.digest.as_deref().unwrap_or(&self.member)
    }
}

fn is_index(media_type: &str) -> bool {
    media_type.contains("image.index") || media_type.contains("manifest.list")
}

/// The layers (in order) and the config member.
fn plan(m: &Members) -> Result<(Vec<LayerRef>, String), OciError> {
    if m.small.contains_key(&m.resolve("index.json")) {
        let index: Index = m.json("index.json")?;
        let mut desc = index
            .manifests
            .into_iter()
            .next()
            .ok_or_else(|| OciError::NotAnImage("index.json lists no manifest".into()))?;
        // An image index (multi-platform): take linux/amd64, else its first manifest. A
        // descriptor without a media type is judged by what it points to.
        for _ in 0..4 {
            let path = blob_path(&desc.digest)?;
            let doc: serde_json::Value = m.json(&path)?;
            if !is_index(&desc.media_type) && doc.get("manifests").is_none() {
                break;
            }
            let inner: Index = serde_json::from_value(doc)
                .map_err(|e| OciError::NotAnImage(format!("image index {}: {e}", desc.digest)))?;
            let mut list = inner.manifests;
            if list.is_empty() {
                return Err(OciError::NotAnImage(
                    "an image index lists no manifest".into(),
                ));
            }
            let pick = list
                .iter()
                .position(|d| {
                    d.platform
                        .as_ref()
                        .is_some_and(|p| p.os == "linux" && p.architecture == "amd64")
                })
                .unwrap_or(0);
            desc = list.swap_remove(pick);
        }
        let manifest: Manifest = m.json(&blob_path(&desc.digest)?)?;
        let mut layers = Vec::new();
        for l in manifest.layers {
            if l.media_type.contains("zstd") {
                return Err(zstd_unsupported(&format!("layer {}", l.digest)));
            }
            layers.push(LayerRef {
                member: blob_path(&l.digest)?,
                digest: Some(l.digest),
            });
        }
        return Ok((layers, blob_path(&manifest.config.digest)?));
    }
    if m.small.contains_key(&m.resolve("manifest.json")) {
        let list: Vec<DockerManifest> = m.json("manifest.json")?;
        let first = list
            .into_iter()
            .next()
            .ok_or_else(|| OciError::NotAnImage("manifest.json lists no image".into()))?;
        let layers = first
            .layers
            .iter()
            .map(|l| {
                let name = member(Path::new(l));
                LayerRef {
                    digest: digest_of_member(&name),
                    member: name,
                }
            })
            .collect();
        return Ok((layers, member(Path::new(&first.config))));
    }
    Err(OciError::NotAnImage(
        "no manifest.json or index.json".into(),
    ))
}

/// Copies the layers to `work/layer-N` (checking digests), reads the config.
pub(super) fn extract(tarball: &Path, work: &Path) -> Result<Extracted, OciError> {
    let members = small_members(tarball)?;
    let (layers, config) = plan(&members)?;
    let cfg: ImageConfig = members
        .small
        .get(&members.resolve(&config))
        .and_then(|b| serde_json::from_slice(b).ok())
        .unwrap_or_default();
    // Pass two: the layer blobs, streamed to their files. A blob may serve several layers.
    let mut wanted: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, l) in layers.iter().enumerate() {
        wanted
            .entry(members.resolve(&l.member))
            .or_default()
            .push(i);
    }
    let paths: Vec<PathBuf> = (0..layers.len())
        .map(|i| work.join(format!("layer-{i}")))
        .collect();
    let mut found = vec![false; layers.len()];
    let mut total = 0u64;
    let mut archive = tar::Archive::new(open_maybe_gzip(tarball)?);
    for entry in archive.entries().map_err(tar_err)? {
        let mut entry = entry.map_err(tar_err)?;
        if entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let name = member(&entry.path().map_err(tar_err)?);
        let Some(idx) = wanted.get(&name) else {
            continue;
        };
        let first = idx[0];
        if found[first] {
            // The same member twice in the archive: the first one counts.
            continue;
        }
        let layer = &layers[first];
        let dest = &paths[first];
        let mut out = File::create(dest).map_err(io(format!("create {}", dest.display())))?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 256 * 1024];
        let mut magic = Vec::with_capacity(4);
        loop {
            let n = entry.read(&mut buf).map_err(tar_err)?;
            if n == 0 {
                break;
            }
            if magic.len() < 4 {
                let take = (4 - magic.len()).min(n);
                magic.extend_from_slice(&buf[..take]);
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])
                .map_err(io(format!("write {}", dest.display())))?;
            total += n as u64;
            if total > MAX_LAYER_BYTES {
                return Err(OciError::Unsupported(format!(
                    "layers larger than {} GiB in all",
                    MAX_LAYER_BYTES >> 30
                )));
            }
        }
        if magic == ZSTD_MAGIC {
            return Err(zstd_unsupported(&format!("layer {}", layer.label())));
        }
        if let Some(digest) = &layer.digest {
            if let Some(want) = digest.strip_prefix("sha256:") {
                if !hex::encode(hasher.finalize()).eq_ignore_ascii_case(want) {
                    return Err(OciError::Digest {
                        digest: digest.clone(),
                    });
                }
            }
        }
        for &i in idx {
            if i != first {
                std::fs::copy(dest, &paths[i])
                    .map_err(io(format!("copy to {}", paths[i].display())))?;
            }
            found[i] = true;
        }
    }
    if let Some(i) = found.iter().position(|f| !f) {
        return Err(OciError::MissingLayer {
            layer: layers[i].label().to_owned(),
        });
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
        assert_eq!(member(Path::new(".//./x")), "x");
        assert_eq!(member(Path::new("./")), "");
        let hex = "ab".repeat(32);
        assert_eq!(
            digest_of_member(&format!("blobs/sha256/{hex}")),
            Some(format!("sha256:{hex}"))
        );
        assert_eq!(digest_of_member("abc/layer.tar"), None);
        assert_eq!(digest_of_member("blobs/sha256/abc"), None);
    }

    #[test]
    fn archive_links_resolve_by_name_inside_the_archive() {
        assert_eq!(
            resolve_link("b", Path::new("../a/layer.tar")).as_deref(),
            Some("a/layer.tar")
        );
        assert_eq!(
            resolve_link("", Path::new("/a/layer.tar")).as_deref(),
            Some("a/layer.tar")
        );
        assert_eq!(resolve_link("b", Path::new("../../x")), None);
        assert_eq!(resolve_link("", Path::new(".")), None);
        let mut m = Members::default();
        m.links.insert("b/layer.tar".into(), "a/layer.tar".into());
        m.links.insert("loop".into(), "loop".into());
        assert_eq!(m.resolve("b/layer.tar"), "a/layer.tar");
        assert_eq!(m.resolve("loop"), "loop");
        assert_eq!(m.resolve("other"), "other");
    }

    #[test]
    fn plans_an_index_through_an_image_index_to_linux_amd64() {
        let arm = "1".repeat(64);
        let amd = "2".repeat(64);
        let cfg = "3".repeat(64);
        let layer = "4".repeat(64);
        let inner = "5".repeat(64);
        let mut m = Members::default();
        let put = |m: &mut Members, k: &str, v: serde_json::Value| {
            m.small
                .insert(k.to_owned(), serde_json::to_vec(&v).unwrap());
        };
        // The outer descriptor has no media type: the document says it is an index.
        put(
            &mut m,
            "index.json",
            serde_json::json!({"manifests": [{"digest": format!("sha256:{inner}")}]}),
        );
        put(
            &mut m,
            &format!("blobs/sha256/{inner}"),
            serde_json::json!({"manifests": [
                {"mediaType": "application/vnd.oci.image.manifest.v1+json",
                 "digest": format!("sha256:{arm}"),
                 "platform": {"os": "linux", "architecture": "arm64"}},
                {"mediaType": "application/vnd.oci.image.manifest.v1+json",
                 "digest": format!("sha256:{amd}"),
                 "platform": {"os": "linux", "architecture": "amd64"}},
            ]}),
        );
        put(
            &mut m,
            &format!("blobs/sha256/{amd}"),
            serde_json::json!({
                "config": {"digest": format!("sha256:{cfg}")},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                            "digest": format!("sha256:{layer}")}],
            }),
        );
        let (layers, config) = plan(&m).unwrap();
        assert_eq!(config, format!("blobs/sha256/{cfg}"));
        assert_eq!(
            layers,
            [LayerRef {
                member: format!("blobs/sha256/{layer}"),
                digest: Some(format!("sha256:{layer}")),
            }]
        );

        put(
            &mut m,
            &format!("blobs/sha256/{amd}"),
            serde_json::json!({
                "config": {"digest": format!("sha256:{cfg}")},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd",
                            "digest": format!("sha256:{layer}")}],
            }),
        );
        let err = plan(&m).unwrap_err().to_string();
        assert!(err.contains("zstd layers are not supported"), "{err}");

        let err = plan(&Members::default()).unwrap_err().to_string();
        assert_eq!(
            err,
            "not an OCI or docker-save tarball: no manifest.json or index.json"
        );
    }
}
