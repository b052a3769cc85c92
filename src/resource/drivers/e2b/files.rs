//! Files in a sandbox, through envd: `GET`/`POST /files` for contents (uploads as
//! `multipart/form-data`), and the `filesystem.Filesystem` Connect service for the rest.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{Method, header};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};

use super::encoding::percent_encode;
use super::envd::Envd;
use super::error::{Call, E2bError, E2bErrorKind};

/// The multipart field envd reads an upload from.
const FIELD: &str = "file";

/// What a directory entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
}

/// One entry of a directory listing ([`Sandbox::list`](super::Sandbox::list)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Entry {
    /// The entry's name, e.g. `"main.rs"`.
    pub name: String,
    /// Its absolute path in the sandbox, e.g. `"/home/user/src/main.rs"`.
    pub path: String,
    /// What it is.
    pub kind: EntryKind,
    /// Its size in bytes.
    pub size: u64,
}

/// `files.read`: the file's bytes.
pub(super) async fn read(envd: &Envd, path: &str) -> Result<Bytes, E2bError> {
    let call = Call::envd(format!("files.read {path}"), envd.sandbox_id());
    let query = format!("/files?path={}{}", percent_encode(path), envd.user_query());
    let (url, request) = envd.request(Method::GET, &query);
    let answer = envd.send(&call, &url, request.body(Bytes::new())).await?;
    let status = answer.status();
    if status.is_success() {
        Ok(answer.into_body())
    } else {
        Err(E2bError::answer(call, status, answer.body()))
    }
}

/// `files.write`: replaces the file (creating its parent directories) with `data`.
pub(super) async fn write(envd: &Envd, path: &str, data: &[u8]) -> Result<(), E2bError> {
    let call = Call::envd(format!("files.write {path}"), envd.sandbox_id());
    let query = format!("/files?path={}{}", percent_encode(path), envd.user_query());
    let (boundary, body) = multipart(path, data);
    let (url, request) = envd.request(Method::POST, &query);
    let request = request
        .header(
            header::CONTENT_TYPE,
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(Bytes::from(body));
    let answer = envd.send(&call, &url, request).await?;
    let status = answer.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(E2bError::answer(call, status, answer.body()))
    }
}

/// `files.list`: the entries directly in `dir`.
pub(super) async fn list(envd: &Envd, dir: &str) -> Result<Vec<Entry>, E2bError> {
    #[derive(Deserialize)]
    struct ListDirResponse {
        #[serde(default)]
        entries: Vec<Value>,
    }
    let call = Call::envd(format!("files.list {dir}"), envd.sandbox_id());
    let message = json!({ "path": dir, "depth": 1 });
    let answer: ListDirResponse = envd
        .unary(&call, "filesystem.Filesystem/ListDir", &message)
        .await?;
    Ok(answer.entries.iter().filter_map(entry).collect())
}

/// `files.remove`: removes a file or a directory tree.
pub(super) async fn remove(envd: &Envd, path: &str) -> Result<(), E2bError> {
    let call = Call::envd(format!("files.remove {path}"), envd.sandbox_id());
    let message = json!({ "path": path });
    envd.unary::<_, IgnoredAny>(&call, "filesystem.Filesystem/Remove", &message)
        .await
        .map(|_| ())
}

/// `files.exists`: whether a file or directory is at `path`.
pub(super) async fn exists(envd: &Envd, path: &str) -> Result<bool, E2bError> {
    let call = Call::envd(format!("files.exists {path}"), envd.sandbox_id());
    let message = json!({ "path": path });
    match envd
        .unary::<_, IgnoredAny>(&call, "filesystem.Filesystem/Stat", &message)
        .await
    {
        Ok(_) => Ok(true),
        Err(error) if error.kind() == E2bErrorKind::NotFound => Ok(false),
        Err(error) => Err(error),
    }
}

/// `files.make_dir`: creates `path` and its parents; `false` when it existed already.
pub(super) async fn make_dir(envd: &Envd, path: &str) -> Result<bool, E2bError> {
    let call = Call::envd(format!("files.make_dir {path}"), envd.sandbox_id());
    let message = json!({ "path": path });
    match envd
        .unary::<_, IgnoredAny>(&call, "filesystem.Filesystem/MakeDir", &message)
        .await
    {
        Ok(_) => Ok(true),
        Err(error) if error.code() == Some("already_exists") => Ok(false),
        Err(error) => Err(error),
    }
}

