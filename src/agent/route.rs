//! Verifying a webhook without running it, for hosts that run each execution somewhere else.

use bytes::Bytes;

use super::Agent;
use crate::body::Body;
use crate::error::BoxError;
use crate::rt::MaybeSend;

/// Where a webhook goes, as decided by [`Agent::route`].
#[derive(Debug)]
#[non_exhaustive]
pub enum Route {
    /// A dispatch with a good signature and a well-formed payload, for `execution_id`.
    /// `request` is the webhook as received, its body read into memory: forward it to whatever
    /// runs that execution, which passes it to [`Agent::handle`] (checking it again there).
    Run {
        /// The execution the dispatch is for: the key to route on.
        execution_id: String,
        /// The webhook, head and signed body unchanged.
        request: http::Request<Bytes>,
    },
    /// Answer this at once: `401` for a bad or missing signature, `400` for a malformed
    /// payload, `405` for anything but `POST`.
    Reply(http::Response<Body>),
}

impl Agent {
    /// Checks a webhook as [`handle`](Agent::handle) does, without admitting or running it, and
    /// says which execution it is for.
    ///
    /// For hosts that run each execution in a place of its own: a front end routes a good
    /// webhook to the place for its execution (on Cloudflare, a Durable Object named after
    /// the execution), which calls [`handle`](Agent::handle). Bad webhooks are answered at
    /// the front, so they never wake anything up.
    ///
    /// ```
    /// # async fn demo(agent: rebuno::Agent, request: http::Request<rebuno::Body>) {
    /// use rebuno::Route;
    ///
    /// match agent.route(request).await {
    ///     Route::Run { execution_id, request } => {
    ///         // forward `request` to the runner for `execution_id`
    ///         # let _ = (execution_id, request);
    ///     }
    ///     Route::Reply(response) => {
    ///         // send `response` (401, 400 or 405) back to the kernel
    ///         # let _ = response;
    ///     }
    ///     _ => {}
    /// }
    /// # }
    /// ```
    pub async fn route<B>(&self, request: http::Request<B>) -> Route
    where
        B: http_body::Body<Data = Bytes> + MaybeSend + 'static,
        B::Error: Into<BoxError>,
    {
        match self.read_verified(request).await {
            Ok(webhook) => Route::Run {
                execution_id: webhook.payload.execution_id,
                request: http::Request::from_parts(webhook.parts, webhook.raw),
            },
            Err(refusal) => Route::Reply(refusal.response),
        }
    }
}
