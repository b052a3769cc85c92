//! Out of file descriptors, the accept loop backs off and logs once, then recovers.
//!
//! The server runs in a child process (this test binary again) whose descriptor limit is 64, so
//! that exhausting it cannot disturb the other tests.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Set in the child: serve instead of testing.
const CHILD: &str = "REBUNO_HYPER_ACCEPT_CHILD";
const TEST: &str = "accept_backoff::running_out_of_descriptors_backs_off_logs_once_and_recovers";

#[test]
fn running_out_of_descriptors_backs_off_logs_once_and_recovers() {
    if std::env::var_os(CHILD).is_some() {
        return serve_in_child();
    }
    let mut child = spawn_child();
    let port = read_port(&mut child);
    let log = collect_stderr(&mut child);

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let served = runtime.block_on(async {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        // More silent connections than the child has descriptors for; the rest wait in the
        // backlog while accept fails with EMFILE.
        let mut silent = Vec::new();
        for _ in 0..100 {
            silent.push(TcpStream::connect(addr).await.expect("connect"));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let during = lines(&log);
        drop(silent);
        (during, healthz(addr).await)
    });
    let (during, answer) = served;
    let after = lines(&log);
    child.kill().ok();
    child.wait().ok();

    let warnings = during.iter().filter(|l| l.starts_with("WARN")).count();
    assert!(
        (1..20).contains(&warnings),
        "{warnings} warnings in 2 s out of descriptors (want one per episode): {:?}",
        &during[..during.len().min(5)]
    );
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "served again once descriptors freed: {answer:?}"
    );
    let recovered = after
        .iter()
        .find(|l| l.starts_with("INFO") && l.contains("accepting connections again"))
        .unwrap_or_else(|| panic!("no recovery line in {after:?}"));
    assert!(recovered.contains("failures="), "{recovered}");
}

/// Re-runs this test alone with a 64-descriptor limit, as the server.
fn spawn_child() -> Child {
    let exe = std::env::current_exe().expect("test binary");
    let mut command = if Command::new("prlimit").arg("--version").output().is_ok() {
        let mut command = Command::new("prlimit");
        command.arg("--nofile=64:64").arg(exe);
        command
    } else {
        let mut command = Command::new("bash");
        command
            .args(["-c", "ulimit -n 64 && exec \"$0\" \"$@\""])
            .arg(exe);
        command
    };
    command
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the child server")
}

/// The port the child prints as `PORT=<n>`, within 30 s.
fn read_port(child: &mut Child) -> u16 {
    let stdout = child.stdout.take().expect("stdout");
    let (found, port) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
        // The harness prints `test <name> ... ` first, on the same line.
        if let Some(p) = lines
            .by_ref()
            .find_map(|line| line.split_once("PORT=").map(|(_, p)| p.trim().to_owned()))
        {
            found.send(p).ok();
        }
        // Keep draining so the child never blocks on a full pipe.
        lines.for_each(drop);
    });
    let port = port.recv_timeout(Duration::from_secs(30));
    if port.is_err() {
        child.kill().ok();
    }
    port.expect("the child's port").parse().expect("a port")
}

/// Collects the child's log lines on a thread.
fn collect_stderr(child: &mut Child) -> Arc<Mutex<Vec<String>>> {
    let stderr = child.stderr.take().expect("stderr");
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&log);
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    log
}

fn lines(log: &Mutex<Vec<String>>) -> Vec<String> {
    log.lock().unwrap().clone()
}

/// `GET /healthz`, retried for up to 10 s while the server recovers.
async fn healthz(addr: std::net::SocketAddr) -> String {
    let mut answer = String::new();
    for _ in 0..20 {
        if let Ok(mut connection) = TcpStream::connect(addr).await {
            let request = b"GET /healthz HTTP/1.1\r\nhost: agent\r\n\r\n";
            if connection.write_all(request).await.is_ok() {
                answer = common::read_answer(&mut connection).await;
                if !answer.is_empty() {
                    return answer;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    answer
}

/// The child: logs to stderr, prints its port, serves until killed.
fn serve_in_child() {
    tracing::subscriber::set_global_default(log::StderrLog).expect("subscriber");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let mut stdout = std::io::stdout();
        writeln!(stdout, "PORT={port}").expect("port");
        stdout.flush().expect("flush");
        // Silent connections stay open for the whole test unless their client leaves.
        rebuno_hyper::serve(listener, common::agent())
            .idle_timeout(Duration::from_secs(60))
            .header_read_timeout(Duration::from_secs(60))
            .await
            .expect("serve");
    });
}

/// A minimal `tracing` subscriber: `LEVEL message field=value…` lines on stderr, `info` and up.
mod log {
    use std::fmt::Write as _;
    use std::io::Write as _;

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Level, Metadata, Subscriber};

    pub(super) struct StderrLog;

    struct Line(String);

    impl Visit for Line {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            if field.name() == "message" {
                let _ = write!(self.0, " {value:?}");
            } else {
                let _ = write!(self.0, " {}={value:?}", field.name());
            }
        }
    }

    impl Subscriber for StderrLog {
        fn enabled(&self, metadata: &Metadata<'_>) -> bool {
            *metadata.level() <= Level::INFO
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut line = Line(event.metadata().level().to_string());
            event.record(&mut line);
            let _ = writeln!(std::io::stderr(), "{}", line.0);
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }
}
