//! The `ack` workload: signed dispatches sent straight to the agent at a fixed rate.
//!
//! The agent's kernel is a stub in this process that answers `404` to everything at once, so
//! each acknowledged run ends right after its first read (an unknown execution); only the
//! webhook's HTTP `200` latency is measured, from the dispatch's scheduled send time (so a
//! stalled sender is counted, not hidden) to the response.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rebuno::Secret;
use rebuno::signing::sign_webhook;

use crate::stats::quantile;

/// A kernel that knows no execution: every request gets `404` at once.
pub(crate) async fn stub_kernel() -> Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = service_fn(|_request| async {
                    let body = Bytes::from_static(br#"{"code":"not_found","message":"not found"}"#);
                    let mut response = hyper::Response::new(Full::new(body));
                    *response.status_mut() = hyper::StatusCode::NOT_FOUND;
                    response.headers_mut().insert(
                        hyper::header::CONTENT_TYPE,
                        hyper::header::HeaderValue::from_static("application/json"),
                    );
                    Ok::<_, Infallible>(response)
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(url)
}

/// Ack latencies of one run.
#[derive(Debug, Clone, Default)]
pub(crate) struct AckReport {
    /// Dispatches measured (after the warm-up).
    pub(crate) sent: usize,
    /// Of those, answered `200`.
    pub(crate) ok: usize,
    /// Latency p50, milliseconds.
    pub(crate) p50_ms: f64,
    /// Latency p99, milliseconds.
    pub(crate) p99_ms: f64,
    /// Largest latency, milliseconds.
    pub(crate) max_ms: f64,
    /// Latency p50 from the actual send (without the sender's timer lateness), milliseconds.
    pub(crate) send_p50_ms: f64,
    /// Latency p99 from the actual send, milliseconds.
    pub(crate) send_p99_ms: f64,
}

/// Sends `rate` signed dispatches per second to `webhook_url` for `warmup + seconds`, and
/// reports the latencies of those sent after the warm-up.
pub(crate) async fn drive(
    webhook_url: &str,
    secret: &str,
    rate: u32,
    warmup: Duration,
    seconds: Duration,
) -> Result<AckReport> {
    if rate == 0 {
        bail!("--ack-rate must be positive");
    }
    let secret = Secret::new(secret);
    let period = Duration::from_secs(1) / rate;
    let skip = (warmup.as_secs_f64() * f64::from(rate)) as usize;
    let total = skip + (seconds.as_secs_f64() * f64::from(rate)) as usize;
    // Everything signed up front: the sender's cost stays out of the measured latency.
    let dispatches = signed_dispatches(&secret, total);
    let client = reqwest::Client::builder().build()?;
    let samples = Arc::new(Mutex::new(Vec::with_capacity(total)));
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(total);
    for (i, (body, signature)) in dispatches.into_iter().enumerate() {
        ticker.tick().await;
        let scheduled = start + period * u32::try_from(i).unwrap_or(u32::MAX);
        let request = client
            .post(webhook_url)
            .header("Content-Type", "application/json")
            .header("Rebuno-Signature", signature)
            .body(body);
        let samples = samples.clone();
        tasks.push(tokio::spawn(async move {
            let sent = Instant::now();
            let ok = matches!(request.send().await, Ok(r) if r.status() == reqwest::StatusCode::OK);
            let latency = scheduled.elapsed().as_secs_f64() * 1e3;
            let from_send = sent.elapsed().as_secs_f64() * 1e3;
            if i >= skip {
                samples
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push((ok, latency, from_send));
            }
        }));
    }
    for task in tasks {
        task.await?;
    }
    let samples = std::mem::take(
        &mut *samples
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    Ok(summarize(&samples))
}

/// `total` webhook bodies for new executions, each with its signature.
fn signed_dispatches(secret: &Secret, total: usize) -> Vec<(Bytes, String)> {
    (0..total)
        .map(|_| {
            let body = format!(
                r#"{{"execution_id":"{}","dispatch_id":"{}","dispatch_attempt":1,"lease_timeout_seconds":120}}"#,
                uuid::Uuid::new_v4(),
                uuid::Uuid::new_v4()
            );
            let signature = sign_webhook(secret, body.as_bytes());
            (Bytes::from(body), signature)
        })
        .collect()
}

/// The report of the samples `(acknowledged, latency from schedule, latency from send)`.
fn summarize(samples: &[(bool, f64, f64)]) -> AckReport {
    let mut latencies: Vec<f64> = samples.iter().map(|(_, l, _)| *l).collect();
    let mut from_send: Vec<f64> = samples.iter().map(|(_, _, l)| *l).collect();
    AckReport {
        sent: samples.len(),
        ok: samples.iter().filter(|(ok, _, _)| *ok).count(),
        p50_ms: quantile(&mut latencies, 0.50),
        p99_ms: quantile(&mut latencies, 0.99),
        max_ms: quantile(&mut latencies, 1.0),
        send_p50_ms: quantile(&mut from_send, 0.50),
        send_p99_ms: quantile(&mut from_send, 0.99),
    }
}
