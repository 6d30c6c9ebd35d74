//! The code interpreter: runs code in a long-lived kernel inside a sandbox (variables, imports
//! and open files survive between calls), one kernel per context. An exception in the code is
//! data ([`CodeResult::error`]), not an [`Error`].

use pandastack_api_types::{CodeContext, CodeContextRequest, CodeRequest, CodeResult};
use reqwest::Method;

use crate::http::{seg, Call, Payload};
use crate::sandboxes::sandbox_path;
use crate::{Client, Error};

impl Client {
    /// `POST …/code`: runs `req.code` in its context (`default` unless named) and waits for it.
    pub async fn run_code(&self, id: &str, req: &CodeRequest) -> Result<CodeResult, Error> {
        let call = Call::new(Method::POST, sandbox_path(id, "/code")).payload(Payload::json(req)?);
        self.json(call).await
    }

    /// `POST …/code/contexts`: a context with a kernel of its own.
    pub async fn create_code_context(
        &self,
        id: &str,
        req: &CodeContextRequest,
    ) -> Result<CodeContext, Error> {
        self.create(sandbox_path(id, "/code/contexts"), req).await
    }

    /// `DELETE …/code/contexts/{context_id}`: stops its kernel (`default`: resets it).
    pub async fn delete_code_context(&self, id: &str, context_id: &str) -> Result<(), Error> {
        let path = sandbox_path(id, &format!("/code/contexts/{}", seg(context_id)));
        self.empty(Call::new(Method::DELETE, path)).await
    }
}
