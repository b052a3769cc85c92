//! envd, per sandbox: `/health`, `/files`, and the `filesystem.Filesystem` and
//! `process.Process` Connect services, behind envd's access-token check and the proxy's answer
//! for a sandbox that is not running.

mod entry;
mod files;
mod fs;
pub(crate) mod multipart;
mod process;
pub(crate) mod procs;
pub(crate) mod query;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::request::Parts;
use http::{HeaderMap, Method, Response, StatusCode};
use serde_json::json;

use crate::body::{self, Body};
use crate::connect::{Code, RpcError};
use crate::paths::User;
use crate::state::{Sandbox, Shared};

/// Answers one request to a sandbox's envd.
pub(crate) async fn handle(
    shared: &Shared,
    sandbox_id: &str,
    parts: &Parts,
    body: &[u8],
) -> Response<Body> {
    // The proxy in front of envd answers for a sandbox that is gone, or paused (without
    // auto-resume), with a 502.
    let Some(sandbox) = shared.sandbox(sandbox_id).filter(|s| s.is_running()) else {
        let answer =
            json!({ "sandboxId": sandbox_id, "message": "The sandbox was not found", "code": 502 });
        return body::response(
            StatusCode::BAD_GATEWAY,
            "application/json; charset=utf-8",
            answer.to_string(),
        );
    };
    let path = parts.uri.path();
    if !authorized(&sandbox, &parts.method, path, &parts.headers) {
        let message = "unauthorized access, please provide a valid access token or method signing if supported";
        return json_error(StatusCode::UNAUTHORIZED, message);
    }
    match (&parts.method, path) {
        (&Method::GET, "/health") => body::empty(StatusCode::NO_CONTENT),
        (&Method::GET, "/files") => files::download(&sandbox, parts).await,
        (&Method::POST, "/files") => files::upload(&sandbox, parts, body).await,
        (&Method::POST, _) if path.starts_with("/filesystem.Filesystem/") => {
            fs::handle(&sandbox, parts, body).await
        }
        (&Method::POST, _) if path.starts_with("/process.Process/") => {
            process::handle(&sandbox, parts, body).await
        }
        _ => body::response(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "404 page not found\n",
        ),
    }
}

/// envd's rule: with an access token, every path but `/health` and `/files` (which check the
/// token or a signature themselves) needs `X-Access-Token`.
fn authorized(sandbox: &Sandbox, method: &Method, path: &str, headers: &HeaderMap) -> bool {
    let Some(token) = &sandbox.envd_token else {
        return true;
    };
    let excluded = matches!(
        (method, path),
        (&Method::GET, "/health" | "/files") | (&Method::POST, "/files")
    );
    excluded
        || headers
            .get("x-access-token")
            .is_some_and(|v| v.as_bytes() == token.as_bytes())
}

/// envd's JSON error (`{"code": <status>, "message": ...}`).
pub(crate) fn json_error(status: StatusCode, message: &str) -> Response<Body> {
    let answer = json!({ "code": status.as_u16(), "message": message });
    body::response(
        status,
        "application/json; charset=utf-8",
        format!("{answer}\n"),
    )
}

/// The user of an RPC: the Basic auth user name (`user:`), or the default user.
pub(crate) fn rpc_user(headers: &HeaderMap) -> Result<User, RpcError> {
    let Some(value) = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return Ok(User::User);
    };
    let name = value
        .strip_prefix("Basic ")
        .and_then(|b64| STANDARD.decode(b64.trim()).ok())
        .map(|raw| {
            String::from_utf8_lossy(&raw)
                .split(':')
                .next()
                .unwrap_or("")
                .to_owned()
        });
    let Some(name) = name else {
        return Ok(User::User);
    };
    User::lookup(Some(&name))
        .map_err(|_| RpcError::new(Code::Unauthenticated, format!("invalid username: '{name}'")))
}
