//! `wrap_mcp_tool` and `wrap_mcp_tools`.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::call::McpCall;
use super::options::McpOptions;
use super::result::{flatten, strip_nulls};
use super::spec::McpToolSpec;
use crate::error::{BoxError, HandlerError};
use crate::tool::Tool;
use crate::tool::wrap_tool;

/// Wraps one MCP tool: a durable [`Tool`] whose id is [`McpOptions::tool_id`] and whose body
/// calls `call` with the bare name. See the [module docs](super) for the behaviour.
///
/// ```
/// use rebuno::mcp::{McpOptions, McpToolSpec, wrap_mcp_tool};
/// use serde_json::{Map, Value, json};
///
/// let echo = wrap_mcp_tool(
///     McpToolSpec::new("echo").description("Echoes the message"),
///     |name: String, args: Map<String, Value>| async move {
///         Ok::<_, std::io::Error>(json!({"content": [{"type": "text", "text": format!("{name}: {}", args["message"])}]}))
///     },
///     &McpOptions::new().prefix("ev"),
/// );
/// assert_eq!(echo.name(), "ev_echo");
/// # async fn inside_a_handler(echo: rebuno::Tool<Value, Value>) -> rebuno::Result<()> {
/// let said = echo.call_json(json!({"message": "hi", "style": null})).await?; // "echo: \"hi\""
/// # Ok(()) }
/// ```
pub fn wrap_mcp_tool(
    spec: impl Into<McpToolSpec>,
    call: impl McpCall,
    options: &McpOptions,
) -> Tool<Value, Value> {
    wrap_shared(spec.into(), Arc::new(call), options)
}

/// Wraps every descriptor in `specs` (for example a `tools/list` result read with
/// [`McpToolSpec::list_from_json`]), sharing one `call`.
///
/// ```
/// use rebuno::DynTool;
/// use rebuno::mcp::{McpOptions, McpToolSpec, wrap_mcp_tools};
/// use serde_json::{Map, Value, json};
///
/// let tools = wrap_mcp_tools(
///     [McpToolSpec::new("read_file"), McpToolSpec::new("write_file")],
///     |_name: String, _args: Map<String, Value>| async move {
///         Ok::<_, std::io::Error>(json!({"content": []}))
///     },
///     &McpOptions::new().prefix("fs"),
/// );
/// let for_a_framework: Vec<std::sync::Arc<dyn DynTool>> =
///     tools.into_iter().map(|tool| tool.into_dyn()).collect();
/// assert_eq!(for_a_framework[1].spec().name, "fs_write_file");
/// ```
pub fn wrap_mcp_tools<I>(
    specs: I,
    call: impl McpCall,
    options: &McpOptions,
) -> Vec<Tool<Value, Value>>
where
    I: IntoIterator,
    I::Item: Into<McpToolSpec>,
{
    let call: Arc<dyn McpCall> = Arc::new(call);
    specs
        .into_iter()
        .map(|spec| wrap_shared(spec.into(), Arc::clone(&call), options))
        .collect()
}

/// Builds the tool around a shared `call`.
fn wrap_shared(
    spec: McpToolSpec,
    call: Arc<dyn McpCall>,
    options: &McpOptions,
) -> Tool<Value, Value> {
    let id = options.tool_id(&spec);
    warn_if_unusual(&id);
    let mut builder = wrap_tool(id)
        .description(spec.description.clone())
        .input_schema(spec.input_schema.clone())
        .idempotency(options.idempotency_of(&spec))
        .resources(options.resources.clone());
    builder = match &options.to_result {
        Some(map) => {
            let map = Arc::clone(map);
            builder.to_result(move |raw| map(raw))
        }
        None => builder.to_result(flatten),
    };
    if !options.keep_nulls {
        builder = builder.transform_args(strip_nulls);
    }
    let name = spec.name;
    builder.invoke(move |args: Value| {
        let call = Arc::clone(&call);
        let name = name.clone();
        async move {
            let arguments = into_arguments(&name, args)?;
            call.call_tool(name, arguments)
                .await
                .map_err(HandlerError::from)
        }
    })
}

/// MCP arguments are an object; `null` means none.
fn into_arguments(name: &str, args: Value) -> Result<Map<String, Value>, BoxError> {
    match args {
        Value::Object(map) => Ok(map),
        Value::Null => Ok(Map::new()),
        other => {
            Err(format!("MCP tool {name:?} takes a JSON object of arguments, not {other}").into())
        }
    }
}

/// LLM APIs commonly accept tool names of `[A-Za-z0-9_-]{1,64}`; MCP allows more. The id is
/// what the kernel records, so it is never renamed, only flagged.
fn warn_if_unusual(id: &str) {
    let plain = id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !plain || id.is_empty() || id.len() > 64 {
        tracing::warn!(
            tool = id,
            "MCP tool id may be rejected by LLM APIs (expected [A-Za-z0-9_-]{{1,64}})"
        );
    }
}
