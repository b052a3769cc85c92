//! Shared set-up for the integration tests: a dev kernel in-process and agents served by
//! rebuno-hyper on loopback ports.

#![allow(
    dead_code,
    unreachable_pub,
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::disallowed_methods
)]

mod canned;
pub mod host;
pub mod llm_stub;
pub mod logs;
pub mod notebook;
pub mod otlp;
pub mod ports;
pub mod pyagent;
pub mod venv;

pub use canned::Canned;
pub use host::serve_as_host;

use std::net::SocketAddr;
use std::time::Duration;

use rebuno::wire::{Event, Execution};
use rebuno::{Agent, AgentBuilder};
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde_json::Value;
use tokio::net::TcpListener;

pub const SECRET: &str = "dev-secret";
pub const WAIT: Duration = Duration::from_secs(20);

/// Installs a test-scoped log subscriber (RUST_LOG=debug to see the SDK's spans).
pub fn trace_init() -> tracing::subscriber::DefaultGuard {
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .finish();
    tracing::subscriber::set_default(subscriber)
}

/// An agent builder configured against `kernel`; add a handler and `build()` it.
pub fn agent(kernel: &DevKernel, id: &str) -> AgentBuilder {
    Agent::builder(id).secret(SECRET).base_url(kernel.url())
}

/// A running agent server.
pub struct Served {
    pub addr: SocketAddr,
    pub stop: tokio::sync::oneshot::Sender<()>,
    pub done: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Served {
    pub fn webhook_url(&self) -> String {
        format!("http://{}/webhook", self.addr)
    }

    /// Graceful shutdown: waits for in-flight runs.
    pub async fn shutdown(self) {
        let _ = self.stop.send(());
        self.done.await.expect("server task").expect("server");
    }
}

/// Serves `agent` on an ephemeral port.
pub async fn serve(agent: Agent) -> Served {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = rebuno_hyper::serve(listener, agent).with_graceful_shutdown(async {
        let _ = stopped.await;
    });
    let done = tokio::spawn(server.into_future());
    Served { addr, stop, done }
}

/// Starts a kernel, serves the agent `configure` gives a handler to, and registers it.
pub async fn kernel_with(
    agent_id: &str,
    configure: impl FnOnce(AgentBuilder) -> AgentBuilder,
) -> (DevKernel, Served) {
    let kernel = DevKernel::start().await.expect("dev kernel");
    let agent = configure(agent(&kernel, agent_id))
        .build()
        .expect("agent config");
    let served = serve(agent).await;
    kernel
        .register_agent(AgentSpec::new(agent_id, served.webhook_url(), SECRET))
        .expect("register agent");
    (kernel, served)
}

/// Creates an execution and waits for it to end.
pub async fn run(kernel: &DevKernel, agent_id: &str, input: Value) -> Execution {
    let created = kernel
        .create_execution(NewExecution::new(agent_id, input))
        .await
        .expect("create execution");
    kernel
        .wait_terminal(&created.id, WAIT)
        .await
        .expect("execution ends")
}

/// The event types of an execution, in order.
pub fn types(events: &[Event]) -> Vec<String> {
    events.iter().map(|e| e.kind.clone()).collect()
}

use std::future::IntoFuture;
