//! Shared pieces of the simulator tests: the function process, the simulator harness, the
//! loopback gateway that stands in for a Function URL, and event fixtures.

#![allow(dead_code, unreachable_pub)]

pub mod events;
pub mod function;
pub mod gateway;
pub mod harness;

/// Tells the re-executed test binary which function to run (see `function_process`).
pub const ROLE_ENV: &str = "REBUNO_LAMBDA_TEST_ROLE";
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
