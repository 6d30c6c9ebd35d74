//! Where the client connects and with which key: flags, then the environment
//! (`PANDASTACK_API_KEY` or `PANDASTACK_TOKEN`, `PANDASTACK_BASE_URL`), then the config file
//! (`$XDG_CONFIG_HOME/pandastack/config.toml`, by default `~/.config/pandastack/config.toml`),
//! then the default `http://localhost:8080`.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::Error;

/// The base URL used when nothing else names one.
pub const DEFAULT_BASE_URL: &str = "http://localhost:8080";

/// What a client needs to talk to a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `http://host:port`, without a trailing slash and without `/v1`.
    pub base_url: String,
    /// `pds_…`; calls without one get 401 from the server.
    pub api_key: Option<String>,
}

impl Config {
    pub fn new(base_url: impl Into<String>, api_key: Option<String>) -> Self {
        Self {
            base_url: normalize_url(&base_url.into()),
            api_key,
        }
    }
}

/// The stored config file (TOML). Unknown keys are kept out of the way, not refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
}

/// The sources of a [`Config`], strongest first.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    pub flag_base_url: Option<String>,
    pub flag_api_key: Option<String>,
    pub env_base_url: Option<String>,
    /// `PANDASTACK_API_KEY`, else `PANDASTACK_TOKEN`.
    pub env_api_key: Option<String>,
    pub file: ConfigFile,
}

impl Sources {
    /// Flags as given, the environment of this process, and the config file if it exists.
    pub fn from_env(
        flag_base_url: Option<String>,
        flag_api_key: Option<String>,
    ) -> Result<Self, Error> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let file = match config_path(env) {
            Some(p) => ConfigFile::load(&p)?.unwrap_or_default(),
            None => ConfigFile::default(),
        };
        Ok(Self {
            flag_base_url,
            flag_api_key,
            env_base_url: env("PANDASTACK_BASE_URL"),
            env_api_key: env("PANDASTACK_API_KEY").or_else(|| env("PANDASTACK_TOKEN")),
            file,
        })
    }

    /// The strongest source of each setting.
    pub fn resolve(&self) -> Config {
        let base_url = self
            .flag_base_url
            .clone()
            .or_else(|| self.env_base_url.clone())
            .or_else(|| self.file.base_url.clone())
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
        let api_key = self
            .flag_api_key
            .clone()
            .or_else(|| self.env_api_key.clone())
            .or_else(|| self.file.api_key.clone());
        Config::new(base_url, api_key)
    }
}

/// `$XDG_CONFIG_HOME/pandastack/config.toml`, else `$HOME/.config/pandastack/config.toml`;
/// `env` looks variables up (so tests can pass their own).
pub fn config_path(env: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let base = env("XDG_CONFIG_HOME")
        .filter(|d| d.starts_with('/'))
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| Path::new(&h).join(".config")))?;
    Some(base.join("pandastack").join("config.toml"))
}

impl ConfigFile {
    /// Reads the file; `None` when it does not exist.
    pub fn load(path: &Path) -> Result<Option<Self>, Error> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(format!("cannot read {}", path.display()), e)),
        };
        toml::from_str(&text)
            .map(Some)
            .map_err(|e| Error::Config(format!("{}: {e}", path.display())))
    }

    /// Writes the file with mode 0600 (creating its directory), replacing it atomically.
    pub fn save(&self, path: &Path) -> Result<(), Error> {
        let dir = path
            .parent()
            .ok_or_else(|| Error::Config(format!("{}: no parent directory", path.display())))?;
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
        let text = toml::to_string(self).map_err(|e| Error::Config(e.to_string()))?;
        let tmp = path.with_extension("toml.tmp");
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        };
        write().map_err(|e| Error::io(format!("cannot write {}", path.display()), e))
    }
}

/// Drops trailing slashes and a trailing `/v1` so paths can be appended.
fn normalize_url(url: &str) -> String {
    let mut u = url.trim().trim_end_matches('/');
    if let Some(s) = u.strip_suffix("/v1") {
        u = s;
    }
    u.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_is_flags_env_file_default() {
        let mut s = Sources::default();
        assert_eq!(s.resolve(), Config::new(DEFAULT_BASE_URL, None));
        s.file = ConfigFile {
            base_url: Some("http://file:1/".into()),
            api_key: Some("pds_file".into()),
        };
        assert_eq!(
            s.resolve(),
            Config::new("http://file:1", Some("pds_file".into()))
        );
        s.env_base_url = Some("http://env:2/v1".into());
        s.env_api_key = Some("pds_env".into());
        let c = s.resolve();
        assert_eq!(c.base_url, "http://env:2");
        assert_eq!(c.api_key.as_deref(), Some("pds_env"));
        s.flag_base_url = Some("http://flag:3".into());
        s.flag_api_key = Some("pds_flag".into());
        assert_eq!(
            s.resolve(),
            Config::new("http://flag:3", Some("pds_flag".into()))
        );
    }

    #[test]
    fn path_follows_xdg() {
        let env = |x: Option<&'static str>| {
            move |k: &str| match k {
                "XDG_CONFIG_HOME" => x.map(str::to_owned),
                "HOME" => Some("/home/u".into()),
                _ => None,
            }
        };
        assert_eq!(
            config_path(env(Some("/x"))).unwrap(),
            Path::new("/x/pandastack/config.toml")
        );
        assert_eq!(
            config_path(env(None)).unwrap(),
            Path::new("/home/u/.config/pandastack/config.toml")
        );
    }

    #[test]
    fn file_round_trip_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/config.toml");
        assert_eq!(ConfigFile::load(&p).unwrap(), None);
        let f = ConfigFile {
            base_url: Some("http://h:1".into()),
            api_key: Some("pds_k".into()),
        };
        f.save(&p).unwrap();
        assert_eq!(ConfigFile::load(&p).unwrap(), Some(f));
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
