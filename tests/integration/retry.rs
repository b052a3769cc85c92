//! Retry policies: a failing tool body or LLM request is tried again inside its step, only the
//! last outcome is recorded, replays never retry, `at_most_once` bodies are retried only on
//! proof that nothing was sent, and the limits (attempts, elapsed time, the host's deadline)
//! stop the retries with an error that says why.

use rebuno::wire::ExecutionStatus;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use rebuno::retry::Transient;
use rebuno::wire::Execution;
use rebuno::{HandlerError, Idempotency, RetryPolicy, define_tool};
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde_json::{Value, json};

use crate::support::llm_stub::{Fault, LlmStub};
use crate::support::*;

/// Quick retries: 10 ms apart, no jitter.
fn quick() -> RetryPolicy {
    RetryPolicy::new()
        .initial_delay(Duration::from_millis(10))
        .multiplier(1.0)
        .jitter(0.0)
}

fn count(kernel: &DevKernel, id: &str, kind: &str) -> usize {
    kernel.events(id).iter().filter(|e| e.kind == kind).count()
}

/// A port nothing listens on: connecting to it is refused.
async fn closed_port() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

/// The error of connecting to `addr`, whose connection is refused.
async fn refused(addr: std::net::SocketAddr) -> std::io::Error {
    tokio::net::TcpStream::connect(addr).await.unwrap_err()
}

#[tokio::test]
async fn a_tool_failing_twice_records_one_success_and_a_redelivery_replays_it() {
    let _trace = trace_init();
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let (kernel, served) = kernel_with("flaky", move |agent| {
        let lookup = define_tool("lookup")
            .retry(quick())
            .execute(move |id: u32| {
                let run = counter.fetch_add(1, Ordering::SeqCst);
                async move {
                    if run < 2 {
                        return Err(Transient::new(format!("upstream busy ({run})")).into());
                    }
                    Ok::<_, HandlerError>(format!("customer {id}"))
                }
            });
        agent.handler_with_state(lookup, |lookup, _: Value| async move {
            let found = lookup.call(7).await?;
            if rebuno::execution()?.dispatch_attempt() == 1 {
                std::future::pending::<()>().await; // the first delivery is cut off here
            }
            Ok::<_, HandlerError>(json!(found))
        })
    })
    .await;
    let created = kernel
        .create_execution(NewExecution::new("flaky", json!({})))
        .await
        .unwrap();
    kernel
        .wait_for_event(
            &created.id,
            rebuno_devkernel::EventKind::StepSucceeded,
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(
        runs.load(Ordering::SeqCst),
        3,
        "two failures, then the success"
    );

    kernel.redeliver(&created.id).unwrap();
    let done = kernel.wait_terminal(&created.id, WAIT).await.unwrap();

    assert_eq!(
        done.output,
        Some(json!("customer 7")),
        "{}",
        done.failure_reason
    );
    assert_eq!(runs.load(Ordering::SeqCst), 3, "the replay ran nothing");
    assert_eq!(count(&kernel, &created.id, "step.succeeded"), 1);
    assert_eq!(
        count(&kernel, &created.id, "step.failed"),
        0,
        "attempts are not recorded"
    );
    let steps = kernel.steps(&created.id);
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].result, Some(json!("customer 7")));
    served.shutdown().await;
}

/// Runs an `at_most_once` tool whose body fails with `fail(run)` on its first run and succeeds
/// after; returns the execution and how many times the body ran.
async fn at_most_once<F, Fut>(agent_id: &str, fail: F) -> (Execution, usize)
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = HandlerError> + Send + 'static,
{
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let fail = Arc::new(fail);
    let (kernel, served) = kernel_with(agent_id, move |agent| {
        let send = define_tool("send_reply")
            .idempotency(Idempotency::AtMostOnce)
            .retry(quick())
            .execute(move |text: String| {
                let first = counter.fetch_add(1, Ordering::SeqCst) == 0;
                let fail = Arc::clone(&fail);
                async move {
                    if first {
                        return Err(fail().await);
                    }
                    Ok::<_, HandlerError>(format!("sent {text}"))
                }
            });
        agent.handler_with_state(send, |send, _: Value| async move {
            Ok::<_, HandlerError>(json!(send.call("hello".to_owned()).await?))
        })
    })
    .await;
    let done = run(&kernel, agent_id, json!({})).await;
    served.shutdown().await;
    (done, runs.load(Ordering::SeqCst))
}

