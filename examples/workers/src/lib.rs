//! A Rebuno agent on Cloudflare Workers: one durable tool (or one durable LLM call) and local
//! steps.
//!
//! Run with (from `deploy/workers/`, see its README for the kernel side):
//!
//! ```sh
//! npx wrangler dev --local          # builds with worker-build, serves on 127.0.0.1:8787
//! npx wrangler secret put REBUNO_AGENT_SECRET && npx wrangler deploy
//! ```
//!
//! The Worker reads `REBUNO_URL` (a var: the kernel), `REBUNO_AGENT_SECRET` (a secret: the
//! webhook secret) and `REBUNO_AGENT_ID` (a var, default `workers-example`).
//!
//! Input `{"text": "...", "work_ms": 0}`; output
//! `{"words": N, "longest": "...", "worked_ms": N, "checked_at": <unix ms>}`. `work_ms` makes
//! the `work` step take that long, to watch a run yield at its deadline and resume on the
//! re-delivery.
//!
//! Input `{"llm_url": "http://…/v1/chat/completions", "stream": false, "work_ms": 0}` makes one
//! durable LLM call instead of the tool: an OpenAI-style chat request for model `gpt-test`
//! through [`rebuno::llm::DurableLlm`] over `rebuno_workers::FetchTransport` (streamed chunk by
//! chunk when `stream` is true), recorded as an `llm_call` step and replayed, not sent again, on
//! a re-delivery. Output `{"status": N, "body": "<the provider's body>", "content": "<its
//! text>", "chunks": N, "worked_ms": N, "checked_at": <unix ms>}`, `chunks` being how many
//! pieces the live read got. An optional `"timeout_ms"` bounds the call, body included.

#[cfg(target_arch = "wasm32")]
mod agent;
// Used by the wasm32-only agent; compiled everywhere so its tests run on the host.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
mod text;
