//! Shared by the examples: an embedded dev kernel with agents served on loopback ports.

#![allow(dead_code, clippy::disallowed_methods)] // examples are hosts: they may spawn

use std::future::IntoFuture;
use std::time::Duration;

use rebuno::wire::{Event, Execution};
use rebuno::{Agent, AgentBuilder};
use rebuno_devkernel::{AgentSpec, DevKernel};
use tokio::net::TcpListener;

pub(crate) const SECRET: &str = "dev-secret";

/// An agent configured against the embedded kernel; add a handler and `build()` it.
pub(crate) fn agent(kernel: &DevKernel, id: &str) -> AgentBuilder {
    Agent::builder(id).secret(SECRET).base_url(kernel.url())
}

/// Serves `agent` on an ephemeral loopback port and registers it (with `policy`, if any).
pub(crate) async fn serve(
    kernel: &DevKernel,
    agent: Agent,
    policy: Option<&str>,
) -> Result<(), Box<dyn std::error::Error>> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let webhook = format!("http://{}/webhook", listener.local_addr()?);
    let mut spec = AgentSpec::new(agent.id(), webhook, SECRET);
    if let Some(policy) = policy {
        spec = spec.policy_yaml(policy);
    }
    tokio::spawn(rebuno_hyper::serve(listener, agent).into_future());
    kernel.register_agent(spec)?;
    Ok(())
}

/// Waits for the execution to end.
pub(crate) async fn finish(
    kernel: &DevKernel,
    id: &str,
) -> Result<Execution, Box<dyn std::error::Error>> {
    Ok(kernel.wait_terminal(id, Duration::from_secs(30)).await?)
}

/// Prints an execution's outcome and event log.
pub(crate) fn report(execution: &Execution, events: &[Event]) {
    println!("\nexecution {} {:?}", execution.id, execution.status);
    if let Some(output) = &execution.output {
        println!("output: {output}");
    }
    if !execution.failure_reason.is_empty() {
        println!("failure_reason: {}", execution.failure_reason);
    }
    println!("events:");
    for event in events {
        println!(
            "{:>3}  {:<24} {}",
            event.event_seq, event.kind, event.payload
        );
    }
}
