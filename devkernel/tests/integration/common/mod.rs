//! A tiny fake agent for driving the dev kernel over HTTP.
#![allow(
    dead_code,
    unreachable_pub,
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use rebuno::Secret;
use rebuno::signing::{RequestSignature, verify_webhook};
use rebuno_devkernel::{AgentSpec, DevKernel};
use serde_json::Value;
use tokio::sync::mpsc;

pub const SECRET: &str = "dev-secret";

/// Runs the built `rebuno-dev` with `args` (no `REBUNO_*` from the test's environment):
/// (exit status, stdout, stderr).
pub async fn rebuno_dev(args: &[&str]) -> (i32, String, String) {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_rebuno-dev"))
        .args(args)
        .env_remove("REBUNO_URL")
        .env_remove("REBUNO_API_KEY")
        .env_remove("REBUNO_BEARER_TOKEN")
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let text = |bytes| String::from_utf8(bytes).unwrap();
    (
        output.status.code().unwrap_or(-1),
        text(output.stdout),
        text(output.stderr),
    )
}

/// One webhook delivery the fake agent accepted.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub execution_id: String,
    pub dispatch_id: String,
    pub attempt: u32,
    pub lease_timeout_seconds: f64,
    pub raw: String,
}

/// The fake agent's webhook server; deliveries arrive on `rx`.
pub struct FakeAgent {
    pub url: String,
    pub rx: mpsc::UnboundedReceiver<Delivery>,
    pub bad_signatures: mpsc::UnboundedReceiver<()>,
}

#[derive(Clone)]
struct AgentState {
    tx: mpsc::UnboundedSender<Delivery>,
    bad: mpsc::UnboundedSender<()>,
    status: StatusCode,
}

async fn webhook(State(state): State<AgentState>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let sig = headers.get("rebuno-signature").map(|v| v.as_bytes());
    if verify_webhook(&Secret::new(SECRET), &body, sig).is_err() {
        let _ = state.bad.send(());
        return StatusCode::UNAUTHORIZED;
    }
    let json: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        headers
            .get("rebuno-execution-id")
            .unwrap()
            .to_str()
            .unwrap(),
        json["execution_id"].as_str().unwrap()
    );
    let _ = state.tx.send(Delivery {
        execution_id: json["execution_id"].as_str().unwrap().to_owned(),
        dispatch_id: json["dispatch_id"].as_str().unwrap().to_owned(),
        attempt: u32::try_from(json["dispatch_attempt"].as_u64().unwrap()).unwrap(),
        lease_timeout_seconds: json["lease_timeout_seconds"].as_f64().unwrap(),
        raw: String::from_utf8(body.to_vec()).unwrap(),
    });
    state.status
}

impl FakeAgent {
    /// Starts a webhook server answering `status` to valid deliveries.
    pub async fn start_with(status: StatusCode) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let (bad, bad_signatures) = mpsc::unbounded_channel();
        let app = Router::new()
            .route("/webhook", post(webhook))
            .with_state(AgentState { tx, bad, status });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/webhook", listener.local_addr().unwrap());
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            url,
            rx,
            bad_signatures,
        }
    }

    pub async fn start() -> Self {
        Self::start_with(StatusCode::OK).await
    }

    /// The next delivery (fails the test after 5 s).
    pub async fn next(&mut self) -> Delivery {
        tokio::time::timeout(Duration::from_secs(5), self.rx.recv())
            .await
            .expect("no delivery within 5 s")
            .expect("agent channel closed")
    }
}

/// A kernel with the fake agent registered as `hello`.
pub async fn kernel_with_agent() -> (DevKernel, FakeAgent) {
    let agent = FakeAgent::start().await;
    let kernel = DevKernel::start().await.unwrap();
    kernel
        .register_agent(AgentSpec::new("hello", &agent.url, SECRET))
        .unwrap();
    (kernel, agent)
}

/// Signs and sends agent requests.
pub struct AgentClient {
    pub base: String,
    pub agent_id: String,
    pub secret: Secret,
    pub http: reqwest::Client,
}

pub fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

impl AgentClient {
    pub fn new(base: &str) -> Self {
        Self {
            base: base.to_owned(),
            agent_id: "hello".to_owned(),
            secret: Secret::new(SECRET),
            http: reqwest::Client::new(),
        }
    }

