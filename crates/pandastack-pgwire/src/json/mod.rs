//! Query results as JSON, the way Neon's `/sql` endpoint writes them.
//!
//! ```json
//! {"command": "SELECT", "rowCount": 1, "rowAsArray": false,
//!  "fields": [{"name": "n", "tableID": 0, "columnID": 0, "dataTypeID": 23,
//!              "dataTypeSize": 4, "dataTypeModifier": -1, "format": "text"}],
//!  "rows": [{"n": 1}]}
//! ```
//!
//! Values: NULL is `null`; `bool` a JSON boolean; `int2`, `int4`, `oid`, `float4`, `float8`
//! JSON numbers (a float's `NaN` and `±Infinity` stay strings); `json`/`jsonb` parsed JSON;
//! arrays of the built-in types JSON arrays of the same conversions; everything else —
//! `int8` and `numeric` included, whose precision a JSON number would lose — the text.
//! With raw text (`Neon-Raw-Text-Output: true`, which `@neondatabase/serverless` sends
//! with `Neon-Array-Mode: true` to parse values itself) every value stays a string or null.

mod array;

use serde_json::{Map, Number, Value};

use crate::client::QueryResult;
use array::Element;

/// Type OIDs of the built-in types converted to something other than a string.
mod oid {
    pub const BOOL: u32 = 16;
    pub const INT8: u32 = 20;
    pub const INT2: u32 = 21;
    pub const INT4: u32 = 23;
    pub const OID: u32 = 26;
    pub const JSON: u32 = 114;
    pub const FLOAT4: u32 = 700;
    pub const FLOAT8: u32 = 701;
    pub const NUMERIC: u32 = 1700;
    pub const JSONB: u32 = 3802;
}

/// The element type of a built-in array type whose text format uses `,` between elements.
fn array_element(type_oid: u32) -> Option<u32> {
    Some(match type_oid {
        1000 => oid::BOOL,
        1001 => 17, // bytea
        1002 => 18, // char
        1003 => 19, // name
        1005 => oid::INT2,
        1007 => oid::INT4,
        1009 => 25,   // text
        1014 => 1042, // bpchar
        1015 => 1043, // varchar
        1016 => oid::INT8,
        1021 => oid::FLOAT4,
        1022 => oid::FLOAT8,
        1028 => oid::OID,
        1040 => 829,  // macaddr
        1041 => 869,  // inet
        651 => 650,   // cidr
        1115 => 1114, // timestamp
        1182 => 1082, // date
        1183 => 1083, // time
        1185 => 1184, // timestamptz
        1187 => 1186, // interval
        1231 => oid::NUMERIC,
        1270 => 1266, // timetz
        199 => oid::JSON,
        2951 => 2950, // uuid
        3807 => oid::JSONB,
        _ => return None,
    })
}

/// A value in PostgreSQL's text format as JSON (see the module docs). Text that does not
/// parse as its type claims stays a string.
pub fn value_to_json(text: Option<&str>, type_oid: u32) -> Value {
    let Some(text) = text else {
        return Value::Null;
    };
    if let Some(element_oid) = array_element(type_oid) {
        return match array::parse(text, ',') {
            Ok(elements) => elements_to_json(elements, element_oid),
            Err(array::Malformed) => Value::String(text.to_owned()),
        };
    }
    scalar_to_json(text, type_oid)
}

fn scalar_to_json(text: &str, type_oid: u32) -> Value {
    let converted = match type_oid {
        oid::BOOL => match text {
            "t" => Some(Value::Bool(true)),
            "f" => Some(Value::Bool(false)),
            _ => None,
        },
        oid::INT2 | oid::INT4 | oid::OID => text.parse::<i64>().ok().map(Value::from),
        oid::FLOAT4 | oid::FLOAT8 => text
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number),
        oid::JSON | oid::JSONB => serde_json::from_str(text).ok(),
        _ => None,
    };
    converted.unwrap_or_else(|| Value::String(text.to_owned()))
}

fn elements_to_json(elements: Vec<Element>, element_oid: u32) -> Value {
    Value::Array(
        elements
            .into_iter()
            .map(|element| match element {
                Element::Null => Value::Null,
                Element::Text(text) => scalar_to_json(&text, element_oid),
                Element::Array(inner) => elements_to_json(inner, element_oid),
            })
            .collect(),
    )
}

