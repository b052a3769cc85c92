//! The span contract of `rebuno::spans`, pinned: every span name and the exact set of fields
//! each carries, over a run with a live tool call, a denied one, a local step and an LLM call,
//! cut off after its steps and re-delivered, so the second dispatch replays them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rebuno::{Agent, HandlerError, define_tool, step};
use rebuno_devkernel::{DevKernel, NewExecution};
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

use crate::support::llm_stub::LlmStub;

/// A closed `rebuno.*` span: its name, the fields set on it, and the attempt of the dispatch
/// it ran under.
#[derive(Debug, Clone)]
struct Closed {
    name: &'static str,
    fields: BTreeMap<String, String>,
    attempt: Option<String>,
}

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Closed>>>);

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(fields) = span.extensions_mut().get_mut::<Fields>()
        {
            values.record(fields);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        if !span.name().starts_with("rebuno.") {
            return;
        }
        let fields = span
            .extensions()
            .get::<Fields>()
            .map(|f| f.0.clone())
            .unwrap_or_default();
        let attempt = span
            .scope()
            .find(|s| s.name() == rebuno::spans::DISPATCH)
            .and_then(|s| {
                s.extensions()
                    .get::<Fields>()
                    .and_then(|f| f.0.get("attempt").cloned())
            });
        self.0.lock().unwrap().push(Closed {
            name: span.name(),
            fields,
            attempt,
        });
    }
}

const POLICY: &str = "default_action: allow\nrules:\n  - id: no-rm\n    when: { target: rm }\n    then: { decision: deny, reason: destructive }\n";

fn keys(span: &Closed) -> Vec<&str> {
    span.fields.keys().map(String::as_str).collect()
}

