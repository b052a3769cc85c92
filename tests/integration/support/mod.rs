//! Shared set-up for the integration tests: a dev kernel in-process and agents served by
//! rebuno-hyper on loopback ports.

#![allow(
    dead_code,
    unreachable_pub,
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::disallowed_methods
)]

pub mod host;
pub mod llm_stub;
pub mod notebook;

pub use host::serve_as_host;

use std::net::SocketAddr;
use std::time::Duration;

use rebuno::Agent;
use rebuno_devkernel::{AgentSpec, CreateExecution, DevKernel, Event, Execution};
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

/// An agent configured against `kernel`.
pub fn agent(kernel: &DevKernel, id: &str) -> Agent {
    Agent::builder(id)
        .secret(SECRET)
        .base_url(kernel.url())
        .build()
        .expect("agent config")
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

/// Starts a kernel, serves `agent` and registers it.
pub async fn kernel_with(agent_id: &str, bind: impl FnOnce(&Agent)) -> (DevKernel, Served) {
    let kernel = DevKernel::start().await.expect("dev kernel");
    let agent = agent(&kernel, agent_id);
    bind(&agent);
    let served = serve(agent).await;
    kernel
        .register_agent(AgentSpec::new(agent_id, served.webhook_url(), SECRET))
        .expect("register agent");
    (kernel, served)
}

/// Creates an execution and waits for it to end.
pub async fn run(kernel: &DevKernel, agent_id: &str, input: Value) -> Execution {
    let created = kernel
        .create_execution(CreateExecution::new(agent_id, input))
        .await
        .expect("create execution");
    kernel
        .wait_terminal(created.id, WAIT)
        .await
        .expect("execution ends")
}

/// The event types of an execution, in order.
pub fn types(events: &[Event]) -> Vec<String> {
    events.iter().map(|e| e.kind.clone()).collect()
}

use std::future::IntoFuture;
