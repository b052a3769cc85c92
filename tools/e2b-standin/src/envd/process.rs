//! The `process.Process` Connect service: `Start` and `Connect` (server streams of start, data,
//! keepalive and end events), `List`, `SendSignal`, `SendInput`, `StreamInput`, `CloseStdin`.
//! PTYs are not implemented.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::request::Parts;
use http::{HeaderMap, Response, StatusCode};
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, Interval};

use super::procs::{self, ProcEvent, Spawn, as_u64};
use super::rpc_user;
use crate::body::{self, Body};
use crate::connect::{self, Code, RpcError, RpcResult, StreamWriter};
use crate::paths::{SandboxPath, User};
use crate::state::Sandbox;

/// Answers one `process.Process` call.
pub(super) async fn handle(sandbox: &Sandbox, parts: &Parts, body: &[u8]) -> Response<Body> {
    let method = parts.uri.path().trim_start_matches("/process.Process/");
    let Some(streaming) = connect::request_kind(&parts.headers) else {
        return connect::unsupported_media_type();
    };
    let wants_stream = matches!(method, "Start" | "Connect" | "StreamInput");
    let known = wants_stream
        || matches!(
            method,
            "List" | "SendSignal" | "SendInput" | "CloseStdin" | "Update"
        );
    if !known {
        return body::response(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "404 page not found\n",
        );
    }
    if streaming != wants_stream {
        return connect::unsupported_media_type();
    }
    match method {
        "Start" => start(sandbox, &parts.headers, body),
        "Connect" => attach(sandbox, &parts.headers, body),
        "StreamInput" => stream_input(sandbox, body).await,
        _ => {
            let result = match connect::unary_message(body) {
                Ok(message) => unary(sandbox, method, &message).await,
                Err(e) => Err(e),
            };
            connect::unary_response(result)
        }
    }
}

fn first_message(body: &[u8]) -> RpcResult {
    connect::stream_messages(body)?
        .into_iter()
        .next()
        .ok_or_else(|| {
            RpcError::new(
                Code::InvalidArgument,
                "protocol error: missing request message",
            )
        })
}

/// `Start`: runs the process and streams its events until it ends (or the call's deadline,
/// which also kills it, as envd's does).
fn start(sandbox: &Sandbox, headers: &HeaderMap, body: &[u8]) -> Response<Body> {
    let prepared = rpc_user(headers)
        .and_then(|user| Ok((user, first_message(body)?)))
        .and_then(|(user, message)| spawn_spec(sandbox, user, &message));
    let timeout = match prepared.and_then(|spec| Ok((spec, call_timeout(headers)?))) {
        Ok((spec, timeout)) => (spec, timeout),
        Err(error) => return connect::stream_failed(&error),
    };
    let (spec, timeout) = timeout;
    let command = std::iter::once(spec.cmd.as_str())
        .chain(spec.args.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ");
    let (proc, events) = match procs::spawn(&sandbox.procs, spec) {
        Ok(spawned) => spawned,
        Err(e) => {
            let error = RpcError::new(
                Code::InvalidArgument,
                format!("error starting process '{command}': {e}"),
            );
            return connect::stream_failed(&error);
        }
    };
    let deadline = timeout.map(|t| Instant::now() + t);
    if let Some(deadline) = deadline {
        let proc = Arc::clone(&proc);
        tokio::spawn(async move {
            tokio::time::sleep_until(deadline).await;
            let _ = proc.signal_process(Signal::SIGKILL);
        });
    }
    stream(sandbox, headers, proc.pid, deadline, events)
}

fn spawn_spec(sandbox: &Sandbox, user: User, message: &Value) -> RpcResult<Spawn> {
    if message.get("pty").is_some_and(|p| !p.is_null()) {
        return Err(RpcError::new(
            Code::Unimplemented,
            "PTY processes are not implemented by the stand-in",
        ));
    }
    let config = message.get("process").cloned().unwrap_or_else(|| json!({}));
    let cmd = config
        .get("cmd")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let args = config
        .get("args")
        .and_then(Value::as_array)
        .map_or_else(Vec::new, |a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        });
    let cwd = SandboxPath::resolve(
        &sandbox.fs,
        user,
        config.get("cwd").and_then(Value::as_str).unwrap_or(""),
    )
    .map_err(|e| RpcError::new(Code::InvalidArgument, e))?;
    if !cwd.host.is_dir() {
        return Err(RpcError::new(
            Code::InvalidArgument,
            format!("cwd '{}' does not exist", cwd.inner),
        ));
    }
    let env = process_env(sandbox, user, &config)?;
    let stdin = message
        .get("stdin")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let tag = message
        .get("tag")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok(Spawn {
        cmd,
        args,
        env,
        cwd: cwd.host,
        stdin,
        config,
        tag,
    })
}