#[tokio::test(flavor = "current_thread")]
async fn every_span_and_field_of_the_contract_over_a_crash_and_a_replay() {
    let capture = Capture::default();
    let _default =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    let stub = LlmStub::start().await;
    let kernel = DevKernel::start().await.unwrap();
    let search = define_tool("search").execute(|q: String| async move { Ok::<_, HandlerError>(q) });
    let rm = define_tool("rm").execute(|_: String| async move { Ok::<_, HandlerError>(()) });
    let agent = Agent::builder("traced").handler(move |url: String| {
        let (search, rm) = (search.clone(), rm.clone());
        async move {
            search.call("logs".to_owned()).await?;
            let refused = rm.call("/".to_owned()).await.is_err();
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
            Ok::<_, HandlerError>(json!([refused, composed, answered]))
        }
    });
    let served = kernel.serve(agent).await.unwrap();
    kernel.set_policy("traced", POLICY).unwrap();
    let created = kernel
        .create_execution(NewExecution::new("traced", json!(stub.chat_url())))
        .await
        .unwrap();
    while kernel
        .steps(&created.id)
        .iter()
        .filter(|s| s.status == "succeeded")
        .count()
        < 3
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    kernel.redeliver(&created.id).unwrap();
    let done = kernel
        .wait_terminal(&created.id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(done.output, Some(json!([true, 1, 200])));
    served.shutdown().await;
    kernel.shutdown().await;

    let spans = capture.0.lock().unwrap().clone();
    let id = created.id.to_string();
    let dispatches: Vec<&Closed> = spans
        .iter()
        .filter(|s| s.name == rebuno::spans::DISPATCH)
        .collect();
    assert_eq!(dispatches.len(), 2, "{spans:#?}");
    let (first, second) = (
        dispatches
            .iter()
            .find(|d| d.fields["attempt"] == "1")
            .unwrap(),
        dispatches
            .iter()
            .find(|d| d.fields["attempt"] == "2")
            .unwrap(),
    );
    assert_eq!(
        keys(first),
        [
            "agent_id",
            "attempt",
            "dispatch_id",
            "execution_id",
            "outcome",
            "stop"
        ]
    );
    assert_eq!(
        (
            first.fields["outcome"].as_str(),
            first.fields["stop"].as_str()
        ),
        ("stopped", "superseded")
    );
    assert_eq!(
        keys(second),
        [
            "agent_id",
            "attempt",
            "dispatch_id",
            "execution_id",
            "outcome"
        ]
    );
    assert_eq!(second.fields["outcome"], "completed");
    assert_eq!(
        (
            second.fields["agent_id"].as_str(),
            second.fields["execution_id"].as_str()
        ),
        ("traced", id.as_str())
    );

    let steps: Vec<&Closed> = spans
        .iter()
        .filter(|s| s.name == rebuno::spans::STEP)
        .collect();
    assert_eq!(steps.len(), 8, "4 calls x 2 deliveries: {steps:#?}");
    let base = [
        "execution_id",
        "idempotency",
        "kind",
        "outcome",
        "replayed",
        "step_id",
        "target",
    ];
    for (attempt, replayed) in [("1", "false"), ("2", "true")] {
        let of = |target: &str| {
            steps
                .iter()
                .find(|s| s.attempt.as_deref() == Some(attempt) && s.fields["target"] == target)
                .unwrap_or_else(|| panic!("no {target} span in attempt {attempt}: {steps:#?}"))
        };
        for (target, kind) in [
            ("search", "tool_call"),
            ("compose", "local"),
            ("gpt-test", "llm_call"),
        ] {
            let span = of(target);
            assert_eq!(keys(span), base, "{span:#?}");
            assert_eq!(
                (
                    span.fields["kind"].as_str(),
                    span.fields["outcome"].as_str()
                ),
                (kind, "succeeded")
            );
            assert_eq!(span.fields["replayed"], replayed, "{span:#?}");
            assert_eq!(span.fields["idempotency"], "safe_to_retry");
            assert_eq!(span.fields["step_id"].len(), 64);
            assert_eq!(span.fields["execution_id"], id);
        }
        // A denial is decided again on every delivery (no step runs, none replays).
        let denied = of("rm");
        let mut with_reason = base.to_vec();
        with_reason.insert(1, "failure_reason");
        assert_eq!(keys(denied), with_reason, "{denied:#?}");
        assert_eq!(
            (
                denied.fields["outcome"].as_str(),
                denied.fields["replayed"].as_str()
            ),
            ("denied", "false")
        );
        assert!(
            denied.fields["failure_reason"].contains("destructive"),
            "{denied:#?}"
        );
    }
    // The replayed spans carry the first delivery's step ids.
    for target in ["search", "compose", "gpt-test"] {
        let ids: Vec<&str> = steps
            .iter()
            .filter(|s| s.fields["target"] == target)
            .map(|s| s.fields["step_id"].as_str())
            .collect();
        assert_eq!(ids.len(), 2);
        assert_eq!(ids[0], ids[1], "{target}");
    }
    assert_eq!(stub.hits(), 1, "the model was asked once");
    // The provider's request named the execution's trace and the LLM step as its parent.
    let llm_step = steps
        .iter()
        .find(|s| s.fields["target"] == "gpt-test")
        .unwrap();
    let expected = format!(
        "00-{}-{}-01",
        id.replace('-', ""),
        &llm_step.fields["step_id"][..16]
    );
    assert_eq!(stub.traceparents(), [Some(expected)]);
}

#[tokio::test(flavor = "current_thread")]
async fn a_creation_span_names_the_agent_the_callers_context_and_the_new_execution() {
    let capture = Capture::default();
    let _default =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    let kernel = DevKernel::start().await.unwrap();
    let served = kernel
        .serve(
            Agent::builder("echo")
                .handler(|v: serde_json::Value| async move { Ok::<_, HandlerError>(v) }),
        )
        .await
        .unwrap();
    let client = rebuno::client::Client::builder()
        .base_url(kernel.url())
        .build()
        .unwrap();
    let caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let with = client
        .create("echo")
        .traceparent(caller)
        .send()
        .await
        .unwrap();
    // A value that is not a W3C traceparent is dropped, not sent.
    let without = client
        .create("echo")
        .traceparent("not-a-traceparent")
        .send()
        .await
        .unwrap();
    served.shutdown().await;
    kernel.shutdown().await;

    let spans = capture.0.lock().unwrap().clone();
    let creations: Vec<&Closed> = spans
        .iter()
        .filter(|s| s.name == rebuno::spans::CREATE)
        .collect();
    assert_eq!(creations.len(), 2, "{spans:#?}");
    assert_eq!(
        keys(creations[0]),
        ["agent_id", "execution_id", "traceparent"]
    );
    assert_eq!(creations[0].fields["traceparent"], caller);
    assert_eq!(creations[0].fields["execution_id"], with.id);
    assert_eq!(keys(creations[1]), ["agent_id", "execution_id"]);
    assert_eq!(creations[1].fields["execution_id"], without.id);
    assert_eq!(creations[1].fields["agent_id"], "echo");
}
