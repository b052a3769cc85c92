//! Commands in a sandbox: `process.Process/Start`, a Connect server stream of the process's
//! events (start with its pid, stdout and stderr data, end with its exit code), bounded by the
//! command's timeout; past it, `process.Process/SendSignal` kills the process.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use futures_util::StreamExt;
use http::{StatusCode, header};
use serde::de::IgnoredAny;
use serde_json::{Value, json};

use super::connect::{ConnectError, Decoder, Frame, envelope};
use super::encoding::base64_decode;
use super::envd::Envd;
use super::error::{Call, E2bError, E2bErrorKind};
use crate::transport::{ByteStream, TransportError, TransportErrorKind};

/// A command's timeout unless [`RunOptions::timeout`] says otherwise (E2B's SDKs' default).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// The most of each of stdout and stderr kept, unless [`RunOptions::max_output`] says
/// otherwise.
const DEFAULT_MAX_OUTPUT: usize = 1024 * 1024;
/// How often envd sends a keepalive event on a quiet stream, so proxies keep it open (as
/// E2B's SDKs ask).
const KEEPALIVE_SECS: &str = "50";
/// The most of an error answer's body read.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// How to run a command: [`Sandbox::run_with`](super::Sandbox::run_with).
///
/// ```
/// use std::time::Duration;
///
/// use rebuno::resource::drivers::RunOptions;
///
/// let options = RunOptions::new()
///     .timeout(Duration::from_secs(300))
///     .cwd("/home/user/project")
///     .env("RUST_BACKTRACE", "1")
///     .max_output(4 * 1024 * 1024);
/// ```
#[derive(Clone)]
pub struct RunOptions {
    timeout: Duration,
    cwd: Option<String>,
    envs: BTreeMap<String, String>,
    max_output: usize,
}

impl fmt::Debug for RunOptions {
    /// Environment variable names only: their values may be credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunOptions")
            .field("timeout", &self.timeout)
            .field("cwd", &self.cwd)
            .field("envs", &self.envs.keys().collect::<Vec<_>>())
            .field("max_output", &self.max_output)
            .finish()
    }
}

impl Default for RunOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl RunOptions {
    /// The defaults: a 60 s timeout, the user's home as working directory, no extra
    /// environment, 1 MiB of each of stdout and stderr kept.
    pub fn new() -> Self {
        Self {
            timeout: DEFAULT_TIMEOUT,
            cwd: None,
            envs: BTreeMap::new(),
            max_output: DEFAULT_MAX_OUTPUT,
        }
    }

    /// How long the command may run (default 60 s, at most 24 h: longer is cut to that).
    /// Past it the process and its process group are killed (`SIGKILL`) and the run fails with
    /// [`E2bErrorKind::Timeout`]. Keep it under the sandbox's lifetime
    /// ([`E2bSandbox::timeout`](super::E2bSandbox::timeout)).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout.min(MAX_TIMEOUT);
        self
    }

    /// The working directory (default: the user's home, `/home/user`).
    #[must_use]
    pub fn cwd(mut self, dir: impl Into<String>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Sets an environment variable for the command.
    #[must_use]
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.envs.insert(name.into(), value.into());
        self
    }

    /// The most bytes of each of stdout and stderr kept (default 1 MiB); the rest is
    /// dropped and [`CommandOutput::truncated`] set.
    #[must_use]
    pub fn max_output(mut self, bytes: usize) -> Self {
        self.max_output = bytes;
        self
    }
}

/// What a finished command left: its exit code and output.
///
/// A non-zero exit code is an output like any other, not an error (E2B's SDKs raise
/// instead): check [`success`](Self::success) or [`exit_code`](Self::exit_code).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommandOutput {
    /// The exit code (`-1` when a signal ended the process).
    pub exit_code: i32,
    /// Standard output (as UTF-8, invalid sequences replaced), up to the bound.
    pub stdout: String,
    /// Standard error (as UTF-8, invalid sequences replaced), up to the bound.
    pub stderr: String,
    /// Whether stdout or stderr went past [`RunOptions::max_output`] and was cut.
    pub truncated: bool,
}

impl CommandOutput {
    /// Whether the command exited with code 0.
    pub fn success(&self) -> bool {
        self.exit_code == 0
    }
}

