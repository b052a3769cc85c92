//! The MCP path: a server's tools over streamable HTTP, called durably from the Worker.

use rebuno::mcp::{McpOptions, StreamableHttp};
use rebuno::{HandlerError, Idempotency};
use serde_json::Value;

/// Connects to the MCP server at `url` through the Workers `fetch`, wraps its tools as `fx_*`
/// (`record` runs at most once: it has a side effect), and calls `calls` (`[tool id, args]`
/// pairs) in order, as an LLM framework would. Each call is a `tool_call` step: recorded once,
/// replayed on a re-delivery without reaching the server; a policy denial comes back as the
/// tool's result.
///
/// A delivery connects again (`initialize` and `tools/list`), as any new process would.
pub(crate) async fn call_tools(
    url: &str,
    calls: &[(String, Value)],
) -> Result<Vec<Value>, HandlerError> {
    let server = StreamableHttp::builder(url)
        .transport(rebuno_workers::FetchTransport::new())
        .connect()
        .await?;
    let options = McpOptions::new()
        .prefix("fx")
        .tool_idempotency("record", Idempotency::AtMostOnce);
    let tools = server.tools(&options).await?;
    let mut results = Vec::with_capacity(calls.len());
    for (id, args) in calls {
        let tool = tools
            .iter()
            .find(|tool| tool.name() == id)
            .ok_or_else(|| format!("the MCP server has no tool for {id:?}"))?;
        results.push(tool.call_json(args.clone()).await?);
    }
    server.close().await;
    Ok(results)
}