#[tokio::test]
async fn an_at_most_once_tool_that_may_have_taken_effect_is_not_retried() {
    let _trace = trace_init();
    let (done, runs) = at_most_once("replier", || async {
        // The request went out; the answer was lost.
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        HandlerError::from(reset)
    })
    .await;
    assert_eq!(runs, 1, "never run again once it may have been sent");
    assert_eq!(done.status, ExecutionStatus::Failed);
}

#[tokio::test]
async fn a_refused_connection_is_retried_even_for_an_at_most_once_tool() {
    let _trace = trace_init();
    let addr = closed_port().await;
    let (done, runs) = at_most_once("careful", move || async move {
        HandlerError::from(refused(addr).await)
    })
    .await;
    assert_eq!(runs, 2, "a refused connection proves nothing was sent");
    assert_eq!(
        done.output,
        Some(json!("sent hello")),
        "{}",
        done.failure_reason
    );
}

/// Runs a tool that always fails transiently under `policy`, served as a host whose first
/// invocation may run for `budget`; returns the execution and the body's runs.
async fn always_failing(
    agent_id: &str,
    policy: RetryPolicy,
    budget: Option<Duration>,
) -> (Execution, usize, DevKernel) {
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let kernel = DevKernel::start().await.unwrap();
    let tool = define_tool("probe").retry(policy).execute(move |_: Value| {
        counter.fetch_add(1, Ordering::SeqCst);
        async { Err::<Value, _>(HandlerError::from(Transient::new("still down"))) }
    });
    let agent = agent(&kernel, agent_id)
        .handler_with_state(tool, |tool, _: Value| async move {
            Ok::<_, HandlerError>(tool.call(json!({})).await?)
        })
        .build()
        .unwrap();
    let url = serve_as_host(agent, budget).await.url;
    kernel
        .register_agent(AgentSpec::new(agent_id, url, SECRET))
        .unwrap();
    let done = run(&kernel, agent_id, json!({})).await;
    let runs = runs.load(Ordering::SeqCst);
    (done, runs, kernel)
}

#[tokio::test]
async fn max_elapsed_stops_the_retries_with_an_error_that_says_so() {
    let _trace = trace_init();
    let policy = quick()
        .initial_delay(Duration::from_millis(100))
        .max_attempts(100)
        .max_elapsed(Duration::from_millis(450));
    let (done, runs, kernel) = always_failing("patient", policy, None).await;

    assert_eq!(done.status, ExecutionStatus::Failed);
    assert!((4..=6).contains(&runs), "about 450 ms / 100 ms: {runs}");
    assert!(
        done.failure_reason.contains("still down")
            && done.failure_reason.contains("RetryPolicy::max_elapsed"),
        "{}",
        done.failure_reason
    );
    assert_eq!(
        count(&kernel, &done.id, "step.failed"),
        1,
        "the last failure, once"
    );
}

#[tokio::test]
async fn the_hosts_deadline_stops_the_retries_with_an_error_that_says_so() {
    let _trace = trace_init();
    let policy = quick()
        .initial_delay(Duration::from_millis(300))
        .max_attempts(100)
        .max_elapsed(Duration::from_secs(60));
    let budget = Some(Duration::from_millis(1000));
    let (done, runs, kernel) = always_failing("hurried", policy, budget).await;

    assert_eq!(done.status, ExecutionStatus::Failed);
    assert!((2..=4).contains(&runs), "about 900 ms / 300 ms: {runs}");
    assert!(
        done.failure_reason.contains("host's deadline"),
        "{}",
        done.failure_reason
    );
    assert_eq!(count(&kernel, &done.id, "step.failed"), 1);
}