/// envd's environment for a process (`PATH`, `HOME`, `USER`, `LOGNAME`, the sandbox's
/// variables, the request's), with `HOME` mapped into the sandbox directory.
fn process_env(
    sandbox: &Sandbox,
    user: User,
    config: &Value,
) -> RpcResult<BTreeMap<String, String>> {
    let home = SandboxPath::resolve(&sandbox.fs, user, "~")
        .map_err(|e| RpcError::new(Code::Internal, e))?;
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".to_owned());
    let mut env = BTreeMap::new();
    env.insert("PATH".to_owned(), path);
    env.insert("HOME".to_owned(), home.host.to_string_lossy().into_owned());
    env.insert("USER".to_owned(), user.name().to_owned());
    env.insert("LOGNAME".to_owned(), user.name().to_owned());
    env.extend(sandbox.env_vars.clone());
    if let Some(envs) = config.get("envs").and_then(Value::as_object) {
        env.extend(
            envs.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))),
        );
    }
    Ok(env)
}

fn call_timeout(headers: &HeaderMap) -> RpcResult<Option<Duration>> {
    let Some(value) = headers.get("connect-timeout-ms") else {
        return Ok(None);
    };
    let millis: u64 = value
        .to_str()
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| RpcError::new(Code::InvalidArgument, "invalid Connect-Timeout-Ms"))?;
    Ok((millis > 0).then(|| Duration::from_millis(millis)))
}

fn keepalive(headers: &HeaderMap) -> Option<Duration> {
    let secs: u64 = headers
        .get("keepalive-ping-interval")?
        .to_str()
        .ok()?
        .parse()
        .ok()?;
    (secs > 0).then(|| Duration::from_secs(secs))
}

/// The response streaming `events` of process `pid` until it ends, `deadline` passes or the
/// sandbox drops its connections (a pause, a snapshot, a kill).
fn stream(
    sandbox: &Sandbox,
    headers: &HeaderMap,
    pid: u32,
    deadline: Option<Instant>,
    events: mpsc::UnboundedReceiver<ProcEvent>,
) -> Response<Body> {
    let stream = Stream {
        pid,
        keepalive: keepalive(headers),
        deadline,
        drops: sandbox.connection_drops(),
    };
    let (writer, resp) = connect::stream_response();
    tokio::spawn(stream.forward(writer, events));
    resp
}

/// `Connect`: attaches to a running process and streams its events from now on.
fn attach(sandbox: &Sandbox, headers: &HeaderMap, body: &[u8]) -> Response<Body> {
    let found = first_message(body).and_then(|m| sandbox.procs.find(m.get("process")));
    let timeout = found.and_then(|proc| Ok((proc, call_timeout(headers)?)));
    let (proc, timeout) = match timeout {
        Ok(found) => found,
        Err(error) => return connect::stream_failed(&error),
    };
    let events = proc.subscribe();
    let deadline = timeout.map(|t| Instant::now() + t);
    stream(sandbox, headers, proc.pid, deadline, events)
}

/// One process event stream being answered.
struct Stream {
    pid: u32,
    keepalive: Option<Duration>,
    deadline: Option<Instant>,
    drops: watch::Receiver<u64>,
}

impl Stream {
    async fn forward(
        mut self,
        writer: StreamWriter,
        mut events: mpsc::UnboundedReceiver<ProcEvent>,
    ) {
        if !writer
            .send(&json!({ "event": { "start": { "pid": self.pid } } }))
            .await
        {
            return;
        }
        let mut ticker = self
            .keepalive
            .map(|p| tokio::time::interval_at(Instant::now() + p, p));
        loop {
            let message = tokio::select! {
                event = events.recv() => match event {
                    Some(ProcEvent::Stdout(bytes)) => json!({ "event": { "data": { "stdout": STANDARD.encode(bytes) } } }),
                    Some(ProcEvent::Stderr(bytes)) => json!({ "event": { "data": { "stderr": STANDARD.encode(bytes) } } }),
                    Some(ProcEvent::End(end)) => {
                        if writer.send(&json!({ "event": { "end": end } })).await {
                            writer.end(None).await;
                        }
                        return;
                    }
                    None => return writer.end(Some(RpcError::new(Code::Unknown, "end event channel closed before sending end event"))).await,
                },
                () = tick(ticker.as_mut()) => json!({ "event": { "keepalive": {} } }),
                () = until(self.deadline) => {
                    return writer.end(Some(RpcError::new(Code::DeadlineExceeded, "context deadline exceeded"))).await;
                }
                _ = self.drops.changed() => return writer.abort().await,
                () = writer.closed() => return,
            };
            if !writer.send(&message).await {
                return;
            }
        }
    }
}

