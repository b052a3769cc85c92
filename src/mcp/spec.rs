//! `McpToolSpec`: one MCP tool descriptor.

use serde_json::{Map, Value};

use crate::error::{Error, ErrorKind, Result};
use crate::idempotency::Idempotency;

/// One MCP tool descriptor: the spec fields the wrapper uses.
///
/// ```
/// use rebuno::mcp::McpToolSpec;
/// use serde_json::json;
///
/// let spec = McpToolSpec::from_json(&json!({
///     "name": "read_text_file",
///     "description": "Read a file",
///     "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
///     "annotations": {"readOnlyHint": true}
/// }))
/// .unwrap();
/// assert_eq!(spec.name, "read_text_file");
/// assert_eq!(spec.input_schema["properties"]["path"]["type"], "string");
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct McpToolSpec {
    /// The bare tool name the server knows.
    pub name: String,
    /// Shown to the LLM; `""` when the descriptor has none.
    pub description: String,
    /// The raw JSON Schema of the arguments; `{}` when the descriptor has none.
    pub input_schema: Value,
    /// The descriptor's `annotations` (`readOnlyHint`, `idempotentHint`, `destructiveHint`, ...),
    /// untrusted hints; see [`idempotency_from_hints`](Self::idempotency_from_hints).
    pub annotations: Option<Value>,
}

impl McpToolSpec {
    /// A descriptor with only a name: no description, `{}` as the schema.
    ///
    /// ```
    /// let spec = rebuno::mcp::McpToolSpec::new("echo").description("Echoes");
    /// assert_eq!((spec.name.as_str(), spec.description.as_str()), ("echo", "Echoes"));
    /// ```
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: String::new(),
            input_schema: Value::Object(Map::new()),
            annotations: None,
        }
    }

    /// Sets the description.
    ///
    /// ```
    /// let spec = rebuno::mcp::McpToolSpec::new("echo").description("Echoes");
    /// assert_eq!(spec.description, "Echoes");
    /// ```
    #[must_use]
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Sets the input schema.
    ///
    /// ```
    /// let spec = rebuno::mcp::McpToolSpec::new("echo").input_schema(serde_json::json!({"type": "object"}));
    /// assert_eq!(spec.input_schema["type"], "object");
    /// ```
    #[must_use]
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = schema;
        self
    }

    /// Sets the annotations.
    ///
    /// ```
    /// let spec = rebuno::mcp::McpToolSpec::new("rm").annotations(serde_json::json!({"destructiveHint": true}));
    /// assert!(spec.annotations.is_some());
    /// ```
    #[must_use]
    pub fn annotations(mut self, annotations: Value) -> Self {
        self.annotations = Some(annotations);
        self
    }

    /// Reads a descriptor in its wire form: `name` (required), `description`, and
    /// `inputSchema` (or `input_schema`, as Python models dump it), `annotations`.
    ///
    /// ```
    /// use rebuno::mcp::McpToolSpec;
    /// use serde_json::json;
    ///
    /// let spec = McpToolSpec::from_json(&json!({"name": "add", "input_schema": {"type": "object"}})).unwrap();
    /// assert_eq!((spec.description.as_str(), &spec.input_schema), ("", &json!({"type": "object"})));
    /// assert!(McpToolSpec::from_json(&json!({"description": "no name"})).is_err());
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Serde`] when `wire` is not an object with a string `name`.
    pub fn from_json(wire: &Value) -> Result<Self> {
        let name = wire.get("name").and_then(Value::as_str).ok_or_else(|| {
            Error::new(
                ErrorKind::Serde,
                format!("an MCP tool descriptor needs a string \"name\": {wire}"),
            )
        })?;
        let description = wire
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let schema = first_present(wire, &["inputSchema", "input_schema"])
            .cloned()
            .unwrap_or_else(|| Value::Object(Map::new()));
        let mut spec = Self::new(name)
            .description(description)
            .input_schema(schema);
        spec.annotations = first_present(wire, &["annotations"]).cloned();
        Ok(spec)
    }

    /// Reads a `tools/list` result (`{"tools": [...]}`) or a bare array of descriptors.
    ///
    /// ```
    /// use rebuno::mcp::McpToolSpec;
    /// use serde_json::json;
    ///
    /// let specs = McpToolSpec::list_from_json(&json!({"tools": [{"name": "a"}, {"name": "b"}]})).unwrap();
    /// assert_eq!(specs.len(), 2);
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Serde`] when `wire` is neither shape or a descriptor is malformed.
    pub fn list_from_json(wire: &Value) -> Result<Vec<Self>> {
        let list = match wire {
            Value::Array(list) => list,
            _ => match wire.get("tools") {
                Some(Value::Array(list)) => list,
                _ => {
                    return Err(Error::new(
                        ErrorKind::Serde,
                        "expected a tools/list result {\"tools\": [...]} or an array of MCP tools",
                    ));
                }
            },
        };
        list.iter().map(Self::from_json).collect()
    }

    /// An opt-in mapping of the descriptor's hints: [`Idempotency::SafeToRetry`] when
    /// `readOnlyHint` or `idempotentHint` is true, else [`Idempotency::AtMostOnce`].
    ///
    /// The spec calls annotations untrusted hints, so the wrapper never applies this on its own;
    /// pass it to [`McpOptions::idempotency_with`](super::McpOptions::idempotency_with).
    ///
    /// ```
    /// use rebuno::Idempotency;
    /// use rebuno::mcp::McpToolSpec;
    /// use serde_json::json;
    ///
    /// let read = McpToolSpec::new("read").annotations(json!({"readOnlyHint": true}));
    /// assert_eq!(read.idempotency_from_hints(), Idempotency::SafeToRetry);
    /// assert_eq!(McpToolSpec::new("move").idempotency_from_hints(), Idempotency::AtMostOnce);
    /// ```
    pub fn idempotency_from_hints(&self) -> Idempotency {
        let hint = |key: &str| {
            self.annotations
                .as_ref()
                .and_then(|a| a.get(key))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        if hint("readOnlyHint") || hint("idempotentHint") {
            Idempotency::SafeToRetry
        } else {
            Idempotency::AtMostOnce
        }
    }
}

/// The first of `keys` present in `wire` with a non-null value.
fn first_present<'a>(wire: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter()
        .filter_map(|key| wire.get(*key))
        .find(|value| !value.is_null())
}

impl TryFrom<&Value> for McpToolSpec {
    type Error = Error;

    /// See [`McpToolSpec::from_json`].
    fn try_from(wire: &Value) -> Result<Self> {
        Self::from_json(wire)
    }
}

impl TryFrom<Value> for McpToolSpec {
    type Error = Error;

    /// See [`McpToolSpec::from_json`].
    fn try_from(wire: Value) -> Result<Self> {
        Self::from_json(&wire)
    }
}
