//! The line protocol between the driver and the kernel process: one JSON request per stdin
//! line, one JSON reply per stdout line.

use serde::{Deserialize, Serialize};

/// A request to the kernel process.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub(crate) enum Request {
    /// Registers the benchmark agent at `webhook_url`.
    Register {
        /// Agent id.
        agent_id: String,
        /// Where the kernel POSTs dispatches.
        webhook_url: String,
        /// Shared HMAC secret.
        secret: String,
    },
    /// Runs `n` executions of `k` no-op tool calls (or `k` LLM calls), `c` at a time, each to
    /// its end.
    Live {
        /// Executions.
        n: usize,
        /// Tool calls per execution.
        k: usize,
        /// Executions in flight at once.
        c: usize,
        /// Make durable LLM calls to the kernel process's stub provider instead of tool calls.
        #[serde(default)]
        llm: bool,
        /// Start an execution every `1 / rate` seconds instead, however many are in flight.
        #[serde(default)]
        rate: Option<f64>,
    },
    /// Starts a loopback TCP proxy to `upstream` (an `http://host:port` URL) that delays every
    /// answer by `delay_ms`; replies [`Reply::Ready`] with the proxy's URL (same path).
    Proxy {
        /// Where the proxy connects.
        upstream: String,
        /// Milliseconds each chunk from `upstream` waits before it is passed on.
        delay_ms: f64,
    },
    /// Runs `n` executions of `k` tool calls, `c` at a time, until each has recorded its `k`
    /// steps and is waiting (first attempt); they stay in flight for [`Request::Redeliver`].
    Hold {
        /// Executions.
        n: usize,
        /// Tool calls per execution.
        k: usize,
        /// Executions in flight at once.
        c: usize,
        /// LLM calls instead of tool calls (as in [`Request::Live`]).
        #[serde(default)]
        llm: bool,
    },
    /// Re-delivers every held execution, `c` at a time, and waits for each to complete: every
    /// one of its `k` steps replays.
    Redeliver {
        /// Re-deliveries in flight at once.
        c: usize,
    },
    /// Starts `m` executions that each wait inside a tool, and returns once all `m` tools are
    /// executing.
    Idle {
        /// Executions in flight.
        m: usize,
        /// Start them one at a time, each once the previous one waits in its tool (so the
        /// agent's connections are reused), instead of all at once.
        paced: bool,
    },
    /// The input the kernel process gives a `k`-step execution in `mode` (`live`, `hold`,
    /// `llm`, `llm_hold`, `idle`; LLM modes carry the stub provider's URL): for a driver that
    /// creates the executions itself (deployed setup).
    Input {
        /// Steps.
        k: usize,
        /// Mode.
        mode: String,
    },
    /// Requests the stub LLM provider has answered so far.
    ProviderCalls,
    /// Re-delivers the given executions at once and returns without waiting (the deployed
    /// driver waits through the client API).
    RedeliverIds {
        /// Execution ids.
        ids: Vec<String>,
    },
    /// Returns once every given execution is executing its tool (`idle` mode).
    AwaitTool {
        /// Execution ids.
        ids: Vec<String>,
    },
    /// Stops the kernel process.
    Quit,
}

/// What a [`Request::Live`] or [`Request::Redeliver`] measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct RunReport {
    /// Wall-clock seconds from the first create (or re-delivery) to the last terminal status.
    pub(crate) elapsed_s: f64,
    /// Executions that completed.
    pub(crate) completed: usize,
    /// Executions that failed, were cancelled or timed out.
    pub(crate) failed: usize,
    /// The first failure, if any.
    pub(crate) first_failure: Option<String>,
    /// Steps recorded (live) or replayed (re-delivery).
    pub(crate) steps: usize,
    /// Step latency p50 in milliseconds (live: between consecutive `step.succeeded` events of
    /// an execution; re-delivery: (terminal − re-delivery) / k per execution).
    pub(crate) step_p50_ms: Option<f64>,
    /// Step latency p99 in milliseconds (same definition).
    pub(crate) step_p99_ms: Option<f64>,
    /// Live only, p50 in milliseconds: from a step's `step.succeeded` to the next step's
    /// `step.proposed` (the complete's answer, the agent between steps, the next submit).
    pub(crate) between_p50_ms: Option<f64>,
    /// Live only, p50 in milliseconds: from `step.proposed` to `step.succeeded` of one step
    /// (the submit's answer, the tool, the complete).
    pub(crate) within_p50_ms: Option<f64>,
    /// Requests the stub LLM provider answered during the run (none when every call replays).
    #[serde(default)]
    pub(crate) provider_calls: usize,
}

/// What a [`Request::Hold`] or [`Request::Idle`] reached.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct WaitReport {
    /// Wall-clock seconds it took.
    pub(crate) elapsed_s: f64,
    /// Executions that reached the wanted state.
    pub(crate) reached: usize,
    /// Their ids ([`Request::Hold`] only).
    #[serde(default)]
    pub(crate) ids: Vec<String>,
}

/// A reply line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Reply {
    /// The kernel is listening at this base URL (first line), or a proxy at this URL.
    Ready(String),
    /// Done, nothing to report.
    Ok,
    /// A run's figures.
    Run(RunReport),
    /// A wait's figures.
    Wait(WaitReport),
    /// An execution input ([`Request::Input`]).
    Input(serde_json::Value),
    /// A count ([`Request::ProviderCalls`]).
    Count(usize),
    /// The request failed.
    Error(String),
}
