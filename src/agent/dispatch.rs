//! Webhook → acknowledgement (+ background run). Never spawns; the host keeps the run alive.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use futures_util::future::{Abortable, Either, select};
use http::{Method, StatusCode};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde_json::json;
use tracing::Instrument;

use super::Agent;
use super::handler::ErasedHandler;
use super::refusals;
use super::registry::{Admission, Ticket};
use super::run::run_dispatch;
use crate::body::Body;
use crate::error::BoxError;
use crate::kernel::Lease;
use crate::rt::{Deadline, MaybeSend, Task};
use crate::signing::verify_webhook;
use crate::wire::WebhookPayload;

/// The largest webhook body accepted (`413` past it); real ones are about 200 bytes.
const MAX_WEBHOOK_BODY: usize = 64 * 1024;

/// How long a webhook body may take to arrive (`408` past it), so a client trickling bytes
/// cannot hold a request open.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// The shortest lease accepted. The kernel floors leases at 10 s; anything under a second
/// would drive back-to-back heartbeats.
const MIN_LEASE: Duration = Duration::from_secs(1);

/// The outcome of [`Agent::handle`]: the response to send now, and the run to keep alive after.
#[derive(Debug)]
#[non_exhaustive]
pub struct Dispatch {
    /// `200` for an accepted (or repeated) dispatch, `4xx`/`5xx` otherwise.
    pub response: http::Response<Body>,
    /// The execution run. The host must drive it to completion after sending the response
    /// (`tokio::spawn`, `ctx.wait_until`, a Lambda extension, ...); dropping it cancels the run,
    /// and the kernel re-delivers once the lease expires.
    pub background: Option<Task>,
}

impl Dispatch {
    fn reply(status: StatusCode, code: &str, message: &str) -> Self {
        let body = json!({ "code": code, "message": message }).to_string();
        let response = http::Response::builder()
            .status(status)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Body::from(body));
        Self {
            response: response.unwrap_or_default(),
            background: None,
        }
    }

    fn ack(background: Option<Task>) -> Self {
        Self {
            response: http::Response::new(Body::empty()),
            background,
        }
    }
}

impl Agent {
    /// Verifies, parses and acknowledges a webhook without spawning anything.
    ///
    /// A bad or missing signature gets `401`, a malformed payload `400`, a body over 64 KiB
    /// `413`, a body that takes over 10 s to arrive `408`, a non-POST `405`, a webhook after
    /// [`close`](Agent::close) `503`. Otherwise `200`, with the run in
    /// [`Dispatch::background`] unless the same attempt is already running.
    pub async fn handle<B>(&self, request: http::Request<B>) -> Dispatch
    where
        B: http_body::Body<Data = Bytes> + MaybeSend + 'static,
        B::Error: Into<BoxError>,
    {
        let arrived = crate::observe::Arrival::now();
        match self.read_verified(request).await {
            Ok(webhook) => {
                let deadline = webhook.parts.extensions.get::<Deadline>().copied();
                let dispatch = self.accept(webhook.payload, webhook.lease, deadline);
                if dispatch.background.is_some() {
                    arrived.acked();
                }
                dispatch
            }
            Err(refusal) => refusal,
        }
    }

    /// Reads the body, checks the signature and parses the payload: the part of [`handle`]
    /// that [`route`](Agent::route) shares. `Err` is the answer for a bad webhook.
    ///
    /// [`handle`]: Agent::handle
    pub(super) async fn read_verified<B>(
        &self,
        request: http::Request<B>,
    ) -> Result<VerifiedWebhook, Dispatch>
    where
        B: http_body::Body<Data = Bytes> + MaybeSend + 'static,
        B::Error: Into<BoxError>,
    {
        if request.method() != Method::POST {
            return Err(Dispatch::reply(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "webhooks are POST",
            ));
        }
        let (parts, body) = request.into_parts();
        let raw = self.read_body(body).await?;
        let header = parts.headers.get("Rebuno-Signature").map(|v| v.as_bytes());
        if !self.signed_by_us(&raw, header) {
            self.log_unsigned(header.is_some());
            return Err(Dispatch::reply(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "bad or missing signature",
            ));
        }
        match parse(&raw) {
            Ok((payload, lease)) => Ok(VerifiedWebhook {
                parts,
                raw,
                payload,
                lease,
            }),
            Err(message) => {
                self.log_malformed(&message);
                Err(Dispatch::reply(
                    StatusCode::BAD_REQUEST,
                    "validation_error",
                    &message,
                ))
            }
        }
    }

