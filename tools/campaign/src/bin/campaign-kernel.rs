//! The campaign's kernel: a `rebuno_devkernel::DevKernel` in its own process, so the driver can
//! `SIGKILL` it and start it again on the same ports and data directory.
//!
//! It is built with the campaign's settings (`rebuno_campaign::LEASE`, `MAX_ATTEMPTS`,
//! `RETRY_BACKOFF`, `WEBHOOK_TIMEOUT`), keeps its event log, registry and leases in
//! `--data-dir`, registers the `campaign` agent (webhook `--webhook-url`, the campaign's policy)
//! over whatever the directory recovered, and serves the `/v0` API on `--port`. A second listener
//! on `--admin-port` serves what the HTTP API has no route for:
//!
//! * `POST /redeliver/{execution_id}`: `DevKernel::redeliver` (a new attempt of the in-flight
//!   dispatch); `200 {"attempt": n}`, or `409` when nothing is in flight.
//!
//! Once both listen it prints [`KERNEL_READY`] `kernel=<port> admin=<port>` on stdout. It exits
//! when its stdin closes (the driver is gone), so a killed driver leaves no kernel behind.
//!
//! ```text
//! campaign-kernel --port 7001 --admin-port 7002 --data-dir DIR --webhook-url URL
//! ```

use std::convert::Infallible;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rebuno_campaign::{
    AGENT_ID, KERNEL_READY, LEASE, MAX_ATTEMPTS, RETRY_BACKOFF, SECRET, WEBHOOK_TIMEOUT,
    policy_yaml,
};
use rebuno_devkernel::{AgentSpec, DevKernel};
use tokio::io::AsyncReadExt;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The command line.
struct Args {
    port: u16,
    admin_port: u16,
    data_dir: PathBuf,
    webhook_url: String,
}

/// Parses the command line (every flag takes a value; all are required).
fn args() -> Result<Args, BoxError> {
    let (mut port, mut admin_port, mut data_dir, mut webhook_url) = (None, None, None, None);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--port" => port = Some(value.parse()?),
            "--admin-port" => admin_port = Some(value.parse()?),
            "--data-dir" => data_dir = Some(PathBuf::from(value)),
            "--webhook-url" => webhook_url = Some(value),
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    Ok(Args {
        port: port.ok_or("--port is required")?,
        admin_port: admin_port.ok_or("--admin-port is required")?,
        data_dir: data_dir.ok_or("--data-dir is required")?,
        webhook_url: webhook_url.ok_or("--webhook-url is required")?,
    })
}

/// A response with `status` and a JSON body.
fn reply(status: u16, body: serde_json::Value) -> http::Response<Full<Bytes>> {
    let mut response = http::Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        "content-type",
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// Answers one admin request.
fn admin(kernel: &DevKernel, method: &http::Method, path: &str) -> http::Response<Full<Bytes>> {
    let Some(id) = path.strip_prefix("/redeliver/") else {
        return reply(404, serde_json::json!({"error": "not_found"}));
    };
    if method != http::Method::POST {
        return reply(405, serde_json::json!({"error": "method_not_allowed"}));
    }
    let Ok(id) = uuid::Uuid::parse_str(id) else {
        return reply(400, serde_json::json!({"error": "invalid execution id"}));
    };
    match kernel.redeliver(&id.to_string()) {
        Ok(attempt) => reply(200, serde_json::json!({ "attempt": attempt })),
        Err(error) => reply(409, serde_json::json!({ "error": error.to_string() })),
    }
}

/// Serves the admin routes on `listener` for ever.
async fn serve_admin(listener: tokio::net::TcpListener, kernel: DevKernel) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let kernel = kernel.clone();
        let service =
            hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let response = admin(&kernel, request.method(), request.uri().path());
                async move { Ok::<_, Infallible>(response) }
            });
        tokio::spawn(async move {
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Resolves when stdin reaches its end (the driver closed it, or is gone).
async fn stdin_closed() {
    let mut stdin = tokio::io::stdin();
    let mut buffer = [0u8; 64];
    while matches!(stdin.read(&mut buffer).await, Ok(n) if n > 0) {}
}

/// Starts the kernel and the admin listener, prints the ready line, serves until stdin closes.
async fn run(args: Args) -> Result<(), BoxError> {
    let agent = AgentSpec::new(AGENT_ID, args.webhook_url, SECRET).policy_yaml(policy_yaml());
    let kernel = DevKernel::builder()
        .addr(SocketAddr::from((Ipv4Addr::LOCALHOST, args.port)))
        .default_lease_timeout(LEASE)
        .max_attempts(MAX_ATTEMPTS)
        .retry_backoff(RETRY_BACKOFF.0, RETRY_BACKOFF.1)
        .webhook_timeout(WEBHOOK_TIMEOUT)
        .data_dir(&args.data_dir)
        .agent(agent)
        .start()
        .await?;
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, args.admin_port)).await?;
    tokio::spawn(serve_admin(listener, kernel.clone()));
    let mut stdout = std::io::stdout();
    writeln!(
        stdout,
        "{KERNEL_READY} kernel={} admin={} pid={}",
        kernel.addr().port(),
        args.admin_port,
        std::process::id()
    )?;
    stdout.flush()?;
    stdin_closed().await;
    kernel.shutdown().await;
    Ok(())
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new("warn,rebuno_devkernel::kernel::recovery=info")
            }),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let outcome = match args() {
        Ok(args) => run(args).await,
        Err(error) => Err(error),
    };
    if let Err(error) = outcome {
        eprintln!("campaign-kernel: {error}");
        std::process::exit(2);
    }
}
