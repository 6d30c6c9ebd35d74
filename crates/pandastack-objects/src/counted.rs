//! The object store as the rest of the crate uses it, counting each call and the bytes it moved
//! in the process's metrics (`pandastack_object_store_operations`, `…_bytes`). Every call goes
//! through here, so no caller has to remember to count.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};

/// An object store whose calls are counted.
#[derive(Debug)]
pub(crate) struct Counted(pub(crate) Arc<dyn ObjectStore>);

impl fmt::Display for Counted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Counts call `op` ending with `r`.
fn count<T>(op: &'static str, r: &Result<T>) {
    let result = match r {
        Ok(_) => "ok",
        Err(object_store::Error::NotFound { .. }) => "not_found",
        Err(
            object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. },
        ) => "exists",
        Err(_) => "error",
    };
    pandastack_telemetry::metrics().object_op(op, result);
}

fn bytes(direction: &'static str, n: u64) {
    pandastack_telemetry::metrics().object_bytes(direction, n);
}

#[async_trait::async_trait]
impl ObjectStore for Counted {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let n = payload.content_length() as u64;
        let r = self.0.put_opts(location, payload, opts).await;
        count("put", &r);
        if r.is_ok() {
            bytes("write", n);
        }
        r
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        let r = self.0.put_multipart_opts(location, opts).await;
        count("put_multipart", &r);
        Ok(Box::new(CountedUpload(r?)))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let head = options.head;
        let r = self.0.get_opts(location, options).await;
        count(if head { "head" } else { "get" }, &r);
        if let (Ok(g), false) = (&r, head) {
            bytes("read", g.range.end.saturating_sub(g.range.start));
        }
        r
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let r = self.0.get_ranges(location, ranges).await;
        count("get", &r);
        if let Ok(v) = &r {
            bytes("read", v.iter().map(|b| b.len() as u64).sum());
        }
        r
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.0
            .delete_stream(locations)
            .inspect(|r| count("delete", r))
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        pandastack_telemetry::metrics().object_op("list", "ok");
        self.0.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        pandastack_telemetry::metrics().object_op("list", "ok");
        self.0.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let r = self.0.list_with_delimiter(prefix).await;
        count("list", &r);
        r
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let r = self.0.copy_opts(from, to, options).await;
        count("copy", &r);
        r
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        let r = self.0.rename_opts(from, to, options).await;
        count("rename", &r);
        r
    }
}

/// A multipart upload whose parts count as written bytes.
#[derive(Debug)]
struct CountedUpload(Box<dyn MultipartUpload>);

#[async_trait::async_trait]
impl MultipartUpload for CountedUpload {
    fn put_part(&mut self, data: PutPayload) -> object_store::UploadPart {
        let n = data.content_length() as u64;
        let part = self.0.put_part(data);
        Box::pin(async move {
            let r = part.await;
            if r.is_ok() {
                bytes("write", n);
            }
            r
        })
    }

    async fn complete(&mut self) -> Result<PutResult> {
        self.0.complete().await
    }

    async fn abort(&mut self) -> Result<()> {
        self.0.abort().await
    }
}
