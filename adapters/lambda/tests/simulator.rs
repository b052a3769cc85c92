//! `rebuno_lambda` under lambda-simulator, which freezes the function process (SIGSTOP) the way
//! Lambda does once the runtime and every extension have asked for the next event.
//!
//! The function process is this test binary run again with `REBUNO_LAMBDA_TEST_ROLE` set: it
//! executes only the ignored `function_process` test below, serving the agent that
//! `REBUNO_LAMBDA_TEST_SCENARIO` names (see `support::Scenario`) and counting step bodies in the
//! files under `REBUNO_LAMBDA_TEST_MARKERS`. Set `REBUNO_LAMBDA_TEST_LOG=1` to see its output.
// Test code: panicking on a broken fixture is the point.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rebuno::Secret;
use rebuno::rt::Deadline;
use rebuno::signing::sign_webhook;
use rebuno::wire::{Execution, ExecutionStatus};
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde_json::{Value, json};
use support::events::{self, FIXTURES};
use support::gateway::{Delivery, Gateway};
use support::harness::{FUNCTION_TIMEOUT, Function};
use support::llm_stub::{self, LlmStub};
use support::markers::Markers;
use support::{AGENT_ID, MAILER_POLICY, Role, SECRET, SETTLE_MS, STOPWATCH_STEP_MS, Scenario};

/// Entry point of the function process; does nothing in a normal test run.
#[test]
#[ignore = "the Lambda function process the simulator tests spawn; does nothing on its own"]
fn function_process() {
    let Some(role) = std::env::var(support::ROLE_ENV)
        .ok()
        .as_deref()
        .and_then(Role::parse)
    else {
        return;
    };
    // The log filter is the console's own, so it cannot hide the SDK's spans from the
    // exporter (set when the test passes OTEL_EXPORTER_OTLP_ENDPOINT).
    let telemetry = rebuno::telemetry::Telemetry::from_env().expect("OTEL_* variables parse");
    {
        use tracing_subscriber::prelude::*;
        tracing_subscriber::registry()
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_filter(tracing_subscriber::EnvFilter::from_default_env()),
            )
            .with(telemetry.as_ref().map(rebuno::telemetry::Telemetry::layer))
            .init();
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(support::function::serve(role));
}

/// A kernel URL nobody listens on, for tests where the agent never calls the kernel.
const NO_KERNEL: &str = "http://127.0.0.1:9";

/// Shows the simulator's lifecycle log when `REBUNO_LAMBDA_TEST_LOG` is set.
fn show_logs() {
    if std::env::var_os("REBUNO_LAMBDA_TEST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter("lambda_lifecycle=info")
            .with_test_writer()
            .try_init();
    }
}

