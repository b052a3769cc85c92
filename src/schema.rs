//! JSON Schemas from Rust types (feature `schemars`).

use serde_json::Value;

/// The JSON Schema of `T` as a JSON value.
pub(crate) fn of<T: schemars::JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null)
}
