//! A durable agent that asks a model through rig: the rig provider sends through
//! `rebuno::llm::DurableLlm`, so every completion is an `llm_call` step, recorded once and replayed
//! on re-delivery, streamed live, and subject to policy.
//!
//! Run with: `cargo run --example rig_chat --features rig`
//!
//! It starts the dev kernel in-process, serves the agent on a loopback port, runs one execution
//! and prints the answer as it streams, then the output and the event log.
//!
//! The model: set `LLM_BASE_URL` (e.g. `https://api.openai.com/v1`, or
//! `http://localhost:11434/v1` for Ollama), `LLM_MODEL` (default `gpt-4o-mini`) and
//! `OPENAI_API_KEY`. For an `https://` URL add the `rustls` feature:
//! `cargo run --example rig_chat --features rig,rustls`. With `LLM_BASE_URL` unset, a tiny
//! OpenAI-style stub runs in-process, so the example works offline.

#![allow(clippy::disallowed_methods)] // examples are hosts: they may spawn

#[path = "common/mod.rs"]
mod common;
#[path = "common/model.rs"]
mod model;

use futures_util::StreamExt;
use rebuno::llm::DurableLlm;
use rebuno::{AgentBuilder, HandlerError};
use rebuno_devkernel::DevKernel;
use rig_core::completion::CompletionRequest;
use rig_core::providers::openai::{OpenAI, OpenAIConfig};
use rig_core::streaming::{Item, StreamEvent};
use rig_reqwest::ReqwestClient;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize)]
struct Input {
    question: String,
}

/// The agent: one streamed chat completion, printed as it arrives.
fn with_handler(agent: AgentBuilder, openai: OpenAI, model: String) -> AgentBuilder {
    agent.handler(move |input: Input| {
        let chat = openai.chat(model.clone());
        async move {
            let request =
                CompletionRequest::new(input.question).preamble("Answer in one short sentence.");
            // A refusal by policy arrives as rig's provider error (a 403 whose body names the
            // refusal); `?` hands it to the runner, which fails the execution with its reason.
            let mut events = chat.stream(request)?;
            let mut answer = String::new();
            while let Some(item) = events.next().await {
                if let Item::Event(StreamEvent::Text { text, .. }) = item? {
                    model::echo(&mut answer, &text);
                }
            }
            println!();
            Ok::<_, HandlerError>(json!({ "answer": answer }))
        }
    })
}

/// What the offline stand-in model answers.
const ANSWER: model::Reply = model::Reply::Text("It runs your agent to completion.");

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    rebuno_hyper::init_logging(); // RUST_LOG, info by default
    let endpoint = model::endpoint(|_| ANSWER).await?;
    let key = endpoint.key();
    // Built once: each call finds the execution it runs in when it is sent.
    let openai = OpenAIConfig::new(key)
        .with_base_url(&endpoint.base_url)
        .connect(DurableLlm::new(ReqwestClient::default()));

    let kernel = DevKernel::start().await?;
    let agent = with_handler(
        common::agent(&kernel, "rig_chat"),
        openai,
        endpoint.name.clone(),
    )
    .build()?;
    model::ask_once(
        kernel,
        agent,
        &endpoint,
        "What does a durable execution runtime do?",
    )
    .await
}
