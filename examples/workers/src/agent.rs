//! The Worker: the `fetch` event, the agent and its handler.

use std::cell::OnceCell;
use std::convert::Infallible;
use std::time::Duration;

use futures_util::StreamExt;
use rebuno::llm::{DurableLlm, TransportService};
use rebuno::rt::Clock;
use rebuno::{Agent, Body, HandlerError, Secret, Tool};
use serde::{Deserialize, Serialize};
use worker::{
    Context, DurableObject, Env, HttpRequest, Request, Response, State, durable_object, event,
};

// The rig completion: its text and how many pieces rig delivered.
#[cfg(feature = "rig")]
use crate::rig::ask as ask_rig;
// The OTLP export when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
use crate::e2b::{Worked, work_in_sandbox};
use crate::mcp::call_tools as call_mcp_tools;
#[cfg(feature = "otel")]
use crate::telemetry::install as install_telemetry;
use crate::text::{Analysis, Analyze, analyze, answer_text};

/// The agent id when `REBUNO_AGENT_ID` is not set.
const DEFAULT_AGENT_ID: &str = "workers-example";

/// The execution's input: a text to analyze, or a provider to ask.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Input {
    /// `{"e2b_url": "http://…", "files": [["path", "content"], ...], "command": "…", "work_ms": N}`:
    /// an E2B sandbox (the API at `e2b_url`, the key from the secret `E2B_API_KEY`), its files
    /// written and the command run by declared tools.
    E2b {
        e2b_url: String,
        files: Vec<(String, String)>,
        command: String,
        #[serde(default)]
        work_ms: u64,
    },
    /// `{"mcp_url": "http://…/mcp", "calls": [["fx_add", {"a": 2, "b": 3}], ...], "work_ms": N}`:
    /// the MCP server's tools, called in order.
    Mcp {
        mcp_url: String,
        calls: Vec<(String, serde_json::Value)>,
        #[serde(default)]
        work_ms: u64,
    },
    /// `{"rig_url": "http://…/v1", "stream": bool, "work_ms": N}`: one completion through rig's
    /// OpenAI-compatible client sending through `rebuno::llm::DurableLlm`.
    Rig {
        rig_url: String,
        #[serde(default)]
        stream: bool,
        #[serde(default)]
        work_ms: u64,
    },
    /// `{"llm_url": "...", "stream": bool, "work_ms": N, "timeout_ms": N}`: one durable LLM
    /// call (`timeout_ms` bounds it, body included; default 600 s).
    Llm {
        llm_url: String,
        #[serde(default)]
        stream: bool,
        #[serde(default)]
        work_ms: u64,
        #[serde(default)]
        timeout_ms: Option<u64>,
    },
    /// `{"text": "...", "work_ms": N, "pause_ms": N}`: the `analyze_text` tool; `pause_ms` waits
    /// after the `work` step, outside any step (a moment when nothing is in flight).
    Analyze {
        text: String,
        #[serde(default)]
        work_ms: u64,
        #[serde(default)]
        pause_ms: u64,
    },
}

/// The execution's output.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Output {
    E2b {
        /// The sandbox, the command's exit code and output.
        #[serde(flatten)]
        worked: Worked,
        worked_ms: u64,
        checked_at: u64,
    },
    Mcp {
        /// Each call's recorded result (or its denial), in order.
        results: Vec<serde_json::Value>,
        worked_ms: u64,
        checked_at: u64,
    },
    Rig {
        /// The answer's text as rig delivered it.
        text: String,
        /// How many text pieces rig delivered: the stream's deltas, or the message's parts.
        pieces: usize,
        worked_ms: u64,
        checked_at: u64,
    },
    Llm {
        status: u16,
        /// The provider's body as read: JSON, or the event stream's text.
        body: String,
        /// The answer's text: the message, or the stream's deltas joined.
        content: String,
        /// How many chunks the live read got (recorded, so a replay keeps it).
        chunks: usize,
        worked_ms: u64,
        checked_at: u64,
    },
    Analyze {
        words: usize,
        longest: String,
        worked_ms: u64,
        checked_at: u64,
    },
}

thread_local! {
    // One agent per isolate: it remembers which executions this isolate is running, so a
    // repeated delivery is not run twice side by side.
    static AGENT: OnceCell<Agent> = const { OnceCell::new() };
}

/// The Durable Object namespace binding that switches the Worker to Durable Object mode.
const RUNS_BINDING: &str = "REBUNO_RUNS";

#[event(fetch)]
async fn fetch(req: HttpRequest, env: Env, ctx: Context) -> worker::Result<http::Response<Body>> {
    let agent = agent(&env).map_err(config_error)?;
    if env.durable_object(RUNS_BINDING).is_ok() {
        // Each execution runs in its own `RebunoRun` object, without the 30 s cut.
        return rebuno_workers::forward_to_durable_object(&agent, req, &env, RUNS_BINDING).await;
    }
    rebuno_workers::fetch(&agent, req, &env, &ctx).await
}