    /// Logs a `401` with what to check: at once the first time, then at most once a minute.
    fn log_unsigned(&self, had_signature: bool) {
        let now = self.inner.runtime.unix_millis();
        let Some(quiet) = self.inner.refusals.unsigned.admit(now) else {
            return tracing::debug!(agent_id = self.id(), "webhook refused (401)");
        };
        let since = refusals::since(quiet);
        if had_signature {
            tracing::warn!(
                agent_id = self.id(),
                "webhook refused (401): its Rebuno-Signature does not match this agent's \
                 secret; check that REBUNO_AGENT_SECRET is the secret the kernel has for agent \
                 `{}` (and REBUNO_AGENT_SECRET_PREVIOUS, during a rotation){since}",
                self.id()
            );
        } else {
            tracing::warn!(
                agent_id = self.id(),
                "webhook refused (401): no Rebuno-Signature header; the kernel signs every \
                 dispatch, so this request came from something else, or a proxy dropped the \
                 header{since}"
            );
        }
    }

    /// Logs a `400` for a webhook signed with the secret that is not a dispatch, with what was
    /// wrong: at once the first time, then at most once a minute.
    fn log_malformed(&self, problem: &str) {
        let now = self.inner.runtime.unix_millis();
        let Some(quiet) = self.inner.refusals.malformed.admit(now) else {
            return tracing::debug!(agent_id = self.id(), problem, "webhook refused (400)");
        };
        tracing::warn!(
            agent_id = self.id(),
            "webhook refused (400): signed with this agent's secret but not a dispatch: \
             {problem}; is the sender a Rebuno kernel speaking /v0?{}",
            refusals::since(quiet)
        );
    }

    /// Reads the whole body, at most [`MAX_WEBHOOK_BODY`] bytes within [`BODY_TIMEOUT`]. A body
    /// that is already complete (Lambda, Workers, a buffered request) never starts a timer.
    async fn read_body<B>(&self, body: B) -> Result<Bytes, Dispatch>
    where
        B: http_body::Body<Data = Bytes> + MaybeSend + 'static,
        B::Error: Into<BoxError>,
    {
        let mut collect = std::pin::pin!(Limited::new(body, MAX_WEBHOOK_BODY).collect());
        let collected = match (&mut collect).now_or_never() {
            Some(collected) => collected,
            None => {
                let timer = self.inner.runtime.sleep(BODY_TIMEOUT);
                match select(collect, timer).await {
                    Either::Left((collected, _)) => collected,
                    Either::Right(((), _)) => {
                        return Err(Dispatch::reply(
                            StatusCode::REQUEST_TIMEOUT,
                            "request_timeout",
                            "the webhook body did not arrive within 10 s",
                        ));
                    }
                }
            }
        };
        match collected {
            Ok(collected) => Ok(collected.to_bytes()),
            Err(error) if error.is::<LengthLimitError>() => Err(Dispatch::reply(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "webhook bodies are at most 64 KiB",
            )),
            Err(_) => Err(Dispatch::reply(
                StatusCode::BAD_REQUEST,
                "validation_error",
                "unreadable body",
            )),
        }
    }

