//! The listener: one HTTP/1.1 server for the REST API and every sandbox's envd. A request
//! naming a sandbox (the `E2b-Sandbox-Id` header, or a `49983-<id>.` host) goes to envd, any
//! other to the REST API (their paths do not collide).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinSet;

use crate::body::{self, Body};
use crate::capture::Target;
use crate::state::Shared;
use crate::{api, envd};

/// The port envd listens on inside a sandbox (and the prefix of its host name).
const ENVD_PORT: &str = "49983";

/// Serves until `stop` fires (or is dropped); the open connections end with it.
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let shared = Arc::clone(&shared);
                    connections.spawn(async move {
                        let service = service_fn(move |req| handle(Arc::clone(&shared), req));
                        let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
                    });
                }
                // Out of file descriptors and the like: back off instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    connections.shutdown().await;
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let (parts, incoming) = req.into_parts();
    let Ok(collected) = incoming.collect().await else {
        return Ok(body::empty(StatusCode::BAD_REQUEST));
    };
    let bytes = collected.to_bytes();
    let sandbox = envd_sandbox(&parts.headers);
    let (resp, target) = match sandbox.as_deref() {
        Some(id) => (
            envd::handle(&shared, id, &parts, &bytes).await,
            Target::Envd(id),
        ),
        None => (api::handle(&shared, &parts, &bytes).await, Target::Api),
    };
    shared
        .capture()
        .record(&parts, &bytes, target, resp.status());
    Ok(resp)
}

/// The sandbox an envd request names, if it names one.
fn envd_sandbox(headers: &HeaderMap) -> Option<String> {
    if let Some(id) = headers.get("e2b-sandbox-id").and_then(|v| v.to_str().ok()) {
        return Some(id.to_owned());
    }
    let host = headers.get(header::HOST)?.to_str().ok()?;
    let (label, _) = host.split_once('.')?;
    let id = label.strip_prefix(ENVD_PORT)?.strip_prefix('-')?;
    (!id.is_empty()).then(|| id.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_sandbox_by_header_or_host() {
        let mut headers = HeaderMap::new();
        assert_eq!(envd_sandbox(&headers), None);
        headers.insert(header::HOST, "49983-iabc.e2b.app:443".parse().unwrap());
        assert_eq!(envd_sandbox(&headers).as_deref(), Some("iabc"));
        headers.insert(header::HOST, "api.e2b.app".parse().unwrap());
        assert_eq!(envd_sandbox(&headers), None);
        headers.insert("e2b-sandbox-id", "ixyz".parse().unwrap());
        assert_eq!(envd_sandbox(&headers).as_deref(), Some("ixyz"));
    }
}
