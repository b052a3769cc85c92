//! A Python agent (a module of the official SDK's FastAPI `app`) served by uvicorn as a child
//! process on a free loopback port: started, probed until it listens, SIGKILLed when dropped.
//! Shared by the interop suite and the differential suite (included there with `#[path]`).

#![allow(dead_code, unreachable_pub, clippy::expect_used, clippy::unwrap_used)]

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A Python agent served by uvicorn; killed (SIGKILL) and reaped when dropped.
#[derive(Debug)]
pub struct PyAgent {
    pub label: String,
    pub child: Child,
    pub log: PathBuf,
    pub port: u16,
}

/// How to start one uvicorn process.
#[derive(Debug, Clone, Copy)]
pub struct Uvicorn<'a> {
    pub python: &'a Path,
    /// The directory the module is imported from (`--app-dir`).
    pub app_dir: &'a Path,
    /// `module` of `module:app`.
    pub module: &'a str,
    pub label: &'a str,
    pub port: u16,
    /// Where stdout and stderr go.
    pub log: &'a Path,
}

impl PyAgent {
    /// Starts `python -m uvicorn module:app` with `env` added (and `REBUNO_API_KEY` removed).
    pub fn spawn<'e>(
        how: Uvicorn<'_>,
        env: impl IntoIterator<Item = (&'e str, &'e OsStr)>,
    ) -> Self {
        let out = fs::File::create(how.log).expect("agent log");
        let err = out.try_clone().expect("agent log");
        let mut command = Command::new(how.python);
        command
            .args(["-m", "uvicorn", &format!("{}:app", how.module), "--app-dir"])
            .arg(how.app_dir)
            .args(["--host", "127.0.0.1", "--port", &how.port.to_string()])
            .args(["--log-level", "info", "--no-use-colors"])
            .env("PYTHONUNBUFFERED", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env_remove("REBUNO_API_KEY");
        for (key, value) in env {
            command.env(key, value);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", how.python.display()));
        PyAgent {
            label: how.label.to_owned(),
            child,
            log: how.log.to_owned(),
            port: how.port,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last `lines` lines of the process's stdout + stderr.
    pub fn tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// SIGKILL (a crash: no shutdown hooks run), then reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Polls a TCP connect until uvicorn listens (it binds after the app's startup).
    pub async fn wait_ready(&mut self, wait: Duration) -> Ready {
        for _ in 0..(wait.as_millis() / 50) {
            if let Ok(Some(status)) = self.child.try_wait() {
                return if self.tail(20).contains("address already in use") {
                    Ready::PortTaken
                } else {
                    Ready::Exited(status)
                };
            }
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                return Ready::Yes;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ready::TimedOut
    }
}

impl Drop for PyAgent {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How [`PyAgent::wait_ready`] ended.
#[derive(Debug)]
pub enum Ready {
    Yes,
    /// Someone took the port between the probe and uvicorn's bind: pick another.
    PortTaken,
    Exited(std::process::ExitStatus),
    TimedOut,
}