    /// Whether `header` signs `raw` with the current secret or, during a rotation, the
    /// previous one.
    fn signed_by_us(&self, raw: &[u8], header: Option<&[u8]>) -> bool {
        verify_webhook(&self.inner.secret, raw, header).is_ok()
            || self
                .inner
                .previous_secret
                .as_ref()
                .is_some_and(|previous| verify_webhook(previous, raw, header).is_ok())
    }

    /// Admits a verified dispatch and builds its background run.
    fn accept(
        &self,
        payload: WebhookPayload,
        lease: Lease,
        deadline: Option<Deadline>,
    ) -> Dispatch {
        if self.is_closed() {
            return Dispatch::reply(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "agent is closing",
            );
        }
        let handler = Arc::clone(&self.inner.handler);
        match self.inner.registry.admit(&payload.execution_id, &lease) {
            Admission::Duplicate => Dispatch::ack(None),
            Admission::Run(ticket) => {
                Dispatch::ack(Some(self.background(handler, ticket, lease, deadline)))
            }
        }
    }

    fn background(
        &self,
        handler: Arc<dyn ErasedHandler>,
        ticket: Ticket,
        lease: Lease,
        deadline: Option<Deadline>,
    ) -> Task {
        let span = tracing::info_span!(
            "rebuno.dispatch",
            agent_id = self.id(),
            execution_id = ticket.execution_id.as_str(),
            dispatch_id = lease.dispatch_id.as_str(),
            attempt = lease.attempt,
            outcome = tracing::field::Empty,
            failure_reason = tracing::field::Empty,
            stop = tracing::field::Empty,
        );
        let agent = self.clone();
        // Whether the run ends, is superseded or is dropped by its host unfinished, the
        // registry forgets it: `in_flight`, `join` and `close` never wait on a dropped run.
        let finished = Finishing {
            agent: self.clone(),
            execution_id: ticket.execution_id.clone(),
            serial: ticket.serial,
        };
        let run = async move {
            let _finished = finished;
            agent.publish_metadata_once().await;
            let run = run_dispatch(
                agent.id(),
                agent.inner.kernel.clone(),
                &*handler,
                &ticket.execution_id,
                lease,
                deadline,
            );
            if Abortable::new(run, ticket.abort).await.is_err() {
                crate::spans::record_stop(crate::ErrorKind::LeaseSuperseded);
                tracing::info!("run stopped: superseded by a newer dispatch");
            }
        }
        .instrument(span);
        // The run's span closes when `run` is dropped, so it is buffered before the export. A
        // combinator, not an `async move` block awaiting `run`, which would hold it twice.
        Task::new(run.then(move |()| crate::observe::after_run(deadline)))
    }

    /// Publishes the description and input schema on the first dispatch; a failure is retried on
    /// the next one and never blocks the run for long.
    async fn publish_metadata_once(&self) {
        let config = &self.inner.config;
        if (config.description.is_none()
            && config.input_schema.is_none()
            && config.output_schema.is_none())
            || self.inner.metadata_published.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let metadata = json!({ "description": config.description, "input_schema": config.input_schema, "output_schema": config.output_schema });
        if let Err(error) = self
            .inner
            .kernel
            .set_metadata(&config.agent_id, &metadata)
            .await
        {
            let again = error.is_retryable();
            tracing::warn!(
                error = crate::error::error_chain(&error),
                "could not publish this agent's description and schemas to the kernel{}",
                if again {
                    "; trying again on the next dispatch"
                } else {
                    ""
                }
            );
            if again {
                self.inner
                    .metadata_published
                    .store(false, Ordering::Release);
            }
        }
    }
}

/// Hands a run's registry entry back when the run ends or is dropped.
struct Finishing {
    agent: Agent,
    execution_id: String,
    serial: u64,
}

impl Drop for Finishing {
    fn drop(&mut self) {
        self.agent
            .inner
            .registry
            .finish(&self.execution_id, self.serial);
    }
}

