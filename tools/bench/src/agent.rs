//! The agent process: a rebuno-rs agent served with rebuno-hyper, whose tools do nothing.
//!
//! Input `{"k": K, "mode": M}`: `live` calls the no-op tool K times and completes; `hold` does
//! the same but, on the first delivery attempt, waits forever after the K calls (so a
//! re-delivery replays all K); `idle` waits inside a tool for an hour. `llm` and `llm_hold` are
//! `live` and `hold` with K durable LLM calls ([`rebuno::llm::fetch`], each an `llm_call` step)
//! to the chat-completions stub at the input's `llm_url` instead of the K tool calls.
//! `big` and `big_hold` call a tool K times whose result is a string of `size` bytes; `fan`
//! and `fan_hold` issue their K no-op calls all at once (`try_join_all` inside the handler's
//! future; each call's args differ, so the step ids do not depend on the order of the submits).

use std::time::Duration;

use anyhow::{Context as _, Result};
use bytes::Bytes;
use rebuno::{Agent, HandlerError, define_tool};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::kernel::AGENT_ID;

/// Arguments of the no-op tool.
#[derive(Debug, Serialize, Deserialize)]
struct Noop {
    i: u64,
}

/// Arguments of the tool with a large result.
#[derive(Debug, Serialize, Deserialize)]
struct Big {
    i: u64,
    size: usize,
}

/// Arguments of the waiting tool.
#[derive(Debug, Serialize, Deserialize)]
struct Wait {
    secs: u64,
}

/// The execution input.
#[derive(Debug, Deserialize)]
struct Input {
    #[serde(default)]
    k: u64,
    #[serde(default)]
    mode: String,
    /// The stub provider's chat-completions URL (`llm` modes).
    #[serde(default)]
    llm_url: String,
    /// Bytes of each `big` result.
    #[serde(default)]
    size: usize,
}

/// One chat completion through the SDK's recorder; `i` makes each request (and step) distinct.
async fn chat(url: &str, i: u64) -> Result<(), HandlerError> {
    let body = json!({
        "model": "bench",
        "messages": [{"role": "user", "content": i.to_string()}],
        "stream": false,
    });
    let request = http::Request::post(url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Bytes::from(serde_json::to_vec(&body)?))?;
    let response = rebuno::llm::fetch(request).await?;
    if !response.status().is_success() {
        return Err(format!("the provider answered {}", response.status()).into());
    }
    let answer: Value = serde_json::from_slice(&response.into_body().bytes().await?)?;
    if answer["choices"][0]["message"]["content"].is_null() {
        return Err("the provider's answer has no content".into());
    }
    Ok(())
}

/// Builds the benchmark agent against the kernel at `kernel_url`.
pub(crate) fn agent(kernel_url: &str, secret: &str) -> Result<Agent> {
    let noop =
        define_tool("noop").execute(|args: Noop| async move { Ok::<_, HandlerError>(args.i) });
    let wait = define_tool("wait").execute(|args: Wait| async move {
        tokio::time::sleep(Duration::from_secs(args.secs)).await;
        Ok::<_, HandlerError>(0u64)
    });
    let big = define_tool("big")
        .execute(|args: Big| async move { Ok::<_, HandlerError>("x".repeat(args.size)) });
    let agent = Agent::builder(AGENT_ID)
        .secret(secret)
        .base_url(kernel_url)
        .handler_with_state(
            (noop, wait, big),
            |(noop, wait, big), input: Input| async move {
                if input.mode == "idle" {
                    wait.call(Wait { secs: 3600 }).await?;
                    return Ok::<Value, HandlerError>(json!({}));
                }
                let llm = input.mode.starts_with("llm");
                if input.mode.starts_with("fan") {
                    let calls = (0..input.k).map(|i| noop.call(Noop { i }));
                    futures_util::future::try_join_all(calls).await?;
                } else {
                    for i in 0..input.k {
                        if llm {
                            chat(&input.llm_url, i).await?;
                        } else if input.mode.starts_with("big") {
                            big.call(Big {
                                i,
                                size: input.size,
                            })
                            .await?;
                        } else {
                            noop.call(Noop { i }).await?;
                        }
                    }
                }
                if input.mode.ends_with("hold") && rebuno::execution()?.dispatch_attempt() == 1 {
                    std::future::pending::<()>().await;
                }
                Ok(json!({ "steps": input.k }))
            },
        )
        .build()
        .context("building the agent")?;
    Ok(agent)
}

/// Serves the agent on an ephemeral loopback port, printing `http://ADDR/webhook` on stdout;
/// exits when stdin closes (the driver went away).
pub(crate) async fn run(kernel_url: &str, secret: &str) -> Result<()> {
    // The telemetry variant: with OTEL_EXPORTER_OTLP_ENDPOINT set, every span goes through the
    // OpenTelemetry layer and each run exports before its task ends.
    if let Some(telemetry) = rebuno::telemetry::Telemetry::from_env()? {
        use tracing_subscriber::prelude::*;
        tracing_subscriber::registry()
            .with(telemetry.layer())
            .try_init()
            .context("installing the telemetry subscriber")?;
    }
    let agent = agent(kernel_url, secret)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("http://{}{}", listener.local_addr()?, agent.webhook_path());
    tokio::select! {
        served = rebuno_hyper::serve(listener, agent) => served.context("serving the agent")?,
        () = crate::stdin_closed() => {}
    }
    Ok(())
}
