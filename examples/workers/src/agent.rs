//! The Worker: the `fetch` event, the agent and its handler.

use std::cell::OnceCell;
use std::convert::Infallible;
use std::time::Duration;

use rebuno::rt::Clock;
use rebuno::{Agent, Body, HandlerError, Tool};
use serde::{Deserialize, Serialize};
use worker::{Context, Env, HttpRequest, event};

use crate::text::{Analysis, Analyze, analyze};

/// The agent id when `REBUNO_AGENT_ID` is not set.
const DEFAULT_AGENT_ID: &str = "workers-example";

/// The execution's input.
#[derive(Debug, Deserialize)]
struct Input {
    text: String,
    #[serde(default)]
    work_ms: u64,
}

/// The execution's output.
#[derive(Debug, Serialize)]
struct Output {
    words: usize,
    longest: String,
    worked_ms: u64,
    checked_at: u64,
}

thread_local! {
    // One agent per isolate: it remembers which executions this isolate is running, so a
    // repeated delivery is not run twice side by side.
    static AGENT: OnceCell<Agent> = const { OnceCell::new() };
}

#[event(fetch)]
async fn fetch(req: HttpRequest, env: Env, ctx: Context) -> worker::Result<http::Response<Body>> {
    let agent = agent(&env).map_err(|e| worker::Error::RustError(e.to_string()))?;
    rebuno_workers::fetch(&agent, req, &env, &ctx).await
}

/// The isolate's agent, built from the bindings on the first request.
fn agent(env: &Env) -> rebuno::Result<Agent> {
    if let Some(agent) = AGENT.with(|cell| cell.get().cloned()) {
        return Ok(agent);
    }
    let id = env
        .var("REBUNO_AGENT_ID")
        .map_or_else(|_| DEFAULT_AGENT_ID.to_owned(), |v| v.to_string());
    let agent = rebuno_workers::agent_builder(id, env)
        .description("Counts the words of a text and finds the longest one")
        .build()?;
    let analyze = analyze_tool();
    agent.bind(move |input: Input| {
        let analyze = analyze.clone();
        async move { handle(&analyze, input).await }
    });
    AGENT.with(|cell| cell.set(agent.clone()).ok());
    Ok(agent)
}

/// A durable tool: policy applies to it, and a replayed dispatch gets the recorded result.
fn analyze_tool() -> Tool<Analyze, Analysis> {
    rebuno::define_tool("analyze_text")
        .description("Counts the words of a text and finds the longest one")
        .execute(|args: Analyze| async move { Ok::<_, Infallible>(analyze(&args.text)) })
}

/// The handler: the tool, a slow `work` step, then a `checked_at` step recording the time, so
/// a replay returns the same values.
async fn handle(analyze: &Tool<Analyze, Analysis>, input: Input) -> Result<Output, HandlerError> {
    let analysis = analyze.call(Analyze { text: input.text }).await?;
    let work_ms = input.work_ms;
    let worked_ms: u64 = rebuno::Step::new("work")
        .args(serde_json::json!({ "ms": work_ms }))
        .run(|| async move {
            worker::Delay::from(Duration::from_millis(work_ms)).await;
            Ok::<_, Infallible>(work_ms)
        })
        .await?;
    let checked_at: u64 = rebuno::step("checked_at", || async {
        Ok::<_, Infallible>(rebuno_workers::DateClock.unix_millis())
    })
    .await?;
    Ok(Output {
        words: analysis.words,
        longest: analysis.longest,
        worked_ms,
        checked_at,
    })
}
