//! A durable agent with two tool calls and a local step, end to end.
//!
//! Run with: `cargo run --example hello`
//!
//! With `REBUNO_URL` unset it starts the dev kernel in-process, serves the agent on an ephemeral
//! port, registers it, runs one execution and prints the output and the event log.
//!
//! With `REBUNO_URL` set (and `REBUNO_AGENT_SECRET`), it only serves the agent on
//! `0.0.0.0:${PORT:-5000}/webhook` against that kernel, until Ctrl-C. Register it there, e.g.
//! with `rebuno-dev --config manifest.yaml`, then create executions of agent `hello`.

#[path = "common/mod.rs"]
mod common;

use rebuno::{Agent, AgentBuilder, HandlerError, Tool, define_tool, step};
use rebuno_devkernel::{DevKernel, NewExecution};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::net::TcpListener;

#[derive(Deserialize)]
struct Input {
    name: String,
}

#[derive(Serialize, Deserialize)]
struct Lookup {
    name: String,
}

fn tools() -> (Tool<Lookup, String>, Tool<Lookup, u32>) {
    let greeting = define_tool("greeting")
        .description("Pick a greeting for a person")
        .execute(
            |args: Lookup| async move { Ok::<_, HandlerError>(format!("Hello, {}!", args.name)) },
        );
    let lucky = define_tool("lucky_number")
        .description("A person's lucky number")
        .execute(|args: Lookup| async move { Ok::<_, HandlerError>(args.name.len() as u32 * 7) });
    (greeting, lucky)
}

/// The handler, with the tools as its state (each run gets a clone).
fn with_handler(agent: AgentBuilder) -> AgentBuilder {
    agent.handler_with_state(tools(), |(greeting, lucky), input: Input| async move {
        let text = greeting
            .call(Lookup {
                name: input.name.clone(),
            })
            .await?;
        let number = lucky.call(Lookup { name: input.name }).await?;
        let run_id = step("run_id", || async {
            Ok::<_, HandlerError>(rebuno::execution()?.id().to_owned())
        })
        .await?;
        Ok::<_, HandlerError>(json!({ "greeting": text, "lucky_number": number, "run": run_id }))
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    rebuno_hyper::init_logging(); // RUST_LOG, info by default
    match std::env::var("REBUNO_URL") {
        Ok(url) if !url.is_empty() => serve_only().await,
        _ => run_embedded().await,
    }
}

/// Serves against an external kernel until Ctrl-C or SIGTERM (a container stop), draining the
/// runs in flight.
async fn serve_only() -> Result<(), Box<dyn std::error::Error>> {
    let agent = with_handler(Agent::builder("hello")).build()?;
    let port = std::env::var("PORT").unwrap_or_else(|_| "5000".into());
    let listener = TcpListener::bind(format!("0.0.0.0:{port}")).await?;
    println!(
        "serving agent `hello` on http://{}/webhook for {}",
        listener.local_addr()?,
        agent.base_url()
    );
    rebuno_hyper::serve(listener, agent)
        .with_graceful_shutdown(rebuno_hyper::shutdown_signal())
        .await?;
    Ok(())
}

/// Starts the dev kernel in-process and runs one execution end to end.
async fn run_embedded() -> Result<(), Box<dyn std::error::Error>> {
    let kernel = DevKernel::start().await?;
    let agent = with_handler(common::agent(&kernel, "hello")).build()?;
    common::serve(&kernel, agent, None).await?;
    println!("dev kernel at {}", kernel.url());

    let created = kernel
        .create_execution(NewExecution::new("hello", json!({ "name": "Ada" })))
        .await?;
    let done = common::finish(&kernel, &created.id).await?;
    common::report(&done, &kernel.events(&done.id));
    kernel.shutdown().await;
    Ok(())
}
