//! Sandbox endpoints: create, get, kill, connect, pause, resume, timeout, refreshes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http::{Response, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use super::template_ref::{DEFAULT_TAG, TemplateRef};
use super::{ApiError, Version, error, fail, parse_body, sandbox_not_found, snapshots};
use crate::body::{self, Body};
use crate::ids;
use crate::state::{
    BASE_ALIAS, BASE_TEMPLATE_ID, ENVD_VERSION, RunState, Sandbox, SandboxSpec, Shared,
};
use crate::time::rfc3339;

/// The client id the API still returns for backwards compatibility.
const CLIENT_ID: &str = "6532622b";
/// The default sandbox timeout of `POST /sandboxes` and of resume.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);
/// The default timeout of the `/v2` routes (`NewSandboxV2.timeout`'s default in the SDK's
/// model), also used by a `/v2` connect that sends none.
const V2_DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// The longest timeout the stand-in's team may ask for.
const MAX_HOURS: u64 = 24;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewSandbox {
    #[serde(rename = "templateID")]
    template_id: String,
    timeout: Option<i64>,
    auto_pause: Option<bool>,
    secure: Option<bool>,
    env_vars: Option<BTreeMap<String, String>>,
    metadata: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
struct TimeoutBody {
    timeout: Option<i64>,
}

#[derive(Deserialize)]
struct RefreshBody {
    duration: Option<u64>,
}

/// `POST /sandboxes` and `POST /v2/sandboxes`: 201 with the sandbox.
pub(super) async fn create(shared: &Shared, body: &[u8], version: Version) -> Response<Body> {
    let schema = if version == Version::V1 {
        "NewSandbox"
    } else {
        "NewSandboxV2"
    };
    let req: NewSandbox = match parse_body(body, schema, true) {
        Ok(req) => req,
        Err(e) => return e.into(),
    };
    let template = match TemplateRef::parse(&req.template_id) {
        Ok(template) => template,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("Invalid template reference: {e}"),
            );
        }
    };
    let default = if version == Version::V1 {
        DEFAULT_TIMEOUT
    } else {
        V2_DEFAULT_TIMEOUT
    };
    let timeout = match validate_timeout(req.timeout, default) {
        Ok(timeout) => timeout,
        Err(e) => return e.into(),
    };
    let source = match resolve_source(shared, &template) {
        Ok(source) => source,
        Err(e) => return e.into(),
    };
    let id = ids::sandbox_id();
    let dir = shared.root().join("sandboxes").join(&id);
    if let Err(e) = source.materialize(dir.join("fs")).await {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("error creating sandbox filesystem: {e}"),
        );
    }
    // Every /v2 sandbox is secured; a /v1 one only when it asks (`secure: true`).
    let secure = version == Version::V2 || req.secure == Some(true);
    let spec = SandboxSpec {
        template_id: source.template_id,
        alias: source.alias,
        envd_token: secure.then(ids::access_token),
        env_vars: req.env_vars.unwrap_or_default(),
        metadata: req.metadata.unwrap_or_default(),
        auto_pause: req.auto_pause.unwrap_or(false),
        timeout,
    };
    let sandbox = Arc::new(Sandbox::new(id, dir, spec));
    shared.insert(Arc::clone(&sandbox));
    body::json(StatusCode::CREATED, &sandbox_json(&sandbox))
}

struct Source {
    template_id: String,
    alias: Option<String>,
    copy_from: Option<std::path::PathBuf>,
}

impl Source {
    async fn materialize(&self, fs: std::path::PathBuf) -> std::io::Result<()> {
        let from = self.copy_from.clone();
        tokio::task::spawn_blocking(move || match from {
            Some(from) => snapshots::copy_tree(&from, &fs),
            None => std::fs::create_dir_all(fs.join("home/user"))
                .and_then(|()| std::fs::create_dir_all(fs.join("root"))),
        })
        .await
        .map_err(std::io::Error::other)?
    }
}

fn resolve_source(shared: &Shared, template: &TemplateRef) -> Result<Source, ApiError> {
    let is_base = template.identifier == BASE_ALIAS || template.identifier == BASE_TEMPLATE_ID;
    if is_base && template.tag == DEFAULT_TAG {
        return Ok(Source {
            template_id: BASE_TEMPLATE_ID.to_owned(),
            alias: Some(BASE_ALIAS.to_owned()),
            copy_from: None,
        });
    }
    let identifier = &template.identifier;
    let Some(found) = shared.template(identifier).filter(|_| !is_base) else {
        if is_base {
            return Err(fail(
                StatusCode::NOT_FOUND,
                format!(
                    "tag '{}' does not exist for template '{identifier}'",
                    template.tag
                ),
            ));
        }
        return Err(fail(
            StatusCode::NOT_FOUND,
            format!("template '{identifier}' not found"),
        ));
    };
    let Some(build) = found.builds.get(&template.tag) else {
        return Err(fail(
            StatusCode::NOT_FOUND,
            format!(
                "tag '{}' does not exist for template '{identifier}'",
                template.tag
            ),
        ));
    };
    let alias = found
        .names
        .first()
        .map(|n| n.rsplit('/').next().unwrap_or(n).to_owned());
    Ok(Source {
        template_id: found.id.clone(),
        alias,
        copy_from: Some(build.fs.clone()),
    })
}

