//! envd's `/files`: download (`GET`) and upload (`POST`, multipart or octet-stream), with
//! envd's access rule for them (the access token in `X-Access-Token`, or a signed URL).

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use http::request::Parts;
use http::{HeaderValue, Response, StatusCode, header};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{json_error, multipart, query};
use crate::body::{self, Body};
use crate::paths::{SandboxPath, User};
use crate::state::Sandbox;

type Answer = Result<Response<Body>, Fail>;

/// An envd error not yet turned into its response (`json_error`).
#[derive(Debug)]
pub(super) struct Fail(StatusCode, String);

fn fail(status: StatusCode, message: impl Into<String>) -> Fail {
    Fail(status, message.into())
}

impl From<Fail> for Response<Body> {
    fn from(Fail(status, message): Fail) -> Self {
        json_error(status, &message)
    }
}

/// `GET /files?path=&username=`: the file's bytes.
pub(super) async fn download(sandbox: &Sandbox, parts: &Parts) -> Response<Body> {
    let params = query::parse(parts.uri.query().unwrap_or(""));
    match read(sandbox, parts, &params).await {
        Ok(resp) => resp,
        Err(e) => e.into(),
    }
}

async fn read(sandbox: &Sandbox, parts: &Parts, params: &[(String, String)]) -> Answer {
    let (user, path) = authorize(sandbox, parts, params, "read")?;
    let resolved = SandboxPath::resolve(&sandbox.fs, user, &path).map_err(|e| {
        fail(
            StatusCode::BAD_REQUEST,
            format!("error expanding and resolving path '{path}': {e}"),
        )
    })?;
    let meta = tokio::fs::metadata(&resolved.host).await.map_err(|_| {
        fail(
            StatusCode::NOT_FOUND,
            format!("path '{}' does not exist", resolved.inner),
        )
    })?;
    if meta.is_dir() {
        return Err(fail(
            StatusCode::BAD_REQUEST,
            format!("path '{}' is a directory", resolved.inner),
        ));
    }
    let bytes = tokio::fs::read(&resolved.host).await.map_err(|e| {
        fail(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("error opening file '{}': {e}", resolved.inner),
        )
    })?;
    let mut resp = body::response(StatusCode::OK, "application/octet-stream", bytes);
    let disposition = format!(
        "inline; filename=\"{}\"",
        resolved.name().replace('"', "\\\"")
    );
    if let Ok(value) = HeaderValue::from_str(&disposition) {
        resp.headers_mut()
            .insert(header::CONTENT_DISPOSITION, value);
    }
    Ok(resp)
}

/// `POST /files?path=&username=`: writes the uploaded file(s), creating parent directories;
/// answers the written entries.
pub(super) async fn upload(sandbox: &Sandbox, parts: &Parts, body: &[u8]) -> Response<Body> {
    let params = query::parse(parts.uri.query().unwrap_or(""));
    match write(sandbox, parts, &params, body).await {
        Ok(resp) => resp,
        Err(e) => e.into(),
    }
}

async fn write(
    sandbox: &Sandbox,
    parts: &Parts,
    params: &[(String, String)],
    body: &[u8],
) -> Answer {
    let (user, _) = authorize(sandbox, parts, params, "write")?;
    if parts
        .headers
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| v.as_bytes() != b"identity")
    {
        let message = "error decompressing request body: compressed uploads are not supported by the stand-in";
        return Err(fail(StatusCode::BAD_REQUEST, message));
    }
    let files = uploaded_files(parts, params, body)?;
    let mut written: Vec<Value> = Vec::new();
    for (path, data) in files {
        let target = SandboxPath::resolve(&sandbox.fs, user, &path).map_err(|e| {
            fail(
                StatusCode::BAD_REQUEST,
                format!("error resolving path: {e}"),
            )
        })?;
        if written.iter().any(|w| w["path"] == target.inner.as_str()) {
            let message = format!(
                "you cannot upload multiple files to the same path '{}' in one upload request, only the first specified file was uploaded",
                target.inner
            );
            return Err(fail(StatusCode::BAD_REQUEST, message));
        }
        write_one(sandbox, &target, data).await?;
        written.push(json!({ "path": target.inner, "name": target.name(), "type": "file" }));
    }
    Ok(body::json(StatusCode::OK, &Value::Array(written)))
}

/// The files of an upload body: its one file (octet-stream, named by `path`), or its `file`
/// parts (multipart, named by `path` or their file names).
fn uploaded_files<'a>(
    parts: &Parts,
    params: &[(String, String)],
    body: &'a [u8],
) -> Result<Vec<(String, &'a [u8])>, Fail> {
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let media = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let path = query::get(params, "path");
    if media == "application/octet-stream" {
        let path = path.ok_or_else(|| {
            fail(
                StatusCode::BAD_REQUEST,
                "path query parameter is required for raw body upload",
            )
        })?;
        Ok(vec![(path.to_owned(), body)])
    } else if media.starts_with("multipart/") {
        multipart_files(content_type, body, path)
    } else {
        let message = format!(
            "unsupported content type: {content_type}, expected multipart/form-data or application/octet-stream"
        );
        Err(fail(StatusCode::BAD_REQUEST, message))
    }
}