/// An `EntryInfo` (proto3 JSON) as an [`Entry`]; `None` for a kind this driver does not
/// know, which E2B's SDKs skip too.
fn entry(info: &Value) -> Option<Entry> {
    let kind = match &info["type"] {
        Value::String(name) => name.as_str(),
        Value::Number(n) => match n.as_u64() {
            Some(1) => "FILE_TYPE_FILE",
            Some(2) => "FILE_TYPE_DIRECTORY",
            Some(3) => "FILE_TYPE_SYMLINK",
            _ => "",
        },
        _ => "",
    };
    let kind = match kind {
        "FILE_TYPE_FILE" => EntryKind::File,
        "FILE_TYPE_DIRECTORY" => EntryKind::Dir,
        "FILE_TYPE_SYMLINK" => EntryKind::Symlink,
        _ => return None,
    };
    let text = |field: &str| info[field].as_str().unwrap_or_default().to_owned();
    // int64 is a JSON string in proto3 JSON; parsers accept a number too.
    let size = match &info["size"] {
        Value::String(size) => size.parse().unwrap_or(0),
        size => size.as_u64().unwrap_or(0),
    };
    Some(Entry {
        name: text("name"),
        path: text("path"),
        kind,
        size,
    })
}

/// A `multipart/form-data` body with `data` as the one part `file`, named `path` (as E2B's
/// SDKs name it); returns the boundary and the body.
pub(super) fn multipart(path: &str, data: &[u8]) -> (String, Vec<u8>) {
    let boundary = boundary_for(data);
    let mut body = Vec::with_capacity(data.len() + 256);
    body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
    body.extend_from_slice(
        format!(
            "Content-Disposition: form-data; name=\"{FIELD}\"; filename=\"{}\"\r\n",
            form_escape(path)
        )
        .as_bytes(),
    );
    body.extend_from_slice(b"Content-Type: application/octet-stream\r\n\r\n");
    body.extend_from_slice(data);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (boundary, body)
}

/// A boundary that does not occur in `data`.
fn boundary_for(data: &[u8]) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let boundary = format!("rebuno-e2b-{n:016x}");
        let taken = data
            .windows(boundary.len())
            .any(|window| window == boundary.as_bytes());
        if !taken {
            return boundary;
        }
    }
}

/// A form field parameter value as browsers (and httpx) write it: `"` and control
/// characters percent-encoded, `\` escaped.
fn form_escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '"' => out.push_str("%22"),
            '\\' => out.push_str("\\\\"),
            c if c.is_ascii_control() => {
                let _ = write!(out, "%{:02X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_multipart_body_has_one_file_part() {
        let (boundary, body) = multipart("/home/user/a \"b\".txt", b"hello\r\n");
        let expected = format!(
            "--{boundary}\r\n\
             Content-Disposition: form-data; name=\"file\"; filename=\"/home/user/a %22b%22.txt\"\r\n\
             Content-Type: application/octet-stream\r\n\
             \r\n\
             hello\r\n\
             \r\n\
             --{boundary}--\r\n"
        );
        assert_eq!(String::from_utf8(body).unwrap(), expected);
    }

    #[test]
    fn the_boundary_never_occurs_in_the_data() {
        let (first, _) = multipart("a", b"");
        let n = u64::from_str_radix(first.trim_start_matches("rebuno-e2b-"), 16).unwrap();
        // Data holding the next few boundaries forces a later one.
        let data: String = (n + 1..n + 50)
            .map(|k| format!("rebuno-e2b-{k:016x}"))
            .collect();
        let (boundary, body) = multipart("a", data.as_bytes());
        assert!(!data.contains(&boundary));
        assert!(body.starts_with(format!("--{boundary}\r\n").as_bytes()));
    }

    #[test]
    fn entries_read_proto3_json_in_either_form() {
        let file = json!({"name": "a.txt", "type": "FILE_TYPE_FILE", "path": "/home/user/a.txt", "size": "12"});
        assert_eq!(
            entry(&file),
            Some(Entry {
                name: "a.txt".into(),
                path: "/home/user/a.txt".into(),
                kind: EntryKind::File,
                size: 12,
            })
        );
        let dir = json!({"name": "src", "type": 2, "path": "/home/user/src", "size": 4096});
        assert_eq!(
            entry(&dir).map(|e| (e.kind, e.size)),
            Some((EntryKind::Dir, 4096))
        );
        assert_eq!(
            entry(&json!({"name": "x", "type": "FILE_TYPE_UNSPECIFIED"})),
            None
        );
    }
}