/// `commands.run`: runs `cmd` with `/bin/bash -l -c` and waits for it to end.
pub(super) async fn run(
    envd: &Envd,
    cmd: &str,
    options: &RunOptions,
) -> Result<CommandOutput, E2bError> {
    let call = Call::envd(format!("commands.run {}", label(cmd)), envd.sandbox_id());
    let (url, request) = start_request(envd, cmd, options)?;
    tracing::debug!(call = %call.name, sandbox = %envd.sandbox_id(), "E2B envd stream");
    let answer = match envd
        .transport()
        .send_streaming(request, options.timeout)
        .await
    {
        Ok(answer) => answer,
        Err(error) if error.kind() == TransportErrorKind::Timeout => {
            let what = format!("no answer from {url}; envd ends the process at the same deadline");
            return Err(E2bError::command_timeout(call, options.timeout, &what));
        }
        Err(error) => return Err(E2bError::transport(call, &url, error)),
    };
    if answer.status() != StatusCode::OK {
        return Err(refusal(call, answer).await);
    }
    let mut process = Process::new(options.max_output);
    match follow(&call, &url, answer.into_body(), &mut process).await {
        Ok(()) => process
            .finish()
            .map_err(|what| E2bError::protocol(call, what)),
        Err(Stop::TimedOut) => {
            let killed = kill(envd, process.pid).await;
            Err(E2bError::command_timeout(call, options.timeout, &killed))
        }
        Err(Stop::Failed(error)) => Err(error),
    }
}

/// How errors and logs name a command: its first word, never the rest (which may carry a
/// token, or be a long script).
fn label(cmd: &str) -> String {
    let mut words = cmd.split_whitespace();
    let first: String = words.next().unwrap_or_default().chars().take(40).collect();
    let more = words.next().is_some() || first.len() < cmd.trim().len();
    format!("{:?}", if more { format!("{first} …") } else { first })
}

/// The `process.Process/Start` stream request that runs `cmd`: its URL and the request.
fn start_request(
    envd: &Envd,
    cmd: &str,
    options: &RunOptions,
) -> Result<(String, http::Request<bytes::Bytes>), E2bError> {
    let (url, request) = envd.rpc_request("process.Process/Start", options.timeout);
    let message = start_message(cmd, options).to_string();
    let request = request
        .header(header::CONTENT_TYPE, "application/connect+json")
        .header("keepalive-ping-interval", KEEPALIVE_SECS)
        .body(envelope(message.as_bytes()))
        .map_err(|e| E2bError::config(format!("invalid envd request to {url:?}: {e}")))?;
    Ok((url, request))
}

/// The `StartRequest` (proto3 JSON) that runs `cmd` as E2B's SDKs run it, stdin closed.
fn start_message(cmd: &str, options: &RunOptions) -> Value {
    let mut process = json!({ "cmd": "/bin/bash", "args": ["-l", "-c", cmd] });
    if !options.envs.is_empty() {
        process["envs"] = json!(options.envs);
    }
    if let Some(cwd) = &options.cwd {
        process["cwd"] = json!(cwd);
    }
    json!({ "process": process, "stdin": false })
}

/// Why following the stream stopped before its end.
enum Stop {
    TimedOut,
    Failed(E2bError),
}

/// Reads the process's events into `process` until the stream ends.
async fn follow(
    call: &Call,
    url: &str,
    mut body: ByteStream,
    process: &mut Process,
) -> Result<(), Stop> {
    let mut decoder = Decoder::default();
    let protocol = |what: String| Stop::Failed(E2bError::protocol(call.clone(), what));
    while let Some(chunk) = body.next().await {
        let chunk = match chunk {
            Ok(chunk) => chunk,
            // The end event came: what follows does not change the outcome.
            Err(_) if process.ended() => return Ok(()),
            Err(error) if is_timeout(error.as_ref()) => return Err(Stop::TimedOut),
            Err(error) => {
                return Err(Stop::Failed(E2bError::broken_stream(
                    call.clone(),
                    url,
                    error,
                )));
            }
        };
        for frame in decoder.push(&chunk).map_err(protocol)? {
            match frame {
                Frame::Message(data) => process.accept(&data).map_err(protocol)?,
                Frame::End(Ok(())) => return Ok(()),
                Frame::End(Err(error)) => return end_error(call, error, process.ended()),
            }
        }
    }
    if decoder.has_partial() {
        return Err(protocol("the stream ended inside an envelope".to_owned()));
    }
    Ok(())
}

