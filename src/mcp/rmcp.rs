//! The official `rmcp` client as the MCP seam (feature `mcp-rmcp`; native targets only).
//!
//! [`McpClient`] connects to a server (a child process over stdio with `mcp-stdio`, or any rmcp
//! transport through [`McpClient::connect`]), lists its tools and wraps them; each call goes
//! through [`RmcpCall`], which adds an optional timeout. `rmcp::Peer<RoleClient>` and
//! `rmcp::model::Tool` also plug into the core directly: the peer is an [`McpCall`] and the tool
//! converts into an [`McpToolSpec`]. For streamable HTTP use [`StreamableHttp`](super::StreamableHttp),
//! the SDK's own client on every target.
//!
//! ```no_run
//! # #[cfg(feature = "mcp-stdio")]
//! # async fn demo() -> rebuno::Result<()> {
//! use std::time::Duration;
//!
//! use rebuno::Idempotency;
//! use rebuno::mcp::McpOptions;
//! use rebuno::mcp::rmcp::McpClient;
//!
//! let mut server = tokio::process::Command::new("node");
//! server.args(["node_modules/@modelcontextprotocol/server-filesystem/dist/index.js", "/data"]);
//! let client = McpClient::stdio(server).await?.timeout(Duration::from_secs(30));
//! let tools = client
//!     .tools(&McpOptions::new().prefix("fs").tool_idempotency("write_file", Idempotency::AtMostOnce))
//!     .await?;
//! // hand `tools` to the agent; close the connection when the host shuts down
//! client.close().await;
//! # Ok(()) }
//! ```
//!
//! Connections are not durable: a resumed dispatch in a new process connects again, while the
//! steps it replays never reach the server.

#[cfg(target_family = "wasm")]
compile_error!(
    "the `mcp-rmcp` feature is native-only (rmcp's client needs a Tokio reactor and a clock); \
     on wasm32 pass your own `call` to rebuno::mcp::wrap_mcp_tools"
);

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, RequestParamsMeta as _};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::IntoTransport;
use rmcp::{Peer, ServiceExt};
use serde_json::{Map, Value};

use super::{McpCall, McpOptions, McpToolSpec, wrap_mcp_tools};
use crate::error::{BoxError, Error, ErrorKind, Result};
use crate::rt::BoxFuture;
use crate::tool::Tool;

impl From<&rmcp::model::Tool> for McpToolSpec {
    fn from(tool: &rmcp::model::Tool) -> Self {
        let mut spec = McpToolSpec::new(tool.name.to_string())
            .description(tool.description.as_deref().unwrap_or_default())
            .input_schema(tool.schema_as_json_value());
        spec.annotations = tool
            .annotations
            .as_ref()
            .and_then(|a| serde_json::to_value(a).ok());
        spec
    }
}

impl From<rmcp::model::Tool> for McpToolSpec {
    fn from(tool: rmcp::model::Tool) -> Self {
        Self::from(&tool)
    }
}

/// The peer calls tools with no timeout; see [`RmcpCall`] for one.
impl McpCall for Peer<RoleClient> {
    fn call_tool(
        &self,
        name: String,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'static, std::result::Result<Value, BoxError>> {
        RmcpCall::new(self.clone()).call_tool(name, arguments)
    }
}

/// `tools/call` through an rmcp peer, with an optional timeout; the result is the
/// `CallToolResult` in its wire JSON form.
///
/// Uses `Peer::call_tool`, so a server that asks for input mid-call (MRTR `input_required`) or
/// answers with a task fails the call instead of running an unrecorded interaction. A call that
/// times out or is dropped (its dispatch superseded) sends `notifications/cancelled`.
///
/// ```no_run
/// # async fn demo(peer: rmcp::Peer<rmcp::RoleClient>) {
/// use std::time::Duration;
///
/// use rebuno::mcp::rmcp::RmcpCall;
/// use rebuno::mcp::{McpOptions, McpToolSpec, wrap_mcp_tools};
///
/// let call = RmcpCall::new(peer.clone()).timeout(Duration::from_secs(10));
/// let listed = peer.list_all_tools().await.unwrap_or_default();
/// let tools = wrap_mcp_tools(listed.iter().map(McpToolSpec::from), call, &McpOptions::new());
/// # drop(tools); }
/// ```
#[derive(Debug, Clone)]
pub struct RmcpCall {
    peer: Peer<RoleClient>,
    timeout: Option<Duration>,
}

