//! An agent's `200` that comes back after its run already moved the execution on (blocked it,
//! completed it) is still recorded as `dispatch.acked`, as the Go kernel appends it after every
//! successful delivery (`internal/kernel/dispatch.go`, `deliver`). A fast agent on a loaded
//! machine meets this every day; the differential suite's Rust agents did.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use rebuno_devkernel::{AgentSpec, DevKernel};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

use super::common::{AgentClient, SECRET, client, events_of};

/// A webhook that reports each delivery's body, then answers `200` only once released.
#[derive(Clone)]
struct Held {
    deliveries: mpsc::UnboundedSender<Value>,
    release: Arc<Notify>,
}

async fn held_webhook(State(held): State<Held>, body: axum::body::Bytes) -> StatusCode {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let _ = held.deliveries.send(body);
    held.release.notified().await;
    StatusCode::OK
}

/// Serves [`held_webhook`]; returns its URL, the deliveries and the release.
async fn start_held() -> (String, mpsc::UnboundedReceiver<Value>, Arc<Notify>) {
    let (deliveries, rx) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let app = Router::new()
        .route("/webhook", post(held_webhook))
        .with_state(Held {
            deliveries,
            release: release.clone(),
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/webhook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, rx, release)
}

#[tokio::test]
async fn an_ack_that_comes_back_after_the_run_completed_is_recorded() {
    let (url, mut deliveries, release) = start_held().await;
    let kernel = DevKernel::start().await.unwrap();
    kernel
        .register_agent(AgentSpec::new("hello", &url, SECRET))
        .unwrap();
    let (status, created) = client(
        "POST",
        &format!("{}/v0/executions", kernel.url()),
        None,
        Some(r#"{"agent_id":"hello","input":"Ada"}"#),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let delivery = tokio::time::timeout(Duration::from_secs(5), deliveries.recv())
        .await
        .unwrap()
        .unwrap();
    let dispatch = delivery["dispatch_id"].as_str().unwrap().to_owned();
    // The run completes while the webhook's answer is still on its way.
    let (status, body) = AgentClient::new(&kernel.url())
        .send(
            "POST",
            &format!("/v0/executions/{id}/complete"),
            Some((&dispatch, 1)),
            &json!({ "output": "hello, Ada" }).to_string(),
        )
        .await;
    assert!(status < 300, "complete: {status} {body}");
    assert!(events_of(&kernel, &id, "dispatch.acked").is_empty());
    release.notify_one();
    let mut acked = Vec::new();
    for _ in 0..100 {
        acked = events_of(&kernel, &id, "dispatch.acked");
        if !acked.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(acked.len(), 1, "{:?}", kernel.events(&id));
    assert_eq!(acked[0].payload["attempt"], 1);
    assert_eq!(acked[0].payload["dispatch_id"], dispatch.as_str());
    let kinds: Vec<String> = kernel.events(&id).into_iter().map(|e| e.kind).collect();
    let completed = kinds.iter().position(|k| k == "execution.completed");
    let ack = kinds.iter().position(|k| k == "dispatch.acked");
    assert!(completed < ack, "{kinds:?}");
}