/// What the stream's end-of-stream error means: a timeout when envd's deadline (the same as
/// ours) ran out first, even if envd reported the process's end (its kill) just before; else
/// nothing once the process has ended, or the failure.
fn end_error(call: &Call, error: ConnectError, ended: bool) -> Result<(), Stop> {
    if error.code == "deadline_exceeded" {
        Err(Stop::TimedOut)
    } else if ended {
        Ok(())
    } else {
        Err(Stop::Failed(E2bError::connect(call.clone(), None, error)))
    }
}

/// Sends `SIGKILL` to the timed-out process and to its process group (envd signals only the
/// process, so a `cargo test` under `bash -c` would live on); says what happened, for the error.
async fn kill(envd: &Envd, pid: Option<u32>) -> String {
    let Some(pid) = pid else {
        return "envd ends the process, if it started, at the same deadline".to_owned();
    };
    kill_group(envd, pid).await;
    let call = Call::envd(format!("commands.kill {pid}"), envd.sandbox_id());
    let message = json!({ "process": { "pid": pid }, "signal": "SIGNAL_SIGKILL" });
    match envd
        .unary::<_, IgnoredAny>(&call, "process.Process/SendSignal", &message)
        .await
    {
        Ok(_) => format!("sent SIGKILL to process {pid}"),
        Err(error) if error.kind() == E2bErrorKind::NotFound => {
            format!("process {pid} had already exited")
        }
        Err(error) => {
            tracing::warn!(sandbox = %envd.sandbox_id(), pid, %error, "could not kill a timed-out E2B command");
            format!("could not send SIGKILL to process {pid}: {error}")
        }
    }
}

/// Kills the process group `pid` leads (envd starts each command in a group of its own) with
/// a short command of its own; failures are only logged: the process itself is killed next.
async fn kill_group(envd: &Envd, pid: u32) {
    let options = RunOptions::new().timeout(KILL_TIMEOUT);
    let command = format!("kill -KILL -- -{pid} 2>/dev/null; true");
    let sent = match start_request(envd, &command, &options) {
        Ok((_, request)) => envd.transport().send_streaming(request, KILL_TIMEOUT).await,
        Err(error) => return tracing::warn!(%error, "could not kill a timed-out command's group"),
    };
    match sent {
        // Drained to its end: the kill ran.
        Ok(answer) => answer.into_body().for_each(|_| async {}).await,
        Err(error) => {
            tracing::warn!(sandbox = %envd.sandbox_id(), pid, %error, "could not kill a timed-out command's group")
        }
    }
}

/// The longest timeout a command or a request takes: a `Duration::MAX` would overflow a
/// deadline, and a JS timer.
pub(super) const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// How long killing a timed-out command's group may take.
const KILL_TIMEOUT: Duration = Duration::from_secs(10);

/// The error a non-200 answer to the stream carries.
async fn refusal(call: Call, answer: http::Response<ByteStream>) -> E2bError {
    let status = answer.status();
    let mut body = answer.into_body();
    let mut text = Vec::new();
    while let Some(Ok(chunk)) = body.next().await {
        text.extend_from_slice(&chunk);
        if text.len() > MAX_ERROR_BODY {
            break;
        }
    }
    match ConnectError::from_unary(&text) {
        Some(error) => E2bError::connect(call, Some(status), error),
        None => E2bError::answer(call, status, &text),
    }
}

/// Whether a body error (or one of its causes) is a timeout.
fn is_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(failure) = error.downcast_ref::<TransportError>() {
            return failure.kind() == TransportErrorKind::Timeout;
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::TimedOut
        {
            return true;
        }
        #[cfg(feature = "reqwest")]
        if let Some(failure) = error.downcast_ref::<reqwest::Error>()
            && failure.is_timeout()
        {
            return true;
        }
        current = error.source();
    }
    false
}

/// A running process, as its events describe it.
struct Process {
    pid: Option<u32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    limit: usize,
    truncated: bool,
    exit_code: Option<i32>,
}

impl Process {
    fn new(limit: usize) -> Self {
        Self {
            pid: None,
            stdout: Vec::new(),
            stderr: Vec::new(),
            limit,
            truncated: false,
            exit_code: None,
        }
    }

    fn ended(&self) -> bool {
        self.exit_code.is_some()
    }

