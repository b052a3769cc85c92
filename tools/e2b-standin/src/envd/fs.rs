//! The `filesystem.Filesystem` Connect service: `Stat`, `ListDir`, `MakeDir`, `Remove`, `Move`
//! (the watchers are not implemented), with envd's error codes and messages.

use std::path::{Path, PathBuf};

use http::Response;
use http::request::Parts;
use serde_json::{Value, json};

use super::entry::entry_info;
use super::files::ensure_dirs;
use super::rpc_user;
use crate::body::{self, Body};
use crate::connect::{self, Code, RpcError, RpcResult};
use crate::paths::{SandboxPath, User};
use crate::state::Sandbox;

const UNARY: &[&str] = &[
    "Stat",
    "MakeDir",
    "Move",
    "ListDir",
    "Remove",
    "CreateWatcher",
    "GetWatcherEvents",
    "RemoveWatcher",
];
const STREAMING: &[&str] = &["WatchDir"];

/// Answers one `filesystem.Filesystem` call.
pub(super) async fn handle(sandbox: &Sandbox, parts: &Parts, body: &[u8]) -> Response<Body> {
    let method = parts
        .uri
        .path()
        .trim_start_matches("/filesystem.Filesystem/")
        .to_owned();
    let Some(streaming) = connect::request_kind(&parts.headers) else {
        return connect::unsupported_media_type();
    };
    if !UNARY.contains(&method.as_str()) && !STREAMING.contains(&method.as_str()) {
        return body::response(
            http::StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "404 page not found\n",
        );
    }
    if streaming != STREAMING.contains(&method.as_str()) {
        return connect::unsupported_media_type();
    }
    if streaming {
        return connect::stream_failed(&not_implemented(&method));
    }
    let prepared =
        rpc_user(&parts.headers).and_then(|user| Ok((user, connect::unary_message(body)?)));
    let (user, message) = match prepared {
        Ok(prepared) => prepared,
        Err(error) => return connect::unary_response(Err(error)),
    };
    let fs = sandbox.fs.clone();
    let result = tokio::task::spawn_blocking(move || call(&fs, user, &method, &message))
        .await
        .unwrap_or_else(|e| Err(RpcError::new(Code::Internal, e.to_string())));
    connect::unary_response(result)
}

fn not_implemented(method: &str) -> RpcError {
    RpcError::new(
        Code::Unimplemented,
        format!("filesystem.Filesystem.{method} is not implemented by the stand-in"),
    )
}

fn call(fs: &Path, user: User, method: &str, message: &Value) -> RpcResult {
    let path = |field: &str| {
        resolve(
            fs,
            user,
            message.get(field).and_then(Value::as_str).unwrap_or(""),
        )
    };
    match method {
        "Stat" => Ok(json!({ "entry": entry_info(fs, &path("path")?)? })),
        "ListDir" => list_dir(
            fs,
            &path("path")?,
            message
                .get("depth")
                .and_then(super::procs::as_u64)
                .unwrap_or(0),
        ),
        "MakeDir" => make_dir(fs, &path("path")?),
        "Remove" => remove(&path("path")?),
        "Move" => rename(fs, &path("source")?, &path("destination")?),
        other => Err(not_implemented(other)),
    }
}

fn resolve(fs: &Path, user: User, path: &str) -> RpcResult<SandboxPath> {
    SandboxPath::resolve(fs, user, path).map_err(|e| RpcError::new(Code::InvalidArgument, e))
}

fn list_dir(fs: &Path, dir: &SandboxPath, depth: u64) -> RpcResult {
    let depth = if depth == 0 { 1 } else { depth };
    let resolved: PathBuf = std::fs::canonicalize(&dir.host).map_err(|_| {
        RpcError::new(
            Code::NotFound,
            format!(
                "path not found: lstat {}: no such file or directory",
                dir.inner
            ),
        )
    })?;
    if !resolved.is_dir() {
        return Err(RpcError::new(
            Code::InvalidArgument,
            format!("path is not a directory: {}", dir.inner),
        ));
    }
    let mut entries = Vec::new();
    walk(fs, dir, depth, &mut entries)?;
    if entries.is_empty() {
        return Ok(json!({}));
    }
    Ok(json!({ "entries": entries }))
}

fn walk(fs: &Path, dir: &SandboxPath, depth: u64, out: &mut Vec<Value>) -> RpcResult<()> {
    let read = std::fs::read_dir(&dir.host).map_err(|e| {
        RpcError::new(
            Code::Internal,
            format!("error reading directory {}: {e}", dir.inner),
        )
    })?;
    let mut names: Vec<String> = read
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in names {
        let child = dir.join(&name);
        match entry_info(fs, &child) {
            Ok(entry) => out.push(entry),
            Err(e) if e.code == Code::NotFound => continue,
            Err(e) => return Err(e),
        }
        let is_dir = std::fs::symlink_metadata(&child.host).is_ok_and(|m| m.is_dir());
        if is_dir && depth > 1 {
            walk(fs, &child, depth - 1, out)?;
        }
    }
    Ok(())
}

fn make_dir(fs: &Path, dir: &SandboxPath) -> RpcResult {
    match std::fs::metadata(&dir.host) {
        Ok(meta) if meta.is_dir() => {
            return Err(RpcError::new(
                Code::AlreadyExists,
                format!("directory already exists: {}", dir.inner),
            ));
        }
        Ok(_) => {
            let message = format!(
                "path already exists but it is not a directory: {}",
                dir.inner
            );
            return Err(RpcError::new(Code::InvalidArgument, message));
        }
        Err(_) => {}
    }
    ensure_dirs(fs, dir).map_err(|e| RpcError::new(Code::Internal, e))?;
    Ok(json!({ "entry": entry_info(fs, dir)? }))
}

fn remove(path: &SandboxPath) -> RpcResult {
    let removed = match std::fs::symlink_metadata(&path.host) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&path.host),
        Ok(_) => std::fs::remove_file(&path.host),
        Err(_) => Ok(()),
    };
    removed.map_err(|e| {
        RpcError::new(
            Code::Internal,
            format!("error removing file or directory: {e}"),
        )
    })?;
    Ok(json!({}))
}

fn rename(fs: &Path, source: &SandboxPath, destination: &SandboxPath) -> RpcResult {
    ensure_dirs(fs, &destination.parent(fs)).map_err(|e| RpcError::new(Code::Internal, e))?;
    std::fs::rename(&source.host, &destination.host).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            let message = format!(
                "source file not found: rename {} {}: no such file or directory",
                source.inner, destination.inner
            );
            RpcError::new(Code::NotFound, message)
        } else {
            RpcError::new(Code::Internal, format!("error renaming: {e}"))
        }
    })?;
    Ok(json!({ "entry": entry_info(fs, destination)? }))
}
