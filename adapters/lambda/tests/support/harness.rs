//! The simulator with the function process in it.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lambda_simulator::process::{ManagedProcess, ProcessConfig, ProcessRole};
use lambda_simulator::{FreezeMode, InvocationBuilder, Simulator, SimulatorPhase};
use serde_json::Value;
use tokio::sync::Mutex;

use super::{MARKERS_ENV, ROLE_ENV, Role, SCENARIO_ENV, SECRET, Scenario, events};

/// How long a sandbox may stay busy (the simulated function timeout).
pub const FUNCTION_TIMEOUT: Duration = Duration::from_secs(30);

/// A simulated Lambda function: the Runtime and Extensions APIs with freeze/thaw, and the
/// function process.
pub struct Function {
    pub lambda: Arc<Lambda>,
    process: ManagedProcess,
    /// From spawning the process to the runtime's first `/next`.
    pub cold_start: Duration,
}

/// The simulator, invoked one event at a time like a single Lambda sandbox.
pub struct Lambda {
    pub sim: Simulator,
    /// Whether an invocation has run (then the next waits for the sandbox to be released).
    busy_before: Mutex<bool>,
    /// Function timeouts for the next invocations, in order; [`FUNCTION_TIMEOUT`] after them.
    timeouts: std::sync::Mutex<VecDeque<Duration>>,
}

/// The outcome of one invocation.
#[derive(Debug, Clone)]
pub struct Invoked {
    pub request_id: String,
    pub status: u16,
    pub body: String,
    /// From enqueueing the event to the function's response.
    pub latency: Duration,
    /// When the response arrived.
    pub answered: Instant,
    /// Whether the function reported an error instead of a response.
    pub failed: bool,
}

impl Function {
    /// Starts the simulator and this test binary as the function process, and waits until it
    /// is ready for invocations (and its extension registered, when it has one).
    pub async fn start(role: Role, kernel_url: &str) -> Self {
        Self::start_process(test_binary(role, kernel_url), role == Role::Extension).await
    }

    /// The function serving `scenario` with the internal extension, counting step bodies in
    /// `markers` (a directory from [`Markers`](super::markers::Markers)).
    pub async fn start_scenario(scenario: Scenario, kernel_url: &str, markers: &Path) -> Self {
        Self::start_scenario_with_env(scenario, kernel_url, markers, &[]).await
    }

    /// The same with more environment variables (`OTEL_EXPORTER_OTLP_ENDPOINT`, say).
    pub async fn start_scenario_with_env(
        scenario: Scenario,
        kernel_url: &str,
        markers: &Path,
        env: &[(&str, String)],
    ) -> Self {
        let mut config = test_binary(Role::Extension, kernel_url)
            .env(SCENARIO_ENV, scenario.as_str())
            .env("REBUNO_AGENT_ID", scenario.agent_id())
            .env(MARKERS_ENV, markers.to_string_lossy());
        for (name, value) in env {
            config = config.env(*name, value);
        }
        Self::start_process(config, true).await
    }

    /// The same with a packaged `bootstrap` (the example's), using the internal extension.
    pub async fn start_bootstrap(path: &str, agent_id: &str, kernel_url: &str) -> Self {
        let config = ProcessConfig::new(path, ProcessRole::Runtime)
            .env("REBUNO_AGENT_ID", agent_id)
            .env("REBUNO_URL", kernel_url)
            .env("REBUNO_AGENT_SECRET", SECRET)
            .inherit_stdio(std::env::var_os("REBUNO_LAMBDA_TEST_LOG").is_some());
        Self::start_process(config, true).await
    }

