//! `McpCall`: the seam to an MCP client's `tools/call`.

use std::future::Future;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::error::BoxError;
use crate::rt::{BoxFuture, MaybeSend, MaybeSync};

/// The transport seam: `call_tool(bare_name, arguments)` performs `tools/call` and returns the
/// server's raw `CallToolResult` in its wire (camelCase) JSON form.
///
/// Any closure `Fn(String, Map<String, Value>) -> impl Future<Output = Result<Value, E>>` (with
/// `E: Into<BoxError>`) is one, as is `Arc<C>` of one; with the `mcp-rmcp` feature so is an
/// `rmcp` client `Peer<RoleClient>` (see `rebuno::mcp::rmcp`).
///
/// ```
/// use rebuno::mcp::McpCall;
/// use serde_json::{Map, Value, json};
///
/// fn assert_call(_: impl McpCall) {}
/// assert_call(|name: String, _args: Map<String, Value>| async move {
///     Ok::<_, std::io::Error>(json!({"content": [{"type": "text", "text": name}]}))
/// });
/// ```
pub trait McpCall: MaybeSend + MaybeSync + 'static {
    /// Calls the tool `name` (bare, without any prefix) with `arguments`.
    ///
    /// An `isError: true` result is a result, not an error: return `Err` only when no result
    /// came back (transport failure, protocol error, timeout).
    fn call_tool(
        &self,
        name: String,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'static, Result<Value, BoxError>>;
}

impl<F, Fut, E> McpCall for F
where
    F: Fn(String, Map<String, Value>) -> Fut + MaybeSend + MaybeSync + 'static,
    Fut: Future<Output = Result<Value, E>> + MaybeSend + 'static,
    E: Into<BoxError>,
{
    fn call_tool(
        &self,
        name: String,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'static, Result<Value, BoxError>> {
        let call = self(name, arguments);
        Box::pin(async move { call.await.map_err(Into::into) })
    }
}

impl<C: McpCall + ?Sized> McpCall for Arc<C> {
    fn call_tool(
        &self,
        name: String,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'static, Result<Value, BoxError>> {
        (**self).call_tool(name, arguments)
    }
}

/// Shares one `call` among tools: `Arc<dyn McpCall>`.
///
/// Useful to keep a type-erased client around; any closure already is an [`McpCall`].
///
/// ```
/// use rebuno::mcp::call_fn;
/// use serde_json::{Map, Value, json};
///
/// let call = call_fn(|_name: String, args: Map<String, Value>| async move {
///     Ok::<_, std::io::Error>(json!({"structuredContent": args}))
/// });
/// let again = std::sync::Arc::clone(&call);
/// # drop(again);
/// ```
pub fn call_fn(call: impl McpCall) -> Arc<dyn McpCall> {
    Arc::new(call)
}
