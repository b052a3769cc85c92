//! Shared pieces of the simulator tests: the function process, the simulator harness, the
//! loopback gateway that stands in for a Function URL, and event fixtures.

#![allow(dead_code, unreachable_pub)]

pub mod events;
/// The example Lambda function (`examples/lambda`), whose agent [`Scenario::Example`] serves.
#[path = "../../../../examples/lambda/src/main.rs"]
#[allow(clippy::disallowed_methods)] // `SystemTime::now` in a native-only example
pub mod example;
pub mod function;
pub mod gateway;
pub mod harness;
/// The OpenAI-style provider stub of the core crate's durable-LLM tests.
#[path = "../../../../tests/integration/support/llm_stub.rs"]
#[allow(clippy::disallowed_methods)] // its server task is a `tokio::spawn`
pub mod llm_stub;
pub mod markers;
pub mod otlp;
/// Loopback ports for the OTLP receiver's processes (its `crate::support::ports`).
#[path = "../../../../tests/integration/support/ports.rs"]
pub mod ports;

/// Tells the re-executed test binary which function to run (see `function_process`).
pub const ROLE_ENV: &str = "REBUNO_LAMBDA_TEST_ROLE";
/// Tells the function process which agent to serve (see [`Scenario`]); unset means
/// [`Scenario::Lookup`].
pub const SCENARIO_ENV: &str = "REBUNO_LAMBDA_TEST_SCENARIO";
/// The directory where the function process counts step bodies (see [`markers`]).
pub const MARKERS_ENV: &str = "REBUNO_LAMBDA_TEST_MARKERS";
/// The agent id the function serves.
pub const AGENT_ID: &str = "lambda-agent";
/// The shared webhook secret.
pub const SECRET: &str = "lambda-test-secret";
/// How long the handler's `settle` step sleeps, so a run is never done by the time the
/// webhook has been answered.
pub const SETTLE_MS: u64 = 400;

/// How the function keeps acknowledged runs alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `rebuno_lambda::run(agent)`: the internal extension holds the sandbox.
    Extension,
    /// `BackgroundMode::Inline`: the run finishes before the response.
    Inline,
    /// Test-only: plain `lambda_http::run` + `agent.fetch`, so the run is a bare `tokio::spawn`.
    Detached,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Extension => "extension",
            Self::Inline => "inline",
            Self::Detached => "detached",
        }
    }

    pub fn parse(role: &str) -> Option<Self> {
        [Self::Extension, Self::Inline, Self::Detached]
            .into_iter()
            .find(|r| r.as_str() == role)
    }
}

/// Which agent the function process serves. [`Scenario::Lookup`] runs under any [`Role`];
/// the others under [`Role::Extension`], with a marker directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// [`AGENT_ID`]: a tool, then a local step that takes [`SETTLE_MS`].
    Lookup,
    /// `stopwatch`: a local step that takes [`STOPWATCH_STEP_MS`], then a second one; each
    /// body leaves a marker.
    Stopwatch,
    /// `mailer`: a local step, then the `send_email` tool (held for approval by
    /// [`MAILER_POLICY`]); each body leaves a marker.
    Mailer,
    /// `lambda-example`: the agent of the example function (`examples/lambda`), whose
    /// `{"llm_url", "stream"}` input makes one durable LLM call.
    Example,
}

/// How long the stopwatch's first step takes: longer than the window its invocation leaves
/// for starting steps, so the step after it always falls inside the deadline margin.
pub const STOPWATCH_STEP_MS: u64 = 2_500;

/// The policy that holds the mailer's `send_email` for a human.
pub const MAILER_POLICY: &str = r#"
default_action: allow
rules:
  - id: mail-needs-a-human
    when: { target: send_email }
    then: { decision: require_approval }
"#;

impl Scenario {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lookup => "lookup",
            Self::Stopwatch => "stopwatch",
            Self::Mailer => "mailer",
            Self::Example => "example",
        }
    }

    pub fn parse(scenario: &str) -> Option<Self> {
        [Self::Lookup, Self::Stopwatch, Self::Mailer, Self::Example]
            .into_iter()
            .find(|s| s.as_str() == scenario)
    }

    /// The agent id it serves.
    pub fn agent_id(self) -> &'static str {
        match self {
            Self::Lookup => AGENT_ID,
            Self::Stopwatch => "stopwatch",
            Self::Mailer => "mailer",
            Self::Example => "lambda-example",
        }
    }
}