fn multipart_files<'a>(
    content_type: &str,
    body: &'a [u8],
    path: Option<&str>,
) -> Result<Vec<(String, &'a [u8])>, Fail> {
    let parse_error = |e: String| {
        fail(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("error parsing multipart form: {e}"),
        )
    };
    let boundary = multipart::boundary(content_type)
        .ok_or_else(|| parse_error("no multipart boundary param in Content-Type".to_owned()))?;
    let parts = multipart::parse(body, &boundary).map_err(parse_error)?;
    let mut files = Vec::new();
    for part in parts
        .into_iter()
        .filter(|p| p.name.as_deref() == Some("file"))
    {
        let name = match (path, &part.filename) {
            (Some(path), _) => path.to_owned(),
            (None, Some(filename)) => filename.clone(),
            (None, None) => {
                let message = "error getting multipart custom part file name: no filename";
                return Err(fail(StatusCode::BAD_REQUEST, message));
            }
        };
        files.push((name, part.data));
    }
    Ok(files)
}

async fn write_one(sandbox: &Sandbox, target: &SandboxPath, data: &[u8]) -> Result<(), Fail> {
    ensure_dirs(&sandbox.fs, &target.parent(&sandbox.fs)).map_err(|e| {
        fail(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("error ensuring directories: {e}"),
        )
    })?;
    if tokio::fs::metadata(&target.host)
        .await
        .is_ok_and(|m| m.is_dir())
    {
        return Err(fail(
            StatusCode::BAD_REQUEST,
            format!("path is a directory: {}", target.inner),
        ));
    }
    tokio::fs::write(&target.host, data).await.map_err(|e| {
        fail(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("error writing file: {e}"),
        )
    })
}

/// Creates `dir` and its parents, failing (as envd does) when one of them is a file.
pub(super) fn ensure_dirs(fs: &Path, dir: &SandboxPath) -> Result<(), String> {
    let mut current = SandboxPath::from_absolute(fs, "/");
    for component in dir.inner.split('/').filter(|c| !c.is_empty()) {
        current = current.join(component);
        match std::fs::metadata(&current.host) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => return Err(format!("path is a file: {}", current.inner)),
            Err(_) => std::fs::create_dir(&current.host)
                .or_else(|e| {
                    if current.host.is_dir() {
                        Ok(())
                    } else {
                        Err(e)
                    }
                })
                .map_err(|e| format!("failed to create directory: {e}"))?,
        }
    }
    Ok(())
}

/// envd's check for `/files`: with an access token, either the token in `X-Access-Token` or a
/// valid signature; then the user. Answers the user and the `path` parameter.
fn authorize(
    sandbox: &Sandbox,
    parts: &Parts,
    params: &[(String, String)],
    operation: &str,
) -> Result<(User, String), Fail> {
    let path = query::get(params, "path").unwrap_or("").to_owned();
    let username = query::get(params, "username");
    if let Some(token) = &sandbox.envd_token {
        check_signing(token, parts, params, &path, username, operation)
            .map_err(|message| fail(StatusCode::UNAUTHORIZED, message))?;
    }
    let user = User::lookup(username).map_err(|message| fail(StatusCode::UNAUTHORIZED, message))?;
    Ok((user, path))
}

fn check_signing(
    token: &str,
    parts: &Parts,
    params: &[(String, String)],
    path: &str,
    username: Option<&str>,
    operation: &str,
) -> Result<(), &'static str> {
    if let Some(header) = parts.headers.get("x-access-token") {
        return if header.as_bytes() == token.as_bytes() {
            Ok(())
        } else {
            Err("access token present in header but does not match")
        };
    }
    let signature = query::get(params, "signature").ok_or("missing signature query parameter")?;
    let expiration = query::get(params, "signature_expiration");
    let mut raw = format!("{path}:{operation}:{}:{token}", username.unwrap_or(""));
    if let Some(expiration) = expiration {
        raw = format!("{raw}:{expiration}");
    }
    let expected = format!(
        "v1_{}",
        STANDARD_NO_PAD.encode(Sha256::digest(raw.as_bytes()))
    );
    if expected != signature {
        return Err("invalid signature");
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    match expiration.map(str::parse::<u64>) {
        Some(Ok(at)) if at < now => Err("signature is already expired"),
        Some(Err(_)) => Err("invalid signature"),
        _ => Ok(()),
    }
}
