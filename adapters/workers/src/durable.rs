//! Durable Object mode: each execution runs in a Durable Object of its own, free of the
//! 30-second `waitUntil` cut.

use http::StatusCode;
use rebuno::{Agent, Body, Route};
use worker::{Env, HttpRequest};

use crate::serve::health;

/// The header of the acknowledgement that names the Durable Object the dispatch went to (its
/// id in hex), for logs and for checking that an execution's dispatches share one object.
pub const OBJECT_HEADER: &str = "rebuno-durable-object";

/// Serves one `fetch` event of the Worker in Durable Object mode: checks the webhook and
/// forwards it to the Durable Object named after its execution, in the namespace bound as
/// `binding`, whose acknowledgement it returns with that object's id in the
/// [`OBJECT_HEADER`] header.
///
/// The object runs the dispatch with [`serve_in_durable_object`]. A Durable Object is not cut
/// off 30 s after its response as `waitUntil` work is: it stays alive while it has I/O pending
/// (the kernel calls, the tools, a model's stream), so a run there is not sliced by deadlines
/// and a long LLM stream is read to its end. All dispatches of one execution reach the same
/// object, one at a time in arrival order, where a newer dispatch supersedes an older one as it
/// does in any agent.
///
/// A bad webhook is answered here (`401`, `400`, `405`) and wakes no object. When the object
/// cannot be reached the kernel gets `503` and delivers again, so nothing is lost.
///
/// # Errors
///
/// None in practice: every failure is an HTTP answer. The `Result` matches `#[event(fetch)]`.
pub async fn forward_to_durable_object(
    agent: &Agent,
    request: HttpRequest,
    env: &Env,
    binding: &str,
) -> worker::Result<http::Response<Body>> {
    if request.method() == http::Method::GET || request.method() == http::Method::HEAD {
        return Ok(health());
    }
    match agent.route(request).await {
        Route::Reply(response) => Ok(response),
        Route::Run {
            execution_id,
            request,
        } => Ok(forward(env, binding, &execution_id, request)
            .await
            .unwrap_or_else(|error| {
                tracing::warn!(%error, execution_id, "forwarding the dispatch to its Durable Object failed");
                unavailable()
            })),
        _ => Ok(unavailable()),
    }
}

/// Sends the verified webhook to the object for `execution_id` and reads its answer.
async fn forward(
    env: &Env,
    binding: &str,
    execution_id: &str,
    request: http::Request<bytes::Bytes>,
) -> worker::Result<http::Response<Body>> {
    let namespace = env.durable_object(binding)?;
    let id = namespace.id_from_name(execution_id)?;
    let stub = id.get_stub()?;
    let request = worker::Request::try_from(request.map(Body::from))?;
    let mut answer = stub.fetch_with_request(request).await?;
    let status = StatusCode::from_u16(answer.status_code()).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type = answer.headers().get("content-type")?;
    let body = answer.bytes().await?;
    let mut response = http::Response::new(Body::from(bytes::Bytes::from(body)));
    *response.status_mut() = status;
    if let Some(value) = content_type.and_then(|v| http::HeaderValue::from_str(&v).ok()) {
        response
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, value);
    }
    if let Ok(value) = http::HeaderValue::from_str(&id.to_string()) {
        response.headers_mut().insert(OBJECT_HEADER, value);
    }
    Ok(response)
}

fn unavailable() -> http::Response<Body> {
    let body =
        r#"{"code":"unavailable","message":"the execution's Durable Object is unreachable"}"#;
    let mut response = http::Response::new(Body::from(body));
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// Serves a dispatch forwarded by [`forward_to_durable_object`], inside the Durable Object's
/// `fetch`: checks it again, acknowledges it, and runs it in the background of the object with
/// no deadline, since nothing cuts the object off while the run has I/O pending.
///
/// ```ignore
/// use worker::{DurableObject, Env, Request, Response, Result, State, durable_object};
///
/// #[durable_object(fetch)]
/// pub struct RebunoRun {
///     env: Env,
/// }
///
/// impl DurableObject for RebunoRun {
///     fn new(_state: State, env: Env) -> Self {
///         Self { env }
///     }
///
///     async fn fetch(&self, request: Request) -> Result<Response> {
///         let agent = agent(&self.env).map_err(|e| worker::Error::RustError(e.to_string()))?;
///         rebuno_workers::serve_in_durable_object(&agent, request).await
///     }
/// }
/// ```
///
/// # Errors
///
/// When the request or the answer cannot be converted between `worker` and `http` types.
pub async fn serve_in_durable_object(
    agent: &Agent,
    request: worker::Request,
) -> worker::Result<worker::Response> {
    let request = HttpRequest::try_from(request)?;
    let dispatch = agent.handle(request).await;
    if let Some(task) = dispatch.background {
        // `waitUntil` means nothing in a Durable Object; its pending I/O keeps it alive.
        wasm_bindgen_futures::spawn_local(task);
    }
    worker::Response::try_from(dispatch.response)
}
