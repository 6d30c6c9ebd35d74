//! The tools, one module per resource. Each module has an `#[tool_router]` block of thin tool
//! methods (name, description, input schema, annotations) that hand their arguments to a plain
//! async function of the module doing the API call; the handler adds the routers together.
//!
//! Arguments are decoded here, not by rmcp's `Parameters` extractor, so that a bad argument is
//! a tool error the model can read and correct (what the MCP specification asks of input
//! validation), not a JSON-RPC error. Argument types deny unknown fields: their schemas say
//! `additionalProperties: false`.

mod exec;
mod files;
mod platform;
mod sandboxes;

use std::sync::Arc;

use rmcp::handler::server::common::{schema_for_input, schema_for_type};
use rmcp::model::JsonObject;
use schemars::JsonSchema;

use crate::ToolError;

/// The input schema of a tool taking `T`, optional fields described by their type alone.
pub(crate) fn schema<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    // Every argument type is a struct, whose schema is an object; should one not be, its plain
    // schema is still an honest description.
    let schema = schema_for_input::<T>().unwrap_or_else(|_| schema_for_type::<T>());
    let mut v = serde_json::Value::Object((*schema).clone());
    drop_null_alternatives(&mut v);
    match v {
        serde_json::Value::Object(o) => Arc::new(o),
        _ => schema,
    }
}

/// schemars describes an `Option<T>` field as "T or null"; an optional argument is one that can
/// be left out, so its schema is T's. Clients that fill arguments from the schema (the MCP
/// Inspector turns `"600"` into a number only where the type is `integer`) and models read the
/// plain type better. A null sent anyway is still accepted (as absent).
fn drop_null_alternatives(v: &mut serde_json::Value) {
    use serde_json::Value;
    let Value::Object(o) = v else {
        if let Value::Array(items) = v {
            items.iter_mut().for_each(drop_null_alternatives);
        }
        return;
    };
    if let Some(Value::Array(types)) = o.get("type") {
        let rest: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
        if rest.len() == 1 && types.len() == 2 {
            o.insert("type".into(), rest[0].clone());
        }
    }
    let is_null = |s: &Value| s.get("type").is_some_and(|t| t == "null");
    if let Some(Value::Array(alts)) = o.get("anyOf") {
        if alts.len() == 2 && alts.iter().any(is_null) {
            if let Some(Value::Object(keep)) = alts.iter().find(|s| !is_null(s)).cloned() {
                o.remove("anyOf");
                for (k, val) in keep {
                    o.entry(k).or_insert(val);
                }
            }
        }
    }
    o.values_mut().for_each(drop_null_alternatives);
}

/// A sandbox id as the API spells them (the API answers `sandbox_not_found` for one that does
/// not exist; this only refuses what cannot be an id, before a call).
pub(crate) fn check_id(field: &str, id: &str) -> Result<(), ToolError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(ToolError::InvalidArguments(format!(
            "{field}: {id:?} is not an id (letters, digits, '_' and '-', at most 64)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::drop_null_alternatives;
    use crate::PandaStackMcp;

    #[test]
    fn optional_fields_are_their_type() {
        let mut v = json!({"properties": {
            "a": {"type": ["integer", "null"], "minimum": 1},
            "b": {"anyOf": [{"$ref": "#/$defs/State"}, {"type": "null"}], "description": "d"},
            "c": {"type": "string"},
        }});
        drop_null_alternatives(&mut v);
        assert_eq!(
            v,
            json!({"properties": {
                "a": {"type": "integer", "minimum": 1},
                "b": {"$ref": "#/$defs/State", "description": "d"},
                "c": {"type": "string"},
            }})
        );
    }

    /// Every tool has a description, and an object schema that names its required fields and
    /// refuses unknown ones.
    #[test]
    fn tools_have_precise_schemas() {
        let client = pandastack_client::Client::new(pandastack_client::Config::new(
            "http://127.0.0.1:1",
            None,
        ))
        .unwrap();
        let tools = PandaStackMcp::new(client).tools();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        for want in [
            "create_sandbox",
            "list_sandboxes",
            "kill_sandbox",
            "run_command",
            "run_code",
            "create_code_context",
            "write_file",
            "read_file",
            "list_files",
            "get_preview_url",
            "snapshot_sandbox",
            "fork_sandbox",
            "create_database",
            "query_database",
            "deploy_app",
            "get_app",
            "invoke_function",
        ] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
        for t in &tools {
            let text = serde_json::to_string(&t.input_schema).unwrap();
            assert!(!text.contains("\"null\""), "{}: {text}", t.name);
            let d = t.description.as_deref().unwrap_or("");
            assert!(d.len() > 20, "{}: description {d:?}", t.name);
            let s = &t.input_schema;
            assert_eq!(s["type"], "object", "{}", t.name);
            assert_eq!(
                s.get("additionalProperties"),
                Some(&serde_json::json!(false)),
                "{}: {s:?}",
                t.name
            );
        }
    }
}
