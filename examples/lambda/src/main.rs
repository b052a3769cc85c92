//! A Rebuno agent on AWS Lambda: one durable tool and one local step, or one durable LLM call.
//!
//! Run with:
//!
//! ```sh
//! cargo lambda build --profile deploy -p rebuno-example-lambda   # writes target/lambda/bootstrap/bootstrap
//! printf 'REBUNO_AGENT_SECRET=%s\n' "$SECRET" > deploy/lambda/function.env
//! cargo lambda deploy --manifest-path examples/lambda/Cargo.toml \
//!     --env-file deploy/lambda/function.env rebuno-example-lambda
//! ```
//!
//! Then register the agent with the kernel, pointing its `webhook_url` at the Function URL that
//! `cargo lambda deploy` printed (see `deploy/lambda/README.md`). The function reads
//! `REBUNO_URL` (the kernel) and `REBUNO_AGENT_SECRET` (the webhook secret) from its
//! environment, and `REBUNO_AGENT_ID` (default `lambda-example`).
//!
//! Input `{"text": "..."}`; output `{"words": N, "longest": "...", "checked_at": <unix seconds>}`.
//!
//! Input `{"llm_url": "...", "stream": bool}` makes one durable LLM call instead: an
//! OpenAI-style chat completion posted to `llm_url` through [`rebuno::llm::fetch`], recorded
//! by the kernel as an `llm_call` step and replayed on re-delivery without calling the provider
//! again. Output `{"status": <HTTP status>, "text": "<the whole answer body>"}`.

use std::convert::Infallible;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rebuno::{Agent, HandlerError, Tool};
use serde::{Deserialize, Serialize};

/// The execution's input: a model to ask, or a text to analyze.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Request {
    Ask(Ask),
    Analyze(Input),
}

/// Input for one durable LLM call.
#[derive(Debug, Deserialize)]
struct Ask {
    /// An OpenAI-style chat-completions URL.
    llm_url: String,
    /// Whether to ask for a server-sent-events answer.
    #[serde(default)]
    stream: bool,
}

/// Input for the analysis.
#[derive(Debug, Deserialize)]
struct Input {
    text: String,
}

/// The execution's output, by request.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Reply {
    Answer(Answer),
    Analysis(Output),
}

/// The provider's answer as the handler read it (a replay reads the recorded one).
#[derive(Debug, Serialize)]
struct Answer {
    status: u16,
    text: String,
}

/// The analysis output.
#[derive(Debug, Serialize)]
struct Output {
    words: usize,
    longest: String,
    checked_at: u64,
}

/// The tool's arguments, recorded by the kernel with the call.
#[derive(Debug, Serialize, Deserialize)]
struct Analyze {
    text: String,
}

/// The tool's result.
#[derive(Debug, Serialize, Deserialize)]
struct Analysis {
    words: usize,
    longest: String,
}

// One vCPU at most below 1,769 MB: a current-thread runtime (see rebuno-lambda's docs).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Plain lines on stdout, which Lambda sends to CloudWatch: RUST_LOG (info by default).
    rebuno_lambda::init_logging();
    rebuno_lambda::run(agent()?).await?;
    Ok(())
}

/// The agent and its handler, configured from the environment (`REBUNO_URL`,
/// `REBUNO_AGENT_SECRET`, `REBUNO_AGENT_ID`). The simulator tests of `rebuno-lambda` include
/// this file and serve this agent.
pub(crate) fn agent() -> Result<Agent, rebuno::Error> {
    let agent_id = std::env::var("REBUNO_AGENT_ID").unwrap_or_else(|_| "lambda-example".to_owned());
    Agent::builder(agent_id)
        .description("Counts the words of a text and finds the longest one, or asks a model")
        .handler_with_state(analyze_tool(), |analyze, request: Request| async move {
            match request {
                Request::Ask(ask) => llm_call(ask).await.map(Reply::Answer),
                Request::Analyze(input) => handle(&analyze, input).await.map(Reply::Analysis),
            }
        })
        .build()
}

/// A durable tool: policy applies to it, and a replayed dispatch gets the recorded result.
fn analyze_tool() -> Tool<Analyze, Analysis> {
    rebuno::define_tool("analyze_text")
        .description("Counts the words of a text and finds the longest one")
        .execute(|args: Analyze| async move { Ok::<_, Infallible>(analyze(&args.text)) })
}

fn analyze(text: &str) -> Analysis {
    let words: Vec<&str> = text.split_whitespace().collect();
    let longest = words
        .iter()
        .copied()
        .max_by_key(|word| word.chars().count())
        .unwrap_or_default();
    Analysis {
        words: words.len(),
        longest: longest.to_owned(),
    }
}

/// The analysis: the tool, then a local step recording when the text was checked, so a replay
/// returns the same time.
async fn handle(analyze: &Tool<Analyze, Analysis>, input: Input) -> Result<Output, HandlerError> {
    let analysis = analyze.call(Analyze { text: input.text }).await?;
    let checked_at: u64 = rebuno::step("checked_at", || async {
        Ok::<_, Infallible>(unix_seconds())
    })
    .await?;
    Ok(Output {
        words: analysis.words,
        longest: analysis.longest,
        checked_at,
    })
}

/// One durable LLM call: an `llm_call` step (target `gpt-test`) whose answer the kernel records
/// once, streamed or not, and serves again on a replay without a new provider request.
async fn llm_call(ask: Ask) -> Result<Answer, HandlerError> {
    let prompt = serde_json::json!({
        "model": "gpt-test",
        "messages": [{ "role": "user", "content": "hi" }],
        "stream": ask.stream,
    });
    let request = http::Request::post(ask.llm_url)
        .header("content-type", "application/json")
        .body(Bytes::from(prompt.to_string()))?;
    let response = rebuno::llm::fetch(request).await?;
    let status = response.status().as_u16();
    let text = response.into_body().text().await?;
    Ok(Answer { status, text })
}

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn analyzes_words() {
        let analysis = analyze("durable agents on lambda");
        assert_eq!((analysis.words, analysis.longest.as_str()), (4, "durable"));
        assert_eq!(analyze("").words, 0);
    }
}