impl RmcpCall {
    /// Calls through `peer` with no timeout.
    ///
    /// ```no_run
    /// # fn demo(peer: rmcp::Peer<rmcp::RoleClient>) {
    /// let call = rebuno::mcp::rmcp::RmcpCall::new(peer);
    /// # drop(call); }
    /// ```
    pub fn new(peer: Peer<RoleClient>) -> Self {
        Self {
            peer,
            timeout: None,
        }
    }

    /// Fails a call that has no result after `timeout` (and cancels it on the server).
    ///
    /// ```no_run
    /// # fn demo(peer: rmcp::Peer<rmcp::RoleClient>) {
    /// let call = rebuno::mcp::rmcp::RmcpCall::new(peer).timeout(std::time::Duration::from_secs(5));
    /// # drop(call); }
    /// ```
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

impl McpCall for RmcpCall {
    fn call_tool(
        &self,
        name: String,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'static, std::result::Result<Value, BoxError>> {
        let peer = self.peer.clone();
        let timeout = self.timeout;
        let traceparent = crate::context::current_step()
            .and_then(|(context, step)| crate::spans::traceparent(context.id(), &step.id));
        Box::pin(async move {
            let mut params = CallToolRequestParams::new(name.clone()).with_arguments(arguments);
            if let Some(traceparent) = &traceparent {
                // SEP-414: the call's trace context in `_meta`, over stdio and HTTP alike.
                params.set_traceparent(traceparent);
            }
            let call = peer.call_tool(params);
            let result = match timeout {
                Some(limit) => tokio::time::timeout(limit, call)
                    .await
                    .map_err(|_| format!("MCP tool {name:?} timed out after {limit:?}"))?,
                None => call.await,
            };
            let result = result.map_err(|e| format!("MCP tool {name:?} failed: {e}"))?;
            Ok(serde_json::to_value(result)?)
        })
    }
}

/// Lists every tool of the server behind `peer` (following pagination) as descriptors.
///
/// ```no_run
/// # async fn demo(peer: rmcp::Peer<rmcp::RoleClient>) -> rebuno::Result<()> {
/// let specs = rebuno::mcp::rmcp::list_tools(&peer).await?;
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`ErrorKind::Network`] when the request fails.
pub async fn list_tools(peer: &Peer<RoleClient>) -> Result<Vec<McpToolSpec>> {
    let tools = peer.list_all_tools().await.map_err(|e| {
        Error::new(ErrorKind::Network, format!("MCP tools/list failed: {e}")).with_source(e)
    })?;
    Ok(tools.iter().map(McpToolSpec::from).collect())
}

/// A connected MCP server: lists its tools and wraps them, calls going through [`RmcpCall`].
///
/// Close it with [`close`](Self::close) (a stdio server's process is killed when the client
/// is dropped inside a Tokio runtime, too).
pub struct McpClient {
    service: RunningService<RoleClient, ()>,
    timeout: Option<Duration>,
}

