//! The OpenAPI 3.1 document of `/v1`, generated from the handlers' `#[utoipa::path]` annotations
//! and the wire types' `ToSchema` derives (the list of operations is the route table in
//! `routes.rs`). [`Conventions`] adds what every operation shares: the bearer scheme and the error
//! envelope as the default response.

use std::sync::OnceLock;

use utoipa::openapi::path::Operation;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, RefOr, Required};
use utoipa::{Modify, OpenApi as _};

pub use crate::routes::ApiDoc;

/// Name of the security scheme (`Authorization: Bearer pds_…`).
pub const BEARER: &str = "bearer";
/// Name of the shared error response in `components.responses`.
pub const ERROR_RESPONSE: &str = "Error";
/// Paths served without an API key (the signed file URLs carry their own signature; a
/// database's `/sql` logs in with the connection string's credentials).
pub const PUBLIC_PATHS: &[&str] = &[
    "/v1/health",
    "/v1/openapi.json",
    "/v1/databases/{id}/sql",
    "/v1/sandboxes/{id}/files/signed",
];
/// Operations whose JSON body may be left out: the body extractor reads an empty body as `{}`,
/// and every field of these requests has a default.
pub const OPTIONAL_BODIES: &[&str] = &[
    "create_sandbox",
    "update_sandbox",
    "fork_sandbox",
    "create_key",
    "create_code_context",
    "branch_database",
    "update_app",
    "rollback_app",
    "update_function",
    "rollback_function",
    "update_schedule",
];

/// Adds the bearer scheme, the shared error response on every operation, marks the public paths
/// as needing no key and the [`OPTIONAL_BODIES`] as optional.
pub struct Conventions;

impl Modify for Conventions {
    fn modify(&self, doc: &mut OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.security_schemes.insert(
            BEARER.into(),
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("pds_<64 hex digits>")
                    .description(Some(
                        "An API key (`pandastack keys create` or `POST /v1/keys`). The streams a \
                         browser opens without headers (`GET` of SSE logs, WebSocket) also \
                         accept it as `?access_token=`.",
                    ))
                    .build(),
            ),
        );
        components.responses.insert(
            ERROR_RESPONSE.into(),
            RefOr::T(
                ResponseBuilder::new()
                    .description(
                        "Error envelope. The HTTP status follows `error.code` (404 `*_not_found`, \
                         401 `unauthorized` (no key, a bad or an expired one), 403 `forbidden` (an \
                         operator route and a key that is not an admin's, or a key whose scopes \
                         do not include the call's: the message names the scope), 422 `invalid_argument`, 400 `invalid_json`, 409 \
                         `conflict`/`sandbox_state`/`volume_busy`, 405 `method_not_allowed` with `Allow`, 413 \
                         `payload_too_large`, 426 `upgrade_required`, 429 `rate_limited` with \
                         `Retry-After`, 500 `internal`, 503 `unavailable`, 507 \
                         `insufficient_storage`/`quota_exceeded`).",
                    )
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name("ErrorEnvelope")))
                            .build(),
                    )
                    .build(),
            ),
        );
        open_tagged_variants(components);
        for (path, item) in doc.paths.paths.iter_mut() {
            let public = PUBLIC_PATHS.contains(&path.as_str());
            let ops: [&mut Option<Operation>; 8] = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.options,
                &mut item.head,
                &mut item.patch,
                &mut item.trace,
            ];
            for op in ops.into_iter().flatten() {
                op.responses.responses.insert(
                    "default".into(),
                    RefOr::Ref(Ref::new(format!("#/components/responses/{ERROR_RESPONSE}"))),
                );
                if public {
                    op.security = Some(Vec::new());
                }
                let optional = op
                    .operation_id
                    .as_deref()
                    .is_some_and(|id| OPTIONAL_BODIES.contains(&id));
                if let (true, Some(body)) = (optional, op.request_body.as_mut()) {
                    body.required = Some(Required::False);
                }
            }
        }
    }
}

/// An internally tagged enum (`ScheduleTarget`) is `oneOf` of `allOf: [$ref Variant, {type}]`.
/// A variant struct that refuses unknown fields has `additionalProperties: false`, which also
/// forbids the `type` the other half requires: no body would satisfy the union (schema-driven
/// clients and fuzzers cannot build one). The variants' own schemas leave other properties
/// open; the server still refuses unknown fields (422).
fn open_tagged_variants(components: &mut utoipa::openapi::Components) {
    use utoipa::openapi::schema::Schema;
    let mut variants = Vec::new();
    for s in components.schemas.values() {
        let RefOr::T(Schema::OneOf(one)) = s else {
            continue;
        };
        for item in &one.items {
            if let RefOr::T(Schema::AllOf(all)) = item {
                if let Some(RefOr::Ref(r)) = all.items.first() {
                    if let Some(name) = r.ref_location.rsplit('/').next() {
                        variants.push(name.to_owned());
                    }
                }
            }
        }
    }
    for name in variants {
        if let Some(RefOr::T(Schema::Object(o))) = components.schemas.get_mut(&name) {
            o.additional_properties = None;
        }
    }
}

/// The document served at `GET /v1/openapi.json`.
pub fn document() -> OpenApi {
    let mut doc = ApiDoc::openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").into();
    doc
}

