//! [rig](https://docs.rs/rig-core) integration (feature `rig`): durable LLM calls and Rebuno
//! tools.
//!
//! # LLM calls
//!
//! [`DurableLlm`](crate::llm::DurableLlm) wraps any rig HTTP client (and is one itself), so every rig provider built on it (OpenAI and every
//! OpenAI-shaped vendor, Anthropic, Gemini, Ollama, …) sends its requests through the
//! execution: each completion is an `llm_call` step, recorded once and replayed on
//! re-delivery, streamed live to watchers, and subject to policy (see [`crate::llm`] for the
//! rules). A refused call reaches rig as the provider error it would get from a real 403, 409
//! or 429, whose text carries `rebuno_refusal: …`, so
//! [`raise_for_refusal`](crate::llm::raise_for_refusal) recognises it.
//!
//! ```no_run
//! use rig_core::completion::CompletionRequest;
//! use rig_core::providers::openai::OpenAIConfig;
//!
//! # async fn handler(_: serde_json::Value) -> Result<String, rebuno::HandlerError> {
//! let http = rebuno::llm::DurableLlm::new(rig_reqwest::ReqwestClient::default());
//! let openai = OpenAIConfig::from_env()?.connect(http);
//! let answer = openai.chat("gpt-4o-mini").call(CompletionRequest::new("Hi!")).await?;
//! # Ok(format!("{:?}", answer.choice)) }
//! ```
//!
//! # Tools
//!
//! A tool made with [`define_tool`](crate::define_tool), [`wrap_tool`](crate::wrap_tool) or the
//! MCP wrappers becomes a rig [`DynamicTool`](rig_core::tool::DynamicTool) with
//! [`dynamic_tool`]: rig sees its name, description and JSON Schema, and every call rig makes
//! goes through the kernel like any other (policy, replay, audit). A denial reaches the model
//! as the usual `"<name> not allowed. reason: <reason>"` result.
//!
//! ```no_run
//! # fn demo(search: rebuno::Tool<serde_json::Value, serde_json::Value>) -> rebuno::Result<()> {
//! let tool = rebuno::rig::dynamic_tool(search.into_dyn())?;
//! // register `tool` with a rig agent or tool registry
//! # Ok(()) }
//! ```

mod http;
mod tools;

pub use self::tools::dynamic_tool;
