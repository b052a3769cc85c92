//! OpenTelemetry export (feature `opentelemetry`) into a real collector on loopback
//! (support::otlp): an execution cut off and re-delivered is one trace whose live steps each
//! appear once, replays left out unless asked for; creations join the execution's trace.

use std::collections::HashSet;
use std::time::Duration;

use bytes::Bytes;
use rebuno::client::Client;
use rebuno::telemetry::Telemetry;
use rebuno::{Agent, HandlerError, define_tool, step, subagent};
use rebuno_devkernel::{DevKernel, NewExecution};
use serde_json::{Value, json};
use tracing_subscriber::layer::SubscriberExt;

use crate::support::llm_stub::LlmStub;
use crate::support::otlp::{Receiver, attribute};

const WAIT: Duration = Duration::from_secs(30);

fn hex_id(id: &str) -> String {
    id.replace('-', "")
}

fn of_service<'a>(spans: &'a [Value], service: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["service"] == service).collect()
}

fn named<'a>(spans: &[&'a Value], contract: &str) -> Vec<&'a Value> {
    spans
        .iter()
        .copied()
        .filter(|s| attribute(s, "rebuno.span") == contract)
        .collect()
}

/// An OTLP integer, which proto3 JSON writes as a number or a string.
fn int(value: &Value) -> i64 {
    value
        .as_i64()
        .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(-1)
}

/// An exporter to `receiver` as `service`, without metrics, installed for this thread.
fn exporting(
    receiver: &Receiver,
    service: &'static str,
) -> (Telemetry, tracing::subscriber::DefaultGuard) {
    let telemetry = Telemetry::otlp(receiver.endpoint())
        .service_name(service)
        .metrics(false)
        .build()
        .unwrap();
    let guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(telemetry.layer()));
    (telemetry, guard)
}

/// A handler with a live tool call (with a span of the user's inside), a local step and an
/// LLM call, cut off after them on its first delivery.
fn traced_agent() -> rebuno::AgentBuilder {
    let search = define_tool("search").execute(|q: String| async move {
        let _inside = tracing::info_span!("lookup", query = q.as_str()).entered();
        Ok::<_, HandlerError>(q)
    });
    Agent::builder("traced").handler(move |url: String| {
        let search = search.clone();
        async move {
            search.call("logs".to_owned()).await?;
            let composed = step("compose", || async { Ok::<_, HandlerError>(1) }).await?;
            let body =
                json!({ "model": "gpt-test", "messages": [{ "role": "user", "content": "hi" }] });
            let request = http::Request::post(url)
                .header("content-type", "application/json")
                .body(Bytes::from(body.to_string()))?;
            let answered = rebuno::llm::fetch(request).await?.status().as_u16();
            if rebuno::execution()?.dispatch_attempt() == 1 {
                std::future::pending::<()>().await; // the first delivery is cut off here
            }
            Ok::<_, HandlerError>(json!([composed, answered]))
        }
    })
}

