//! [`StreamableHttp`]: a small MCP client over the streamable HTTP transport, on the SDK's own
//! [`Transport`], so it runs wherever the SDK does (Cloudflare Workers included).
//!
//! It speaks the part of the protocol that durable tools need: the `initialize` handshake,
//! `tools/list` (every page) and `tools/call`, with the session and version headers the
//! transport asks for. Answers may be one JSON body or an event stream; on a stream it answers
//! the server's `ping` and turns down any other server request (it declares no client
//! capabilities). When the server ends the session (`404`), it initializes a new one and sends
//! the request again. A stream that ends before its response is resumed (`GET` with
//! `Last-Event-ID`, after the server's `retry` delay) when the call is made inside an execution.
//! Not covered: server-initiated streams (a standalone `GET`), sampling, elicitation and roots;
//! use `mcp::rmcp` (native) for those.
//!
//! A call dropped before its answer (its dispatch superseded) is cancelled on the server with
//! `notifications/cancelled`. Connections are not durable: each dispatch may connect again, and
//! replayed steps never reach the server.

mod answer;
mod message;
mod resume;
mod session;

use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value};

use self::answer::Failure;
use self::session::{Negotiated, Session};
use super::{McpCall, McpOptions, McpToolSpec, wrap_mcp_tools};
use crate::error::{BoxError, Error, ErrorKind, Result};
use crate::rt::BoxFuture;
use crate::tool::Tool;
use crate::transport::{SharedTransport, Transport};

/// How long one request may take, answer included, unless [`StreamableHttpBuilder::timeout`]
/// says otherwise: tool calls can be slow.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Most `tools/list` pages read, against a server whose cursors never end.
const MAX_PAGES: usize = 1000;

/// A connected MCP server over streamable HTTP.
///
/// ```no_run
/// # async fn demo() -> rebuno::Result<()> {
/// use rebuno::Idempotency;
/// use rebuno::mcp::{McpOptions, StreamableHttp};
///
/// let server = StreamableHttp::connect("http://127.0.0.1:8000/mcp").await?;
/// let tools = server
///     .tools(&McpOptions::new().prefix("fx").tool_idempotency("record", Idempotency::AtMostOnce))
///     .await?;
/// // hand `tools` to the agent's handler; end the session when done
/// server.close().await;
/// # Ok(()) }
/// ```
///
/// On Cloudflare Workers, send through the Workers `fetch`:
///
/// ```ignore
/// let server = StreamableHttp::builder(url)
///     .transport(rebuno_workers::FetchTransport::new())
///     .connect()
///     .await?;
/// ```
#[derive(Clone)]
pub struct StreamableHttp {
    session: Arc<Session>,
}

impl fmt::Debug for StreamableHttp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let negotiated = self.session.negotiated();
        f.debug_struct("StreamableHttp")
            .field("endpoint", &self.session.endpoint)
            .field("protocol_version", &negotiated.protocol_version)
            .field("server_info", &negotiated.server_info)
            .finish_non_exhaustive()
    }
}

impl StreamableHttp {
    /// Connects to the MCP endpoint at `url` with the default transport and performs the
    /// `initialize` handshake.
    ///
    /// ```no_run
    /// # async fn demo() -> rebuno::Result<()> {
    /// let server = rebuno::mcp::StreamableHttp::connect("http://127.0.0.1:8000/mcp").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`StreamableHttpBuilder::connect`].
    pub async fn connect(url: impl Into<String>) -> Result<Self> {
        Self::builder(url).connect().await
    }

