//! Live step deltas: agent → kernel → SSE subscriber.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::{AgentClient, kernel_with_agent};
use rebuno_devkernel::NewExecution;
use serde_json::json;

#[tokio::test]
async fn deltas_reach_sse_subscribers() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let exec = kernel
        .create_execution(NewExecution::new("hello", json!({})))
        .await
        .unwrap();
    let d = agent.next().await.dispatch_id;
    let api = AgentClient::new(&kernel.url());
    let base = format!("/v0/executions/{}", exec.id);
    let (_, proceed) = api
        .send(
            "POST",
            &format!("{base}/steps"),
            Some((&d, 1)),
            r#"{"kind":"llm_call","target":"m","args":{"stream":true}}"#,
        )
        .await;
    let step = proceed["step_id"].as_str().unwrap().to_owned();

    // Agent credentials are refused on the SSE route; unknown executions are 404.
    assert_eq!(
        api.send("GET", &format!("{base}/stream"), None, "").await.0,
        401
    );
    let missing = format!(
        "{}/v0/executions/{}/stream",
        kernel.url(),
        uuid::Uuid::now_v7()
    );
    assert_eq!(reqwest::get(&missing).await.unwrap().status(), 404);

    let mut sse = reqwest::get(format!("{}{base}/stream", kernel.url()))
        .await
        .unwrap();
    assert_eq!(sse.status(), 200);
    assert_eq!(sse.headers()["content-type"], "text/event-stream");
    let first = sse.chunk().await.unwrap().unwrap();
    assert_eq!(&first[..], b": ok\n\n");

    let delta = format!("{base}/steps/{step}/stream");
    let (status, _) = api
        .send(
            "POST",
            &delta,
            Some((&d, 1)),
            r#"{"seq": 0, "data": "Hel"}"#,
        )
        .await;
    assert_eq!(status, 204);
    let frame = tokio::time::timeout(Duration::from_secs(2), sse.chunk())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let text = String::from_utf8(frame.to_vec()).unwrap();
    let payload: serde_json::Value =
        serde_json::from_str(text.strip_prefix("data: ").unwrap().trim_end()).unwrap();
    assert_eq!(payload, json!({"step_id": step, "seq": 0, "data": "Hel"}));

    // Oversized data, stale attempt, settled step.
    let big = json!({"seq": 1, "data": "x".repeat(7001)}).to_string();
    assert_eq!(api.send("POST", &delta, Some((&d, 1)), &big).await.0, 400);
    assert_eq!(
        api.send("POST", &delta, Some((&d, 2)), r#"{"seq": 1, "data": "x"}"#)
            .await
            .0,
        409
    );
    let usage = r#"{"result": {"status": 200, "headers": {}, "body": "{\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2}}"}}"#;
    api.send(
        "POST",
        &format!("{base}/steps/{step}/complete"),
        Some((&d, 1)),
        usage,
    )
    .await;
    let (status, body) = api
        .send("POST", &delta, Some((&d, 1)), r#"{"seq": 1, "data": "x"}"#)
        .await;
    assert_eq!((status, body["code"].as_str()), (409, Some("conflict")));
    let url = format!("{}/v0/executions/{}/steps/{step}", kernel.url(), exec.id);
    let (_, recorded) = crate::common::client("GET", &url, None, None).await;
    assert_eq!(
        (&recorded["usage_input"], &recorded["usage_output"]),
        (&json!(7), &json!(2))
    );
    let succeeded = kernel
        .events(&exec.id)
        .into_iter()
        .find(|e| e.kind == "step.succeeded")
        .unwrap();
    assert_eq!(
        succeeded.payload["usage"],
        json!({"input_tokens": 7, "output_tokens": 2})
    );
    drop(sse);
    kernel.shutdown().await;
}
