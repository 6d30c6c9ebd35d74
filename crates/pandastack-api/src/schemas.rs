//! Schemas of the OpenAPI document that no wire type derives: the Server-Sent Events streams and
//! raw file bytes. In OpenAPI 3.1 the schema of a `text/event-stream` response describes one
//! event: an object with the event's name in `event` and its payload, JSON text, in `data`
//! (`contentMediaType` JSON, the payload's shape in `contentSchema`). Each stream here is one
//! alternative per event name, so a client — or a fuzzer checking the server — knows every event
//! and payload a stream can carry.

use serde_json::{json, Value};
use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

/// One event: `event` is `name`, `data` is JSON text of shape `payload`.
fn event(name: &str, payload: Value) -> Schema {
    ObjectBuilder::new()
        .property(
            "event",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some([name])),
        )
        .required("event")
        .property(
            "data",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .content_media_type("application/json")
                // utoipa has no `contentSchema` keyword; extensions are written as given.
                .extensions(Some(Extensions::from_iter([("contentSchema", payload)]))),
        )
        .required("data")
        .into()
}

/// A stream of the given events.
fn events(description: &str, list: Vec<(&str, Value)>) -> RefOr<Schema> {
    list.into_iter()
        .fold(OneOfBuilder::new(), |b, (name, payload)| {
            b.item(event(name, payload))
        })
        .description(Some(description))
        .into()
}

fn component(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

/// `{"data": text}` of an output event.
fn text() -> Value {
    json!({"type": "object", "required": ["data"], "properties": {"data": {"type": "string"}}})
}

fn object(required: &[&str], properties: Value) -> Value {
    json!({"type": "object", "required": required, "properties": properties})
}

/// Events of `POST …/exec/stream`.
pub struct ExecEvents;

impl PartialSchema for ExecEvents {
    fn schema() -> RefOr<Schema> {
        let count = json!({"type": "integer", "minimum": 0});
        events(
            "One event of an exec stream: `stdout`/`stderr` as produced, then one `exit` or `error`.",
            vec![
                ("stdout", text()),
                ("stderr", text()),
                (
                    "exit",
                    object(
                        &["exit_code", "timed_out", "truncated", "duration_ms"],
                        json!({
                            "exit_code": {"type": "integer", "format": "int32"},
                            "timed_out": {"type": "boolean"},
                            "truncated": {"type": "boolean"},
                            "duration_ms": count,
                        }),
                    ),
                ),
                (
                    "error",
                    object(
                        &["code", "message"],
                        json!({"code": component("ErrorCode"), "message": {"type": "string"}}),
                    ),
                ),
            ],
        )
    }
}

impl ToSchema for ExecEvents {}

/// Events of `POST …/code/stream`.
pub struct CodeEvents;

impl PartialSchema for CodeEvents {
    fn schema() -> RefOr<Schema> {
        events(
            "One event of a code run: `stdout`/`stderr` as printed, `result`s, an `error`, then one `done`.",
            vec![
                ("stdout", text()),
                ("stderr", text()),
                ("result", component("CodeOutput")),
                ("error", component("CodeError")),
                (
                    "done",
                    object(
                        &["duration_ms", "truncated"],
                        json!({
                            "duration_ms": {"type": "integer", "minimum": 0},
                            "truncated": {"type": "boolean"},
                        }),
                    ),
                ),
            ],
        )
    }
}

impl ToSchema for CodeEvents {}

/// Events of a followed log (`GET …/logs?follow=1`, a sandbox's or a template build's).
pub struct LogEvents;

impl PartialSchema for LogEvents {
    fn schema() -> RefOr<Schema> {
        events(
            "One event of a followed log: `log` pieces in order, then one `end`.",
            vec![("log", component("LogChunk")), ("end", component("LogEnd"))],
        )
    }
}

impl ToSchema for LogEvents {}

/// Events of `GET …/files/watch`: each named by its frame's `type`, the frame as data.
pub struct WatchEvents;

impl PartialSchema for WatchEvents {
    fn schema() -> RefOr<Schema> {
        let names = [
            "ready", "create", "modify", "delete", "rename", "overflow", "error",
        ];
        events(
            "One event of a file watch: `ready` once armed (again after a wake), the changes, \
             `overflow` when some were dropped, and `error` as the last.",
            names
                .into_iter()
                .map(|n| (n, component("WatchFrame")))
                .collect(),
        )
    }
}

impl ToSchema for WatchEvents {}

/// Events of `GET /v1/events` as a stream: each named by its event's type, the event as data.
pub struct EventEvents;

impl PartialSchema for EventEvents {
    fn schema() -> RefOr<Schema> {
        events(
            "One event of the workspace, named by its type; its SSE `id` is the event's id.",
            pandastack_api_types::EVENT_TYPES
                .iter()
                .map(|t| (*t, component("Event")))
                .collect(),
        )
    }
}

impl ToSchema for EventEvents {}

/// Bytes of a file, sent or received as they are.
pub struct Bytes;

impl PartialSchema for Bytes {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .content_media_type("application/octet-stream")
            .into()
    }
}

impl ToSchema for Bytes {}