impl std::fmt::Debug for McpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpClient")
            .field(
                "server",
                &self
                    .service
                    .peer()
                    .peer_info()
                    .map(|i| i.server_info.clone()),
            )
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl McpClient {
    /// Connects over any rmcp client transport and performs the `initialize` handshake.
    ///
    /// ```no_run
    /// # use rmcp::{RoleClient, transport::IntoTransport};
    /// # async fn demo<T, E, A>(transport: T) -> rebuno::Result<()>
    /// # where T: IntoTransport<RoleClient, E, A>, E: std::error::Error + Send + Sync + 'static {
    /// let client = rebuno::mcp::rmcp::McpClient::connect(transport).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Network`] when the handshake fails.
    pub async fn connect<T, E, A>(transport: T) -> Result<Self>
    where
        T: IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let service = ().serve(transport).await.map_err(|e| {
            Error::new(ErrorKind::Network, format!("MCP initialize failed: {e}")).with_source(e)
        })?;
        Ok(Self {
            service,
            timeout: None,
        })
    }

    /// Spawns `command` as an MCP server speaking over its stdin and stdout (its stderr is
    /// inherited) and connects.
    ///
    /// ```no_run
    /// # async fn demo() -> rebuno::Result<()> {
    /// let mut command = tokio::process::Command::new("node");
    /// command.args(["node_modules/@modelcontextprotocol/server-everything/dist/index.js", "stdio"]);
    /// let client = rebuno::mcp::rmcp::McpClient::stdio(command).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Network`] when the process cannot start or the handshake fails.
    #[cfg(feature = "mcp-stdio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "mcp-stdio")))]
    pub async fn stdio(command: tokio::process::Command) -> Result<Self> {
        let program = command
            .as_std()
            .get_program()
            .to_string_lossy()
            .into_owned();
        let transport = rmcp::transport::TokioChildProcess::new(command).map_err(|e| {
            Error::new(
                ErrorKind::Network,
                format!("cannot start MCP server {program:?}: {e}"),
            )
            .with_source(e)
        })?;
        Self::connect(transport).await
    }

    /// Fails tool calls that have no result after `timeout`.
    ///
    /// ```no_run
    /// # async fn demo(client: rebuno::mcp::rmcp::McpClient) {
    /// let client = client.timeout(std::time::Duration::from_secs(30));
    /// # drop(client); }
    /// ```
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The rmcp peer, for everything else MCP offers (resources, prompts, ...).
    ///
    /// ```no_run
    /// # fn demo(client: &rebuno::mcp::rmcp::McpClient) {
    /// let info = client.peer().peer_info();
    /// # drop(info); }
    /// ```
    pub fn peer(&self) -> &Peer<RoleClient> {
        self.service.peer()
    }

    /// The call seam: this connection with this client's timeout.
    ///
    /// ```no_run
    /// # fn demo(client: &rebuno::mcp::rmcp::McpClient) {
    /// let call = client.call();
    /// # drop(call); }
    /// ```
    pub fn call(&self) -> RmcpCall {
        let call = RmcpCall::new(self.peer().clone());
        match self.timeout {
            Some(timeout) => call.timeout(timeout),
            None => call,
        }
    }

    /// The server's tool descriptors.
    ///
    /// ```no_run
    /// # async fn demo(client: &rebuno::mcp::rmcp::McpClient) -> rebuno::Result<()> {
    /// let names: Vec<String> = client.specs().await?.into_iter().map(|s| s.name).collect();
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`list_tools`].
    pub async fn specs(&self) -> Result<Vec<McpToolSpec>> {
        list_tools(self.peer()).await
    }

    /// Lists the server's tools and wraps them all with `options`.
    ///
    /// ```no_run
    /// # async fn demo(client: &rebuno::mcp::rmcp::McpClient) -> rebuno::Result<()> {
    /// let tools = client.tools(&rebuno::mcp::McpOptions::new().prefix("fs")).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`list_tools`].
    pub async fn tools(&self, options: &McpOptions) -> Result<Vec<Tool<Value, Value>>> {
        Ok(wrap_mcp_tools(self.specs().await?, self.call(), options))
    }

    /// Closes the connection (and stops a stdio server's process).
    ///
    /// ```no_run
    /// # async fn demo(client: rebuno::mcp::rmcp::McpClient) {
    /// client.close().await;
    /// # }
    /// ```
    pub async fn close(self) {
        if let Err(error) = self.service.cancel().await {
            tracing::debug!(%error, "MCP client task ended abnormally");
        }
    }
}
