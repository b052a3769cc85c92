//! A durable agent that asks a model through async-openai: every call is an `llm_call` step,
//! recorded once and replayed on re-delivery, streamed live, and subject to policy.
//!
//! Run with: `cargo run --example openai_chat --features async-openai`
//!
//! It starts the dev kernel in-process, serves the agent on a loopback port, runs one execution
//! and prints the answer as it streams, then the output and the event log.
//!
//! The model: set `LLM_BASE_URL` (e.g. `https://api.openai.com/v1`, or
//! `http://localhost:11434/v1` for Ollama), `LLM_MODEL` (default `gpt-4o-mini`) and
//! `OPENAI_API_KEY`. For an `https://` URL add the `rustls` feature:
//! `cargo run --example openai_chat --features async-openai,rustls`. With `LLM_BASE_URL` unset,
//! a tiny OpenAI-style stub runs in-process, so the example works offline.

#![allow(clippy::disallowed_methods)] // examples are hosts: they may spawn

#[path = "common/mod.rs"]
mod common;
#[path = "common/model.rs"]
mod model;

use async_openai::config::OpenAIConfig;
use async_openai::types::chat::{
    ChatCompletionRequestSystemMessageArgs, ChatCompletionRequestUserMessageArgs,
    CreateChatCompletionRequestArgs,
};
use futures_util::StreamExt;
use rebuno::{AgentBuilder, HandlerError};
use rebuno_devkernel::DevKernel;
use serde::Deserialize;
use serde_json::json;

type OpenAI = async_openai::Client<OpenAIConfig>;

#[derive(Deserialize)]
struct Input {
    question: String,
}

/// The agent: one streamed chat completion, printed as it arrives.
fn with_handler(agent: AgentBuilder, openai: OpenAI, model: String) -> AgentBuilder {
    agent.handler_with_state((openai, model), |(openai, model), input: Input| {
        async move {
            let request = CreateChatCompletionRequestArgs::default()
                .model(model)
                .messages([
                    ChatCompletionRequestSystemMessageArgs::default()
                        .content("Answer in one short sentence.")
                        .build()?
                        .into(),
                    ChatCompletionRequestUserMessageArgs::default()
                        .content(input.question)
                        .build()?
                        .into(),
                ])
                .build()?;
            // A refusal by policy arrives here as async-openai's own `ApiError`; `?` hands it
            // to the runner, which fails the execution with the refusal's reason.
            let mut stream = openai.chat().create_stream(request).await?;
            let mut answer = String::new();
            while let Some(chunk) = stream.next().await {
                for choice in chunk?.choices {
                    if let Some(text) = choice.delta.content {
                        model::echo(&mut answer, &text);
                    }
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
    // Built once: each call finds the execution it runs in.
    let openai = rebuno::async_openai::client(
        OpenAIConfig::new()
            .with_api_base(&endpoint.base_url)
            .with_api_key(key),
    );

    let kernel = DevKernel::start().await?;
    let agent = with_handler(
        common::agent(&kernel, "openai_chat"),
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
