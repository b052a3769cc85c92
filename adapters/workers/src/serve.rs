//! The `fetch` entry point and the agent built from the Worker's bindings.

use std::panic::AssertUnwindSafe;

use http::{Method, StatusCode};
use rebuno::rt::{Clock, Task};
use rebuno::{Agent, AgentBuilder, Body};
use wasm_bindgen::JsValue;
use worker::{Context, Env, HttpRequest};

use crate::{DateClock, FetchTransport, Limits, SECRET_VAR, URL_VAR, runtime};

/// Serves one `fetch` event: acknowledges the webhook and keeps its run alive with
/// `ctx.wait_until`, bounded by [`Limits::from_env`].
///
/// # Errors
///
/// Only when the runtime refuses `ctx.wait_until`; every webhook problem is an HTTP answer
/// (`401` bad signature, `400` bad payload, `503` after [`Agent::close`]).
pub async fn fetch(
    agent: &Agent,
    request: HttpRequest,
    env: &Env,
    ctx: &Context,
) -> worker::Result<http::Response<Body>> {
    fetch_with(agent, request, ctx, Limits::from_env(env)).await
}

/// [`fetch`] with explicit [`Limits`].
///
/// # Errors
///
/// As [`fetch`].
pub async fn fetch_with(
    agent: &Agent,
    mut request: HttpRequest,
    ctx: &Context,
    limits: Limits,
) -> worker::Result<http::Response<Body>> {
    if request.method() == Method::GET || request.method() == Method::HEAD {
        return Ok(health());
    }
    let now = DateClock.unix_millis();
    request.extensions_mut().insert(limits.deadline(now));
    let dispatch = agent.handle(request).await;
    if let Some(task) = dispatch.background {
        keep_alive(ctx, task)?;
    }
    Ok(dispatch.response)
}

/// Hands `task` to `ctx.wait_until` (without `worker::Context::wait_until`'s panic).
fn keep_alive(ctx: &Context, task: Task) -> worker::Result<()> {
    ctx.as_ref()
        .wait_until(&task_promise(task))
        .map_err(worker::Error::from)
}

/// `task` (a run, or a run and what follows it) as a JS promise, for a `waitUntil`.
pub(crate) fn task_promise(task: impl Future<Output = ()> + 'static) -> js_sys::Promise {
    wasm_bindgen_futures::future_to_promise(AssertUnwindSafe(async move {
        task.await;
        Ok(JsValue::UNDEFINED)
    }))
}

pub(crate) fn health() -> http::Response<Body> {
    let mut response = http::Response::new(Body::from("ok"));
    *response.status_mut() = StatusCode::OK;
    response
}

/// An [`AgentBuilder`] for `agent_id` set up for Workers: the [`runtime()`], the
/// [`FetchTransport`], and the kernel URL and secret from the Worker's `REBUNO_URL` var and
/// `REBUNO_AGENT_SECRET` secret when they are bound.
///
/// ```no_run
/// # fn demo(env: &worker::Env) -> rebuno::Result<rebuno::Agent> {
/// let agent = rebuno_workers::agent_builder("hello", env)
///     .description("Greets people")
///     .handler(|name: String| async move { Ok::<_, rebuno::HandlerError>(format!("hello, {name}")) })
///     .build()?;
/// # Ok(agent) }
/// ```
pub fn agent_builder(agent_id: impl Into<String>, env: &Env) -> AgentBuilder {
    let builder = Agent::builder(agent_id)
        .runtime(runtime())
        .transport(FetchTransport::new());
    let builder = match env.var(URL_VAR) {
        Ok(url) => builder.base_url(url.to_string()),
        Err(_) => builder,
    };
    match env.secret(SECRET_VAR).or_else(|_| env.var(SECRET_VAR)) {
        Ok(secret) => builder.secret(secret.to_string()),
        Err(_) => builder,
    }
}
