//! rmcp's streamable-HTTP client with each request's W3C `traceparent` (the one a durable MCP
//! call puts in its `_meta`, SEP-414) also sent as an HTTP header, so a gateway or server that
//! traces from headers joins the step's trace.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use futures_util::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::{Error as SseError, Sse};

/// Same-origin 307 and 308 redirects are followed, up to this many (rmcp's default client's
/// policy, which keeps the JSON-RPC body and never replays the session to another host).
const MAX_REDIRECTS: usize = 10;

/// A reqwest client for rmcp that copies `_meta.traceparent` into a `traceparent` header.
#[derive(Clone, Debug)]
pub(crate) struct TracedHttpClient(reqwest::Client);

impl TracedHttpClient {
    /// rmcp's default client settings: no idle pooling, same-origin 307/308 redirects only.
    pub(crate) fn new() -> reqwest::Result<Self> {
        let policy = reqwest::redirect::Policy::custom(|attempt| {
            let same_origin = attempt.previous().first().is_some_and(|first| {
                let next = attempt.url();
                first.scheme() == next.scheme()
                    && first.host_str() == next.host_str()
                    && first.port_or_known_default() == next.port_or_known_default()
            });
            let keeps_body = matches!(attempt.status().as_u16(), 307 | 308);
            if same_origin && keeps_body && attempt.previous().len() <= MAX_REDIRECTS {
                attempt.follow()
            } else {
                attempt.stop()
            }
        });
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .redirect(policy)
            .build()
            .map(Self)
    }
}

/// `headers` with the message's `_meta.traceparent`, when it has a valid one.
fn with_traceparent(
    message: &ClientJsonRpcMessage,
    mut headers: HashMap<HeaderName, HeaderValue>,
) -> HashMap<HeaderName, HeaderValue> {
    let traceparent = serde_json::to_value(message).ok().and_then(|json| {
        let value = json.pointer("/params/_meta/traceparent")?.as_str()?;
        crate::spans::is_traceparent(value).then(|| HeaderValue::from_str(value).ok())?
    });
    if let Some(value) = traceparent {
        headers
            .entry(HeaderName::from_static("traceparent"))
            .or_insert(value);
    }
    headers
}

type PostResult = Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>;
type StreamResult =
    Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<reqwest::Error>>;

impl StreamableHttpClient for TracedHttpClient {
    type Error = reqwest::Error;

    fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = PostResult> + Send + '_ {
        let headers = with_traceparent(&message, custom_headers);
        self.0
            .post_message(uri, message, session_id, auth_header, headers)
    }

    fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> impl Future<Output = PostResult> + Send + '_ {
        let headers = with_traceparent(&message, custom_headers);
        self.0.post_message_with_max_sse_event_size(
            uri,
            message,
            session_id,
            auth_header,
            headers,
            max_sse_event_size,
        )
    }

    fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> impl Future<Output = PostResult> + Send + '_ {
        let headers = with_traceparent(&message, custom_headers);
        self.0.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            headers,
            limits,
        )
    }

    fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = Result<(), StreamableHttpError<reqwest::Error>>> + Send + '_ {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
    }

    fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = StreamResult> + Send + '_ {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
    }

    fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> impl Future<Output = StreamResult> + Send + '_ {
        self.0.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            max_sse_event_size,
        )
    }
}