/// An agent that makes one durable LLM call to `url` with `policy` and returns its status.
fn llm_agent(kernel: &DevKernel, id: &str, policy: RetryPolicy) -> rebuno::Agent {
    let transport = rebuno::transport::ReqwestTransport::new().unwrap();
    let llm = rebuno::llm::DurableLlm::from_transport(transport).retry(policy);
    agent(kernel, id)
        .handler_with_state(llm, |llm, url: String| async move {
            let body =
                json!({ "model": "gpt-test", "messages": [{ "role": "user", "content": "hi" }] });
            let request = http::Request::post(url)
                .header("content-type", "application/json")
                .body(Bytes::from(body.to_string()))?;
            let answer = llm.send(request).await?;
            Ok::<_, HandlerError>(json!(answer.status().as_u16()))
        })
        .build()
        .unwrap()
}

async fn run_llm(agent_id: &str, policy: RetryPolicy, stub: &LlmStub) -> (Execution, Vec<Value>) {
    let kernel = DevKernel::start().await.unwrap();
    let served = serve(llm_agent(&kernel, agent_id, policy)).await;
    kernel
        .register_agent(AgentSpec::new(agent_id, served.webhook_url(), SECRET))
        .unwrap();
    let done = run(&kernel, agent_id, json!(stub.chat_url())).await;
    served.shutdown().await;
    let steps = kernel.steps(&done.id);
    let results = steps
        .iter()
        .map(|s| s.result.clone().unwrap_or_default())
        .collect();
    (done, results)
}

#[tokio::test]
async fn a_503_then_200_is_recorded_once_as_200_after_the_retry_after() {
    let _trace = trace_init();
    let stub = LlmStub::start().await;
    stub.fault(Fault::Throttle {
        status: 503,
        retry_after: "1".to_owned(),
    });
    let policy = RetryPolicy::llm()
        .initial_delay(Duration::from_millis(10))
        .jitter(0.0);
    let started = std::time::Instant::now();
    let (done, results) = run_llm("throttled", policy, &stub).await;

    assert_eq!(done.output, Some(json!(200)), "{}", done.failure_reason);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "waited the Retry-After, not the 10 ms backoff"
    );
    assert_eq!(stub.hits(), 2);
    assert_eq!(results.len(), 1, "one llm_call step");
    assert_eq!(results[0]["status"], 200, "the 503 was not recorded");
}

#[tokio::test]
async fn the_last_retried_status_is_recorded_as_it_came() {
    let _trace = trace_init();
    let stub = LlmStub::start().await;
    stub.fault(Fault::Status(503));
    stub.fault(Fault::Status(503));
    let policy = RetryPolicy::llm()
        .initial_delay(Duration::from_millis(10))
        .max_attempts(2);
    let (done, results) = run_llm("overloaded", policy, &stub).await;

    assert_eq!(done.output, Some(json!(503)), "{}", done.failure_reason);
    assert_eq!(stub.hits(), 2);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["status"], 503);
}

#[tokio::test]
async fn a_refused_provider_connection_is_retried_by_default() {
    let _trace = trace_init();
    let stub = LlmStub::start().await;
    // A provider that is down for the first attempt only: a proxy port refused at first.
    let addr = closed_port().await;
    let url = format!("http://{addr}/v1/chat/completions");
    let target = stub.chat_url();
    let kernel = DevKernel::start().await.unwrap();
    let agent = agent(&kernel, "reconnecting")
        .handler(move |_: Value| {
            let (url, target) = (url.clone(), target.clone());
            async move {
                // The first request is refused; the retry goes to the live stub.
                let tries = Arc::new(AtomicUsize::new(0));
                let service = tower_redirect(tries, url, target);
                let llm = rebuno::llm::DurableLlm::new(service)
                    .retry(RetryPolicy::llm().initial_delay(Duration::from_millis(10)));
                let body = json!({ "model": "gpt-test", "messages": [] });
                let request = http::Request::post("http://provider.invalid/v1/chat/completions")
                    .header("content-type", "application/json")
                    .body(Bytes::from(body.to_string()))?;
                let answer = llm.send(request).await?;
                Ok::<_, HandlerError>(json!(answer.status().as_u16()))
            }
        })
        .build()
        .unwrap();
    let served = serve(agent).await;
    kernel
        .register_agent(AgentSpec::new("reconnecting", served.webhook_url(), SECRET))
        .unwrap();
    let done = run(&kernel, "reconnecting", json!({})).await;
    served.shutdown().await;

    assert_eq!(done.output, Some(json!(200)), "{}", done.failure_reason);
    assert_eq!(stub.hits(), 1);
    assert_eq!(kernel.steps(&done.id).len(), 1);
}

