//! Scenarios 6-9: a tool gated by `require_approval` (granted, denied, expired on the
//! kernel's manual clock) and a rate limit with `max_wait` that parks the execution until it
//! refills, and one without `max_wait` that refuses the call. Python: `py/gates.py`.

use std::time::Duration;

use rebuno::wire::ExecutionStatus;
use rebuno::{AgentBuilder, HandlerError, Step, Tool, define_tool};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::engine::Justified;
use crate::kit::Kit;
use crate::run::differential;
use crate::tools::REFUSAL_STRING;
use crate::world::{Group, Side};

const POLICY: &str = "\
default_action: allow
rules:
  - id: gate-publish
    when: { target: publish }
    then:
      decision: require_approval
      reason: publishing needs a human
      approval_config: { approvers: [alice], timeout: 5m, message: check the post }
  - id: throttle-ping
    when: { target: ping }
    then:
      decision: allow
      rate_limit: { max_calls: 1, window: 1m, per_what: execution, max_wait: 5m }
  - id: throttle-burst
    when: { target: burst }
    then:
      decision: allow
      rate_limit: { max_calls: 1, window: 1m, per_what: execution }
";

pub static GROUP: Group = Group {
    agent_id: "diff-gates",
    py_module: "gates",
    policy: Some(POLICY),
    rust: twin,
};

#[derive(Serialize, Deserialize)]
struct Post {
    post: String,
}

#[derive(Serialize, Deserialize)]
struct Ping {
    n: u32,
}

#[derive(Clone)]
struct Gates {
    kit: Kit,
    publish: Tool<Post, String>,
    ping: Tool<Ping, String>,
    burst: Tool<Ping, String>,
}

fn twin(builder: AgentBuilder, kit: Kit) -> AgentBuilder {
    let k = kit.clone();
    let publish = define_tool("publish").execute(move |a: Post| {
        k.mark("publish.ran", &a.post);
        async move { Ok::<_, HandlerError>(format!("published: {}", a.post)) }
    });
    let k = kit.clone();
    let ping = define_tool("ping").execute(move |a: Ping| {
        k.mark("ping.ran", &a.n.to_string());
        async move { Ok::<_, HandlerError>(format!("pong {}", a.n)) }
    });
    let k = kit.clone();
    let burst = define_tool("burst").execute(move |a: Ping| {
        k.mark("burst.ran", &a.n.to_string());
        async move { Ok::<_, HandlerError>(format!("burst {}", a.n)) }
    });
    let gates = Gates {
        kit,
        publish,
        ping,
        burst,
    };
    builder.handler_with_state(gates, |g: Gates, input: Value| async move {
        g.handle(input).await
    })
}

impl Gates {
    async fn handle(self, input: Value) -> Result<Value, HandlerError> {
        match input["case"].as_str().unwrap_or_default() {
            "publish" => {
                let text = input["text"].as_str().unwrap_or_default().to_owned();
                let kit = self.kit.clone();
                let post: String = Step::new("draft")
                    .args(json!({ "text": text }))
                    .run(|| async move {
                        kit.mark("draft.ran", &text);
                        Ok::<_, HandlerError>(text.to_uppercase())
                    })
                    .await?;
                let receipt = self.publish.call_json(json!({ "post": post })).await?;
                Ok(json!({ "post": post, "receipt": receipt }))
            }
            "ping" => {
                let first = self.ping.call(Ping { n: 1 }).await?;
                let second = self.ping.call(Ping { n: 2 }).await?;
                Ok(json!({ "first": first, "second": second }))
            }
            "burst" => {
                let first = self.burst.call(Ping { n: 1 }).await?;
                let second = self.burst.call(Ping { n: 2 }).await?;
                Ok(json!({ "first": first, "second": second }))
            }
            other => Err(format!("unknown case {other}").into()),
        }
    }
}

/// How the test answers the approval.
#[derive(Clone, Copy)]
enum Answer {
    Grant,
    Deny,
    Expire,
}

async fn publish(side: &mut Side, answer: Answer) -> Vec<String> {
    let id = side
        .create(json!({ "case": "publish", "text": "hello world" }))
        .await;
    side.wait_status(&id, |s| s == ExecutionStatus::Blocked)
        .await;
    let approval = side.kernel.approvals().remove(0);
    match answer {
        Answer::Grant => side
            .kernel
            .decide_as(&approval.id, true, "alice", "ship it"),
        Answer::Deny => side
            .kernel
            .decide_as(&approval.id, false, "alice", "not today"),
        Answer::Expire => {
            side.advance(Duration::from_secs(6 * 60));
            Ok(())
        }
    }
    .expect("decide");
    side.wait_terminal(&id).await;
    vec![id]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s06_approval_granted() {
    let drive = async |side: &mut Side| publish(side, Answer::Grant).await;
    differential("s06-approval-granted", &GROUP, &[], drive).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s07_approval_denied() {
    let justified = [Justified {
        why: REFUSAL_STRING,
        on: "execution.completed",
        python: "reason: [policy_denied] not today (HTTP 403)",
        rust: "reason: not today",
    }];
    let drive = async |side: &mut Side| publish(side, Answer::Deny).await;
    differential("s07-approval-denied", &GROUP, &justified, drive).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s08_approval_expired() {
    let justified = [Justified {
        why: REFUSAL_STRING,
        on: "execution.completed",
        python: "reason: [policy_denied] approval_timeout (HTTP 403)",
        rust: "reason: approval_timeout",
    }];
    let drive = async |side: &mut Side| publish(side, Answer::Expire).await;
    differential("s08-approval-expired", &GROUP, &justified, drive).await;
}

/// The second `ping` parks the execution; the clock moves past the refill and the re-delivered
/// handler replays the first and runs the second.
async fn parked(side: &mut Side) -> Vec<String> {
    let id = side.create(json!({ "case": "ping" })).await;
    side.wait_event(&id, "step.rate_limited").await;
    side.advance(Duration::from_secs(10 * 60));
    side.wait_terminal(&id).await;
    vec![id]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s09_rate_limit_park() {
    differential("s09-rate-limit-park", &GROUP, &[], parked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s09b_rate_limited_without_max_wait_fails() {
    let drive = async |side: &mut Side| vec![side.run(json!({ "case": "burst" })).await];
    differential("s09b-rate-limited", &GROUP, &[], drive).await;
}
