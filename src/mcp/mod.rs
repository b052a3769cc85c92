//! MCP tools: wrap [Model Context Protocol](https://modelcontextprotocol.io) tool descriptors
//! so they get the same treatment as the SDK's own tools (policy, recording, replay, audit).
//!
//! The core works on the MCP wire shapes as [`serde_json::Value`] plus a `call` seam, so it
//! builds for every target (wasm32 included) and fits any MCP client:
//!
//! * [`McpToolSpec`]: a tool descriptor (`name`, `description`, `inputSchema`);
//! * [`McpCall`]: `call(bare_name, arguments)` returning the raw `CallToolResult` JSON; any
//!   `Fn(String, Map<String, Value>) -> Future<Output = Result<Value, E>>` closure is one;
//! * [`wrap_mcp_tool`] / [`wrap_mcp_tools`] with [`McpOptions`]: the wrapped
//!   [`Tool<Value, Value>`](crate::Tool)s, usable wherever the SDK's own tools are (including as
//!   [`DynTool`](crate::DynTool)s);
//! * [`flatten`] and [`strip_nulls`]: the default result mapping and argument cleaning.
//!
//! Behaviour, as in the Python SDK's `wrap_mcp_tool`:
//!
//! * the tool id is `{prefix}_{name}` (the bare `name` when the prefix is empty); the LLM and
//!   the kernel see the id, the MCP server sees the bare name;
//! * description and input schema are carried over from the descriptor;
//! * top-level `null` arguments are dropped before they are recorded (LLMs fill optional fields
//!   with `null`, which typed MCP parameters reject); [`McpOptions::keep_nulls`] opts out;
//! * the recorded result is [`flatten`]ed from the `CallToolResult` (structured content
//!   preferred, else the text blocks joined) unless [`McpOptions::to_result`] overrides it. An
//!   `isError: true` result is recorded like any other, so the LLM reads the error text; an
//!   error from `call` itself (transport, protocol) fails the step;
//! * idempotency is `safe_to_retry` unless set per tool;
//! * a policy denial becomes the usual `"<id> not allowed. reason: <reason>"` result of
//!   [`Tool::call_json`](crate::Tool::call_json).
//!
//! Two clients connect to servers for you:
//!
//! * [`StreamableHttp`], always compiled, on every target: a small client of the streamable
//!   HTTP transport over the SDK's own [`Transport`](crate::transport::Transport) (on Cloudflare
//!   Workers, `rebuno_workers::FetchTransport`). It lists and calls tools;
//! * with the `mcp-rmcp` feature (native targets), the `rmcp` submodule connects the official
//!   `rmcp` client: `mcp::rmcp::McpClient` lists a server's tools and calls them over stdio
//!   (`mcp-stdio`) or any rmcp transport you hold, with a timeout, and gives the whole protocol
//!   (sampling, elicitation, resources) through its peer.
//!
//! ```
//! use rebuno::mcp::{McpOptions, McpToolSpec, wrap_mcp_tools};
//! use serde_json::{Map, Value, json};
//!
//! # fn main() -> rebuno::Result<()> {
//! // `tools/list` as it came over the wire, from any MCP client.
//! let listed = json!({"tools": [
//!     {"name": "search", "description": "Search the docs",
//!      "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}}
//! ]});
//! let specs = McpToolSpec::list_from_json(&listed)?;
//! let tools = wrap_mcp_tools(
//!     specs,
//!     |name: String, args: Map<String, Value>| async move {
//!         // your client's `tools/call`; here a canned CallToolResult
//!         Ok::<_, std::io::Error>(json!({"content": [{"type": "text", "text": format!("{name}: {}", args["q"])}]}))
//!     },
//!     &McpOptions::new().prefix("docs"),
//! );
//! assert_eq!(tools[0].name(), "docs_search");
//! assert_eq!(tools[0].spec().description, "Search the docs");
//! # Ok(()) }
//! ```

mod call;
mod http;
mod options;
mod result;
mod spec;
mod wrap;

#[cfg(feature = "mcp-rmcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp-rmcp")))]
pub mod rmcp;

pub use call::{McpCall, call_fn};
pub use http::{StreamableHttp, StreamableHttpBuilder, StreamableHttpCall};
pub use options::McpOptions;
pub use result::{flatten, strip_nulls};
pub use spec::McpToolSpec;
pub use wrap::{wrap_mcp_tool, wrap_mcp_tools};
