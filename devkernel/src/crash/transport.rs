//! The agent's side of a crash: a transport that passes every request to the kernel until its
//! crash point, then answers nothing ever again, as a process that died would not.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use rebuno::transport::{Transport, TransportFuture};
use serde::Deserialize;
use tokio::sync::Notify;

use super::CrashPoint;

/// What one incarnation of the agent saw of its step submits.
#[derive(Debug, Default)]
pub(super) struct Tap {
    /// Step submits sent so far.
    pub(super) submits: usize,
    /// The step id each submit was answered with, by position (`None`: no step recorded).
    pub(super) answered: Vec<Option<String>>,
    /// Whether each submit was answered `proceed` (its body runs), by position.
    pub(super) proceeded: Vec<bool>,
    /// `proceed` answers the agent received, by step id: how often each body started.
    pub(super) body_runs: HashMap<String, usize>,
    /// Whether the crash happened.
    pub(super) crashed: bool,
}

#[derive(Debug)]
struct Shared {
    tap: Mutex<Tap>,
    crashed: Notify,
}

/// A transport over the real one, armed to crash at one point of one step (or never).
#[derive(Debug, Clone)]
pub(super) struct CrashingTransport {
    inner: Arc<dyn Transport>,
    armed: Option<(usize, CrashPoint)>,
    shared: Arc<Shared>,
}

/// How a request of the agent API relates to steps.
enum Request {
    Submit,
    Settle(String),
    Other,
}

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    decision: String,
    #[serde(default)]
    step_id: Option<String>,
}

impl CrashingTransport {
    /// Over `inner`, crashing at `armed` (0-based submit position and point), or never.
    pub(super) fn new(inner: Arc<dyn Transport>, armed: Option<(usize, CrashPoint)>) -> Self {
        let shared = Shared {
            tap: Mutex::new(Tap::default()),
            crashed: Notify::new(),
        };
        Self {
            inner,
            armed,
            shared: Arc::new(shared),
        }
    }

    fn tap(&self) -> MutexGuard<'_, Tap> {
        self.shared
            .tap
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// What this incarnation saw so far.
    pub(super) fn with_tap<T>(&self, read: impl FnOnce(&Tap) -> T) -> T {
        read(&self.tap())
    }

    /// Resolves once the crash has happened.
    pub(super) async fn crashed(&self) {
        let notified = self.shared.crashed.notified();
        if self.tap().crashed {
            return;
        }
        notified.await;
    }

    fn is_armed(&self, position: usize, point: CrashPoint) -> bool {
        self.armed == Some((position, point))
    }

    /// The process dies: this and every later request never gets an answer.
    fn die(&self) -> TransportFuture {
        self.tap().crashed = true;
        self.shared.crashed.notify_waiters();
        Box::pin(std::future::pending())
    }

    fn submit(&self, request: http::Request<Bytes>, timeout: Duration) -> TransportFuture {
        let position = {
            let mut tap = self.tap();
            tap.submits += 1;
            tap.submits - 1
        };
        if self.is_armed(position, CrashPoint::BeforeSubmit) {
            return self.die();
        }
        let this = self.clone();
        let sent = self.inner.send(request, timeout);
        Box::pin(async move {
            let response = sent.await?;
            let answer = serde_json::from_slice::<Answer>(response.body()).ok();
            let dies = this.is_armed(position, CrashPoint::AfterSubmit);
            this.record(position, answer, !dies);
            if dies {
                return this.die().await;
            }
            Ok(response)
        })
    }

    /// Notes the answer to the submit at `position`; `delivered`: the agent gets it.
    fn record(&self, position: usize, answer: Option<Answer>, delivered: bool) {
        let mut tap = self.tap();
        let (step_id, proceed) =
            answer.map_or((None, false), |a| (a.step_id, a.decision == "proceed"));
        if tap.answered.len() <= position {
            tap.answered.resize(position + 1, None);
            tap.proceeded.resize(position + 1, false);
        }
        tap.answered[position].clone_from(&step_id);
        tap.proceeded[position] = proceed;
        if let (Some(id), true, true) = (step_id, proceed, delivered) {
            *tap.body_runs.entry(id).or_insert(0) += 1;
        }
    }

    fn settle(
        &self,
        step_id: &str,
        request: http::Request<Bytes>,
        timeout: Duration,
    ) -> TransportFuture {
        let position = self
            .tap()
            .answered
            .iter()
            .position(|id| id.as_deref() == Some(step_id));
        let armed = |point| position.is_some_and(|p| self.is_armed(p, point));
        if armed(CrashPoint::InBody) {
            return self.die();
        }
        let sent = self.inner.send(request, timeout);
        if !armed(CrashPoint::AfterComplete) {
            return sent;
        }
        let this = self.clone();
        Box::pin(async move {
            sent.await?;
            this.die().await
        })
    }
}

/// Which step request `request` is: a submit, a step's complete or fail, or anything else.
fn classify(request: &http::Request<Bytes>) -> Request {
    if request.method() != http::Method::POST {
        return Request::Other;
    }
    let path = request.uri().path();
    let Some(rest) = path.strip_prefix("/v0/executions/") else {
        return Request::Other;
    };
    let mut parts = rest.split('/').skip(1);
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("steps"), None, _, _) => Request::Submit,
        (Some("steps"), Some(id), Some("complete" | "fail"), None) => {
            Request::Settle(id.to_owned())
        }
        _ => Request::Other,
    }
}

impl Transport for CrashingTransport {
    fn send(&self, request: http::Request<Bytes>, timeout: Duration) -> TransportFuture {
        if self.tap().crashed {
            return Box::pin(std::future::pending());
        }
        match classify(&request) {
            Request::Submit => self.submit(request, timeout),
            Request::Settle(step_id) => self.settle(&step_id, request, timeout),
            Request::Other => self.inner.send(request, timeout),
        }
    }
}