    /// A client for the endpoint at `url`, to configure before connecting.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let builder = rebuno::mcp::StreamableHttp::builder("https://mcp.example.com/mcp")
    ///     .header("authorization", "Bearer sk-example")
    ///     .timeout(Duration::from_secs(30));
    /// assert!(!format!("{builder:?}").contains("sk-example"));
    /// ```
    pub fn builder(url: impl Into<String>) -> StreamableHttpBuilder {
        StreamableHttpBuilder {
            url: url.into(),
            transport: None,
            headers: HeaderMap::new(),
            header_error: None,
            timeout: DEFAULT_TIMEOUT,
            client_name: "rebuno-rs".to_owned(),
            client_version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }

    /// The protocol version the server settled on.
    pub fn protocol_version(&self) -> String {
        self.session
            .negotiated()
            .protocol_version
            .unwrap_or_default()
    }

    /// The server's `serverInfo` (`name`, `version`, ...) from its `initialize` answer.
    pub fn server_info(&self) -> Value {
        self.session.negotiated().server_info
    }

    /// Sends any request of the protocol (`resources/read`, `prompts/get`, ...) and returns
    /// its result.
    ///
    /// ```no_run
    /// # async fn demo(server: rebuno::mcp::StreamableHttp) -> rebuno::Result<()> {
    /// let prompts = server.request("prompts/list", None).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Network`] or [`ErrorKind::Timeout`] when no answer came,
    /// [`ErrorKind::Api`] for a JSON-RPC error, [`ErrorKind::Protocol`] for an answer that
    /// is not a JSON-RPC response.
    pub async fn request(&self, method: &str, params: Option<Value>) -> Result<Value> {
        self.session
            .request(method, params, None, None)
            .await
            .map_err(|failure| failure.into_error(method))
    }

    /// The server's tool descriptors, every page of `tools/list`.
    ///
    /// # Errors
    ///
    /// As [`request`](Self::request); [`ErrorKind::Serde`] for a malformed descriptor.
    pub async fn specs(&self) -> Result<Vec<McpToolSpec>> {
        let mut specs = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let page = self
                .request("tools/list", message::list_params(cursor.as_deref()))
                .await?;
            specs.extend(McpToolSpec::list_from_json(&page)?);
            cursor = page
                .get("nextCursor")
                .and_then(Value::as_str)
                .map(str::to_owned);
            if cursor.is_none() {
                return Ok(specs);
            }
        }
        Err(Error::new(
            ErrorKind::Protocol,
            format!("MCP tools/list went on for more than {MAX_PAGES} pages"),
        ))
    }

    /// Lists the server's tools and wraps them all with `options`, calls going through
    /// [`call`](Self::call).
    ///
    /// # Errors
    ///
    /// As [`specs`](Self::specs).
    pub async fn tools(&self, options: &McpOptions) -> Result<Vec<Tool<Value, Value>>> {
        Ok(wrap_mcp_tools(self.specs().await?, self.call(), options))
    }

    /// The call seam for [`wrap_mcp_tools`]: `tools/call` on this session.
    pub fn call(&self) -> StreamableHttpCall {
        StreamableHttpCall {
            session: Arc::clone(&self.session),
        }
    }

    /// Ends the session on the server (`DELETE`), when it keeps one. Calls still held by
    /// wrapped tools start a new session if they are made after this.
    pub async fn close(self) {
        self.session.end().await;
    }
}

/// `tools/call` over a [`StreamableHttp`] session: an [`McpCall`].
///
/// A call made inside a step sends the step's W3C `traceparent` in its `_meta` and as an HTTP
/// header. A JSON-RPC error or a missing answer fails the call (and so the step); an
/// `isError: true` result is a result.
#[derive(Clone)]
pub struct StreamableHttpCall {
    session: Arc<Session>,
}

impl fmt::Debug for StreamableHttpCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamableHttpCall")
            .field("endpoint", &self.session.endpoint)
            .finish_non_exhaustive()
    }
}

impl McpCall for StreamableHttpCall {
    fn call_tool(
        &self,
        name: String,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'static, std::result::Result<Value, BoxError>> {
        let session = Arc::clone(&self.session);
        let step = crate::context::current_step();
        let traceparent = step
            .as_ref()
            .and_then(|(context, step)| crate::spans::traceparent(context.id(), &step.id));
        let runtime = step.map(|(context, _)| context.kernel().runtime().clone());
        Box::pin(async move {
            let params = message::call_params(&name, arguments, traceparent.as_deref());
            let abandon = AbandonGuard::new(&session, runtime);
            let result = session
                .request(
                    "tools/call",
                    Some(params),
                    traceparent.as_deref(),
                    Some(&abandon.sent),
                )
                .await;
            abandon.disarm();
            result.map_err(|failure: Failure| {
                BoxError::from(failure.into_error(&format!("tools/call {name:?}")))
            })
        })
    }
}

/// Cancels a `tools/call` on the server when the call is dropped before its answer (its
/// dispatch superseded or cut off), with `notifications/cancelled` sent in a task of the
/// execution's runtime. Outside an execution there is no runtime to send it from.
struct AbandonGuard {
    session: Arc<Session>,
    runtime: Option<crate::rt::Runtime>,
    /// The id of the request on the wire, 0 until it is sent.
    sent: AtomicU64,
    armed: bool,
}