    /// Takes in one `StartResponse` (proto3 JSON): `{"event": {"start"|"data"|"end"|
    /// "keepalive": ...}}`.
    fn accept(&mut self, message: &[u8]) -> Result<(), String> {
        let message: Value = serde_json::from_slice(message)
            .map_err(|e| format!("a process event that is not JSON ({e})"))?;
        let event = &message["event"];
        if let Some(start) = event.get("start") {
            self.pid = integer(&start["pid"]).and_then(|pid| u32::try_from(pid).ok());
        }
        if let Some(data) = event.get("data") {
            for (field, into_stdout) in [("stdout", true), ("pty", true), ("stderr", false)] {
                if let Some(text) = data.get(field).and_then(Value::as_str) {
                    let bytes = base64_decode(text)
                        .ok_or_else(|| format!("{field} data that is not base64"))?;
                    self.keep(&bytes, into_stdout);
                }
            }
        }
        if let Some(end) = event.get("end") {
            let code = end.get("exitCode").or_else(|| end.get("exit_code"));
            let code = code.map_or(Some(0), integer); // proto3 JSON leaves out a 0
            let code = code.and_then(|c| i32::try_from(c).ok());
            self.exit_code = Some(code.ok_or("an end event with an invalid exit code")?);
        }
        Ok(())
    }

    /// Appends `bytes` to stdout or stderr, up to the bound.
    fn keep(&mut self, bytes: &[u8], into_stdout: bool) {
        let limit = self.limit;
        let out = if into_stdout {
            &mut self.stdout
        } else {
            &mut self.stderr
        };
        let room = limit.saturating_sub(out.len());
        if bytes.len() > room {
            self.truncated = true;
        }
        out.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn finish(self) -> Result<CommandOutput, &'static str> {
        let exit_code = self
            .exit_code
            .ok_or("the stream ended before the process did")?;
        Ok(CommandOutput {
            exit_code,
            stdout: String::from_utf8_lossy(&self.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&self.stderr).into_owned(),
            truncated: self.truncated,
        })
    }
}