/// The Durable Object class bound as `REBUNO_RUNS`: runs the dispatches of one execution,
/// kept from idle eviction by its alarm. (`alarm`: the constructor and the
/// `fetch` and `alarm` handlers.)
#[durable_object(alarm)]
#[derive(Debug)]
pub struct RebunoRun {
    state: State,
    env: Env,
}

impl DurableObject for RebunoRun {
    fn new(state: State, env: Env) -> Self {
        Self { state, env }
    }

    async fn fetch(&self, request: Request) -> worker::Result<Response> {
        let agent = agent(&self.env).map_err(config_error)?;
        rebuno_workers::serve_in_durable_object(&agent, &self.state, request).await
    }

    async fn alarm(&self) -> worker::Result<Response> {
        rebuno_workers::alarm_in_durable_object(&self.state).await
    }
}

fn config_error(error: rebuno::Error) -> worker::Error {
    worker::Error::RustError(error.to_string())
}

/// The isolate's agent, built from the bindings on the first request.
fn agent(env: &Env) -> rebuno::Result<Agent> {
    if let Some(agent) = AGENT.with(|cell| cell.get().cloned()) {
        return Ok(agent);
    }
    // Before the agent's first run, so its spans reach the exporter.
    install_telemetry(env);
    // The SDK's logs in the Workers console (the var RUST_LOG, info by default); does nothing
    // when install_telemetry set a subscriber, which logs to the console too.
    rebuno_workers::init_logging(env);
    let id = env
        .var("REBUNO_AGENT_ID")
        .map_or_else(|_| DEFAULT_AGENT_ID.to_owned(), |v| v.to_string());
    let agent = rebuno_workers::agent_builder(id, env)
        .description("Counts the words of a text, or asks an LLM once, durably")
        .handler_with_state(
            (analyze_tool(), e2b_key(env)),
            |(analyze, e2b_key), input: Input| async move { handle(&analyze, e2b_key, input).await },
        )
        .build()?;
    AGENT.with(|cell| cell.set(agent.clone()).ok());
    Ok(agent)
}

/// The secret `E2B_API_KEY`, if bound (only the E2B input needs it).
fn e2b_key(env: &Env) -> Option<Secret> {
    let key = env.secret("E2B_API_KEY").ok()?;
    Some(Secret::from(key.to_string()))
}

/// Without the `otel` feature there is no exporter: say so when one is configured.
#[cfg(not(feature = "otel"))]
fn install_telemetry(env: &Env) {
    if env.var("OTEL_EXPORTER_OTLP_ENDPOINT").is_ok() {
        worker::console_warn!(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set, but this Worker was built without the `otel` feature: no OTLP export"
        );
    }
}

/// A durable tool: policy applies to it, and a replayed dispatch gets the recorded result.
fn analyze_tool() -> Tool<Analyze, Analysis> {
    rebuno::define_tool("analyze_text")
        .description("Counts the words of a text and finds the longest one")
        .execute(|args: Analyze| async move { Ok::<_, Infallible>(analyze(&args.text)) })
}

/// The handler: the tool (or the LLM call, or the rig completion), a slow `work` step, then a
/// `checked_at` step recording the time, so a replay returns the same values.
async fn handle(
    analyze: &Tool<Analyze, Analysis>,
    e2b_key: Option<Secret>,
    input: Input,
) -> Result<Output, HandlerError> {
    match input {
        Input::E2b {
            e2b_url,
            files,
            command,
            work_ms,
        } => {
            let worked = work_in_sandbox(e2b_key, &e2b_url, &files, &command).await?;
            let (worked_ms, checked_at) = work(work_ms).await?;
            Ok(Output::E2b {
                worked,
                worked_ms,
                checked_at,
            })
        }
        Input::Mcp {
            mcp_url,
            calls,
            work_ms,
        } => handle_mcp(&mcp_url, &calls, work_ms).await,
        Input::Analyze {
            text,
            work_ms,
            pause_ms,
        } => handle_analyze(analyze, text, work_ms, pause_ms).await,
        Input::Rig {
            rig_url,
            stream,
            work_ms,
        } => handle_rig(&rig_url, stream, work_ms).await,
        Input::Llm {
            llm_url,
            stream,
            work_ms,
            timeout_ms,
        } => handle_llm(&llm_url, stream, work_ms, timeout_ms).await,
    }
}

