//! The code interpreter: `POST /v1/sandboxes/{id}/code` runs code in a long-lived kernel inside
//! the sandbox (variables survive between calls), one kernel per context, in Python,
//! JavaScript, TypeScript or Bash.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{field_error, FieldError, MAX_EXEC_TIMEOUT_SECONDS};

/// Languages the code interpreter runs.
pub const CODE_LANGUAGES: &[&str] = &["python", "javascript", "typescript", "bash"];
/// The Python context every sandbox has without creating one; the other languages' are
/// `default-<language>` (`default-javascript`, …).
pub const DEFAULT_CODE_CONTEXT: &str = "default";
/// Bound on one run when the request gives none.
pub const DEFAULT_CODE_TIMEOUT_SECONDS: u64 = 300;
/// Largest accepted `code` (bytes).
pub const MAX_CODE_BYTES: usize = 512 * 1024;

/// `POST /v1/sandboxes/{id}/code` (and `/code/stream`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"code": "import sys\nprint('out')\nprint('err', file=sys.stderr)\n6 * 7"}))]
pub struct CodeRequest {
    /// The code to run. In Python, JavaScript and TypeScript the value of a final expression
    /// is returned as a result; in Bash a non-zero exit status of the last command is an
    /// `ExitStatus` error.
    pub code: String,
    /// `python` (the default), `javascript`, `typescript` or `bash`. Without `context_id`, the
    /// run goes to the language's default context (`default`, `default-javascript`, …); with
    /// one, the context's language is used, and a different `language` is refused.
    #[serde(default)]
    #[schema(example = "python")]
    pub language: Option<String>,
    /// The context (kernel) to run in: the language's default context unless one made with
    /// `POST …/code/contexts` is named.
    #[serde(default)]
    pub context_id: Option<String>,
    /// Environment for the kernel when this call starts it (ignored by a running kernel).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Bound on this run (default 300, at most 3600). On expiry the run is interrupted with a
    /// `TimeoutError`; the context and its variables stay.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 3600)]
    pub timeout_seconds: Option<u64>,
}

impl CodeRequest {
    pub fn validate(&self) -> Result<(), FieldError> {
        validate_language(self.language.as_deref())?;
        if let Some(c) = &self.context_id {
            validate_context_id(c)?;
        }
        if self.code.len() > MAX_CODE_BYTES {
            return Err(field_error(
                "code",
                format!("longer than {MAX_CODE_BYTES} bytes"),
            ));
        }
        if self.code.contains('\0') {
            return Err(field_error("code", "contains a NUL byte"));
        }
        if let Some(t) = self.timeout_seconds {
            if t == 0 || t > MAX_EXEC_TIMEOUT_SECONDS {
                return Err(field_error(
                    "timeout_seconds",
                    format!("must be between 1 and {MAX_EXEC_TIMEOUT_SECONDS}"),
                ));
            }
        }
        validate_kernel_env(&self.env)
    }
}

/// A kernel's environment: names non-empty without `=` or NUL, values without NUL (the kernel
/// process could not be started with them).
fn validate_kernel_env(env: &BTreeMap<String, String>) -> Result<(), FieldError> {
    for (k, v) in env {
        if k.is_empty() || k.contains('=') || k.contains('\0') {
            return Err(field_error("env", format!("invalid variable name {k:?}")));
        }
        if v.contains('\0') {
            return Err(field_error(format!("env.{k}"), "contains a NUL byte"));
        }
    }
    Ok(())
}

fn validate_language(l: Option<&str>) -> Result<(), FieldError> {
    match l {
        None => Ok(()),
        Some(l) if CODE_LANGUAGES.contains(&l) => Ok(()),
        Some(l) => Err(field_error(
            "language",
            format!(
                "{l:?} is not supported (supported: {})",
                CODE_LANGUAGES.join(", ")
            ),
        )),
    }
}

/// A context id: 1–64 of `[A-Za-z0-9_-]`.
pub fn validate_context_id(id: &str) -> Result<(), FieldError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(field_error(
            "context_id",
            "1 to 64 letters, digits, '-' or '_'",
        ))
    }
}

/// One rich result: the value of a final expression, a `display(…)` call or a matplotlib figure.
/// `text` is always there; the others when the object provides them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CodeOutput {
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub html: Option<String>,
    /// A PNG image, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub png: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub svg: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub markdown: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub json: Option<serde_json::Value>,
}

/// The exception a run ended with.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CodeError {
    /// Exception class, e.g. `ZeroDivisionError`; `TimeoutError` when the run hit its bound.
    pub name: String,
    pub value: String,
    pub traceback: String,
}

/// What a run produced. An exception in the code is data (`error`), not an HTTP error.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CodeResult {
    pub stdout: String,
    pub stderr: String,
    pub results: Vec<CodeOutput>,
    pub error: Option<CodeError>,
    /// True when stdout/stderr were cut at the output limit.
    pub truncated: bool,
    pub duration_ms: u64,
}

/// `POST /v1/sandboxes/{id}/code/contexts`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CodeContextRequest {
    /// `python` (the default), `javascript`, `typescript` or `bash`.
    #[serde(default)]
    pub language: Option<String>,
    /// Environment for the context's kernel.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

impl CodeContextRequest {
    pub fn validate(&self) -> Result<(), FieldError> {
        validate_language(self.language.as_deref())?;
        validate_kernel_env(&self.env)
    }
}

/// A code context: one kernel with its own variables.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CodeContext {
    pub id: String,
    pub language: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_field() {
        let ok = CodeRequest {
            code: "1+1".into(),
            ..Default::default()
        };
        assert!(ok.validate().is_ok());
        let bad = |r: CodeRequest| r.validate().unwrap_err().field;
        assert_eq!(
            bad(CodeRequest {
                language: Some("cobol".into()),
                ..ok.clone()
            }),
            "language"
        );
        assert_eq!(
            bad(CodeRequest {
                context_id: Some("../x".into()),
                ..ok.clone()
            }),
            "context_id"
        );
        assert_eq!(
            bad(CodeRequest {
                timeout_seconds: Some(0),
                ..ok.clone()
            }),
            "timeout_seconds"
        );
        assert_eq!(
            bad(CodeRequest {
                code: "x".repeat(MAX_CODE_BYTES + 1),
                ..ok.clone()
            }),
            "code"
        );
    }

    /// Found by API fuzzing: a NUL in an environment value (or a context's variable name) got
    /// as far as the guest, which could not start the kernel.
    #[test]
    fn kernel_environments_are_checked_at_the_edge() {
        let env = |k: &str, v: &str| BTreeMap::from([(k.to_owned(), v.to_owned())]);
        let run = CodeRequest {
            code: "1".into(),
            env: env("A", "x\0y"),
            ..Default::default()
        };
        assert_eq!(run.validate().unwrap_err().field, "env.A");
        let ctx = |k: &str, v: &str| CodeContextRequest {
            env: env(k, v),
            ..Default::default()
        };
        assert_eq!(ctx("\0", "").validate().unwrap_err().field, "env");
        assert_eq!(ctx("A", "\0").validate().unwrap_err().field, "env.A");
        assert!(ctx("A", "b").validate().is_ok());
    }
}