    /// Sends a signed request; `lease` = (dispatch_id, attempt).
    pub async fn send(
        &self,
        method: &str,
        target: &str,
        lease: Option<(&str, u32)>,
        body: &str,
    ) -> (u16, Value) {
        self.send_at(method, target, lease, body, now_secs()).await
    }

    pub async fn send_at(
        &self,
        method: &str,
        target: &str,
        lease: Option<(&str, u32)>,
        body: &str,
        timestamp: i64,
    ) -> (u16, Value) {
        let ts = timestamp.to_string();
        let attempt = lease.map(|(_, a)| a.to_string()).unwrap_or_default();
        let dispatch = lease.map(|(d, _)| d).unwrap_or_default();
        let signature = RequestSignature {
            method,
            target,
            timestamp: &ts,
            dispatch_id: dispatch,
            attempt: &attempt,
        }
        .sign(&self.secret, body.as_bytes());
        let mut request = self
            .http
            .request(method.parse().unwrap(), format!("{}{target}", self.base))
            .header("Content-Type", "application/json")
            .header("Rebuno-Agent-Id", &self.agent_id)
            .header("Rebuno-Timestamp", &ts)
            .header("Rebuno-Signature", signature)
            .body(body.to_owned());
        if let Some((d, _)) = lease {
            request = request
                .header("Rebuno-Dispatch-Id", d)
                .header("Rebuno-Dispatch-Attempt", &attempt);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let json = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, json)
    }
}

/// Plain client requests (bearer optional).
pub async fn client(
    method: &str,
    url: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (u16, Value) {
    let mut request = reqwest::Client::new().request(method.parse().unwrap(), url);
    if let Some(token) = token {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    if let Some(body) = body {
        request = request
            .header("Content-Type", "application/json")
            .body(body.to_owned());
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let json = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, json)
}

/// Event types of an execution, in order.
pub fn event_types(kernel: &DevKernel, id: &str) -> Vec<String> {
    kernel.events(id).into_iter().map(|e| e.kind).collect()
}

/// One delivered execution driven by the fake agent: `post` signs with the live lease.
pub struct Run {
    pub id: String,
    pub dispatch: String,
    pub attempt: u32,
    pub api: AgentClient,
}

impl Run {
    /// Creates an execution of `hello` and waits for its first delivery.
    pub async fn start(kernel: &DevKernel, agent: &mut FakeAgent, body: &str) -> Self {
        let (status, created) = client(
            "POST",
            &format!("{}/v0/executions", kernel.url()),
            None,
            Some(body),
        )
        .await;
        assert_eq!(status, 201, "{created}");
        let id = created["id"].as_str().unwrap();
        Self::attach(kernel, agent, id).await
    }

    /// Waits for the next delivery of `id`.
    pub async fn attach(kernel: &DevKernel, agent: &mut FakeAgent, id: &str) -> Self {
        let delivery = agent.next().await;
        assert_eq!(delivery.execution_id, id);
        Self {
            id: id.to_owned(),
            dispatch: delivery.dispatch_id,
            attempt: delivery.attempt,
            api: AgentClient::new(&kernel.url()),
        }
    }

    /// A signed, leased POST to `/v0/executions/{id}{path}`.
    pub async fn post(&self, path: &str, body: &str) -> (u16, Value) {
        let target = format!("/v0/executions/{}{path}", self.id);
        self.api
            .send("POST", &target, Some((&self.dispatch, self.attempt)), body)
            .await
    }

    /// Submits a step and returns the decision (asserting `200`).
    pub async fn submit(&self, body: Value) -> Value {
        let (status, decision) = self.post("/steps", &body.to_string()).await;
        assert_eq!(status, 200, "{decision}");
        decision
    }

    /// Completes a step with `body` and returns the decision (asserting `200`).
    pub async fn complete(&self, step_id: &str, body: Value) -> Value {
        let (status, decision) = self
            .post(&format!("/steps/{step_id}/complete"), &body.to_string())
            .await;
        assert_eq!(status, 200, "{decision}");
        decision
    }
}

/// Events of `id` of one type, in order.
pub fn events_of(kernel: &DevKernel, id: &str, kind: &str) -> Vec<rebuno::wire::Event> {
    kernel
        .events(id)
        .into_iter()
        .filter(|e| e.kind == kind)
        .collect()
}

/// The kernel's RFC 3339 timestamps (Go's `time.Time` JSON), read as the kernel reads them.
#[allow(dead_code, unreachable_pub)]
#[path = "../../../src/model/time.rs"]
pub mod time;