impl AbandonGuard {
    fn new(session: &Arc<Session>, runtime: Option<crate::rt::Runtime>) -> Self {
        Self {
            session: Arc::clone(session),
            runtime,
            sent: AtomicU64::new(0),
            armed: true,
        }
    }

    /// The call ended with an answer or a failure: nothing to cancel.
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for AbandonGuard {
    fn drop(&mut self) {
        let id = self.sent.load(std::sync::atomic::Ordering::Acquire);
        let Some(runtime) = self.runtime.as_ref().filter(|_| self.armed && id != 0) else {
            return;
        };
        let session = Arc::clone(&self.session);
        runtime.spawn(crate::rt::Task::new(async move {
            session.cancel(id, "the call was abandoned").await;
        }));
    }
}

/// Configures a [`StreamableHttp`] client; see [`StreamableHttp::builder`].
pub struct StreamableHttpBuilder {
    url: String,
    transport: Option<SharedTransport>,
    headers: HeaderMap,
    header_error: Option<String>,
    timeout: Duration,
    client_name: String,
    client_version: String,
}

impl fmt::Debug for StreamableHttpBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamableHttpBuilder")
            .field("url", &self.url)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl StreamableHttpBuilder {
    /// Sends through `transport` (by default the SDK's client for LLM providers: hyper on
    /// native targets, the JS `fetch` through reqwest on wasm32).
    ///
    /// ```ignore
    /// let builder = rebuno::mcp::StreamableHttp::builder(url).transport(rebuno_workers::FetchTransport::new());
    /// ```
    #[must_use]
    pub fn transport(mut self, transport: impl Transport + 'static) -> Self {
        self.transport = Some(SharedTransport::new(transport));
        self
    }

    /// Adds a header to every request, for example `authorization`. Its value is kept out of
    /// `Debug` and logs. An invalid name or value fails [`connect`](Self::connect).
    #[must_use]
    pub fn header(mut self, name: &str, value: &str) -> Self {
        match (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            (Ok(name), Ok(mut value)) => {
                value.set_sensitive(true);
                self.headers.insert(name, value);
            }
            _ => {
                self.header_error
                    .get_or_insert_with(|| format!("invalid MCP request header {name:?}"));
            }
        }
        self
    }

    /// Bounds each request, answer included (default 5 minutes).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How the client names itself in `initialize` (default `rebuno-rs` and the SDK's version).
    #[must_use]
    pub fn client_info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.client_name = name.into();
        self.client_version = version.into();
        self
    }

    /// Connects: the `initialize` handshake and `notifications/initialized`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Config`] for a bad URL or header, or no transport; then as
    /// [`StreamableHttp::request`], and [`ErrorKind::Protocol`] when the server speaks a
    /// protocol version this client does not (it speaks 2025-03-26 to 2025-11-25).
    pub async fn connect(self) -> Result<StreamableHttp> {
        if let Some(message) = self.header_error {
            return Err(Error::new(ErrorKind::Config, message));
        }
        let endpoint: http::Uri = self.url.parse().map_err(|e| {
            Error::new(
                ErrorKind::Config,
                format!("invalid MCP endpoint {:?}", self.url),
            )
            .with_source(e)
        })?;
        let transport = match self.transport {
            Some(transport) => transport,
            None => default_transport()?,
        };
        let session = Arc::new(Session {
            endpoint,
            transport,
            headers: self.headers,
            timeout: self.timeout,
            client_name: self.client_name,
            client_version: self.client_version,
            negotiated: Mutex::new(Negotiated::default()),
            next_id: AtomicU64::new(1),
        });
        session
            .initialize()
            .await
            .map_err(|failure| failure.into_error("initialize"))?;
        Ok(StreamableHttp { session })
    }
}

/// The SDK's provider transport, when one is compiled in.
fn default_transport() -> Result<SharedTransport> {
    match crate::transport::default_transport(crate::transport::Peer::Provider) {
        Some(Ok(transport)) => Ok(transport),
        Some(Err(error)) => Err(Error::new(
            ErrorKind::Config,
            "could not create the HTTP client for MCP",
        )
        .with_source(error)),
        None => Err(Error::new(
            ErrorKind::Config,
            "no HTTP client is compiled in: pass one with StreamableHttpBuilder::transport",
        )),
    }
}
