//! The stand-in's REST API and envd answers that E2B's SDK does not exercise: the real API's
//! error bodies, `/v1` create with and without `secure`, envd's token check, the proxy's 502
//! for a paused sandbox, snapshots on disk, expiry and dropped streams.

#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "support/http.rs"]
mod client;

use std::net::SocketAddr;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use std::path::PathBuf;
use std::time::Duration;

use client::{envelope, send};
use rebuno_e2b_standin::{E2bStandin, StandinConfig};
use serde_json::{Value, json};

const KEY: &str = "e2b_rest_test_key";

fn standin(name: &str) -> (E2bStandin, PathBuf) {
    let dir = std::env::temp_dir().join(format!("e2b-standin-rest-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    (
        E2bStandin::start(StandinConfig::new(&dir, KEY)).unwrap(),
        dir,
    )
}

async fn api(addr: SocketAddr, method: &str, path: &str, body: Option<Value>) -> client::Reply {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    send(
        addr,
        method,
        path,
        &[("X-API-Key", KEY), ("Content-Type", "application/json")],
        body.as_bytes(),
    )
    .await
}

async fn create(addr: SocketAddr, body: Value) -> Value {
    let reply = api(addr, "POST", "/sandboxes", Some(body)).await;
    assert_eq!(
        reply.status,
        201,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    reply.json()
}

async fn rpc(addr: SocketAddr, sandbox: &Value, method: &str, message: Value) -> client::Reply {
    let id = sandbox["sandboxID"].as_str().unwrap();
    let token = sandbox["envdAccessToken"].as_str().unwrap_or("");
    let headers = [
        ("E2b-Sandbox-Id", id),
        ("X-Access-Token", token),
        ("Content-Type", "application/json"),
    ];
    send(
        addr,
        "POST",
        &format!("/{method}"),
        &headers,
        message.to_string().as_bytes(),
    )
    .await
}

#[tokio::test]
async fn auth_failures_answer_the_real_401_bodies() {
    let (standin, dir) = standin("auth");
    let addr = standin.local_addr();
    let missing = send(addr, "GET", "/snapshots", &[], b"").await;
    assert_eq!(
        (missing.status, missing.json()),
        (
            401,
            json!({"code": 401, "message": "authorization header is missing"})
        )
    );
    let malformed = send(addr, "GET", "/snapshots", &[("X-API-Key", "nope")], b"").await;
    assert_eq!(
        malformed.json()["message"],
        "authorization header is malformed"
    );
    let wrong = send(
        addr,
        "GET",
        "/snapshots",
        &[("X-API-Key", "e2b_wrong")],
        b"",
    )
    .await;
    assert_eq!(wrong.status, 401);
    assert!(
        wrong.json()["message"]
            .as_str()
            .unwrap()
            .ends_with("Cannot get the team for the given API key")
    );
    let unknown = send(addr, "GET", "/nowhere", &[("X-API-Key", KEY)], b"").await;
    assert_eq!(unknown.status, 404);
    assert!(
        !format!("{standin:?}").contains(KEY),
        "the key stays out of Debug"
    );
    drop(standin);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn create_answers_templates_tokens_and_errors_like_the_api() {
    let (standin, dir) = standin("create");
    let addr = standin.local_addr();
    let open = create(addr, json!({"templateID": "base"})).await;
    assert_eq!(open["alias"], "base");
    assert!(
        open.get("envdAccessToken").is_none(),
        "a /v1 sandbox is secured only when asked"
    );
    assert!(
        standin
            .sandbox_fs(open["sandboxID"].as_str().unwrap())
            .join("home/user")
            .is_dir()
    );
    let secure = create(addr, json!({"templateID": "base", "secure": true})).await;
    assert!(secure["envdAccessToken"].as_str().unwrap().len() > 20);

    let missing = api(
        addr,
        "POST",
        "/sandboxes",
        Some(json!({"templateID": "nosuch:default"})),
    )
    .await;
    assert_eq!(
        (missing.status, missing.json()),
        (
            404,
            json!({"code": 404, "message": "template 'nosuch' not found"})
        )
    );
    let bad = api(
        addr,
        "POST",
        "/sandboxes",
        Some(json!({"templateID": "Not Valid"})),
    )
    .await;
    assert_eq!(bad.status, 400);
    assert_eq!(
        bad.json()["message"],
        "Invalid template reference: invalid template ID: Not Valid"
    );
    let no_body = api(addr, "POST", "/sandboxes", None).await;
    assert_eq!(no_body.status, 400);
    let zero = api(
        addr,
        "POST",
        "/sandboxes",
        Some(json!({"templateID": "base", "timeout": 0})),
    )
    .await;
    assert_eq!(zero.json()["message"], "Timeout must be greater than 0");
    drop(standin);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn envd_checks_the_access_token_and_refuses_a_paused_sandbox() {
    let (standin, dir) = standin("envd");
    let addr = standin.local_addr();
    let sandbox = create(addr, json!({"templateID": "base", "secure": true})).await;
    let id = sandbox["sandboxID"].as_str().unwrap().to_owned();
    let list = json!({"path": "/home/user"});
    assert_eq!(
        rpc(
            addr,
            &sandbox,
            "filesystem.Filesystem/ListDir",
            list.clone()
        )
        .await
        .status,
        200
    );
    let mut tokenless = sandbox.clone();
    tokenless["envdAccessToken"] = json!("wrong");
    let refused = rpc(
        addr,
        &tokenless,
        "filesystem.Filesystem/ListDir",
        list.clone(),
    )
    .await;
    assert_eq!(refused.status, 401);
    assert_eq!(refused.json()["code"], 401);
    let missing = rpc(
        addr,
        &sandbox,
        "filesystem.Filesystem/Stat",
        json!({"path": "nope"}),
    )
    .await;
    assert_eq!(
        (missing.status, missing.json()["code"].clone()),
        (404, json!("not_found"))
    );

    let pause = api(addr, "POST", &format!("/sandboxes/{id}/pause"), None).await;
    assert_eq!(pause.status, 204);
    let again = api(addr, "POST", &format!("/sandboxes/{id}/pause"), None).await;
    assert_eq!(again.status, 409);
    let paused = rpc(
        addr,
        &sandbox,
        "filesystem.Filesystem/ListDir",
        list.clone(),
    )
    .await;
    assert_eq!(paused.status, 502);
    assert_eq!(paused.json()["message"], "The sandbox was not found");
    let resumed = api(
        addr,
        "POST",
        &format!("/sandboxes/{id}/connect"),
        Some(json!({"timeout": 60})),
    )
    .await;
    assert_eq!(resumed.status, 201);
    let running = api(
        addr,
        "POST",
        &format!("/sandboxes/{id}/connect"),
        Some(json!({"timeout": 60})),
    )
    .await;
    assert_eq!(running.status, 200);
    assert_eq!(
        rpc(addr, &sandbox, "filesystem.Filesystem/ListDir", list)
            .await
            .status,
        200
    );
    let gone = api(addr, "GET", "/sandboxes/inosuch", None).await;
    assert_eq!(
        gone.json()["message"],
        "Sandbox \"inosuch\" doesn't exist or you don't have access to it"
    );
    drop(standin);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn snapshots_copy_the_filesystem_and_sandboxes_expire() {
    let (standin, dir) = standin("snapshot");
    let addr = standin.local_addr();
    let sandbox = create(addr, json!({"templateID": "base", "timeout": 60})).await;
    let id = sandbox["sandboxID"].as_str().unwrap();
    std::fs::write(standin.sandbox_fs(id).join("home/user/kept.txt"), "kept").unwrap();
    let snap = api(
        addr,
        "POST",
        &format!("/sandboxes/{id}/snapshots"),
        Some(json!({})),
    )
    .await;
    assert_eq!(snap.status, 201);
    let snapshot_id = snap.json()["snapshotID"].as_str().unwrap().to_owned();
    assert!(
        standin
            .root()
            .join("snapshots")
            .join(&snapshot_id)
            .join("home/user/kept.txt")
            .is_file()
    );
    let listed = api(addr, "GET", "/snapshots", None).await.json();
    assert_eq!(listed, json!([{"snapshotID": snapshot_id, "names": []}]));

    let child = create(addr, json!({"templateID": snapshot_id, "timeout": 1})).await;
    let child_id = child["sandboxID"].as_str().unwrap();
    let copied = standin.sandbox_fs(child_id).join("home/user/kept.txt");
    assert_eq!(std::fs::read_to_string(copied).unwrap(), "kept");
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let expired = api(addr, "GET", &format!("/sandboxes/{child_id}"), None).await;
    assert_eq!(expired.status, 404, "killed at its timeout");
    let killed = api(addr, "DELETE", &format!("/sandboxes/{id}"), None).await;
    assert_eq!(killed.status, 204);
    drop(standin);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn process_streams_carry_output_and_drop_on_pause() {
    let (standin, dir) = standin("process");
    let addr = standin.local_addr();
    let sandbox = create(addr, json!({"templateID": "base"})).await;
    let id = sandbox["sandboxID"].as_str().unwrap().to_owned();
    let headers = [
        ("E2b-Sandbox-Id", id.as_str()),
        ("Content-Type", "application/connect+json"),
    ];
    let start = envelope(
        r#"{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi; pwd"]},"stdin":false}"#,
    );
    let reply = send(addr, "POST", "/process.Process/Start", &headers, &start).await;
    let events = reply.envelopes();
    assert!(events[0].1["event"]["start"]["pid"].as_u64().unwrap() > 0);
    let stdout: Vec<u8> = events
        .iter()
        .filter_map(|(_, e)| e["event"]["data"]["stdout"].as_str())
        .flat_map(|b64| STANDARD.decode(b64).unwrap())
        .collect();
    let home = standin.sandbox_fs(&id).join("home/user");
    assert_eq!(
        String::from_utf8(stdout).unwrap(),
        format!("hi\n{}\n", home.display())
    );
    assert_eq!(
        events[events.len() - 2].1["event"]["end"]["status"],
        "exit status 0"
    );
    assert_eq!(events.last().unwrap(), &(2, json!({})));

    let long = envelope(r#"{"process":{"cmd":"/bin/bash","args":["-l","-c","sleep 30"]}}"#);
    let stream = tokio::spawn(async move {
        send(
            addr,
            "POST",
            "/process.Process/Start",
            &headers_owned(&id),
            &long,
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pause = api(
        addr,
        "POST",
        &format!(
            "/sandboxes/{}/pause",
            sandbox["sandboxID"].as_str().unwrap()
        ),
        None,
    )
    .await;
    assert_eq!(pause.status, 204);
    let cut = tokio::time::timeout(Duration::from_secs(5), stream)
        .await
        .unwrap()
        .unwrap();
    assert!(!cut.complete, "pausing drops the stream without an end");
    drop(standin);
    let _ = std::fs::remove_dir_all(dir);
}

fn headers_owned(id: &str) -> [(&'static str, &str); 2] {
    [
        ("E2b-Sandbox-Id", id),
        ("Content-Type", "application/connect+json"),
    ]
}
