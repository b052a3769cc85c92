//! A real OTLP receiver on loopback for the telemetry tests of every crate (included with
//! `#[path]`): rotel (an OpenTelemetry collector, from the interop venv) takes the SDK's
//! OTLP/HTTP JSON and forwards it, re-encoded as protobuf, to `tests/integration/support/otlp/recorder.py`, which
//! decodes it with the official definitions and writes one JSON line per request. What the
//! tests read is what a collector understood, not what the SDK meant.
//!
//! The includer provides `python()` (the interop venv's interpreter, from
//! `scripts/interop-venv.sh`) and `repo()` (the repository's root) in its parent module.

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{python, repo};

/// The collector and the recorder behind it; both killed when dropped.
pub struct Receiver {
    endpoint: String,
    file: PathBuf,
    log: PathBuf,
    children: Vec<Child>,
}

use crate::support::ports::free_port;

fn wait_listening(port: u16, child: &mut Child, what: &str, log: &PathBuf) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{what} exited ({status}) before listening on {port}:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "{what} not listening on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The rotel binary inside the venv's `rotel` package.
fn rotel() -> PathBuf {
    let out = Command::new(python())
        .args([
            "-c",
            "import os, rotel; print(os.path.join(os.path.dirname(rotel.__file__), 'rotel-agent'))",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

impl Receiver {
    /// Starts the recorder, then rotel in front of it.
    pub fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("rebuno-otlp-{}", free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("received.jsonl");
        let log = dir.join("rotel.log");
        let recorder_port = free_port();
        let mut recorder = Command::new(python())
            .arg(repo().join("tests/integration/support/otlp/recorder.py"))
            .arg(recorder_port.to_string())
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("recorder.log")).unwrap())
            .spawn()
            .unwrap();
        wait_listening(
            recorder_port,
            &mut recorder,
            "recorder",
            &dir.join("recorder.log"),
        );
        let (http, grpc) = (free_port(), free_port());
        let mut collector = Command::new(rotel())
            .args(["start", "--otlp-http-endpoint"])
            .arg(format!("127.0.0.1:{http}"))
            .arg("--otlp-grpc-endpoint")
            .arg(format!("127.0.0.1:{grpc}"))
            .args(["--exporter", "otlp", "--otlp-exporter-protocol", "http"])
            .arg("--otlp-exporter-endpoint")
            .arg(format!("http://127.0.0.1:{recorder_port}"))
            .args(["--batch-timeout", "50ms"])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        wait_listening(http, &mut collector, "rotel", &log);
        Self {
            endpoint: format!("http://127.0.0.1:{http}"),
            file,
            log,
            children: vec![collector, recorder],
        }
    }

    /// The collector's OTLP/HTTP endpoint.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Every request the recorder decoded (or refused), in arrival order.
    pub fn entries(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.file)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// Every span received, each with its resource's `service.name` added as `"service"`.
    pub fn spans(&self) -> Vec<Value> {
        self.flatten("traces", "resourceSpans", "scopeSpans", "spans")
    }

    /// Every metric received, in arrival order (cumulative: the last of a name is its total).
    pub fn metrics(&self) -> Vec<Value> {
        self.flatten("metrics", "resourceMetrics", "scopeMetrics", "metrics")
    }

    fn flatten(&self, signal: &str, resources: &str, scopes: &str, items: &str) -> Vec<Value> {
        let entries = self.entries();
        if let Some(refused) = entries.iter().find(|e| e.get("error").is_some()) {
            panic!("the recorder could not decode an export: {refused}");
        }
        let mut out = Vec::new();
        for entry in entries.iter().filter(|e| e["signal"] == signal) {
            for resource in entry["body"][resources].as_array().into_iter().flatten() {
                let service = resource["resource"]["attributes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|a| a["key"] == "service.name")
                    .map(|a| a["value"]["stringValue"].clone())
                    .unwrap_or_default();
                for scope in resource[scopes].as_array().into_iter().flatten() {
                    for item in scope[items].as_array().into_iter().flatten() {
                        let mut item = item.clone();
                        item["service"] = service.clone();
                        out.push(item);
                    }
                }
            }
        }
        out
    }

    /// Waits until `done` holds for the spans received; panics with them (and rotel's log)
    /// after `timeout`.
    pub async fn wait_for_spans(&self, timeout: Duration, done: impl Fn(&[Value]) -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            let spans = self.spans();
            if done(&spans) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "spans never arrived as expected; got {spans:#?}\nrotel:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A span attribute's value (`stringValue`, `boolValue`, `intValue`…), or `Null`.
pub fn attribute(span: &Value, key: &str) -> Value {
    span["attributes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["key"] == key)
        .and_then(|a| a["value"].as_object())
        .and_then(|value| value.values().next().cloned())
        .unwrap_or(Value::Null)
}