/// A webhook whose signature checked out and whose payload parsed.
#[derive(Debug)]
pub(super) struct VerifiedWebhook {
    /// The request head as received (headers, extensions such as a [`Deadline`]).
    pub(super) parts: http::request::Parts,
    /// The body exactly as signed.
    pub(super) raw: Bytes,
    pub(super) payload: WebhookPayload,
    pub(super) lease: Lease,
}

/// Parses the webhook body into its payload and lease.
fn parse(raw: &[u8]) -> Result<(WebhookPayload, Lease), String> {
    // serde accepts a JSON array for a struct too; the protocol's payload is an object.
    if raw.trim_ascii_start().first() != Some(&b'{') {
        return Err("malformed webhook payload: expected a JSON object".to_owned());
    }
    let payload: WebhookPayload =
        serde_json::from_slice(raw).map_err(|e| format!("malformed webhook payload: {e}"))?;
    if payload.execution_id.is_empty()
        || payload.dispatch_id.is_empty()
        || payload.dispatch_attempt == 0
    {
        return Err(
            "webhook payload needs execution_id, dispatch_id and dispatch_attempt > 0".to_owned(),
        );
    }
    let timeout = Duration::try_from_secs_f64(payload.lease_timeout_seconds)
        .ok()
        .filter(|t| *t >= MIN_LEASE)
        .ok_or_else(|| "lease_timeout_seconds must be a number of at least 1".to_owned())?;
    let lease = Lease {
        dispatch_id: payload.dispatch_id.clone(),
        attempt: payload.dispatch_attempt,
        timeout,
    };
    Ok((payload, lease))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run waiting in its handler keeps its task's future (the handler's is boxed apart).
    /// Measured on 2026-12-04: 3,760 bytes when the task's `async` block awaited the captured
    /// run (holding it twice) and the kernel round trips sat inline; 936 since (debug build).
    #[test]
    fn a_run_waiting_in_its_handler_holds_little() {
        let secret = "a-test-secret";
        let agent = Agent::builder("sizes")
            .secret(secret)
            .base_url("http://127.0.0.1:9")
            .handler(|input: serde_json::Value| async move { Ok::<_, crate::HandlerError>(input) })
            .build()
            .unwrap();
        let body = r#"{"execution_id":"e","dispatch_id":"d","dispatch_attempt":1,"lease_timeout_seconds":60}"#;
        let signature =
            crate::signing::sign_webhook(&crate::secret::Secret::new(secret), body.as_bytes());
        let request = http::Request::post("/")
            .header("Rebuno-Signature", signature)
            .body(http_body_util::Full::new(Bytes::from(body)))
            .unwrap();
        let dispatch = agent.handle(request).now_or_never().unwrap();
        assert_eq!(dispatch.response.status(), StatusCode::OK);
        let size = dispatch.background.unwrap().future_size();
        println!("a run's task: {size} bytes");
        assert!(size <= 1200, "a run's task holds {size} bytes");
    }

    #[test]
    fn payloads_need_every_field() {
        let good = br#"{"execution_id":"e","dispatch_id":"d","dispatch_attempt":2,"lease_timeout_seconds":600.5}"#;
        let (payload, lease) = parse(good).unwrap();
        assert_eq!((payload.execution_id.as_str(), lease.attempt), ("e", 2));
        assert_eq!(lease.timeout, Duration::from_millis(600_500));
        for bad in [
            &br#"{"execution_id":"e","dispatch_id":"d"}"#[..],
            br#"{"execution_id":"","dispatch_id":"d","dispatch_attempt":1,"lease_timeout_seconds":1}"#,
            br#"{"execution_id":"e","dispatch_id":"d","dispatch_attempt":0,"lease_timeout_seconds":1}"#,
            br#"{"execution_id":"e","dispatch_id":"d","dispatch_attempt":1,"lease_timeout_seconds":-1}"#,
            b"not json",
        ] {
            assert!(parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
