//! A sandbox's processes: real child processes, each the leader of its own process group (so
//! a signal reaches everything it started), their output fanned out to every stream attached.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

use crate::connect::{Code, RpcError, RpcResult};

type Table = Arc<Mutex<HashMap<u32, Arc<Proc>>>>;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The running processes of one sandbox, by pid.
#[derive(Default)]
pub(crate) struct ProcTable {
    inner: Table,
}

impl ProcTable {
    /// The process a `ProcessSelector` (`{"pid": n}` or `{"tag": s}`) names.
    pub(crate) fn find(&self, selector: Option<&Value>) -> RpcResult<Arc<Proc>> {
        let selector = selector.unwrap_or(&Value::Null);
        let table = lock(&self.inner);
        if let Some(pid) = selector.get("pid").and_then(as_u64) {
            let pid = u32::try_from(pid).unwrap_or(0);
            return table.get(&pid).cloned().ok_or_else(|| {
                RpcError::new(Code::NotFound, format!("process with pid {pid} not found"))
            });
        }
        if let Some(tag) = selector.get("tag").and_then(Value::as_str) {
            return table
                .values()
                .find(|p| p.tag.as_deref() == Some(tag))
                .cloned()
                .ok_or_else(|| {
                    RpcError::new(Code::NotFound, format!("process with tag {tag} not found"))
                });
        }
        Err(RpcError::new(
            Code::Unimplemented,
            "invalid input type <nil>",
        ))
    }

    /// Every running process, by pid.
    pub(crate) fn list(&self) -> Vec<Arc<Proc>> {
        let mut all: Vec<Arc<Proc>> = lock(&self.inner).values().cloned().collect();
        all.sort_by_key(|p| p.pid);
        all
    }

    /// Sends a signal to every process group (pause, resume, kill).
    pub(crate) fn signal_all(&self, signal: Signal) {
        for proc in lock(&self.inner).values() {
            let _ = proc.signal(signal);
        }
    }
}

/// What a process emits to the streams attached to it.
#[derive(Clone, Debug)]
pub(crate) enum ProcEvent {
    Stdout(Bytes),
    Stderr(Bytes),
    /// The `EndEvent`, in JSON.
    End(Value),
}

/// One running process.
pub(crate) struct Proc {
    pub(crate) pid: u32,
    /// The `ProcessConfig` it was started with, as `List` reports it.
    pub(crate) config: Value,
    pub(crate) tag: Option<String>,
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    subscribers: Mutex<Vec<mpsc::UnboundedSender<ProcEvent>>>,
    exited: AtomicBool,
}

impl Proc {
    /// Signals the process alone, as envd's `SendSignal` and its deadline kill do (Go's
    /// `Process.Signal`): its children live on unless the caller signals the group.
    pub(crate) fn signal_process(&self, signal: Signal) -> nix::Result<()> {
        if self.exited.load(Ordering::Acquire) {
            return Ok(());
        }
        nix::sys::signal::kill(
            Pid::from_raw(i32::try_from(self.pid).unwrap_or(i32::MAX)),
            signal,
        )
    }

    /// Signals the process group (pausing and killing the whole sandbox).
    pub(crate) fn signal(&self, signal: Signal) -> nix::Result<()> {
        if self.exited.load(Ordering::Acquire) {
            return Ok(());
        }
        killpg(
            Pid::from_raw(i32::try_from(self.pid).unwrap_or(i32::MAX)),
            signal,
        )
    }

    /// A receiver of every event from now on.
    pub(crate) fn subscribe(&self) -> mpsc::UnboundedReceiver<ProcEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        lock(&self.subscribers).push(tx);
        rx
    }

    fn publish(&self, event: &ProcEvent) {
        lock(&self.subscribers).retain(|tx| tx.send(event.clone()).is_ok());
    }

    /// Writes to the process's stdin.
    pub(crate) async fn write_stdin(&self, data: &[u8]) -> Result<(), String> {
        let mut stdin = self.stdin.lock().await;
        let pipe = stdin.as_mut().ok_or("stdin not enabled or closed")?;
        pipe.write_all(data)
            .await
            .map_err(|e| format!("error writing to stdin of process '{}': {e}", self.pid))?;
        pipe.flush().await.map_err(|e| e.to_string())
    }

    /// Closes the process's stdin (EOF).
    pub(crate) async fn close_stdin(&self) {
        self.stdin.lock().await.take();
    }
}