fn signed(body: &str) -> String {
    sign_webhook(&Secret::new(SECRET), body.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_shape_reaches_the_webhook_unchanged() {
    show_logs();
    let function = Function::start(Role::Extension, NO_KERNEL).await;
    println!(
        "cold start (spawn to first /next, extension registered): {:?}",
        function.cold_start
    );
    let lambda = &function.lambda;
    let not_a_dispatch = r#"{"hello":"world"}"#;
    for (name, fixture) in FIXTURES {
        let probe = lambda
            .invoke(events::from_fixture(fixture, "GET", "", &[]))
            .await;
        assert_eq!(
            (probe.status, probe.body.as_str()),
            (200, "ok"),
            "{name}: GET is a health probe"
        );

        let unsigned = events::from_fixture(fixture, "POST", not_a_dispatch, &[]);
        assert_eq!(
            lambda.invoke(unsigned).await.status,
            401,
            "{name}: unsigned webhook refused"
        );

        // The signature covers the raw body, so passing verification proves the body reached
        // the agent byte for byte; the payload itself is not a dispatch.
        let signature = signed(not_a_dispatch);
        let headers = [("rebuno-signature", signature.as_str())];
        let verified = events::from_fixture(fixture, "POST", not_a_dispatch, &headers);
        let invoked = lambda.invoke(verified).await;
        assert_eq!(
            invoked.status, 400,
            "{name}: verified, then refused as a payload: {}",
            invoked.body
        );
        assert!(
            invoked.body.contains("validation_error"),
            "{name}: {}",
            invoked.body
        );
        assert!(
            function.frozen(Duration::from_secs(5)).await,
            "{name}: with no run to keep, the extension lets the sandbox freeze"
        );
        println!("{name}: verified webhook answered in {:?}", invoked.latency);
    }
    function.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_that_is_not_http_does_not_hold_the_sandbox() {
    let function = Function::start(Role::Extension, NO_KERNEL).await;
    let invoked = function
        .lambda
        .invoke(json!({ "detail-type": "Scheduled Event" }))
        .await;
    assert!(invoked.failed, "lambda_http reports the unparseable event");
    assert!(
        function.frozen(Duration::from_secs(5)).await,
        "the runtime layer released the invocation the handler never saw"
    );
    function.stop().await;
}

/// The dev kernel, the function in the simulator, and the gateway between them: the kernel's
/// webhook URL for the agent is the gateway, which invokes the function like a Function URL.
struct Stack {
    kernel: DevKernel,
    function: Function,
    gateway: Gateway,
}

impl Stack {
    async fn start(role: Role) -> Self {
        let kernel = DevKernel::start().await.expect("dev kernel starts");
        let function = Function::start(role, &kernel.url()).await;
        println!(
            "{role:?}: cold start (spawn to first /next) {:?}",
            function.cold_start
        );
        Self::connect(kernel, function, AGENT_ID).await
    }

    /// The function serving `scenario` (counting step bodies in `markers`), its agent
    /// registered as `spec` says.
    async fn start_scenario(
        scenario: Scenario,
        markers: &Markers,
        spec: impl FnOnce(AgentSpec) -> AgentSpec,
    ) -> Self {
        let kernel = DevKernel::start().await.expect("dev kernel starts");
        let function = Function::start_scenario(scenario, &kernel.url(), markers.dir()).await;
        Self::connect_with(kernel, function, scenario.agent_id(), spec).await
    }

    /// Registers `agent_id` with the kernel, its webhook URL being a gateway to `function`.
    async fn connect(kernel: DevKernel, function: Function, agent_id: &str) -> Self {
        Self::connect_with(kernel, function, agent_id, |spec| spec).await
    }

    /// The same, with the registration adjusted by `spec` (a policy, a lease).
    async fn connect_with(
        kernel: DevKernel,
        function: Function,
        agent_id: &str,
        spec: impl FnOnce(AgentSpec) -> AgentSpec,
    ) -> Self {
        let gateway = Gateway::start(Arc::clone(&function.lambda)).await;
        kernel
            .register_agent(spec(AgentSpec::new(
                agent_id,
                gateway.webhook_url(),
                SECRET,
            )))
            .expect("agent registers");
        Self {
            kernel,
            function,
            gateway,
        }
    }

    /// Starts an execution of the test agent and waits for the gateway to have the function's
    /// answer.
    async fn dispatch(&self) -> (Execution, Delivery) {
        self.dispatch_to(AGENT_ID, json!({ "word": "lambda" }))
            .await
    }

    async fn dispatch_to(&self, agent_id: &str, input: Value) -> (Execution, Delivery) {
        let execution = self
            .kernel
            .create_execution(NewExecution::new(agent_id, input))
            .await
            .expect("execution created");
        let delivery = self.gateway.delivery(1, Duration::from_secs(10)).await;
        (execution, delivery)
    }

    fn status(&self, execution: &Execution) -> ExecutionStatus {
        self.kernel
            .execution(&execution.id)
            .expect("execution exists")
            .status
    }

    async fn stop(self) {
        let Self {
            kernel,
            function,
            gateway,
        } = self;
        kernel.shutdown().await;
        drop(gateway);
        function.stop().await;
    }
}

fn assert_completed(stack: &Stack, execution: &Execution) {
    let snapshot = stack
        .kernel
        .execution(&execution.id)
        .expect("execution exists");
    assert_eq!(
        snapshot.status,
        ExecutionStatus::Completed,
        "{:?}",
        snapshot.failure_reason
    );
    assert_eq!(
        snapshot.output,
        Some(json!({ "found": "lambda has 6 letters", "settled_ms": SETTLE_MS }))
    );
    let targets: Vec<String> = stack
        .kernel
        .steps(&execution.id)
        .into_iter()
        .map(|step| step.target)
        .collect();
    assert!(
        targets.iter().any(|t| t == "lookup"),
        "tool step recorded: {targets:?}"
    );
    assert!(
        targets.iter().any(|t| t == "settle"),
        "local step recorded: {targets:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extension_mode_acks_at_once_and_finishes_the_run_before_the_freeze() {
    show_logs();
    let stack = Stack::start(Role::Extension).await;
    let (execution, delivery) = stack.dispatch().await;
    assert_eq!(delivery.status, 200, "{}", delivery.body);
    assert!(
        !stack.status(&execution).is_terminal(),
        "acknowledged before the run could finish"
    );
    assert!(
        delivery.ack_latency < Duration::from_millis(SETTLE_MS),
        "the 200 does not wait for the run: {:?}",
        delivery.ack_latency
    );
    assert!(
        stack.function.frozen(FUNCTION_TIMEOUT).await,
        "the sandbox freezes once the run is done"
    );
    let held = delivery.answered.elapsed();
    // Frozen now: anything the run had not done yet would stay undone.
    assert_completed(&stack, &execution);
    println!(
        "extension: ack {:?}, sandbox held {held:?} after the ack until the run finished",
        delivery.ack_latency
    );
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extension_mode_pairs_consecutive_runs_by_request_id() {
    show_logs();
    let stack = Stack::start(Role::Extension).await;
    let input = json!({ "word": "lambda" });
    let first = stack
        .kernel
        .create_execution(NewExecution::new(AGENT_ID, input.clone()));
    let first = first.await.expect("execution created");
    let second = stack
        .kernel
        .create_execution(NewExecution::new(AGENT_ID, input));
    let second = second.await.expect("execution created");
    // One sandbox takes one invocation at a time: the second webhook is invoked once the
    // first run has let the sandbox freeze.
    let deliveries = [
        stack.gateway.delivery(1, FUNCTION_TIMEOUT).await,
        stack.gateway.delivery(2, FUNCTION_TIMEOUT).await,
    ];
    assert!(deliveries.iter().all(|d| d.status == 200), "{deliveries:?}");
    assert_ne!(deliveries[0].request_id, deliveries[1].request_id);
    assert!(stack.function.frozen(FUNCTION_TIMEOUT).await);
    assert_completed(&stack, &first);
    assert_completed(&stack, &second);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_mode_finishes_the_run_before_responding() {
    let stack = Stack::start(Role::Inline).await;
    let (execution, delivery) = stack.dispatch().await;
    assert_eq!(delivery.status, 200, "{}", delivery.body);
    assert_completed(&stack, &execution);
    assert!(delivery.ack_latency >= Duration::from_millis(SETTLE_MS));
    assert!(stack.function.frozen(Duration::from_secs(5)).await);
    println!("inline: response after {:?}", delivery.ack_latency);
    stack.stop().await;
}

/// The negative case: the same agent behind plain lambda_http + `agent.fetch`, whose run is a
/// bare `tokio::spawn`. The simulator freezes the process right after the response, and the
/// run stops where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_spawn_is_frozen_mid_run() {
    let stack = Stack::start(Role::Detached).await;
    let (execution, delivery) = stack.dispatch().await;
    assert_eq!(delivery.status, 200, "{}", delivery.body);
    assert!(
        stack.function.frozen(Duration::from_secs(5)).await,
        "no extension: frozen as soon as the response is posted"
    );
    tokio::time::sleep(Duration::from_millis(3 * SETTLE_MS)).await;
    assert_eq!(
        stack.status(&execution),
        ExecutionStatus::Running,
        "still frozen mid-run, long after it would have finished"
    );
    println!(
        "detached: ack {:?}, still running {:?} after the ack",
        delivery.ack_latency,
        delivery.answered.elapsed()
    );
    stack.stop().await;
}

/// The function timeout of the first invocation in the deadline test: the deadline margin plus
/// a window for starting steps that is shorter than the stopwatch's first step. That step starts
/// in the window and is in flight when the margin begins; the step after it is refused.
const SHORT_TIMEOUT: Duration = Deadline::DEFAULT_MARGIN.saturating_add(STEP_WINDOW);
/// How long after the invocation starts new steps may still start (the step in flight aside).
const STEP_WINDOW: Duration = Duration::from_secs(2);

/// The counts of the step bodies named in `steps`.
fn counts<const N: usize>(markers: &Markers, steps: [&str; N]) -> [usize; N] {
    steps.map(|step| markers.count(step))
}

fn count_events(stack: &Stack, execution: &Execution, kind: &str) -> usize {
    stack
        .kernel
        .events(&execution.id)
        .iter()
        .filter(|event| event.kind == kind)
        .count()
}

/// An invocation whose deadline comes mid-run records the step in flight, starts
/// no other, and ends its dispatch without failing the execution (the hold is released before
/// the deadline, so the sandbox freezes with nothing half done). The kernel re-delivers as a
/// new invocation, which replays the recorded step and runs the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cut_by_its_deadline_resumes_on_redelivery_with_nothing_run_twice() {
    show_logs();
    const _: () = assert!(STOPWATCH_STEP_MS > STEP_WINDOW.as_millis() as u64);
    let markers = Markers::new("deadline");
    let stack = Stack::start_scenario(Scenario::Stopwatch, &markers, |spec| spec).await;
    let agent_id = Scenario::Stopwatch.agent_id();
    stack.function.lambda.time_out_next(SHORT_TIMEOUT);

    let (execution, first) = stack.dispatch_to(agent_id, json!({})).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert!(
        stack.function.frozen(FUNCTION_TIMEOUT).await,
        "the run yields and the sandbox freezes"
    );
    let frozen_after = first.received.elapsed();
    // The freeze came from the run ending, not from the extension giving up at the deadline
    // with the run still going.
    assert!(
        frozen_after < SHORT_TIMEOUT,
        "the run let go before its deadline: frozen {frozen_after:?} after the webhook"
    );
    let midway = stack
        .kernel
        .execution(&execution.id)
        .expect("execution exists");
    assert_eq!(
        midway.status,
        ExecutionStatus::Running,
        "yielding does not fail the execution: {}",
        midway.failure_reason
    );
    assert_eq!(
        counts(&markers, ["fetch", "store"]),
        [1, 0],
        "the step in flight finished; the next was not started"
    );
    let steps: Vec<_> = stack
        .kernel
        .steps(&execution.id)
        .into_iter()
        .map(|step| (step.target, step.status))
        .collect();
    assert_eq!(
        steps,
        [("fetch".to_owned(), "succeeded".to_owned())],
        "the step in flight recorded its outcome before the freeze"
    );

    // The lease would expire; the kernel re-delivers, through the gateway, as a new invocation
    // with the full function timeout.
    let attempt = stack
        .kernel
        .redeliver(&execution.id)
        .expect("the yielded dispatch is still in flight");
    assert_eq!(attempt, 2);
    let done = stack
        .kernel
        .wait_terminal(&execution.id, FUNCTION_TIMEOUT)
        .await
        .expect("the re-delivery finishes the run");
    let second = stack.gateway.delivery(2, FUNCTION_TIMEOUT).await;
    assert_eq!(second.status, 200, "{}", second.body);
    assert_ne!(first.request_id, second.request_id);
    assert!(stack.function.frozen(FUNCTION_TIMEOUT).await);

    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    assert_eq!(
        done.output,
        Some(json!({ "fetched": "fetched", "stored": "stored" }))
    );
    assert_eq!(
        counts(&markers, ["fetch", "store"]),
        [1, 1],
        "fetch was replayed, not run again; store ran once"
    );
    assert_eq!(count_events(&stack, &execution, "dispatch.acked"), 2);
    assert_eq!(stack.gateway.deliveries().len(), 2);
    println!(
        "deadline: first invocation ({SHORT_TIMEOUT:?} timeout) frozen {frozen_after:?} after \
         its webhook; re-delivery answered in {:?}",
        second.ack_latency
    );
    stack.stop().await;
}

/// A function timeout far longer than the suspension test can take: only the run ending
/// releases the sandbox before it.
const LONG_TIMEOUT: Duration = Duration::from_secs(300);
/// The wide bound on how long a run that blocks may keep its sandbox (it takes milliseconds).
const RELEASE_BOUND: Duration = Duration::from_secs(30);

/// A run that blocks on an approval ends its dispatch, so the invocation lets the
/// sandbox freeze at once instead of holding it (and billing) until the function times out.
/// The grant re-dispatches the execution as a new invocation, which completes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_blocked_on_an_approval_releases_the_sandbox_at_once() {
    show_logs();
    let markers = Markers::new("approval");
    let stack = Stack::start_scenario(Scenario::Mailer, &markers, |spec| {
        spec.policy_yaml(MAILER_POLICY)
    })
    .await;
    let agent_id = Scenario::Mailer.agent_id();
    stack.function.lambda.time_out_next(LONG_TIMEOUT);

    let (execution, first) = stack.dispatch_to(agent_id, json!({})).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let waiting = Instant::now();
    assert!(
        stack.function.frozen(RELEASE_BOUND).await,
        "the blocked run released the sandbox (its timeout is {LONG_TIMEOUT:?})"
    );
    let held = first.answered.elapsed();
    println!(
        "approval: sandbox held {held:?} after the ack ({:?} of waiting for the freeze)",
        waiting.elapsed()
    );
    let blocked = stack
        .kernel
        .execution(&execution.id)
        .expect("execution exists");
    assert_eq!(blocked.status, ExecutionStatus::Blocked);
    assert_eq!(
        counts(&markers, ["draft", "send_email"]),
        [1, 0],
        "nothing is sent before the grant"
    );

    let pending: Vec<_> = stack
        .kernel
        .approvals()
        .into_iter()
        .filter(|approval| approval.execution_id == execution.id)
        .collect();
    assert_eq!(pending.len(), 1, "{pending:?}");
    stack.kernel.grant(&pending[0].id).expect("grant");
    let done = stack
        .kernel
        .wait_terminal(&execution.id, FUNCTION_TIMEOUT)
        .await
        .expect("the re-dispatch finishes the run");
    let second = stack.gateway.delivery(2, FUNCTION_TIMEOUT).await;
    assert_eq!(second.status, 200, "{}", second.body);
    assert_ne!(first.request_id, second.request_id);
    assert!(stack.function.frozen(FUNCTION_TIMEOUT).await);

    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    assert_eq!(done.output, Some(json!("sent to ops@example.com")));
    assert_eq!(
        counts(&markers, ["draft", "send_email"]),
        [1, 1],
        "draft was replayed; the email went out once, after the grant"
    );
    for kind in ["execution.blocked", "approval.granted", "execution.resumed"] {
        assert_eq!(count_events(&stack, &execution, kind), 1, "{kind}");
    }
    assert_eq!(count_events(&stack, &execution, "dispatch.acked"), 2);
    stack.stop().await;
}

/// The packaged example (`cargo lambda build --release -p rebuno-example-lambda`) under the
/// simulator: `REBUNO_LAMBDA_BOOTSTRAP=target/lambda/bootstrap/bootstrap cargo test -p
/// rebuno-lambda --test simulator -- --ignored packaged --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBUNO_LAMBDA_BOOTSTRAP: the path of a built bootstrap"]
async fn packaged_example_bootstrap() {
    let Ok(path) = std::env::var("REBUNO_LAMBDA_BOOTSTRAP") else {
        eprintln!("skipped: set REBUNO_LAMBDA_BOOTSTRAP to the path of a built bootstrap");
        return;
    };
    let agent_id = "lambda-example";
    let kernel = DevKernel::start().await.expect("dev kernel starts");
    let function = Function::start_bootstrap(&path, agent_id, &kernel.url()).await;
    println!(
        "bootstrap: cold start (spawn to first /next) {:?}",
        function.cold_start
    );
    let stack = Stack::connect(kernel, function, agent_id).await;
    the_example_analyzes_a_text(&stack, agent_id).await;
    for stream in [false, true] {
        the_example_makes_one_durable_llm_call(&stack, agent_id, stream).await;
    }
    stack.stop().await;
}

/// Any packaged bootstrap (for example the README's Lambda quick start, built by
/// scripts/fresh-projects.sh) under the freezing simulator: one execution of
/// `REBUNO_LAMBDA_AGENT` with `REBUNO_LAMBDA_INPUT` must complete with `REBUNO_LAMBDA_OUTPUT`
/// (JSON), acknowledged first and finished before the sandbox froze.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBUNO_LAMBDA_BOOTSTRAP, REBUNO_LAMBDA_AGENT, REBUNO_LAMBDA_INPUT and REBUNO_LAMBDA_OUTPUT"]
async fn packaged_bootstrap_completes_one_execution() {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("set {name}"));
    let path = var("REBUNO_LAMBDA_BOOTSTRAP");
    let agent_id = var("REBUNO_LAMBDA_AGENT");
    let input: Value = serde_json::from_str(&var("REBUNO_LAMBDA_INPUT")).expect("input is JSON");
    let expected: Value =
        serde_json::from_str(&var("REBUNO_LAMBDA_OUTPUT")).expect("output is JSON");
    let kernel = DevKernel::start().await.expect("dev kernel starts");
    let function = Function::start_bootstrap(&path, &agent_id, &kernel.url()).await;
    let stack = Stack::connect(kernel, function, &agent_id).await;
    let (snapshot, delivery) = run_example(&stack, &agent_id, input).await;
    assert_eq!(
        snapshot.status,
        ExecutionStatus::Completed,
        "{}",
        snapshot.failure_reason
    );
    assert_eq!(snapshot.output, Some(expected));
    println!(
        "{agent_id}: ack {:?}, frozen {:?} after the ack",
        delivery.ack_latency,
        delivery.answered.elapsed()
    );
    stack.stop().await;
}

/// Runs one execution of the example agent with `input` and waits until the function has
/// answered its webhook and the sandbox froze: the run is over, or never will be.
async fn run_example(stack: &Stack, agent_id: &str, input: Value) -> (Execution, Delivery) {
    let n = stack.gateway.deliveries().len() + 1;
    let execution = stack
        .kernel
        .create_execution(NewExecution::new(agent_id, input))
        .await
        .expect("execution created");
    let delivery = stack.gateway.delivery(n, FUNCTION_TIMEOUT).await;
    assert_eq!(delivery.status, 200, "{}", delivery.body);
    assert!(
        stack.function.frozen(FUNCTION_TIMEOUT).await,
        "the sandbox freezes once the run is done"
    );
    let snapshot = stack
        .kernel
        .execution(&execution.id)
        .expect("execution exists");
    (snapshot, delivery)
}

/// The example's first use: `{"text"}` in, the analysis out.
async fn the_example_analyzes_a_text(stack: &Stack, agent_id: &str) {
    let input = json!({ "text": "durable agents on lambda" });
    let (snapshot, delivery) = run_example(stack, agent_id, input).await;
    assert_eq!(
        snapshot.status,
        ExecutionStatus::Completed,
        "{}",
        snapshot.failure_reason
    );
    let output = snapshot.output.expect("output");
    assert_eq!(
        (output["words"].as_u64(), output["longest"].as_str()),
        (Some(4), Some("durable"))
    );
    println!(
        "example: ack {:?}, frozen {:?} after the ack, output {output}",
        delivery.ack_latency,
        delivery.answered.elapsed()
    );
}

/// The one `llm_call` step of an execution: its target and status checked, its record returned.
fn llm_record(stack: &Stack, execution: &Execution) -> Value {
    let steps: Vec<_> = stack
        .kernel
        .steps(&execution.id)
        .into_iter()
        .filter(|step| step.kind == "llm_call")
        .collect();
    assert_eq!(steps.len(), 1, "exactly one llm_call step: {steps:#?}");
    let step = &steps[0];
    assert_eq!(step.target, "gpt-test");
    assert_eq!(step.status, "succeeded", "{:?}", step.error);
    step.result.clone().expect("the answer is recorded")
}

/// The example's durable LLM call: `{"llm_url", "stream"}` in, one provider request, one
/// `llm_call` step recording the whole answer before the sandbox freezes; then a fork of the
/// execution at that step, run as a new invocation, replays the record without a new request.
async fn the_example_makes_one_durable_llm_call(stack: &Stack, agent_id: &str, stream: bool) {
    let stub = LlmStub::start().await;
    let input = json!({ "llm_url": stub.chat_url(), "stream": stream });
    let (done, delivery) = run_example(stack, agent_id, input).await;
    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "stream {stream}: {}",
        done.failure_reason
    );
    assert_eq!(stub.hits(), 1, "stream {stream}: one provider request");
    let mut prompt = json!({
        "model": "gpt-test",
        "messages": [{ "role": "user", "content": "hi" }],
        "stream": stream,
    });
    if stream {
        // The SDK asks an OpenAI-style stream for its usage (a token budget counts it).
        prompt["stream_options"] = json!({ "include_usage": true });
    }
    assert_eq!(stub.requests(), [prompt], "the request the example posted");

    let answer = llm_stub::default_answer(1, stream);
    let content_type = if stream {
        "text/event-stream"
    } else {
        "application/json"
    };
    let record = llm_record(stack, &done);
    assert_eq!(
        record,
        json!({ "status": 200, "headers": { "content-type": content_type }, "body": answer }),
        "stream {stream}: the whole answer recorded as the stub sent it"
    );
    assert_eq!(
        done.output,
        Some(json!({ "status": 200, "text": answer })),
        "stream {stream}: the handler read the whole answer"
    );

    // A fork at the step's outcome is a new execution whose dispatch (a new invocation)
    // replays the recorded call and runs the rest, here nothing.
    let settled = stack
        .kernel
        .events(&done.id)
        .into_iter()
        .find(|event| event.kind == "step.succeeded" && event.payload["step_type"] == "llm_call")
        .expect("the llm_call step succeeded")
        .event_seq;
    let n = stack.gateway.deliveries().len() + 1;
    let fork = stack.kernel.fork(&done.id, settled).expect("fork");
    let replayed = stack
        .kernel
        .wait_terminal(&fork.id, FUNCTION_TIMEOUT)
        .await
        .expect("the fork's dispatch finishes");
    let redelivery = stack.gateway.delivery(n, FUNCTION_TIMEOUT).await;
    assert_eq!(redelivery.status, 200, "{}", redelivery.body);
    assert_ne!(delivery.request_id, redelivery.request_id);
    assert!(stack.function.frozen(FUNCTION_TIMEOUT).await);
    assert_eq!(
        replayed.status,
        ExecutionStatus::Completed,
        "stream {stream}: {}",
        replayed.failure_reason
    );
    assert_eq!(
        replayed.output, done.output,
        "stream {stream}: the replay served the record"
    );
    assert_eq!(
        llm_record(stack, &fork),
        record,
        "stream {stream}: the fork kept the record"
    );
    assert_eq!(
        stub.hits(),
        1,
        "stream {stream}: the replay did not call the provider"
    );
    println!(
        "llm (stream {stream}): ack {:?}, replay ack {:?}",
        delivery.ack_latency, redelivery.ack_latency
    );
}

/// Durable LLM calls on Lambda, answered as JSON: the example function's handler, under the
/// simulator with the internal extension, records the call before the freeze and replays it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_records_a_json_llm_answer_and_replays_it() {
    show_logs();
    let markers = Markers::new("llm-json");
    let stack = Stack::start_scenario(Scenario::Example, &markers, |spec| spec).await;
    let agent_id = Scenario::Example.agent_id();
    the_example_analyzes_a_text(&stack, agent_id).await;
    the_example_makes_one_durable_llm_call(&stack, agent_id, false).await;
    stack.stop().await;
}