/// A provider service that sends its first request to `refused` and the others to `live`.
fn tower_redirect(
    tries: Arc<AtomicUsize>,
    refused: String,
    live: String,
) -> rebuno::llm::TransportService {
    #[derive(Debug)]
    struct Redirect {
        tries: Arc<AtomicUsize>,
        refused: String,
        live: String,
        inner: rebuno::transport::ReqwestTransport,
    }
    impl rebuno::transport::Transport for Redirect {
        fn send(
            &self,
            mut request: http::Request<Bytes>,
            timeout: Duration,
        ) -> rebuno::transport::TransportFuture {
            let first = self.tries.fetch_add(1, Ordering::SeqCst) == 0;
            let url = if first { &self.refused } else { &self.live };
            *request.uri_mut() = url.parse().unwrap();
            self.inner.send(request, timeout)
        }
    }
    let inner = rebuno::transport::ReqwestTransport::new().unwrap();
    rebuno::llm::TransportService::new(Redirect {
        tries,
        refused,
        live,
        inner,
    })
}

#[tokio::test(flavor = "current_thread")]
async fn each_attempt_shows_on_the_step_span_and_in_the_step_metrics() {
    use crate::support::otlp::{Receiver, attribute};
    use tracing_subscriber::layer::SubscriberExt;

    let receiver = Receiver::start();
    let telemetry = rebuno::telemetry::Telemetry::otlp(receiver.endpoint())
        .service_name("retrying")
        .metrics_interval(Duration::ZERO)
        .build()
        .unwrap();
    let _default =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(telemetry.layer()));
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let lookup = define_tool("lookup")
        .retry(quick())
        .execute(move |_: Value| {
            let run = counter.fetch_add(1, Ordering::SeqCst);
            async move {
                if run < 2 {
                    return Err(HandlerError::from(Transient::new("upstream busy")));
                }
                Ok::<_, HandlerError>(json!("found"))
            }
        });
    let kernel = DevKernel::start().await.unwrap();
    let served = kernel
        .serve(
            rebuno::Agent::builder("observed")
                .handler_with_state(lookup, |lookup, _: Value| async move {
                    Ok::<_, HandlerError>(lookup.call(json!({})).await?)
                }),
        )
        .await
        .unwrap();
    let done = run(&kernel, "observed", json!({})).await;
    assert_eq!(done.output, Some(json!("found")), "{}", done.failure_reason);

    let is_lookup = |s: &&Value| attribute(s, "rebuno.target") == "lookup";
    receiver
        .wait_for_spans(WAIT, |spans| spans.iter().any(|s| is_lookup(&s)))
        .await;
    let spans = receiver.spans();
    let step = spans.iter().find(is_lookup).unwrap();
    assert_eq!(
        attribute(step, "rebuno.attempts")
            .to_string()
            .trim_matches('"'),
        "3"
    );
    let retried: Vec<&Value> = step["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["name"] == "attempt failed; retrying")
        .collect();
    assert_eq!(retried.len(), 2, "{step:#}");

    let counted = |metrics: &[Value]| {
        metrics
            .iter()
            .rev()
            .find(|m| m["name"] == "rebuno.steps" && m["service"] == "retrying")
            .and_then(|m| m["sum"]["dataPoints"].as_array().cloned())
            .into_iter()
            .flatten()
            .any(|point| attribute(&point, "rebuno.attempts") == "3")
    };
    let started = std::time::Instant::now();
    while !counted(&receiver.metrics()) {
        assert!(started.elapsed() < WAIT, "{:#?}", receiver.metrics());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    served.shutdown().await;
}
