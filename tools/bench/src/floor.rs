//! The protocol floor: the least an agent process must do for the same workload, with no SDK.
//!
//! Per dispatch it verifies the webhook's HMAC, answers `200`, reads the execution (signed
//! `GET`, for the input), then per step makes exactly the signed submit and, when told
//! `proceed`, the signed complete, and finally completes the execution. Same hyper server as
//! the SDK's host and the same pooled hyper client as its default transport (plain HTTP, no
//! TLS connector); JSON bodies are formatted by hand; no retries, no
//! heartbeats, no context, no de-duplication, no supersession (a held first attempt just stays
//! parked).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, anyhow, bail};
use bytes::Bytes;
use http::Method;
use http_body_util::{BodyExt as _, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rebuno::Secret;
use rebuno::signing::{RequestSignature, verify_webhook};
use serde::Deserialize;

use crate::kernel::AGENT_ID;

/// The webhook body.
#[derive(Debug, Deserialize)]
struct Webhook {
    execution_id: String,
    dispatch_id: String,
    dispatch_attempt: u64,
}

/// The part of the execution the floor reads.
#[derive(Debug, Deserialize)]
struct Execution {
    input: Input,
}

/// The execution input (see [`crate::agent`]).
#[derive(Debug, Deserialize)]
struct Input {
    #[serde(default)]
    k: u64,
    #[serde(default)]
    mode: String,
}

/// The part of a step decision the floor reads.
#[derive(Debug, Deserialize)]
struct Decision {
    decision: String,
    #[serde(default)]
    step_id: Option<String>,
}

/// Shared by all runs.
#[derive(Debug)]
struct Floor {
    base: String,
    secret: Secret,
    http: Client<HttpConnector, Full<Bytes>>,
}

/// Serves the floor agent on an ephemeral loopback port, printing its webhook URL on stdout;
/// exits when stdin closes.
pub(crate) async fn run(kernel_url: &str, secret: &str) -> Result<()> {
    let floor = Arc::new(Floor {
        base: kernel_url.trim_end_matches('/').to_owned(),
        secret: Secret::new(secret),
        http: Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .build(connector()),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("http://{}/webhook", listener.local_addr()?);
    let accept = async {
        loop {
            let (stream, _) = listener.accept().await?;
            let floor = floor.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| webhook(floor.clone(), request));
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    };
    tokio::select! {
        result = accept => result,
        () = crate::stdin_closed() => Ok(()),
    }
}

async fn webhook(
    floor: Arc<Floor>,
    request: hyper::Request<hyper::body::Incoming>,
) -> Result<hyper::Response<Full<Bytes>>, Infallible> {
    let status = match accept(&floor, request).await {
        Ok(webhook) => {
            tokio::spawn(async move {
                if let Err(error) = floor.run(webhook).await {
                    // Once: the ack workload makes every run fail on purpose (unknown ids).
                    static TOLD: AtomicBool = AtomicBool::new(false);
                    if !TOLD.swap(true, Ordering::Relaxed) {
                        eprintln!("floor run failed (told once): {error:#}");
                    }
                }
            });
            200
        }
        Err(_) => 401,
    };
    let mut response = hyper::Response::new(Full::new(Bytes::new()));
    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or_default();
    Ok(response)
}

async fn accept(floor: &Floor, request: hyper::Request<hyper::body::Incoming>) -> Result<Webhook> {
    let (parts, body) = request.into_parts();
    let raw = body.collect().await?.to_bytes();
    let header = parts.headers.get("Rebuno-Signature").map(|v| v.as_bytes());
    verify_webhook(&floor.secret, &raw, header).map_err(|e| anyhow!("{e}"))?;
    Ok(serde_json::from_slice(&raw)?)
}

impl Floor {
    async fn run(&self, hook: Webhook) -> Result<()> {
        let id = &hook.execution_id;
        let attempt = hook.dispatch_attempt.to_string();
        let lease = (hook.dispatch_id.as_str(), attempt.as_str());
        let raw = self
            .call(
                Method::GET,
                &format!("/v0/executions/{id}"),
                None,
                Vec::new(),
            )
            .await?;
        let execution: Execution = serde_json::from_slice(&raw)?;
        let input = execution.input;
        if input.mode == "idle" {
            bail!("the floor has no idle mode");
        }
        for i in 0..input.k {
            let body = format!(r#"{{"kind":"tool_call","target":"noop","args":{{"i":{i}}}}}"#);
            let target = format!("/v0/executions/{id}/steps");
            let raw = self
                .call(Method::POST, &target, Some(lease), body.into_bytes())
                .await?;
            let decision: Decision = serde_json::from_slice(&raw)?;
            match decision.decision.as_str() {
                "replay" => {}
                "proceed" => {
                    let step = decision.step_id.context("proceed without a step id")?;
                    let target = format!("/v0/executions/{id}/steps/{step}/complete");
                    let body = format!(r#"{{"result":{i}}}"#).into_bytes();
                    self.call(Method::POST, &target, Some(lease), body).await?;
                }
                other => bail!("step {i}: decision {other}"),
            }
        }
        if input.mode == "hold" && hook.dispatch_attempt == 1 {
            std::future::pending::<()>().await;
        }
        let body = format!(r#"{{"output":{{"steps":{}}}}}"#, input.k).into_bytes();
        let target = format!("/v0/executions/{id}/complete");
        self.call(Method::POST, &target, Some(lease), body).await?;
        Ok(())
    }

    /// One signed request; its body, or an error on a non-2xx status.
    async fn call(
        &self,
        method: Method,
        target: &str,
        lease: Option<(&str, &str)>,
        body: Vec<u8>,
    ) -> Result<Bytes> {
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default()
            .to_string();
        let (dispatch_id, attempt) = lease.unwrap_or(("", ""));
        let signature = RequestSignature {
            method: method.as_str(),
            target,
            timestamp: &timestamp,
            dispatch_id,
            attempt,
        }
        .sign(&self.secret, &body);
        let mut request = http::Request::builder()
            .method(method)
            .uri(format!("{}{target}", self.base))
            .header("Rebuno-Agent-Id", AGENT_ID)
            .header("Rebuno-Timestamp", timestamp)
            .header("Rebuno-Signature", signature)
            .header("Content-Type", "application/json");
        if lease.is_some() {
            request = request
                .header("Rebuno-Dispatch-Id", dispatch_id)
                .header("Rebuno-Dispatch-Attempt", attempt);
        }
        let response = self
            .http
            .request(request.body(Full::new(Bytes::from(body)))?)
            .await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        if !status.is_success() {
            bail!("{target}: {status} {}", String::from_utf8_lossy(&body));
        }
        Ok(body)
    }
}

fn connector() -> HttpConnector {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector
}
