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
//! With a Durable Object namespace bound as `REBUNO_RUNS` (class `RebunoRun`, see
//! `deploy/workers/wrangler.toml`), the Worker runs in Durable Object mode: it forwards each
//! checked webhook to the object for its execution, which runs it without the 30 s cut.
//!
//! The Worker reads `REBUNO_URL` (a var: the kernel), `REBUNO_AGENT_SECRET` (a secret: the
//! webhook secret), `REBUNO_AGENT_ID` (a var, default `workers-example`) and `RUST_LOG` (a var:
//! the level of the SDK's logs in the console, `info` by default; `rebuno_workers::init_logging`).
//!
//! Input `{"text": "...", "work_ms": 0, "pause_ms": 0}` (`pause_ms`: a wait between the `work`
//! and `checked_at` steps, outside any step); output
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
//!
//! Input `{"rig_url": "http://…/v1", "stream": false, "work_ms": 0}` asks the same through rig
//! instead: rig's OpenAI-compatible client (chat-completions wire, model `gpt-test`) whose HTTP
//! client is `rebuno::llm::DurableLlm` over rig's reqwest client (the JS `fetch` on wasm), so the
//! completion is one `llm_call` step, replayed on a re-delivery. With `stream` true it reads
//! rig's stream event by event. Output `{"text": "<the answer>", "pieces": N, "worked_ms": N,
//! "checked_at": <unix ms>}`, `pieces` being how many text pieces rig delivered. This path needs
//! the crate's `rig` feature, which adds about 360 KB gzipped to the wasm:
//! `worker-build --release . --features rig`. Without it, such an input fails the execution
//! with a message saying so.
//!
//! Input `{"mcp_url": "http://…/mcp", "calls": [["fx_add", {"a": 2, "b": 3}], …], "work_ms": 0}`
//! connects to that MCP server over streamable HTTP with [`rebuno::mcp::StreamableHttp`] through
//! the Workers fetch, wraps its tools as `fx_<name>` (`fx_record` at most once) and calls each
//! pair in order: every call a `tool_call` step, recorded once and replayed on a re-delivery
//! without reaching the server. Output `{"results": [...], "worked_ms": N, "checked_at": <unix
//! ms>}`, a denied call's result being the denial's text.
//!
//! Input `{"e2b_url": "http://…", "files": [["path", "content"], …], "command": "…",
//! "work_ms": 0}` opens an E2B sandbox as the execution's `workspace` resource with
//! [`rebuno::resource::drivers::E2bSandbox`] over the Workers fetch (the API key from the secret
//! `E2B_API_KEY`; `e2b_url` is the API and envd URL of a local stand-in, for tests), writes each
//! file and runs the command with declared tools, checkpointing by E2B snapshots after every 2
//! and pausing the sandbox while the execution waits (an approval, subagents). Output
//! `{"sandbox": "<id>", "exit_code": N, "stdout": "…", "worked_ms": N, "checked_at": <unix
//! ms>}`.
//!
//! With the crate's `otel` feature (`worker-build --release . --features otel`), a var
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (`http://collector:4318`) turns on the OTLP/HTTP export of
//! `rebuno::telemetry` over the Workers fetch: one trace per execution (trace id = execution
//! id), a `dispatch <agent>` span per delivery and a span per live step, sent with the SDK's
//! metrics by each run as the last act of its `ctx.wait_until` task. `OTEL_SERVICE_NAME` (a
//! var) names the service, default `workers-example`. Built without the feature, the endpoint
//! var only gets a warning in the Worker's log.

#[cfg(target_arch = "wasm32")]
mod agent;
#[cfg(target_arch = "wasm32")]
mod e2b;
#[cfg(target_arch = "wasm32")]
mod mcp;
#[cfg(all(target_arch = "wasm32", feature = "rig"))]
mod rig;
#[cfg(all(target_arch = "wasm32", feature = "otel"))]
mod telemetry;
// Used by the wasm32-only agent; compiled everywhere so its tests run on the host.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
mod text;
