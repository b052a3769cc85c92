//! The default argument and result mappings.

use serde_json::Value;

/// Drops the top-level `null` arguments of an object (shallow, like the Python SDK's
/// `_strip_none`): LLMs often fill optional fields with `null`, and typed MCP parameters reject
/// it. Nulls nested inside values are kept; anything but an object passes unchanged.
///
/// ```
/// use rebuno::mcp::strip_nulls;
/// use serde_json::json;
///
/// assert_eq!(
///     strip_nulls(json!({"path": "a.txt", "head": null, "opts": {"x": null}})),
///     json!({"path": "a.txt", "opts": {"x": null}})
/// );
/// ```
pub fn strip_nulls(args: Value) -> Value {
    match args {
        Value::Object(map) => {
            Value::Object(map.into_iter().filter(|(_, v)| !v.is_null()).collect())
        }
        other => other,
    }
}

/// Flattens a `CallToolResult` (wire JSON) into the value the LLM reads, as the Python SDK
/// does: `structuredContent` when present and not `null`; otherwise the `content` blocks, each
/// `text` block as its text and any other block as its compact JSON, one block as that string,
/// several joined with `"\n"`, none as `""`; with no `content` array, `raw` itself. (A block's
/// JSON lists its keys in `serde_json`'s map order: sorted, unless `preserve_order` is on. The
/// Python SDK prints its model's repr there instead, so only text and structured results match
/// it byte for byte.)
///
/// `isError` is not looked at: an error result flattens to its text like any other.
///
/// ```
/// use rebuno::mcp::flatten;
/// use serde_json::json;
///
/// let text = json!({"content": [{"type": "text", "text": "Echo: hi"}]});
/// assert_eq!(flatten(text), json!("Echo: hi"));
///
/// let structured = json!({
///     "content": [{"type": "text", "text": "{\"result\":5}"}],
///     "structuredContent": {"result": 5}
/// });
/// assert_eq!(flatten(structured), json!({"result": 5}));
///
/// let image = json!({"type": "image", "data": "iVBOR", "mimeType": "image/png"});
/// let mixed = json!({"content": [{"type": "text", "text": "an image:"}, image]});
/// assert_eq!(flatten(mixed), json!(format!("an image:\n{image}")));
/// ```
pub fn flatten(raw: Value) -> Value {
    if let Some(structured) = structured(&raw) {
        return structured.clone();
    }
    let texts: Vec<String> = match raw.get("content") {
        Some(Value::Array(blocks)) => blocks.iter().map(block_text).collect(),
        _ => return raw,
    };
    match <[String; 1]>::try_from(texts) {
        Ok([one]) => Value::String(one),
        Err(texts) => Value::String(texts.join("\n")),
    }
}

/// `structuredContent` (or `structured_content`, as Python models dump it), unless absent or null.
fn structured(raw: &Value) -> Option<&Value> {
    ["structuredContent", "structured_content"]
        .iter()
        .filter_map(|key| raw.get(*key))
        .find(|value| !value.is_null())
}

/// A text block's text; any other block as compact JSON.
fn block_text(block: &Value) -> String {
    match (block.get("type").and_then(Value::as_str), block.get("text")) {
        (Some("text"), Some(Value::String(text))) => text.clone(),
        _ => block.to_string(),
    }
}
