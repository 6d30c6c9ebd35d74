//! Guest files: download and upload (streamed to and from local files, or as bytes), list,
//! stat, mkdir, rename and delete.

use std::path::Path;

use pandastack_api_types::{
    FileInfo, FileUrl, FileUrlMethod, FileUrlRequest, List, MkdirRequest, RenameRequest,
};
use reqwest::Method;
use tokio::io::AsyncWriteExt;

use crate::http::{Call, Payload};
use crate::sandboxes::sandbox_path;
use crate::{Client, Error};

/// Entries per page [`Client::list_files`] asks for: the most the server returns at once (each
/// page walks the directory again in the guest, so fewer pages cost less).
const FS_LIST_PAGE: u32 = 5000;

impl Client {
    /// `GET …/fs?path=`, streamed into the local file `local` (created or truncated); returns
    /// the bytes written.
    pub async fn download(&self, id: &str, path: &str, local: &Path) -> Result<u64, Error> {
        let what = format!("cannot write {}", local.display());
        let mut f = tokio::fs::File::create(local)
            .await
            .map_err(|e| Error::io(what.clone(), e))?;
        self.download_into(id, path, &mut f, &what).await
    }

    /// `GET …/fs?path=`, streamed into `out` (stdout, a pipe); returns the bytes written.
    /// `what` names `out` in a write error.
    pub async fn download_into<W>(
        &self,
        id: &str,
        path: &str,
        out: &mut W,
        what: &str,
    ) -> Result<u64, Error>
    where
        W: tokio::io::AsyncWrite + Unpin,
    {
        let call = Call::new(Method::GET, sandbox_path(id, "/fs")).query("path", path);
        let mut resp = self.send(call).await?;
        let mut n = 0u64;
        while let Some(chunk) = resp.chunk().await.map_err(Error::Http)? {
            out.write_all(&chunk)
                .await
                .map_err(|e| Error::io(what.to_owned(), e))?;
            n += chunk.len() as u64;
        }
        out.flush()
            .await
            .map_err(|e| Error::io(what.to_owned(), e))?;
        Ok(n)
    }

    /// `GET …/fs?path=` into memory.
    pub async fn read_file(&self, id: &str, path: &str) -> Result<bytes::Bytes, Error> {
        let call = Call::new(Method::GET, sandbox_path(id, "/fs")).query("path", path);
        self.send(call).await?.bytes().await.map_err(Error::Http)
    }

    /// `PUT …/fs?path=`, streamed from the local file `local`; returns the bytes written as the
    /// server counted them.
    pub async fn upload(&self, id: &str, local: &Path, path: &str) -> Result<u64, Error> {
        let call = Call::new(Method::PUT, sandbox_path(id, "/fs"))
            .query("path", path)
            .payload(Payload::File(local.to_owned()));
        let v: serde_json::Value = self.json(call).await?;
        Ok(v["bytes_written"].as_u64().unwrap_or(0))
    }

    /// `PUT …/fs?path=` with bytes from memory.
    pub async fn write_file(
        &self,
        id: &str,
        path: &str,
        data: impl Into<bytes::Bytes>,
    ) -> Result<(), Error> {
        let call = Call::new(Method::PUT, sandbox_path(id, "/fs"))
            .query("path", path)
            .payload(Payload::Bytes(data.into()));
        self.empty(call).await
    }

    /// `GET …/fs/list?path=&depth=&pattern=`, every page: the server answers a large directory
    /// a page at a time, and this follows `next_cursor` to the last one. Sorted by path. With
    /// `pattern` (a glob of a name, `*.py`), only the entries whose name matches it.
    pub async fn list_files(
        &self,
        id: &str,
        path: &str,
        depth: Option<u32>,
        pattern: Option<&str>,
    ) -> Result<Vec<FileInfo>, Error> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self
                .list_files_page(id, path, depth, pattern, cursor.as_deref())
                .await?;
            all.extend(page.data);
            match page.next_cursor {
                // A cursor that does not move on would fetch the same page forever.
                Some(c) if Some(&c) != cursor.as_ref() => cursor = Some(c),
                _ => return Ok(all),
            }
        }
    }

    /// One page of `GET …/fs/list?path=&depth=&pattern=&limit=&cursor=` (as many entries as the
    /// server gives at once), starting after `cursor` (a previous page's `next_cursor`).
    pub async fn list_files_page(
        &self,
        id: &str,
        path: &str,
        depth: Option<u32>,
        pattern: Option<&str>,
        cursor: Option<&str>,
    ) -> Result<List<FileInfo>, Error> {
        let mut call = Call::new(Method::GET, sandbox_path(id, "/fs/list"))
            .query("path", path)
            .query("limit", FS_LIST_PAGE.to_string());
        if let Some(d) = depth {
            call = call.query("depth", d.to_string());
        }
        if let Some(p) = pattern {
            call = call.query("pattern", p.to_owned());
        }
        if let Some(c) = cursor {
            call = call.query("cursor", c.to_owned());
        }
        self.json(call).await
    }

    /// `POST …/files/url`: a signed URL that does `method` to file `path` without an API key
    /// for `expires_in` seconds; its `url` made absolute with this client's base URL.
    pub async fn file_url(
        &self,
        id: &str,
        path: &str,
        method: FileUrlMethod,
        expires_in: u64,
    ) -> Result<FileUrl, Error> {
        let body = FileUrlRequest {
            path: path.to_owned(),
            method,
            expires_in,
        };
        let call =
            Call::new(Method::POST, sandbox_path(id, "/files/url")).payload(Payload::json(&body)?);
        let mut url: FileUrl = self.json(call).await?;
        if url.url.starts_with('/') {
            url.url = format!("{}{}", self.config.base_url.trim_end_matches('/'), url.url);
        }
        Ok(url)
    }

    /// `GET …/fs/stat?path=`.
    pub async fn stat(&self, id: &str, path: &str) -> Result<FileInfo, Error> {
        let call = Call::new(Method::GET, sandbox_path(id, "/fs/stat")).query("path", path);
        self.json(call).await
    }

    /// `POST …/fs/mkdir` (with parents when `parents`).
    pub async fn mkdir(&self, id: &str, path: &str, parents: bool) -> Result<(), Error> {
        let body = MkdirRequest {
            path: path.to_owned(),
            parents,
        };
        let call =
            Call::new(Method::POST, sandbox_path(id, "/fs/mkdir")).payload(Payload::json(&body)?);
        self.empty(call).await
    }

    /// `POST …/fs/rename`.
    pub async fn rename(
        &self,
        id: &str,
        from: &str,
        to: &str,
        overwrite: bool,
    ) -> Result<(), Error> {
        let body = RenameRequest {
            from: from.to_owned(),
            to: to.to_owned(),
            overwrite,
        };
        let call =
            Call::new(Method::POST, sandbox_path(id, "/fs/rename")).payload(Payload::json(&body)?);
        self.empty(call).await
    }

    /// `DELETE …/fs?path=&recursive=`.
    pub async fn delete_file(&self, id: &str, path: &str, recursive: bool) -> Result<(), Error> {
        let call = Call::new(Method::DELETE, sandbox_path(id, "/fs"))
            .query("path", path)
            .query("recursive", recursive.to_string());
        self.empty(call).await
    }
}