#[tokio::test(flavor = "current_thread")]
async fn a_redelivered_execution_is_one_trace_with_each_live_step_once() {
    let receiver = Receiver::start();
    let plain = Telemetry::otlp(receiver.endpoint())
        .service_name("plain")
        .metrics_interval(Duration::ZERO) // the metrics with every run, as on Lambda
        .build()
        .unwrap();
    let with_replays = Telemetry::otlp(receiver.endpoint())
        .service_name("with-replays")
        .export_replayed(true)
        .build()
        .unwrap();
    let _default = tracing::subscriber::set_default(
        tracing_subscriber::registry()
            .with(plain.layer())
            .with(with_replays.layer()),
    );
    let stub = LlmStub::start().await;
    let kernel = DevKernel::start().await.unwrap();
    let served = kernel.serve(traced_agent()).await.unwrap();
    let created = kernel
        .create_execution(NewExecution::new("traced", json!(stub.chat_url())))
        .await
        .unwrap();
    let started = std::time::Instant::now();
    while kernel
        .steps(&created.id)
        .iter()
        .filter(|s| s.status == "succeeded")
        .count()
        < 3
    {
        assert!(
            started.elapsed() < WAIT,
            "the first delivery's steps never all succeeded: {:#?}",
            kernel.steps(&created.id)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    kernel.redeliver(&created.id).unwrap();
    let done = kernel.wait_terminal(&created.id, WAIT).await.unwrap();
    assert_eq!(done.output, Some(json!([1, 200])));
    // No flush by hand: each run exported its spans as its last act.
    receiver
        .wait_for_spans(WAIT, |spans| {
            let dispatches = |service| named(&of_service(spans, service), "rebuno.dispatch").len();
            dispatches("plain") == 2 && dispatches("with-replays") == 2
        })
        .await;
    served.shutdown().await;

    let spans = receiver.spans();
    let trace = hex_id(&created.id);
    let plain_spans = of_service(&spans, "plain");
    assert!(
        plain_spans.iter().all(|s| s["traceId"] == trace.as_str()),
        "one trace, named by the execution id: {plain_spans:#?}"
    );
    let ids: HashSet<&str> = plain_spans
        .iter()
        .map(|s| s["spanId"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), plain_spans.len(), "span ids are unique");

    let dispatches = named(&plain_spans, "rebuno.dispatch");
    let delivery = |attempt: i64| {
        *dispatches
            .iter()
            .find(|d| int(&attribute(d, "rebuno.attempt")) == attempt)
            .unwrap_or_else(|| panic!("no attempt {attempt}: {dispatches:#?}"))
    };
    let (first, second) = (delivery(1), delivery(2));
    for dispatch in [first, second] {
        assert_eq!(dispatch["name"], "dispatch traced");
        assert_eq!(dispatch["kind"], "SPAN_KIND_SERVER");
        assert!(dispatch.get("parentSpanId").is_none(), "{dispatch:#?}");
    }
    assert_eq!(attribute(first, "rebuno.stop"), "superseded");
    assert_eq!(attribute(second, "rebuno.outcome"), "completed");

    // Each live step once, under the delivery that ran it; the replays are not there.
    let steps = named(&plain_spans, "rebuno.step");
    let names: Vec<&str> = steps.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(steps.len(), 3, "{names:?}");
    let recorded = kernel.steps(&created.id);
    let step_id = |target: &str| {
        recorded
            .iter()
            .find(|s| s.target == target)
            .map(|s| s.step_id.clone())
            .unwrap_or_else(|| panic!("the kernel recorded no {target}"))
    };
    for (name, step_id) in [
        ("tool_call search", step_id("search")),
        ("local compose", step_id("compose")),
        ("llm_call gpt-test", step_id("gpt-test")),
    ] {
        let span = steps
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no {name}: {names:?}"));
        assert_eq!(span["parentSpanId"], first["spanId"], "{span:#?}");
        assert_eq!(span["spanId"].as_str(), step_id.get(..16), "{span:#?}");
        assert_eq!(attribute(span, "rebuno.replayed"), false);
        assert_eq!(attribute(span, "rebuno.outcome"), "succeeded");
    }
    let llm = steps
        .iter()
        .find(|s| s["name"] == "llm_call gpt-test")
        .unwrap();
    assert_eq!(llm["kind"], "SPAN_KIND_CLIENT");
    assert_eq!(
        stub.traceparents()[0].as_deref(),
        Some(format!("00-{trace}-{}-01", llm["spanId"].as_str().unwrap()).as_str()),
        "the provider's span is the step's child"
    );
    let search = steps
        .iter()
        .find(|s| s["name"] == "tool_call search")
        .unwrap();
    let lookup = plain_spans
        .iter()
        .find(|s| s["name"] == "lookup")
        .expect("the user's span inside the tool body");
    assert_eq!(lookup["parentSpanId"], search["spanId"]);
    assert_eq!(attribute(lookup, "query"), "logs");

    // Asked for, the replays come with the first run's span ids, under the second delivery.
    let replaying = of_service(&spans, "with-replays");
    let replayed: Vec<&Value> = named(&replaying, "rebuno.step")
        .into_iter()
        .filter(|s| attribute(s, "rebuno.replayed") == true)
        .collect();
    assert_eq!(replayed.len(), 3, "{replaying:#?}");
    let second_id = replaying
        .iter()
        .find(|s| s["spanId"] == second["spanId"])
        .map(|s| s["spanId"].clone())
        .unwrap();
    for span in &replayed {
        assert_eq!(span["parentSpanId"], second_id);
        let live = steps.iter().find(|s| s["name"] == span["name"]).unwrap();
        assert_eq!(span["spanId"], live["spanId"]);
    }

    // Metrics: cumulative, so the last export of a name holds the totals. They follow the
    // spans of the same flush, so they may still be on their way.
    let steps_by_replay = |metrics: &[Value]| {
        let last = metrics
            .iter()
            .rev()
            .find(|m| m["name"] == "rebuno.steps" && m["service"] == "plain")?;
        let mut by_replay = (0, 0);
        for point in last["sum"]["dataPoints"].as_array()? {
            let count = int(&point["asInt"]);
            if attribute(point, "rebuno.replayed") == "true" {
                by_replay.1 += count;
            } else {
                by_replay.0 += count;
            }
        }
        Some(by_replay)
    };
    let started = std::time::Instant::now();
    while steps_by_replay(&receiver.metrics()) != Some((3, 3)) {
        assert!(
            started.elapsed() < WAIT,
            "3 live and 3 replayed steps never counted: {:#?}",
            receiver.metrics()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let metrics = receiver.metrics();
    let last = |name: &str| {
        metrics
            .iter()
            .rev()
            .find(|m| m["name"] == name && m["service"] == "plain")
            .unwrap_or_else(|| panic!("no {name} metric"))
            .clone()
    };
    let runs = last("rebuno.runs.in_flight");
    assert_eq!(int(&runs["sum"]["dataPoints"][0]["asInt"]), 0);
    // Acknowledgements are counted per process, not per subscriber: other tests' count too.
    let acks = last("rebuno.ack.duration");
    assert!(
        int(&acks["histogram"]["dataPoints"][0]["count"]) >= 2,
        "{acks:#?}"
    );
    kernel.shutdown().await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_creation_joins_the_executions_trace_linked_to_its_caller() {
    let receiver = Receiver::start();
    let (telemetry, _default) = exporting(&receiver, "creator");
    let kernel = DevKernel::start().await.unwrap();
    let researcher = Agent::builder("researcher").handler(|topic: String| async move {
        Ok::<_, HandlerError>(format!("all about {topic}"))
    });
    let research = define_tool("research").execute(|topic: String| async move {
        Ok::<String, HandlerError>(subagent("researcher", &topic).await?)
    });
    let lead = Agent::builder("lead").handler(move |topic: String| {
        let research = research.clone();
        async move { Ok::<_, HandlerError>(research.call(topic).await?) }
    });
    let child = kernel.serve(researcher).await.unwrap();
    let parent = kernel.serve(lead).await.unwrap();
    let client = Client::builder().base_url(kernel.url()).build().unwrap();
    let caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let execution = client
        .create("lead")
        .input(json!("rust"))
        .traceparent(caller)
        .send()
        .await
        .unwrap();
    let done = client.wait(&execution.id, WAIT).await.unwrap();
    assert_eq!(done.output, Some(json!("all about rust")));
    telemetry.flush().await.unwrap();
    let lead_trace = execution.id.replace('-', "");
    receiver
        .wait_for_spans(WAIT, |spans| {
            spans
                .iter()
                .filter(|s| s["name"] == "create researcher")
                .count()
                == 1
                && spans.iter().filter(|s| s["name"] == "create lead").count() == 1
                && spans
                    .iter()
                    .filter(|s| s["name"] == "dispatch researcher")
                    .count()
                    == 1
        })
        .await;
    child.shutdown().await;
    parent.shutdown().await;
    kernel.shutdown().await;

    let spans = receiver.spans();
    let find = |name: &str| spans.iter().find(|s| s["name"] == name).unwrap();
    // The client's creation: in the execution's trace, linked to the caller's context.
    let created = find("create lead");
    assert_eq!(created["traceId"], lead_trace.as_str());
    assert_eq!(created["kind"], "SPAN_KIND_CLIENT");
    assert_eq!(
        created["links"],
        json!([{ "traceId": "4bf92f3577b34da6a3ce929d0e0e4736", "spanId": "00f067aa0ba902b7" }])
    );
    // The subagent's creation: in the child's trace, linked to the parent's tool step.
    let child_create = find("create researcher");
    let child_run = find("dispatch researcher");
    assert_eq!(child_create["traceId"], child_run["traceId"]);
    assert_ne!(child_run["traceId"], lead_trace.as_str());
    let tool = spans
        .iter()
        .find(|s| {
            s["name"] == "tool_call research" && attribute(s, "rebuno.outcome") == "succeeded"
        })
        .or_else(|| spans.iter().find(|s| s["name"] == "tool_call research"))
        .unwrap();
    assert_eq!(tool["traceId"], lead_trace.as_str());
    let links = child_create["links"].as_array().unwrap();
    assert!(
        links
            .iter()
            .any(|l| l["traceId"] == tool["traceId"] && l["spanId"] == tool["spanId"]),
        "linked to the parent's step: {child_create:#?}\n{tool:#?}"
    );
}

/// rebuno-hyper's graceful shutdown drains the runs in flight, and each run exports its spans
/// before its task ends: when `serve` returns (and a process would exit), they are sent.
#[tokio::test(flavor = "current_thread")]
async fn a_run_drained_at_shutdown_is_exported_before_serve_returns() {
    use crate::support::{SECRET, agent, serve};
    let receiver = Receiver::start();
    let (telemetry, _default) = exporting(&receiver, "draining");
    let kernel = DevKernel::start().await.unwrap();
    let slow = agent(&kernel, "slow")
        .handler(|ms: u64| async move {
            step("wait", || async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok::<_, HandlerError>(ms)
            })
            .await
        })
        .build()
        .unwrap();
    let served = serve(slow).await;
    kernel
        .register_agent(rebuno_devkernel::AgentSpec::new(
            "slow",
            served.webhook_url(),
            SECRET,
        ))
        .unwrap();
    let created = kernel
        .create_execution(NewExecution::new("slow", json!(500)))
        .await
        .unwrap();
    kernel
        .wait_for_event(&created.id, rebuno_devkernel::EventKind::StepAllowed, WAIT)
        .await
        .unwrap();
    assert!(telemetry.buffered_spans() == 0 && receiver.spans().is_empty());
    served.shutdown().await; // the step still has ~500 ms to go
    assert_eq!(
        telemetry.buffered_spans(),
        0,
        "nothing left for a later flush"
    );
    receiver
        .wait_for_spans(Duration::from_secs(10), |spans| {
            spans.iter().any(|s| s["name"] == "local wait")
                && spans.iter().any(|s| s["name"] == "dispatch slow")
        })
        .await;
    let done = kernel.execution(&created.id).unwrap();
    assert_eq!(done.output, Some(json!(500)));
    kernel.shutdown().await;
}

/// A streamable-HTTP MCP server that answers `initialize` and `tools/call` and records, per
/// method, the `traceparent` header and `_meta.traceparent` it got.
async fn recording_mcp_server() -> (
    String,
    std::sync::Arc<std::sync::Mutex<Vec<(String, Option<String>, Option<String>)>>>,
) {
    use axum::http::HeaderMap;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorded = std::sync::Arc::clone(&seen);
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post(move |headers: HeaderMap, body: String| {
            let recorded = std::sync::Arc::clone(&recorded);
            async move {
                let request: Value = serde_json::from_str(&body).unwrap();
                let method = request["method"].as_str().unwrap_or_default().to_owned();
                let header = headers
                    .get("traceparent")
                    .map(|v| v.to_str().unwrap().to_owned());
                let meta = request["params"]["_meta"]["traceparent"]
                    .as_str()
                    .map(str::to_owned);
                recorded
                    .lock()
                    .unwrap()
                    .push((method.clone(), header, meta));
                let result = match method.as_str() {
                    "initialize" => json!({
                        "protocolVersion": request["params"]["protocolVersion"],
                        "capabilities": { "tools": {} },
                        "serverInfo": { "name": "recorder", "version": "0" },
                    }),
                    "tools/list" => json!({ "tools": [{
                        "name": "echo",
                        "inputSchema": { "type": "object" },
                    }]}),
                    "tools/call" => json!({ "content": [{ "type": "text", "text": "echoed" }] }),
                    _ => {
                        return (
                            axum::http::StatusCode::ACCEPTED,
                            HeaderMap::new(),
                            String::new(),
                        );
                    }
                };
                let mut reply = HeaderMap::new();
                reply.insert("content-type", "application/json".parse().unwrap());
                let body = json!({ "jsonrpc": "2.0", "id": request["id"], "result": result });
                (axum::http::StatusCode::OK, reply, body.to_string())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

/// An MCP tool call over streamable HTTP carries its step's `traceparent` twice: in `_meta`
/// (SEP-414) for the server, and as the HTTP header for a gateway in between.
#[tokio::test(flavor = "current_thread")]
async fn an_mcp_call_over_http_carries_its_steps_traceparent() {
    use rebuno::mcp::{McpOptions, StreamableHttp};
    let (url, seen) = recording_mcp_server().await;
    let client = StreamableHttp::connect(url).await.unwrap();
    let tools = client.tools(&McpOptions::default()).await.unwrap();
    let echo = tools.into_iter().find(|t| t.name() == "echo").unwrap();
    let kernel = DevKernel::start().await.unwrap();
    let served = kernel
        .serve(Agent::builder("mcp-caller").handler(move |_: Value| {
            let echo = echo.clone();
            async move { Ok::<_, HandlerError>(echo.call(json!({ "text": "hi" })).await?) }
        }))
        .await
        .unwrap();
    let created = kernel
        .create_execution(NewExecution::new("mcp-caller", json!(null)))
        .await
        .unwrap();
    let done = kernel.wait_terminal(&created.id, WAIT).await.unwrap();
    assert!(done.output.is_some(), "{done:?}");
    let step = kernel
        .steps(&created.id)
        .into_iter()
        .find(|s| s.target == "echo")
        .unwrap();
    let expected = format!("00-{}-{}-01", hex_id(&created.id), &step.step_id[..16]);
    let seen = seen.lock().unwrap().clone();
    let calls: Vec<_> = seen.iter().filter(|(m, _, _)| m == "tools/call").collect();
    assert_eq!(calls.len(), 1, "{seen:?}");
    assert_eq!(calls[0].1.as_deref(), Some(expected.as_str()), "the header");
    assert_eq!(calls[0].2.as_deref(), Some(expected.as_str()), "_meta");
    let initialize = seen.iter().find(|(m, _, _)| m == "initialize").unwrap();
    assert_eq!(
        initialize.1, None,
        "only calls made inside a step carry one"
    );
    served.shutdown().await;
    kernel.shutdown().await;
}

/// An agent "process" of its own: a thread with its own runtime and its own exporter, serving
/// `crashy` until killed (its runtime dropped at once: no run finishes, nothing flushes).
struct Process {
    webhook_url: String,
    kill: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Process {
    fn start(service: &'static str, endpoint: String, kernel_url: String) -> Self {
        let (url_sender, url) = std::sync::mpsc::channel();
        let (kill, killed) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let telemetry = Telemetry::otlp(endpoint)
                .service_name(service)
                .export_interval(Duration::from_millis(200))
                .metrics(false)
                .build()
                .unwrap();
            let _default = tracing::subscriber::set_default(
                tracing_subscriber::registry().with(telemetry.layer()),
            );
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let agent = crashy(&kernel_url).build().unwrap();
                let served = crate::support::serve(agent).await;
                url_sender.send(served.webhook_url()).unwrap();
                let _ = killed.await;
                std::mem::forget(served); // killed: no graceful shutdown
            });
            runtime.shutdown_background();
        });
        Self {
            webhook_url: url.recv().unwrap(),
            kill: Some(kill),
            thread: Some(thread),
        }
    }

    fn kill(mut self) {
        let _ = self.kill.take().map(|kill| kill.send(()));
        let _ = self.thread.take().map(std::thread::JoinHandle::join);
    }
}

/// Two steps and an LLM call (to the URL in the input), then, on the first delivery, a wait
/// that only a kill ends.
fn crashy(kernel_url: &str) -> rebuno::AgentBuilder {
    let search = define_tool("search").execute(|q: String| async move { Ok::<_, HandlerError>(q) });
    Agent::builder("crashy")
        .secret(crate::support::SECRET)
        .base_url(kernel_url)
        .handler(move |(q, llm_url): (String, String)| {
            let search = search.clone();
            async move {
                let found = search.call(q).await?;
                let composed = step("compose", || async { Ok::<_, HandlerError>(1) }).await?;
                let body = json!({ "model": "gpt-test", "stream": true, "messages": [{ "role": "user", "content": "hi" }] });
                let request = http::Request::post(llm_url)
                    .header("content-type", "application/json")
                    .body(Bytes::from(body.to_string()))?;
                let response = rebuno::llm::fetch(request).await?;
                let answered = response.status().as_u16();
                http_body_util::BodyExt::collect(response.into_body()).await?;
                // Nothing after the LLM call: only its own span's closing can export it.
                if rebuno::execution()?.dispatch_attempt() == 1 {
                    std::future::pending::<()>().await;
                }
                Ok::<_, HandlerError>(json!([found, composed, answered]))
            }
        })
}

/// A process killed in the middle of a run: the steps it finished were exported while the run
/// went on (within the export interval), so the re-delivery on another process, which replays
/// them, leaves each live step in the trace exactly once, and no replayed span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_killed_mid_run_leaves_its_finished_steps_in_the_trace_once() {
    use rebuno_devkernel::AgentSpec;
    let receiver = Receiver::start();
    let kernel = DevKernel::start().await.unwrap();
    let first = Process::start("first", receiver.endpoint().to_owned(), kernel.url());
    kernel
        .register_agent(AgentSpec::new(
            "crashy",
            &first.webhook_url,
            crate::support::SECRET,
        ))
        .unwrap();
    let stub = LlmStub::start().await;
    // A stream that outlasts the export interval (200 ms): the export the earlier steps
    // scheduled has gone by the time the LLM call's span closes.
    stub.set_chunk_delay(Duration::from_millis(150));
    let created = kernel
        .create_execution(NewExecution::new(
            "crashy",
            json!(["logs", stub.chat_url()]),
        ))
        .await
        .unwrap();
    // The three steps' spans arrive while the run still waits: the export interval, not its
    // end.
    receiver
        .wait_for_spans(WAIT, |spans| {
            spans.iter().filter(|s| s["service"] == "first").count() == 3
        })
        .await;
    first.kill();

    let second = Process::start("second", receiver.endpoint().to_owned(), kernel.url());
    kernel
        .register_agent(AgentSpec::new(
            "crashy",
            &second.webhook_url,
            crate::support::SECRET,
        ))
        .unwrap();
    kernel.redeliver(&created.id).unwrap();
    let done = kernel.wait_terminal(&created.id, WAIT).await.unwrap();
    assert_eq!(done.output, Some(json!(["logs", 1, 200])));
    assert_eq!(stub.hits(), 1, "the LLM call was replayed, not sent again");
    receiver
        .wait_for_spans(WAIT, |spans| {
            spans
                .iter()
                .any(|s| s["service"] == "second" && s["name"] == "dispatch crashy")
        })
        .await;
    let spans = receiver.spans();
    let trace = hex_id(&created.id);
    assert!(
        spans.iter().all(|s| s["traceId"] == trace.as_str()),
        "{spans:#?}"
    );
    for name in ["tool_call search", "local compose", "llm_call gpt-test"] {
        let live: Vec<&Value> = spans.iter().filter(|s| s["name"] == name).collect();
        assert_eq!(live.len(), 1, "{name} once: {spans:#?}");
        assert_eq!(live[0]["service"], "first", "from the process that ran it");
        assert_eq!(attribute(live[0], "rebuno.replayed"), false);
    }
    // The killed delivery's own span never closed; the re-delivery's did.
    let deliveries: Vec<&Value> = spans
        .iter()
        .filter(|s| s["name"] == "dispatch crashy")
        .collect();
    assert_eq!(deliveries.len(), 1, "{deliveries:#?}");
    assert_eq!(int(&attribute(deliveries[0], "rebuno.attempt")), 2);
    second.kill();
    kernel.shutdown().await;
}
