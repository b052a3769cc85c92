//! Snapshots: `POST /sandboxes/{id}/snapshots` copies the sandbox's filesystem into a snapshot
//! template (`<root>/snapshots/<templateID>:<tag>`), `GET /snapshots` lists them and
//! `DELETE /templates/{templateID}` (the SDK's `delete_snapshot`) deletes one with its builds.

use std::io;
use std::path::{Path, PathBuf};

use http::{Response, StatusCode};
use nix::sys::signal::Signal;
use serde::Deserialize;
use serde_json::{Value, json};

use super::template_ref::{DEFAULT_TAG, TemplateRef};
use super::{ApiError, error, fail, parse_body, sandbox_not_found};
use crate::body::{self, Body};
use crate::ids;
use crate::state::{Shared, Template};

#[derive(Deserialize)]
struct SnapshotRequest {
    name: Option<String>,
}

/// `POST /sandboxes/{id}/snapshots`: 201 with `SnapshotInfo`. The sandbox is stopped while its
/// filesystem is copied and its connections are dropped, as a real snapshot does; it then
/// runs on.
pub(super) async fn create(shared: &Shared, id: &str, body: &[u8]) -> Response<Body> {
    let req: SnapshotRequest = match parse_body(body, "SandboxSnapshotRequest", true) {
        Ok(req) => req,
        Err(e) => return e.into(),
    };
    let name = match req
        .name
        .as_deref()
        .map(|n| parse_name(shared, n))
        .transpose()
    {
        Ok(name) => name,
        Err(e) => return e.into(),
    };
    let Some(sandbox) = shared.sandbox(id).filter(|s| s.is_running()) else {
        return error(StatusCode::NOT_FOUND, sandbox_not_found(id));
    };
    let alias = name.as_ref().map(|n| n.alias().to_owned());
    let tag = name
        .as_ref()
        .map_or(DEFAULT_TAG, |n| n.tag.as_str())
        .to_owned();
    let template_id = shared
        .template_for_name(alias.as_deref())
        .unwrap_or_else(ids::template_id);
    let target = shared
        .root()
        .join("snapshots")
        .join(format!("{template_id}:{tag}"));
    sandbox.procs.signal_all(Signal::SIGSTOP);
    let copied = copy_fresh(sandbox.fs.clone(), target.clone()).await;
    if sandbox.is_running() {
        sandbox.procs.signal_all(Signal::SIGCONT);
    }
    sandbox.drop_connections();
    if let Err(e) = copied {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("Error creating snapshot template: {e}"),
        );
    }
    shared.add_build(&template_id, alias.as_deref(), id, &tag, target);
    let template = shared.template(&template_id);
    body::json(
        StatusCode::CREATED,
        &template.map_or(Value::Null, |t| info(&t, &tag)),
    )
}

fn parse_name(shared: &Shared, name: &str) -> Result<TemplateRef, ApiError> {
    let parsed = TemplateRef::parse(name)
        .map_err(|e| fail(StatusCode::BAD_REQUEST, format!("Invalid name: {e}")))?;
    match parsed.namespace() {
        Some(namespace) if namespace != shared.slug() => Err(fail(
            StatusCode::BAD_REQUEST,
            format!(
                "namespace '{namespace}' must match your team '{}'",
                shared.slug()
            ),
        )),
        _ => Ok(parsed),
    }
}

async fn copy_fresh(from: PathBuf, to: PathBuf) -> io::Result<()> {
    tokio::task::spawn_blocking(move || {
        if to.exists() {
            std::fs::remove_dir_all(&to)?;
        }
        copy_tree(&from, &to)
    })
    .await
    .map_err(io::Error::other)?
}

/// `SnapshotInfo` for one build of a template.
fn info(template: &Template, tag: &str) -> Value {
    let id = match template.names.first() {
        Some(name) => format!("{name}:{tag}"),
        None => format!("{}:{tag}", template.id),
    };
    json!({ "snapshotID": id, "names": template.names })
}

/// `DELETE /templates/{templateID}`: 204 once the template and every build of it are gone
/// (from the registry and the disk); 404 when there is no such template. A snapshot id
/// (`<templateID>:<tag>`, or a name) names its template.
pub(super) fn delete(shared: &Shared, identifier: &str) -> Response<Body> {
    let identifier = crate::envd::query::decode(identifier);
    let template = identifier
        .split_once(':')
        .map_or(identifier.as_str(), |(t, _)| t);
    let Some(removed) = shared.remove_template(template) else {
        return error(
            StatusCode::NOT_FOUND,
            format!("template '{template}' not found"),
        );
    };
    for build in removed.builds.values() {
        let _ = std::fs::remove_dir_all(&build.fs);
    }
    body::empty(StatusCode::NO_CONTENT)
}

/// `GET /snapshots`: every snapshot build, newest first, filtered by `sandboxID` and `name`,
/// at most `limit` (default 100).
pub(super) fn list(shared: &Shared, query: &str) -> Response<Body> {
    let params = crate::envd::query::parse(query);
    let get = |key: &str| {
        params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let limit = get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .unwrap_or(100);
    let name = match get("name").map(TemplateRef::parse).transpose() {
        Ok(name) => name,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("Invalid name: {e}")),
    };
    let wanted = name
        .as_ref()
        .and_then(|n| shared.template(&n.identifier).map(|t| t.id));
    let mut builds: Vec<(u64, Value)> = Vec::new();
    for template in shared.templates() {
        if get("sandboxID").is_some_and(|id| id != template.source_sandbox) {
            continue;
        }
        if name.is_some() && wanted.as_deref() != Some(template.id.as_str()) {
            continue;
        }
        for (tag, build) in &template.builds {
            builds.push((build.seq, info(&template, tag)));
        }
    }
    builds.sort_by_key(|b| std::cmp::Reverse(b.0));
    let page: Vec<Value> = builds.into_iter().take(limit).map(|(_, v)| v).collect();
    body::json(StatusCode::OK, &Value::Array(page))
}

/// Copies a directory tree, keeping symlinks as symlinks and permissions.
pub(crate) fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::create_dir_all(to)?;
    std::fs::set_permissions(to, std::fs::metadata(from)?.permissions())?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else if kind.is_dir() {
            copy_tree(&src, &dst)?;
        } else if kind.is_file() {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}
