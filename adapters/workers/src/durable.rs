//! Durable Object mode, at the front: each checked webhook goes to the Durable Object of its
//! execution, which runs it free of the 30-second `waitUntil` cut (see `object.rs`).

use http::StatusCode;
use rebuno::{Agent, Body, Route};
use worker::{Env, HttpRequest};

use crate::serve::health;

/// The header in which the Durable Object names itself (its id in hex) on the acknowledgement,
/// for logs and for checking that an execution's dispatches share one object.
pub const OBJECT_HEADER: &str = "rebuno-durable-object";

/// Serves one `fetch` event of the Worker in Durable Object mode: checks the webhook and
/// forwards it to the Durable Object named after its execution, in the namespace bound as
/// `binding`, whose acknowledgement (with the object's id in [`OBJECT_HEADER`]) it returns.
///
/// The object runs the dispatch with [`serve_in_durable_object`](crate::serve_in_durable_object),
/// kept alive by its alarm heartbeat ([`alarm_in_durable_object`](crate::alarm_in_durable_object)).
/// Unlike a Worker's, a Durable Object's `waitUntil` work is not cut off 30 s after the response,
/// so a run there is not sliced by deadlines and a long LLM stream is read to its end. All dispatches of one execution reach the same object, where a
/// newer dispatch supersedes an older one as it does in any agent.
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
    let stub = env
        .durable_object(binding)?
        .id_from_name(execution_id)?
        .get_stub()?;
    let request = worker::Request::try_from(request.map(Body::from))?;
    let mut answer = stub.fetch_with_request(request).await?;
    let status = StatusCode::from_u16(answer.status_code()).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type = answer.headers().get("content-type")?;
    let object = answer.headers().get(OBJECT_HEADER)?;
    let body = answer.bytes().await?;
    let mut response = http::Response::new(Body::from(bytes::Bytes::from(body)));
    *response.status_mut() = status;
    if let Some(value) = content_type.and_then(|v| http::HeaderValue::from_str(&v).ok()) {
        response
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, value);
    }
    if let Some(value) = object.and_then(|v| http::HeaderValue::from_str(&v).ok()) {
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