fn validate_timeout(timeout: Option<i64>, default: Duration) -> Result<Duration, ApiError> {
    let Some(secs) = timeout else {
        return Ok(default);
    };
    let Ok(secs) = u64::try_from(secs) else {
        return Err(fail(
            StatusCode::BAD_REQUEST,
            "Timeout must be greater than 0",
        ));
    };
    if secs == 0 {
        return Err(fail(
            StatusCode::BAD_REQUEST,
            "Timeout must be greater than 0",
        ));
    }
    check_max(secs)
}

fn check_max(secs: u64) -> Result<Duration, ApiError> {
    if secs > MAX_HOURS * 3600 {
        return Err(fail(
            StatusCode::BAD_REQUEST,
            format!("Timeout cannot be greater than {MAX_HOURS} hours"),
        ));
    }
    Ok(Duration::from_secs(secs))
}

/// The `Sandbox` schema.
pub(super) fn sandbox_json(sandbox: &Sandbox) -> Value {
    let mut value = json!({
        "templateID": sandbox.template_id,
        "sandboxID": sandbox.id,
        "clientID": CLIENT_ID,
        "envdVersion": ENVD_VERSION,
        "trafficAccessToken": null,
        "domain": null,
    });
    if let Some(alias) = &sandbox.alias {
        value["alias"] = json!(alias);
    }
    if let Some(token) = &sandbox.envd_token {
        value["envdAccessToken"] = json!(token);
    }
    value
}

fn detail_json(sandbox: &Sandbox) -> Value {
    let mut value = sandbox_json(sandbox);
    let state = match sandbox.state() {
        RunState::Running => "running",
        RunState::Paused => "paused",
    };
    let extra = json!({
        "startedAt": rfc3339(sandbox.started_at),
        "endAt": rfc3339(sandbox.end_at()),
        "cpuCount": 2,
        "memoryMB": 512,
        "diskSizeMB": 512,
        "state": state,
        "allowInternetAccess": null,
    });
    if let (Some(value), Value::Object(extra)) = (value.as_object_mut(), extra) {
        value.remove("trafficAccessToken");
        value.extend(extra);
        if !sandbox.metadata.is_empty() {
            value.insert("metadata".to_owned(), json!(sandbox.metadata));
        }
    }
    value
}

/// `GET /sandboxes` (running ones) and `GET /v2/sandboxes` (`state=running,paused` filter,
/// both by default): `ListedSandbox`es, newest first. Metadata filters and pagination are
/// not implemented.
pub(super) fn list(shared: &Shared, query: &str, version: Version) -> Response<Body> {
    let params = crate::envd::query::parse(query);
    let states = crate::envd::query::get(&params, "state")
        .map(|s| s.split(',').map(str::to_owned).collect::<Vec<_>>());
    let wanted = |state: &str| match (&states, version) {
        (Some(states), Version::V2) => states.iter().any(|s| s == state),
        (None, Version::V2) => true,
        (_, Version::V1) => state == "running",
    };
    let mut sandboxes = shared.sandboxes();
    sandboxes.sort_by_key(|s| std::cmp::Reverse(s.started_at));
    let listed: Vec<Value> = sandboxes
        .iter()
        .map(|s| detail_json(s))
        .filter(|d| wanted(d["state"].as_str().unwrap_or("")))
        .map(|mut d| {
            if let Some(d) = d.as_object_mut() {
                for key in ["envdAccessToken", "domain", "allowInternetAccess"] {
                    d.remove(key);
                }
            }
            d
        })
        .collect();
    body::json(StatusCode::OK, &Value::Array(listed))
}

fn lookup(shared: &Shared, id: &str) -> Result<Arc<Sandbox>, ApiError> {
    shared
        .sandbox(id)
        .ok_or_else(|| fail(StatusCode::NOT_FOUND, sandbox_not_found(id)))
}

/// A sandbox that is running; a paused one is not in the orchestrator and answers 404.
fn running(shared: &Shared, id: &str) -> Result<Arc<Sandbox>, ApiError> {
    lookup(shared, id).and_then(|s| {
        if s.is_running() {
            Ok(s)
        } else {
            Err(fail(StatusCode::NOT_FOUND, sandbox_not_found(id)))
        }
    })
}

/// `GET /sandboxes/{id}`.
pub(super) fn get(shared: &Shared, id: &str) -> Response<Body> {
    match lookup(shared, id) {
        Ok(sandbox) => body::json(StatusCode::OK, &detail_json(&sandbox)),
        Err(e) => e.into(),
    }
}

/// `DELETE /sandboxes/{id}`: 204, or 404.
pub(super) fn kill(shared: &Shared, id: &str) -> Response<Body> {
    if shared.kill(id) {
        body::empty(StatusCode::NO_CONTENT)
    } else {
        error(StatusCode::NOT_FOUND, sandbox_not_found(id))
    }
}