/// A proto3 JSON integer: a number, or a string of one.
fn integer(value: &Value) -> Option<i64> {
    match value {
        Value::String(text) => text.parse().ok(),
        value => value.as_i64(),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use serde_json::json;

    use super::super::fake::{Answer, Fake, Seen, frame, sandbox_json};
    use super::*;

    /// The process events of a run, as envd frames them.
    fn events(events: &[Value], end: &Value) -> Vec<u8> {
        let mut wire: Vec<u8> = events.iter().flat_map(|e| frame(0, e)).collect();
        wire.extend(frame(0x02, end));
        wire
    }

    fn start(pid: u32) -> Value {
        json!({ "event": { "start": { "pid": pid } } })
    }

    #[tokio::test]
    async fn a_command_streams_its_output_and_exit_code() {
        let fake = Fake::default();
        let sandbox = fake.sandbox().await;
        let wire = events(
            &[
                start(7),
                json!({ "event": { "data": { "stdout": "aGVsbG8K" } } }), // "hello\n"
                json!({ "event": { "keepalive": {} } }),
                json!({ "event": { "data": { "stderr": "b29wcw==" } } }), // "oops"
                json!({ "event": { "end": { "exitCode": 2, "exited": true, "status": "exit status 2" } } }),
            ],
            &json!({}),
        );
        let chunks = wire
            .chunks(3)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        fake.answer(Answer::Stream(200, chunks));
        let output = sandbox
            .run("echo hello; echo oops >&2; exit 2")
            .await
            .unwrap();
        assert_eq!(
            output,
            CommandOutput {
                exit_code: 2,
                stdout: "hello\n".into(),
                stderr: "oops".into(),
                truncated: false,
            }
        );
        assert!(!output.success());

        let [request] = fake.take().try_into().unwrap();
        assert_start_request(&request, "echo hello; echo oops >&2; exit 2");
    }

    /// The `Start` request for `cmd` with the default options: one envelope, the Connect and
    /// envd headers.
    fn assert_start_request(request: &Seen, cmd: &str) {
        assert_eq!(
            request.url,
            "https://49983-i1.e2b.app/process.Process/Start"
        );
        assert_eq!(
            request.header("content-type"),
            Some("application/connect+json")
        );
        assert_eq!(request.header("connect-protocol-version"), Some("1"));
        assert_eq!(request.header("connect-timeout-ms"), Some("60000"));
        assert_eq!(request.header("keepalive-ping-interval"), Some("50"));
        assert_eq!(request.header("e2b-sandbox-id"), Some("i1"));
        assert_eq!(request.header("x-access-token"), Some("token-1"));
        assert_eq!(request.timeout, Duration::from_secs(60));
        let (head, message) = request.body.split_at(5);
        assert_eq!(head[0], 0);
        assert_eq!(
            usize::try_from(u32::from_be_bytes(head[1..].try_into().unwrap())).unwrap(),
            message.len()
        );
        let message: Value = serde_json::from_slice(message).unwrap();
        assert_eq!(
            message,
            json!({ "process": { "cmd": "/bin/bash", "args": ["-l", "-c", cmd] }, "stdin": false })
        );
    }

    #[tokio::test]
    async fn a_zero_exit_code_may_be_left_out() {
        let fake = Fake::default();
        let sandbox = fake.sandbox().await;
        let wire = events(
            &[start(1), json!({ "event": { "end": { "exited": true } } })],
            &json!({}),
        );
        fake.answer(Answer::Stream(200, vec![Ok(wire.into())]));
        assert!(sandbox.run("true").await.unwrap().success());
    }

    #[tokio::test]
    async fn output_past_the_bound_is_cut() {
        let fake = Fake::default();
        let sandbox = fake.sandbox().await;
        let wire = events(
            &[
                start(7),
                json!({ "event": { "data": { "stdout": "aGVs" } } }), // "hel"
                json!({ "event": { "data": { "stdout": "bG8K" } } }), // "lo\n"
                json!({ "event": { "data": { "stderr": "b29wcw==" } } }), // "oops"
                json!({ "event": { "end": { "exitCode": 0 } } }),
            ],
            &json!({}),
        );
        fake.answer(Answer::Stream(200, vec![Ok(wire.into())]));
        let options = RunOptions::new().max_output(4);
        let output = sandbox.run_with("yes", options).await.unwrap();
        assert_eq!(
            (output.stdout.as_str(), output.stderr.as_str()),
            ("hell", "oops")
        );
        assert!(output.truncated);
    }

    #[tokio::test]
    async fn a_command_past_its_timeout_is_killed() {
        let fake = Fake::default();
        let sandbox = fake.sandbox().await;
        let timed_out = TransportError::new(TransportErrorKind::Timeout, "deadline passed");
        fake.answer(Answer::Stream(
            200,
            vec![Ok(frame(0, &start(42)).into()), Err(Box::new(timed_out))],
        ));
        fake.answer(Answer::Stream(
            200,
            vec![Ok(events(&[start(43)], &json!({})).into())],
        ));
        fake.answer(Answer::Json(200, json!({})));
        let options = RunOptions::new().timeout(Duration::from_secs(5));
        let error = sandbox.run_with("sleep 100", options).await.unwrap_err();
        assert_eq!(error.kind(), E2bErrorKind::Timeout);
        assert_eq!(error.sandbox_id(), Some("i1"));
        assert_eq!(error.call(), "commands.run \"sleep …\"");
        let text = error.to_string();
        assert!(
            text.contains("timed out after 5s; sent SIGKILL to process 42"),
            "{text}"
        );

        let [start, group, kill] = fake.take().try_into().unwrap();
        assert_eq!(start.timeout, Duration::from_secs(5));
        assert_eq!(group.url, "https://49983-i1.e2b.app/process.Process/Start");
        let args = &group.envelope_json()["process"]["args"];
        assert_eq!(
            args[2], "kill -KILL -- -42 2>/dev/null; true",
            "the group, not only bash"
        );
        assert_eq!(start.header("connect-timeout-ms"), Some("5000"));
        assert_eq!(
            kill.url,
            "https://49983-i1.e2b.app/process.Process/SendSignal"
        );
        assert_eq!(kill.header("content-type"), Some("application/json"));
        assert_eq!(kill.header("connect-protocol-version"), Some("1"));
        assert_eq!(kill.header("x-access-token"), Some("token-1"));
        assert_eq!(
            kill.json(),
            json!({ "process": { "pid": 42 }, "signal": "SIGNAL_SIGKILL" })
        );
    }

    #[tokio::test]
    async fn envds_own_deadline_is_a_timeout_too() {
        let fake = Fake::default();
        let sandbox = fake.sandbox().await;
        let end = json!({ "error": { "code": "deadline_exceeded", "message": "context deadline exceeded" } });
        fake.answer(Answer::Stream(
            200,
            vec![Ok(events(&[start(9)], &end).into())],
        ));
        fake.answer(Answer::Stream(
            200,
            vec![Ok(events(&[start(10)], &json!({})).into())],
        ));
        fake.answer(Answer::Json(
            404,
            json!({ "code": "not_found", "message": "process with pid 9 not found" }),
        ));
        let error = sandbox.run("sleep 100").await.unwrap_err();
        assert_eq!(error.kind(), E2bErrorKind::Timeout);
        assert!(
            error.to_string().contains("process 9 had already exited"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn envds_deadline_wins_over_the_end_of_the_killed_process() {
        let fake = Fake::default();
        let sandbox = fake.sandbox().await;
        let killed = json!({ "event": { "end": { "exitCode": -1, "status": "signal: killed" } } });
        let end =
            json!({ "error": { "code": "deadline_exceeded", "message": "deadline exceeded" } });
        fake.answer(Answer::Stream(
            200,
            vec![Ok(events(&[start(9), killed], &end).into())],
        ));
        fake.answer(Answer::Stream(
            200,
            vec![Ok(events(&[start(10)], &json!({})).into())],
        ));
        fake.answer(Answer::Json(
            404,
            json!({ "code": "not_found", "message": "no process" }),
        ));
        let error = sandbox.run("sleep 100").await.unwrap_err();
        assert_eq!(error.kind(), E2bErrorKind::Timeout);
    }

    #[tokio::test]
    async fn stream_errors_fail_the_run() {
        let fake = Fake::default();
        let sandbox = fake.sandbox().await;
        let end =
            json!({ "error": { "code": "invalid_argument", "message": "no such directory" } });
        fake.answer(Answer::Stream(200, vec![Ok(events(&[], &end).into())]));
        let error = sandbox
            .run_with("ls", RunOptions::new().cwd("/nope"))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), E2bErrorKind::Api);
        assert_eq!(error.code(), Some("invalid_argument"));
        assert!(error.to_string().contains("no such directory"), "{error}");

        // A stream that stops before the process ended.
        fake.answer(Answer::Stream(200, vec![Ok(frame(0, &start(1)).into())]));
        let error = sandbox.run("ls").await.unwrap_err();
        assert_eq!(error.kind(), E2bErrorKind::Protocol);

        // A refusal before the stream: the proxy's answer for a sandbox that is not running.
        // The handle connects again (which resumes a paused sandbox) and runs the command once
        // more; a sandbox that is gone stays an error that says so.
        let not_running = || {
            Answer::Json(
                502,
                json!({ "code": 502, "message": "The sandbox was not found" }),
            )
        };
        fake.take();
        fake.answer(not_running());
        fake.answer(Answer::Json(201, sandbox_json("i1", "token-2", None)));
        let ended = json!({ "event": { "end": { "exited": true, "status": "exit status 0" } } });
        fake.answer(Answer::Stream(
            200,
            vec![Ok(events(&[start(5), ended], &json!({})).into())],
        ));
        assert!(
            sandbox.run("ls").await.unwrap().success(),
            "resumed and run"
        );
        let [refused, connect, again] = fake.take().try_into().unwrap();
        assert_eq!(connect.url, "https://api.e2b.app/sandboxes/i1/connect");
        assert_eq!(refused.url, again.url);
        assert_eq!(again.header("x-access-token"), Some("token-2"));

        fake.answer(not_running());
        fake.answer(Answer::Json(
            404,
            json!({ "code": 404, "message": "sandbox \"i1\" doesn't exist" }),
        ));
        let error = sandbox.run("ls").await.unwrap_err();
        assert_eq!(error.kind(), E2bErrorKind::NotFound);
        assert_eq!(error.status(), Some(StatusCode::NOT_FOUND));
    }

    #[test]
    fn the_start_request_carries_cwd_and_envs() {
        let options = RunOptions::new()
            .cwd("project")
            .env("A", "1")
            .env("B", "secret");
        assert_eq!(
            start_message("make", &options),
            json!({
                "process": {
                    "cmd": "/bin/bash", "args": ["-l", "-c", "make"],
                    "envs": { "A": "1", "B": "secret" }, "cwd": "project",
                },
                "stdin": false,
            })
        );
        assert!(!format!("{options:?}").contains("secret"));
    }
}