/// How to start a process.
pub(crate) struct Spawn {
    pub(crate) cmd: String,
    pub(crate) args: Vec<String>,
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) cwd: PathBuf,
    pub(crate) stdin: bool,
    pub(crate) config: Value,
    pub(crate) tag: Option<String>,
}

/// Starts a process and registers it; answers it and a receiver of its events.
pub(crate) fn spawn(
    table: &ProcTable,
    spec: Spawn,
) -> io::Result<(Arc<Proc>, mpsc::UnboundedReceiver<ProcEvent>)> {
    let mut command = Command::new(&spec.cmd);
    command
        .args(&spec.args)
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(&spec.env)
        .process_group(0)
        .stdin(if spec.stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn()?;
    let pid = child
        .id()
        .ok_or_else(|| io::Error::other("process exited before it was registered"))?;
    let proc = Arc::new(Proc {
        pid,
        config: spec.config,
        tag: spec.tag,
        stdin: tokio::sync::Mutex::new(child.stdin.take()),
        subscribers: Mutex::new(Vec::new()),
        exited: AtomicBool::new(false),
    });
    let events = proc.subscribe();
    lock(&table.inner).insert(pid, Arc::clone(&proc));
    tokio::spawn(pump(Arc::clone(&proc), child, Arc::clone(&table.inner)));
    Ok((proc, events))
}

async fn pump(proc: Arc<Proc>, mut child: Child, table: Table) {
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    tokio::join!(
        read_into(&proc, stdout, ProcEvent::Stdout),
        read_into(&proc, stderr, ProcEvent::Stderr),
    );
    let status = child.wait().await;
    proc.exited.store(true, Ordering::Release);
    lock(&table).remove(&proc.pid);
    let end = match status {
        Ok(status) => end_event(status),
        Err(e) => json!({ "exitCode": -1, "status": "unknown", "error": e.to_string() }),
    };
    proc.publish(&ProcEvent::End(end));
    lock(&proc.subscribers).clear();
}

async fn read_into<R: AsyncRead + Unpin>(
    proc: &Proc,
    reader: Option<R>,
    wrap: fn(Bytes) -> ProcEvent,
) {
    let Some(mut reader) = reader else {
        return;
    };
    let mut buf = vec![0u8; 32 * 1024];
    while let Ok(n @ 1..) = reader.read(&mut buf).await {
        proc.publish(&wrap(Bytes::copy_from_slice(&buf[..n])));
    }
}

/// The `EndEvent` of an exit status, worded as Go's `ProcessState` words it (envd's).
fn end_event(status: ExitStatus) -> Value {
    let mut end = serde_json::Map::new();
    if let Some(code) = status.code() {
        let text = format!("exit status {code}");
        if code != 0 {
            end.insert("exitCode".to_owned(), json!(code));
            end.insert("error".to_owned(), json!(text));
        }
        end.insert("exited".to_owned(), json!(true));
        end.insert("status".to_owned(), json!(text));
    } else {
        let text = format!("signal: {}", signal_name(status.signal().unwrap_or(0)));
        end.insert("exitCode".to_owned(), json!(-1));
        end.insert("status".to_owned(), json!(text));
        end.insert("error".to_owned(), json!(text));
    }
    Value::Object(end)
}

fn signal_name(signal: i32) -> String {
    match signal {
        1 => "hangup".to_owned(),
        2 => "interrupt".to_owned(),
        6 => "aborted".to_owned(),
        9 => "killed".to_owned(),
        11 => "segmentation fault".to_owned(),
        13 => "broken pipe".to_owned(),
        15 => "terminated".to_owned(),
        other => format!("signal {other}"),
    }
}

/// A protobuf JSON integer: a number, or a number in a string.
pub(crate) fn as_u64(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| value.as_str()?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_exit_statuses_like_go() {
        let ok = end_event(ExitStatus::from_raw(0));
        assert_eq!(ok, json!({ "exited": true, "status": "exit status 0" }));
        let failed = end_event(ExitStatus::from_raw(3 << 8));
        assert_eq!(failed["exitCode"], 3);
        assert_eq!(failed["error"], "exit status 3");
        let killed = end_event(ExitStatus::from_raw(9));
        assert_eq!(killed["exitCode"], -1);
        assert_eq!(killed["status"], "signal: killed");
        assert!(killed.get("exited").is_none());
    }
}