/// [`Input::Mcp`]: the MCP server's tools called in order, then the `work` and `checked_at` steps.
async fn handle_mcp(
    mcp_url: &str,
    calls: &[(String, serde_json::Value)],
    work_ms: u64,
) -> Result<Output, HandlerError> {
    let results = call_mcp_tools(mcp_url, calls).await?;
    let (worked_ms, checked_at) = work(work_ms).await?;
    Ok(Output::Mcp {
        results,
        worked_ms,
        checked_at,
    })
}

/// [`Input::Analyze`]: the `analyze_text` tool, then the `work` and `checked_at` steps with a
/// pause between.
async fn handle_analyze(
    analyze: &Tool<Analyze, Analysis>,
    text: String,
    work_ms: u64,
    pause_ms: u64,
) -> Result<Output, HandlerError> {
    let analysis = analyze.call(Analyze { text }).await?;
    let (worked_ms, checked_at) = work_then_pause(work_ms, pause_ms).await?;
    Ok(Output::Analyze {
        words: analysis.words,
        longest: analysis.longest,
        worked_ms,
        checked_at,
    })
}

/// [`Input::Rig`]: one completion through rig, then the `work` and `checked_at` steps.
async fn handle_rig(rig_url: &str, stream: bool, work_ms: u64) -> Result<Output, HandlerError> {
    let (text, pieces) = ask_rig(rig_url, stream).await?;
    let (worked_ms, checked_at) = work(work_ms).await?;
    Ok(Output::Rig {
        text,
        pieces,
        worked_ms,
        checked_at,
    })
}

/// [`Input::Llm`]: one durable LLM call, an `llm_chunks` step recording how many chunks the
/// live read got, then the `work` and `checked_at` steps.
async fn handle_llm(
    llm_url: &str,
    stream: bool,
    work_ms: u64,
    timeout_ms: Option<u64>,
) -> Result<Output, HandlerError> {
    let (status, body, chunks) = ask(llm_url, stream, timeout_ms).await?;
    let chunks: usize =
        rebuno::step("llm_chunks", || async move { Ok::<_, Infallible>(chunks) }).await?;
    let (worked_ms, checked_at) = work(work_ms).await?;
    Ok(Output::Llm {
        status,
        content: answer_text(&body),
        body,
        chunks,
        worked_ms,
        checked_at,
    })
}

/// Without the `rig` feature the rig path is not compiled in: say so.
#[cfg(not(feature = "rig"))]
async fn ask_rig(_url: &str, _stream: bool) -> Result<(String, usize), HandlerError> {
    Err("this Worker was built without the `rig` feature, so it has no rig path".into())
}

/// One durable `llm_call` step through the Workers `fetch`: the status, the whole body and how
/// many chunks it came in. A re-delivery replays the recorded answer instead of asking again.
async fn ask(
    url: &str,
    stream: bool,
    timeout_ms: Option<u64>,
) -> Result<(u16, String, usize), HandlerError> {
    let mut transport = TransportService::new(rebuno_workers::FetchTransport::new());
    if let Some(ms) = timeout_ms {
        transport = transport.timeout(Duration::from_millis(ms));
    }
    let llm = DurableLlm::new(transport);
    let request = serde_json::json!({
        "model": "gpt-test",
        "messages": [{"role": "user", "content": "Say hello from the edge."}],
        "stream": stream,
    });
    let request = http::Request::post(url)
        .header("content-type", "application/json")
        .body(request.to_string().into())?;
    let response = llm.send(request).await?;
    let status = response.status().as_u16();
    let mut body = response.into_body();
    let (mut whole, mut chunks) = (Vec::new(), 0);
    while let Some(chunk) = body.next().await {
        whole.extend_from_slice(&chunk?);
        chunks += 1;
    }
    Ok((status, String::from_utf8_lossy(&whole).into_owned(), chunks))
}

/// A slow `work` step taking `work_ms`, then the `checked_at` step: `(worked_ms, checked_at)`.
async fn work(work_ms: u64) -> Result<(u64, u64), HandlerError> {
    work_then_pause(work_ms, 0).await
}

/// [`work`], waiting `pause_ms` between the two steps.
async fn work_then_pause(work_ms: u64, pause_ms: u64) -> Result<(u64, u64), HandlerError> {
    let worked_ms: u64 = rebuno::Step::new("work")
        .args(serde_json::json!({ "ms": work_ms }))
        .run(|| async move {
            worker::Delay::from(Duration::from_millis(work_ms)).await;
            Ok::<_, Infallible>(work_ms)
        })
        .await?;
    if pause_ms > 0 {
        worker::Delay::from(Duration::from_millis(pause_ms)).await;
    }
    let checked_at: u64 = rebuno::step("checked_at", || async {
        Ok::<_, Infallible>(rebuno_workers::DateClock.unix_millis())
    })
    .await?;
    Ok((worked_ms, checked_at))
}