/// [`document`] as pretty JSON, built once.
pub fn document_json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| {
        document()
            .to_pretty_json()
            .unwrap_or_else(|e| format!("{{\"error\":\"openapi: {e}\"}}"))
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::Value;

    use super::*;

    fn doc() -> Value {
        serde_json::from_str(document_json()).expect("openapi.json parses")
    }

    /// Each variant of a tagged union can carry its `type`: the schema it refers to does not
    /// forbid other properties (schemathesis could build no `POST /v1/schedules` body).
    #[test]
    fn tagged_union_variants_admit_their_tag() {
        let d = doc();
        let schemas = &d["components"]["schemas"];
        let variants = schemas["ScheduleTarget"]["oneOf"].as_array().unwrap();
        assert_eq!(variants.len(), 2);
        for v in variants {
            let r = v["allOf"][0]["$ref"].as_str().unwrap();
            let name = r.rsplit('/').next().unwrap();
            assert_ne!(
                schemas[name]["additionalProperties"],
                Value::Bool(false),
                "{name}"
            );
            assert_eq!(v["allOf"][1]["required"][0], "type");
        }
    }

    #[test]
    fn every_route_is_documented_and_nothing_else() {
        let doc = doc();
        let paths = doc["paths"].as_object().expect("paths");
        let mut documented = BTreeSet::new();
        for (path, item) in paths {
            for (method, _) in item.as_object().unwrap() {
                documented.insert((method.to_uppercase(), path.clone()));
            }
        }
        let served: BTreeSet<(String, String)> = crate::operations()
            .into_iter()
            .map(|(m, p)| (m.to_string(), p))
            .collect();
        assert_eq!(served, documented);
        for must in [
            ("GET", "/v1/openapi.json"),
            ("GET", "/v1/sandboxes/{id}/exec/ws"),
            ("GET", "/v1/sandboxes/{id}/pty"),
            ("GET", "/v1/sandboxes/{id}/logs"),
            ("POST", "/v1/sandboxes"),
        ] {
            assert!(
                served.contains(&(must.0.to_owned(), must.1.to_owned())),
                "{must:?}"
            );
        }
    }

    #[test]
    fn operations_share_the_conventions() {
        let doc = doc();
        assert_eq!(
            doc["components"]["securitySchemes"][BEARER]["scheme"],
            "bearer"
        );
        assert_eq!(doc["security"][0][BEARER], serde_json::json!([]));
        let mut ids = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let id = op["operationId"].as_str().expect("operationId");
                assert!(ids.insert(id.to_owned()), "duplicate operationId {id}");
                assert_eq!(
                    op["responses"]["default"]["$ref"], "#/components/responses/Error",
                    "{method} {path}"
                );
                let public = op.get("security") == Some(&serde_json::json!([]));
                assert_eq!(public, PUBLIC_PATHS.contains(&path.as_str()), "{path}");
            }
        }
    }

    /// The API fuzzer's auth check (scripts/fuzz_api_hooks.py) knows the same public paths.
    #[test]
    fn the_fuzzers_public_paths_are_these() {
        let hooks = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../scripts/fuzz_api_hooks.py");
        let text = std::fs::read_to_string(hooks).unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("PUBLIC_PATHS = {"))
            .expect("PUBLIC_PATHS in the hooks");
        let mut theirs: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
        theirs.sort_unstable();
        let mut ours = PUBLIC_PATHS.to_vec();
        ours.sort_unstable();
        assert_eq!(theirs, ours);
    }

    /// `openapi.json` beside this crate's manifest is the committed contract (SDKs are built
    /// from it): API drift shows as a diff. `PANDASTACK_UPDATE_OPENAPI=1` rewrites it.
    #[test]
    fn committed_document_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
        let now = format!("{}\n", document_json());
        if std::env::var_os("PANDASTACK_UPDATE_OPENAPI").is_some() {
            std::fs::write(&path, &now).expect("write openapi.json");
            return;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == now,
            "{} is out of date: run PANDASTACK_UPDATE_OPENAPI=1 cargo test -p pandastack-api",
            path.display()
        );
    }

    /// Every `$ref` points at something the document defines.
    #[test]
    fn references_resolve() {
        let doc = doc();
        fn walk(v: &Value, doc: &Value, refs: &mut usize) {
            match v {
                Value::Object(m) => {
                    if let Some(Value::String(r)) = m.get("$ref") {
                        let target = r
                            .strip_prefix("#/")
                            .unwrap_or_else(|| panic!("external ref {r}"))
                            .split('/')
                            .fold(doc, |v, k| &v[k]);
                        assert!(!target.is_null(), "dangling {r}");
                        *refs += 1;
                    }
                    m.values().for_each(|v| walk(v, doc, refs));
                }
                Value::Array(a) => a.iter().for_each(|v| walk(v, doc, refs)),
                _ => {}
            }
        }
        let mut refs = 0;
        walk(&doc, &doc, &mut refs);
        assert!(refs > 20, "only {refs} references");
        assert!(doc["components"]["schemas"]["ErrorEnvelope"].is_object());
        assert!(doc["components"]["schemas"]["ExecClientFrame"].is_object());
    }
}