    async fn start_process(config: ProcessConfig, has_extension: bool) -> Self {
        let sim = Simulator::builder()
            .function_name("rebuno-agent")
            .freeze_mode(FreezeMode::Process)
            .invocation_timeout(FUNCTION_TIMEOUT)
            .extension_ready_timeout(FUNCTION_TIMEOUT)
            .build()
            .await
            .expect("simulator starts");
        let started = Instant::now();
        let process = sim
            .spawn_process_with_config(config)
            .expect("function process spawns");
        sim.wait_for_phase(SimulatorPhase::Ready, Duration::from_secs(20))
            .await
            .expect("the runtime asks for its first invocation");
        let cold_start = started.elapsed();
        assert_eq!(
            sim.extension_count().await,
            usize::from(has_extension),
            "the extension registers before the runtime's first /next"
        );
        let lambda = Arc::new(Lambda {
            sim,
            busy_before: Mutex::new(false),
            timeouts: std::sync::Mutex::new(VecDeque::new()),
        });
        Self {
            lambda,
            process,
            cold_start,
        }
    }

    /// Waits until the sandbox is frozen, as Lambda does once the invocation is fully over.
    pub async fn frozen(&self, timeout: Duration) -> bool {
        self.lambda.sim.wait_for_frozen(timeout).await.is_ok()
    }

    /// Thaws the process and stops everything. A process still frozen (the simulator is
    /// shared elsewhere) is killed anyway: SIGKILL reaches a stopped process.
    pub async fn stop(self) {
        let Self {
            lambda, process, ..
        } = self;
        if let Ok(lambda) = Arc::try_unwrap(lambda) {
            lambda.sim.shutdown().await;
        }
        drop(process);
    }
}

impl Lambda {
    /// Gives the next invocation not yet given one a function timeout of `timeout` instead
    /// of [`FUNCTION_TIMEOUT`]: its deadline (`Lambda-Runtime-Deadline-Ms`, the extension's
    /// `deadlineMs`) is that long after it is enqueued.
    pub fn time_out_next(&self, timeout: Duration) {
        self.timeouts.lock().unwrap().push_back(timeout);
    }

    /// Invokes the function with `event`. Like Lambda, a sandbox takes the next invocation
    /// only once the previous one is over (it froze); the simulator does not enforce that.
    pub async fn invoke(&self, event: Value) -> Invoked {
        let mut busy_before = self.busy_before.lock().await;
        if *busy_before {
            self.sim
                .wait_for_frozen(FUNCTION_TIMEOUT)
                .await
                .expect("the previous invocation releases the sandbox");
        }
        *busy_before = true;
        let timeout = self
            .timeouts
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(FUNCTION_TIMEOUT);
        let invocation = InvocationBuilder::new()
            .payload(event)
            .timeout_ms(u64::try_from(timeout.as_millis()).expect("a timeout in range"))
            .build()
            .expect("an invocation with a payload");
        let enqueued = Instant::now();
        let request_id = self.sim.enqueue(invocation).await;
        let state = self
            .sim
            .wait_for_invocation_complete(&request_id, FUNCTION_TIMEOUT)
            .await
            .expect("the invocation completes");
        let answered = Instant::now();
        let failed = state.error.is_some();
        let payload = state.response.map(|r| r.payload).unwrap_or(Value::Null);
        let (status, body) = events::response_of(&payload);
        Invoked {
            request_id,
            status,
            body,
            latency: answered - enqueued,
            answered,
            failed,
        }
    }
}

/// This test binary, running only its ignored `function_process` test as `role`.
fn test_binary(role: Role, kernel_url: &str) -> ProcessConfig {
    let verbose = std::env::var_os("REBUNO_LAMBDA_TEST_LOG").is_some();
    let log = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_owned());
    ProcessConfig::new(
        std::env::current_exe().expect("test binary path"),
        ProcessRole::Runtime,
    )
    // Run only the ignored `function_process` test, without capturing its output.
    .arg("function_process")
    .arg("--exact")
    .arg("--ignored")
    .arg("--nocapture")
    .arg("--test-threads=1")
    .env(ROLE_ENV, role.as_str())
    .env("REBUNO_URL", kernel_url)
    .env("REBUNO_AGENT_SECRET", SECRET)
    .env("RUST_LOG", log)
    .inherit_stdio(verbose)
}