/// A statement's result in Neon's `/sql` response shape: rows as objects keyed by column
/// name (a later column wins over an earlier one of the same name, as in node-postgres), or
/// as arrays in `array_mode`; values converted (see [`value_to_json`]) unless `raw_text`.
pub fn result_to_neon(result: &QueryResult, array_mode: bool, raw_text: bool) -> Value {
    let fields: Vec<Value> = result
        .fields
        .iter()
        .map(|field| {
            let mut object = Map::new();
            object.insert("name".into(), field.name.clone().into());
            object.insert("tableID".into(), field.table_id.into());
            object.insert("columnID".into(), field.column_id.into());
            object.insert("dataTypeID".into(), field.data_type_id.into());
            object.insert("dataTypeSize".into(), field.data_type_size.into());
            object.insert("dataTypeModifier".into(), field.data_type_modifier.into());
            let format = if field.format == 1 { "binary" } else { "text" };
            object.insert("format".into(), format.into());
            Value::Object(object)
        })
        .collect();

    let convert = |value: &Option<String>, type_oid: u32| {
        if raw_text {
            value.clone().map_or(Value::Null, Value::String)
        } else {
            value_to_json(value.as_deref(), type_oid)
        }
    };
    let rows: Vec<Value> = result
        .rows
        .iter()
        .map(|row| {
            let columns = result.fields.iter().zip(row);
            if array_mode {
                Value::Array(
                    columns
                        .map(|(field, value)| convert(value, field.data_type_id))
                        .collect(),
                )
            } else {
                Value::Object(
                    columns
                        .map(|(field, value)| {
                            (field.name.clone(), convert(value, field.data_type_id))
                        })
                        .collect(),
                )
            }
        })
        .collect();

    let mut out = Map::new();
    out.insert("command".into(), result.command.clone().into());
    out.insert(
        "rowCount".into(),
        result.row_count.map_or(Value::Null, Value::from),
    );
    out.insert("rows".into(), Value::Array(rows));
    out.insert("fields".into(), Value::Array(fields));
    out.insert("rowAsArray".into(), array_mode.into());
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Field;
    use serde_json::json;

    #[test]
    fn converts_scalars() {
        assert_eq!(value_to_json(None, oid::INT4), Value::Null);
        assert_eq!(value_to_json(Some("t"), oid::BOOL), json!(true));
        assert_eq!(value_to_json(Some("f"), oid::BOOL), json!(false));
        assert_eq!(value_to_json(Some("42"), oid::INT2), json!(42));
        assert_eq!(value_to_json(Some("-7"), oid::INT4), json!(-7));
        assert_eq!(
            value_to_json(Some("4294967295"), oid::OID),
            json!(4294967295u32)
        );
        assert_eq!(value_to_json(Some("1.5"), oid::FLOAT8), json!(1.5));
        assert_eq!(value_to_json(Some("1e+300"), oid::FLOAT8), json!(1e300));
        assert_eq!(value_to_json(Some("NaN"), oid::FLOAT8), json!("NaN"));
        assert_eq!(
            value_to_json(Some("-Infinity"), oid::FLOAT4),
            json!("-Infinity")
        );
        assert_eq!(
            value_to_json(Some("12345678901234567"), oid::INT8),
            json!("12345678901234567")
        );
        assert_eq!(value_to_json(Some("0.10"), oid::NUMERIC), json!("0.10"));
        assert_eq!(
            value_to_json(Some(r#"{"a":[1]}"#), oid::JSONB),
            json!({"a": [1]})
        );
        assert_eq!(
            value_to_json(Some("not json"), oid::JSON),
            json!("not json")
        );
        assert_eq!(value_to_json(Some("abc"), 25), json!("abc"));
        assert_eq!(value_to_json(Some("x"), oid::INT4), json!("x"));
        let deep = "[".repeat(10_000);
        assert_eq!(value_to_json(Some(&deep), oid::JSON), json!(deep));
    }

    #[test]
    fn converts_arrays() {
        assert_eq!(value_to_json(Some("{1,2,NULL}"), 1007), json!([1, 2, null]));
        assert_eq!(
            value_to_json(Some("{{1,2},{3,4}}"), 1007),
            json!([[1, 2], [3, 4]])
        );
        assert_eq!(
            value_to_json(Some(r#"{a,"b c","NULL",NULL,"q\"uote"}"#), 1009),
            json!(["a", "b c", "NULL", null, "q\"uote"])
        );
        assert_eq!(value_to_json(Some("{t,f}"), 1000), json!([true, false]));
        assert_eq!(
            value_to_json(Some("{1,9007199254740993}"), 1016),
            json!(["1", "9007199254740993"])
        );
        assert_eq!(value_to_json(Some("{1.5,NaN}"), 1022), json!([1.5, "NaN"]));
        assert_eq!(
            value_to_json(Some(r#"{"{\"a\":1}","[2]"}"#), 3807),
            json!([{"a": 1}, [2]])
        );
        assert_eq!(value_to_json(Some("{}"), 1015), json!([]));
        assert_eq!(value_to_json(Some("[0:1]={5,6}"), 1007), json!([5, 6]));
        // Malformed text, or an array type not known here, stays a string.
        assert_eq!(value_to_json(Some("{1,2"), 1007), json!("{1,2"));
        assert_eq!(
            value_to_json(Some("{(0,0),(1,1)}"), 1020),
            json!("{(0,0),(1,1)}")
        );
    }

    fn field(name: &str, type_oid: u32) -> Field {
        Field {
            name: name.into(),
            table_id: 0,
            column_id: 0,
            data_type_id: type_oid,
            data_type_size: -1,
            data_type_modifier: -1,
            format: 0,
        }
    }

    #[test]
    fn writes_neon_results() {
        let result = QueryResult {
            command: "SELECT".into(),
            row_count: Some(1),
            fields: vec![
                field("n", oid::INT4),
                field("j", oid::JSONB),
                field("z", 25),
            ],
            rows: vec![vec![Some("1".into()), Some("[1]".into()), None]],
        };
        let objects = result_to_neon(&result, false, false);
        assert_eq!(objects["rows"], json!([{"n": 1, "j": [1], "z": null}]));
        assert_eq!(objects["command"], json!("SELECT"));
        assert_eq!(objects["rowCount"], json!(1));
        assert_eq!(objects["rowAsArray"], json!(false));
        assert_eq!(
            objects["fields"][0],
            json!({"name": "n", "tableID": 0, "columnID": 0, "dataTypeID": 23,
                   "dataTypeSize": -1, "dataTypeModifier": -1, "format": "text"})
        );
        let arrays = result_to_neon(&result, true, true);
        assert_eq!(arrays["rows"], json!([["1", "[1]", null]]));
        assert_eq!(arrays["rowAsArray"], json!(true));
        let none = result_to_neon(
            &QueryResult {
                command: "CREATE".into(),
                ..QueryResult::default()
            },
            false,
            false,
        );
        assert_eq!(none["rowCount"], Value::Null);
        assert_eq!(none["rows"], json!([]));
        assert_eq!(none["fields"], json!([]));
    }
}