/// `POST /sandboxes/{id}/connect` (and `/v2`): 200 when running (the timeout only extends),
/// 201 when it resumed a paused sandbox.
pub(super) fn connect(shared: &Shared, id: &str, body: &[u8], version: Version) -> Response<Body> {
    let (schema, required) = if version == Version::V1 {
        ("ConnectSandbox", true)
    } else {
        ("ConnectSandboxV2", false)
    };
    let req: TimeoutBody = match parse_body(body, schema, required) {
        Ok(req) => req,
        Err(e) => return e.into(),
    };
    let timeout = match (req.timeout, version) {
        (None, Version::V1) => {
            return error(StatusCode::BAD_REQUEST, missing_property(schema, "timeout"));
        }
        (None, Version::V2) => None,
        (Some(secs), _) => match u64::try_from(secs).map_err(|_| ()).map(check_max) {
            Ok(Ok(timeout)) => Some(timeout),
            Ok(Err(e)) => return e.into(),
            Err(()) => return error(StatusCode::BAD_REQUEST, below_minimum(schema, "timeout")),
        },
    };
    let sandbox = match lookup(shared, id) {
        Ok(sandbox) => sandbox,
        Err(e) => return e.into(),
    };
    if sandbox.resume(timeout.unwrap_or(V2_DEFAULT_TIMEOUT)) {
        return body::json(StatusCode::CREATED, &sandbox_json(&sandbox));
    }
    if let Some(timeout) = timeout {
        sandbox.set_timeout(timeout, true);
    }
    body::json(StatusCode::OK, &sandbox_json(&sandbox))
}

fn missing_property(schema: &str, property: &str) -> String {
    format!(
        "validation error: error in openapi3filter.RequestError: request body has an error: doesn't match schema #/components/schemas/{schema}: Error at \"/{property}\": property \"{property}\" is missing"
    )
}

fn below_minimum(schema: &str, property: &str) -> String {
    format!(
        "validation error: error in openapi3filter.RequestError: request body has an error: doesn't match schema #/components/schemas/{schema}: Error at \"/{property}\": number must be at least 0"
    )
}

/// `POST /sandboxes/{id}/pause`: 204, 409 when already paused, 404.
pub(super) fn pause(shared: &Shared, id: &str, body: &[u8]) -> Response<Body> {
    if let Err(e) = parse_body::<Value>(body, "SandboxPauseRequest", false) {
        return e.into();
    }
    match lookup(shared, id) {
        Ok(sandbox) if sandbox.pause() => body::empty(StatusCode::NO_CONTENT),
        Ok(_) => error(
            StatusCode::CONFLICT,
            format!("Error pausing sandbox - sandbox '{id}' is already paused"),
        ),
        Err(e) => e.into(),
    }
}

/// `POST /sandboxes/{id}/resume` (deprecated): 201, 409 when running, 404.
pub(super) fn resume(shared: &Shared, id: &str, body: &[u8]) -> Response<Body> {
    let req: TimeoutBody = match parse_body(body, "ResumedSandbox", false) {
        Ok(req) => req,
        Err(e) => return e.into(),
    };
    let timeout = match validate_timeout(req.timeout, DEFAULT_TIMEOUT) {
        Ok(timeout) => timeout,
        Err(e) => return e.into(),
    };
    match lookup(shared, id) {
        Ok(sandbox) if sandbox.resume(timeout) => {
            body::json(StatusCode::CREATED, &sandbox_json(&sandbox))
        }
        Ok(_) => error(
            StatusCode::CONFLICT,
            format!("Sandbox {id} is already running"),
        ),
        Err(e) => e.into(),
    }
}

/// `POST /sandboxes/{id}/timeout`: the sandbox ends `timeout` seconds from now (shorter too).
pub(super) fn set_timeout(shared: &Shared, id: &str, body: &[u8]) -> Response<Body> {
    let req: TimeoutBody = match parse_body(body, "SandboxTimeoutRequest", true) {
        Ok(req) => req,
        Err(e) => return e.into(),
    };
    let Some(secs) = req.timeout else {
        return error(
            StatusCode::BAD_REQUEST,
            missing_property("SandboxTimeoutRequest", "timeout"),
        );
    };
    match running(shared, id) {
        Ok(sandbox) => {
            sandbox.set_timeout(Duration::from_secs(u64::try_from(secs).unwrap_or(0)), false);
            body::empty(StatusCode::NO_CONTENT)
        }
        Err(e) => e.into(),
    }
}

/// `POST /sandboxes/{id}/refreshes`: extends the sandbox by `duration` seconds.
pub(super) fn refresh(shared: &Shared, id: &str, body: &[u8]) -> Response<Body> {
    let req: RefreshBody = match parse_body(body, "SandboxRefreshRequest", false) {
        Ok(req) => req,
        Err(e) => return e.into(),
    };
    let duration = req.duration.map_or(DEFAULT_TIMEOUT, Duration::from_secs);
    match running(shared, id) {
        Ok(sandbox) => {
            sandbox.set_timeout(duration, true);
            body::empty(StatusCode::NO_CONTENT)
        }
        Err(e) => e.into(),
    }
}