async fn tick(ticker: Option<&mut Interval>) {
    match ticker {
        Some(ticker) => {
            ticker.tick().await;
        }
        None => std::future::pending().await,
    }
}

async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

async fn unary(sandbox: &Sandbox, method: &str, message: &Value) -> RpcResult {
    match method {
        "List" => Ok(list(sandbox)),
        "SendSignal" => {
            let proc = sandbox.procs.find(message.get("process"))?;
            let signal = match message.get("signal") {
                Some(v) if v == "SIGNAL_SIGKILL" || as_u64(v) == Some(9) => Signal::SIGKILL,
                Some(v) if v == "SIGNAL_SIGTERM" || as_u64(v) == Some(15) => Signal::SIGTERM,
                other => {
                    let name = other.map_or_else(
                        || "SIGNAL_UNSPECIFIED".to_owned(),
                        |v| v.as_str().map_or_else(|| v.to_string(), str::to_owned),
                    );
                    return Err(RpcError::new(
                        Code::Unimplemented,
                        format!("invalid signal: {name}"),
                    ));
                }
            };
            proc.signal_process(signal)
                .map_err(|e| RpcError::new(Code::Internal, format!("error sending signal: {e}")))?;
            Ok(json!({}))
        }
        "SendInput" => {
            let proc = sandbox.procs.find(message.get("process"))?;
            write_input(&proc, message.get("input")).await?;
            Ok(json!({}))
        }
        "CloseStdin" => {
            sandbox
                .procs
                .find(message.get("process"))?
                .close_stdin()
                .await;
            Ok(json!({}))
        }
        _ => Err(RpcError::new(
            Code::Unimplemented,
            format!("process.Process.{method} is not implemented by the stand-in"),
        )),
    }
}

fn list(sandbox: &Sandbox) -> Value {
    let processes: Vec<Value> = sandbox
        .procs
        .list()
        .iter()
        .map(|p| {
            let mut info = json!({ "config": p.config, "pid": p.pid });
            if let Some(tag) = &p.tag {
                info["tag"] = json!(tag);
            }
            info
        })
        .collect();
    if processes.is_empty() {
        json!({})
    } else {
        json!({ "processes": processes })
    }
}

async fn write_input(proc: &procs::Proc, input: Option<&Value>) -> RpcResult<()> {
    let input = input.unwrap_or(&Value::Null);
    if input.get("pty").is_some() {
        let message = "error writing to tty: tty not assigned to process — input should be written to the stdin, not the tty";
        return Err(RpcError::new(Code::Internal, message));
    }
    let Some(data) = input.get("stdin").and_then(Value::as_str) else {
        return Err(RpcError::new(
            Code::Unimplemented,
            "invalid input type <nil>",
        ));
    };
    let bytes = STANDARD
        .decode(data)
        .map_err(|e| RpcError::new(Code::InvalidArgument, format!("invalid base64: {e}")))?;
    proc.write_stdin(&bytes)
        .await
        .map_err(|e| RpcError::new(Code::Internal, format!("error writing to stdin: {e}")))
}

/// `StreamInput` (client stream): a start event naming the process, then data events.
async fn stream_input(sandbox: &Sandbox, body: &[u8]) -> Response<Body> {
    let result: RpcResult<()> = async {
        let mut proc = None;
        for message in connect::stream_messages(body)? {
            let event = message.get("event").unwrap_or(&message);
            if let Some(start) = event.get("start") {
                proc = Some(sandbox.procs.find(start.get("process"))?);
            } else if let Some(data) = event.get("data") {
                let target = proc
                    .as_ref()
                    .ok_or_else(|| RpcError::new(Code::FailedPrecondition, "no start event"))?;
                write_input(target, data.get("input")).await?;
            }
        }
        Ok(())
    }
    .await;
    match result {
        Ok(()) => {
            let mut answer = connect::envelope::encode(0, b"{}").to_vec();
            answer.extend_from_slice(&connect::envelope::encode(
                connect::envelope::END_STREAM,
                b"{}",
            ));
            body::response(StatusCode::OK, "application/connect+json", answer)
        }
        Err(error) => connect::stream_failed(&error),
    }
}