/// The same with a streamed (server-sent events) answer: teed to the handler live, recorded
/// whole up to `data: [DONE]`, and replayed byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_records_a_streamed_llm_answer_whole_and_replays_it() {
    show_logs();
    let markers = Markers::new("llm-sse");
    let stack = Stack::start_scenario(Scenario::Example, &markers, |spec| spec).await;
    the_example_makes_one_durable_llm_call(&stack, Scenario::Example.agent_id(), true).await;
    stack.stop().await;
}

/// The run exports its trace inside the held invocation, before the sandbox freezes, and within
/// the invocation's deadline: a first invocation cut by its deadline still delivers its spans,
/// with nothing after it to thaw the sandbox; the re-delivery's spans join the same trace, and
/// the replayed step is left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_invocation_exports_its_trace_before_the_sandbox_freezes() {
    use support::otlp::{Receiver, attribute};
    show_logs();
    let receiver = Receiver::start();
    let markers = Markers::new("traced");
    let kernel = DevKernel::start().await.expect("dev kernel starts");
    let env = [
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            receiver.endpoint().to_owned(),
        ),
        ("OTEL_SERVICE_NAME", "lambda-simulated".to_owned()),
    ];
    let function =
        Function::start_scenario_with_env(Scenario::Stopwatch, &kernel.url(), markers.dir(), &env)
            .await;
    let agent_id = Scenario::Stopwatch.agent_id();
    let stack = Stack::connect(kernel, function, agent_id).await;
    stack.function.lambda.time_out_next(SHORT_TIMEOUT);
    let (execution, first) = stack.dispatch_to(agent_id, json!({})).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert!(stack.function.frozen(FUNCTION_TIMEOUT).await);
    let frozen_after = first.received.elapsed();
    assert!(frozen_after < SHORT_TIMEOUT, "frozen {frozen_after:?} in");
    // Frozen: only what was exported before the freeze can arrive now.
    let trace = execution.id.replace('-', "");
    let step_span = |target: &str| {
        stack
            .kernel
            .steps(&execution.id)
            .into_iter()
            .find(|s| s.target == target)
            .map(|s| s.step_id[..16].to_owned())
    };
    let fetch = step_span("fetch").expect("fetch recorded");
    receiver
        .wait_for_spans(Duration::from_secs(10), |spans| {
            spans.iter().any(|s| s["name"] == "local fetch")
                && spans.iter().any(|s| s["name"] == "dispatch stopwatch")
        })
        .await;
    let spans = receiver.spans();
    let first_run = spans
        .iter()
        .find(|s| s["name"] == "dispatch stopwatch")
        .unwrap();
    assert_eq!(attribute(first_run, "rebuno.stop"), "deadline");
    assert_eq!(first_run["traceId"], trace.as_str());
    let fetched = spans.iter().find(|s| s["name"] == "local fetch").unwrap();
    assert_eq!(fetched["spanId"], fetch.as_str());
    assert_eq!(fetched["parentSpanId"], first_run["spanId"]);
    assert_eq!(fetched["service"], "lambda-simulated");

    stack.kernel.redeliver(&execution.id).expect("re-delivered");
    let done = stack
        .kernel
        .wait_terminal(&execution.id, FUNCTION_TIMEOUT)
        .await
        .expect("the re-delivery finishes the run");
    assert_eq!(done.status, ExecutionStatus::Completed);
    assert!(stack.function.frozen(FUNCTION_TIMEOUT).await);
    let store = step_span("store").expect("store recorded");
    receiver
        .wait_for_spans(Duration::from_secs(10), |spans| {
            spans.iter().any(|s| {
                s["name"] == "local store" && attribute(s, "rebuno.outcome") == "succeeded"
            }) && spans
                .iter()
                .filter(|s| s["name"] == "dispatch stopwatch")
                .count()
                == 2
        })
        .await;
    let spans = receiver.spans();
    assert!(spans.iter().all(|s| s["traceId"] == trace.as_str()));
    let second_run = spans
        .iter()
        .find(|s| s["name"] == "dispatch stopwatch" && s["spanId"] != first_run["spanId"])
        .unwrap();
    assert_eq!(attribute(second_run, "rebuno.outcome"), "completed");
    // The first invocation's attempt at `store` stopped before it was submitted (the deadline
    // was near): exported as such, with an id of its own.
    let stopped = spans
        .iter()
        .find(|s| s["name"] == "local store" && attribute(s, "rebuno.outcome") == "stopped")
        .unwrap();
    assert_eq!(stopped["parentSpanId"], first_run["spanId"]);
    let stored = spans
        .iter()
        .find(|s| s["name"] == "local store" && attribute(s, "rebuno.outcome") == "succeeded")
        .unwrap();
    assert_eq!(stored["spanId"], store.as_str());
    assert_eq!(stored["parentSpanId"], second_run["spanId"]);
    assert_eq!(
        spans.iter().filter(|s| s["name"] == "local fetch").count(),
        1,
        "the replayed fetch is not exported: {spans:#?}"
    );
    println!(
        "telemetry: first invocation frozen {frozen_after:?} after its webhook, spans exported \
         before the freeze"
    );
    stack.stop().await;
}
