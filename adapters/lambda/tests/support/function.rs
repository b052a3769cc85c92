//! The Lambda function the simulator runs: this test binary, executed again with
//! `ROLE_ENV` set (see `function_process` in `simulator.rs`).

use std::convert::Infallible;
use std::time::Duration;

use rebuno::{Agent, HandlerError, Tool};
use rebuno_lambda::BackgroundMode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::markers::mark;
use super::{AGENT_ID, Role, SCENARIO_ENV, SETTLE_MS, STOPWATCH_STEP_MS, Scenario};

#[derive(Debug, Serialize, Deserialize)]
struct Lookup {
    word: String,
}

#[derive(Debug, Deserialize)]
struct Input {
    word: String,
}

/// Runs the function until the simulator goes away.
pub async fn serve(role: Role) {
    let scenario = std::env::var(SCENARIO_ENV)
        .ok()
        .map_or(Some(Scenario::Lookup), |s| Scenario::parse(&s))
        .expect("a known scenario");
    let agent = match scenario {
        Scenario::Lookup => agent(),
        Scenario::Stopwatch => stopwatch(),
        Scenario::Mailer => mailer(),
        Scenario::Example => {
            super::example::agent().expect("REBUNO_URL and REBUNO_AGENT_SECRET are set by the test")
        }
    };
    let outcome = match role {
        Role::Extension => rebuno_lambda::run(agent).await.map_err(Into::into),
        Role::Inline => rebuno_lambda::run(agent)
            .background_mode(BackgroundMode::Inline)
            .await
            .map_err(Into::into),
        Role::Detached => detached(agent).await,
    };
    if let Err(error) = outcome {
        eprintln!("function process stopped: {error}");
    }
}

/// The agent: one tool, then a local step that takes [`SETTLE_MS`].
fn agent() -> Agent {
    Agent::builder(AGENT_ID)
        .handler_with_state(lookup_tool(), |lookup, input: Input| async move {
            handle(&lookup, input).await
        })
        .build()
        .expect("REBUNO_URL and REBUNO_AGENT_SECRET are set by the test")
}

fn lookup_tool() -> Tool<Lookup, String> {
    rebuno::define_tool("lookup")
        .description("Says how long a word is")
        .execute(|args: Lookup| async move {
            Ok::<_, Infallible>(format!("{} has {} letters", args.word, args.word.len()))
        })
}

async fn handle(lookup: &Tool<Lookup, String>, input: Input) -> Result<Value, HandlerError> {
    let found = lookup.call(Lookup { word: input.word }).await?;
    let settled: u64 = rebuno::step("settle", || async {
        tokio::time::sleep(Duration::from_millis(SETTLE_MS)).await;
        Ok::<_, Infallible>(SETTLE_MS)
    })
    .await?;
    Ok(json!({ "found": found, "settled_ms": settled }))
}

/// Two local steps; the first takes [`STOPWATCH_STEP_MS`], long enough that the second always
/// starts within the deadline margin of a short invocation.
fn stopwatch() -> Agent {
    Agent::builder(Scenario::Stopwatch.agent_id())
        .handler(|_: Value| async {
            let fetched: String = rebuno::step("fetch", || async {
                mark("fetch");
                tokio::time::sleep(Duration::from_millis(STOPWATCH_STEP_MS)).await;
                Ok::<_, Infallible>("fetched".to_owned())
            })
            .await?;
            let stored: String = rebuno::step("store", || async {
                mark("store");
                Ok::<_, Infallible>("stored".to_owned())
            })
            .await?;
            Ok::<_, HandlerError>(json!({ "fetched": fetched, "stored": stored }))
        })
        .build()
        .expect("REBUNO_URL and REBUNO_AGENT_SECRET are set by the test")
}

#[derive(Debug, Serialize, Deserialize)]
struct Email {
    to: String,
}

/// A local step, then `send_email`, which the test's policy holds for approval.
fn mailer() -> Agent {
    let send = rebuno::define_tool("send_email")
        .description("Sends the report")
        .idempotency(rebuno::Idempotency::AtMostOnce)
        .execute(|email: Email| async move {
            mark("send_email");
            Ok::<_, Infallible>(format!("sent to {}", email.to))
        });
    Agent::builder(Scenario::Mailer.agent_id())
        .handler_with_state(send, |send, _: Value| async move {
            let to: String = rebuno::step("draft", || async {
                mark("draft");
                Ok::<_, Infallible>("ops@example.com".to_owned())
            })
            .await?;
            let sent = send.call(Email { to }).await?;
            Ok::<_, HandlerError>(json!(sent))
        })
        .build()
        .expect("REBUNO_URL and REBUNO_AGENT_SECRET are set by the test")
}

/// The naive host: lambda_http straight onto `agent.fetch`, whose run is a bare
/// `tokio::spawn` that Lambda freezes with the sandbox.
async fn detached(agent: Agent) -> Result<(), lambda_http::Error> {
    lambda_http::run(lambda_http::service_fn(
        move |request: lambda_http::Request| {
            let agent = agent.clone();
            async move { Ok::<_, Infallible>(agent.fetch(request).await) }
        },
    ))
    .await
}
