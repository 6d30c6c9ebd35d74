//! Signed file URLs: a URL that reads or writes one file of one sandbox, without an API key,
//! until it expires — for a browser, `curl` or another service an agent hands it to.
//!
//! ```text
//!   POST /v1/sandboxes/{id}/files/url {path, method, expires_in}
//!     └► /v1/sandboxes/{id}/files/signed?path=…&method=GET&expires=<unix s>&signature=<hex>
//!   signature = HMAC-SHA256(the sandbox's access token,
//!                           "pandastack-file-url-v1\n<id>\n<method>\n<path>\n<expires>")
//! ```
//!
//! The key is the sandbox's access token (the secret that opens its private ports): every
//! replica reads it from the sandbox's row, so any replica verifies a URL another signed, and
//! nothing else is stored. A URL names its sandbox, method, path and expiry; changing any of
//! them breaks the signature. It dies with its sandbox.

use hmac::{Hmac, Mac};
use pandastack_store::{now_ms, SandboxRow};
use sha2::Sha256;

use super::{ControlError, Sandboxes};

/// Longest a signed URL lives: 7 days.
pub const MAX_FILE_URL_SECONDS: u64 = 7 * 24 * 3600;

/// What a signed URL lets its holder do to its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileUrlMethod {
    /// Read (download) the file.
    Get,
    /// Write (upload) the file, replacing it.
    Put,
}

impl FileUrlMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            FileUrlMethod::Get => "GET",
            FileUrlMethod::Put => "PUT",
        }
    }
}

/// A signed URL's parts, for the API to put in a query string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedFileUrl {
    pub method: FileUrlMethod,
    pub path: String,
    /// Unix seconds.
    pub expires: i64,
    /// Lowercase hex.
    pub signature: String,
}

/// Why a signed URL opens nothing.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FileUrlRefused {
    #[error("the URL expired")]
    Expired,
    #[error("the URL's signature does not match its sandbox, method, path and expiry")]
    BadSignature,
}

fn mac(key: &str, id: &str, method: FileUrlMethod, path: &str, expires: i64) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).expect("HMAC takes any key");
    mac.update(
        format!(
            "pandastack-file-url-v1\n{id}\n{}\n{path}\n{expires}",
            method.as_str()
        )
        .as_bytes(),
    );
    mac
}

impl Sandboxes {
    /// A URL that does `method` on file `path` of sandbox `row` for `seconds` from now (the
    /// caller checked `seconds` against [`MAX_FILE_URL_SECONDS`] and the path).
    pub async fn sign_file_url(
        &self,
        row: &SandboxRow,
        method: FileUrlMethod,
        path: &str,
        seconds: u64,
    ) -> Result<SignedFileUrl, ControlError> {
        let key = self.access_token(row).await?;
        let expires = now_ms() / 1000 + seconds.min(MAX_FILE_URL_SECONDS) as i64;
        let signature = hex::encode(
            mac(&key, &row.id, method, path, expires)
                .finalize()
                .into_bytes(),
        );
        Ok(SignedFileUrl {
            method,
            path: path.to_owned(),
            expires,
            signature,
        })
    }

    /// The row of sandbox `id` if `url` was signed for it and has not expired (checked in
    /// constant time); a sandbox that is gone is `NotFound`.
    pub async fn open_file_url(
        &self,
        id: &str,
        url: &SignedFileUrl,
    ) -> Result<Result<SandboxRow, FileUrlRefused>, ControlError> {
        let row = self.by_id(id).await?;
        Ok(check(&row.id, &row.access_token, url, now_ms() / 1000).map(|()| row))
    }
}

/// Whether `url` opens sandbox `id`, whose access token is `token`, at unix second `now`.
fn check(id: &str, token: &str, url: &SignedFileUrl, now: i64) -> Result<(), FileUrlRefused> {
    let Ok(sig) = hex::decode(&url.signature) else {
        return Err(FileUrlRefused::BadSignature);
    };
    if token.is_empty() {
        return Err(FileUrlRefused::BadSignature);
    }
    mac(token, id, url.method, &url.path, url.expires)
        .verify_slice(&sig)
        .map_err(|_| FileUrlRefused::BadSignature)?;
    if now >= url.expires {
        return Err(FileUrlRefused::Expired);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(token: &str, method: FileUrlMethod, path: &str, expires: i64) -> SignedFileUrl {
        let sig = mac(token, "sb-1", method, path, expires)
            .finalize()
            .into_bytes();
        SignedFileUrl {
            method,
            path: path.into(),
            expires,
            signature: hex::encode(sig),
        }
    }

    #[test]
    fn a_url_opens_only_what_it_names_until_it_expires() {
        let url = signed("tok", FileUrlMethod::Get, "/a.txt", 100);
        assert_eq!(check("sb-1", "tok", &url, 99), Ok(()));
        assert_eq!(
            check("sb-1", "tok", &url, 100),
            Err(FileUrlRefused::Expired)
        );
        for changed in [
            SignedFileUrl {
                path: "/b.txt".into(),
                ..url.clone()
            },
            SignedFileUrl {
                method: FileUrlMethod::Put,
                ..url.clone()
            },
            SignedFileUrl {
                expires: 200,
                ..url.clone()
            },
            SignedFileUrl {
                signature: "zz".into(),
                ..url.clone()
            },
        ] {
            assert_eq!(
                check("sb-1", "tok", &changed, 50),
                Err(FileUrlRefused::BadSignature)
            );
        }
        // Another sandbox, another token, or none: not opened.
        assert_eq!(
            check("sb-2", "tok", &url, 50),
            Err(FileUrlRefused::BadSignature)
        );
        assert_eq!(
            check("sb-1", "other", &url, 50),
            Err(FileUrlRefused::BadSignature)
        );
        assert_eq!(
            check("sb-1", "", &url, 50),
            Err(FileUrlRefused::BadSignature)
        );
    }
}
