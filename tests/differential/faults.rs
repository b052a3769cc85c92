//! Scenarios 20-21: an agent process killed in the middle of an `at_most_once` body, then the
//! dispatch re-delivered to a fresh process (the kernel answers the re-submitted step
//! `indeterminate`); and a re-delivery to a second process while the first attempt still runs,
//! whose outcome is then refused with `lease_superseded`. Python: `py/faults.py`.

use rebuno::{AgentBuilder, ErrorKind, HandlerError, Idempotency, Step, Tool, define_tool, step};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::kit::Kit;
use crate::run::differential;
use crate::world::{Group, Side};

pub static GROUP: Group = Group {
    agent_id: "diff-faults",
    py_module: "faults",
    policy: None,
    rust: twin,
};

#[derive(Serialize, Deserialize)]
struct Charge {
    order: String,
    cents: u64,
}

#[derive(Serialize, Deserialize)]
struct Fetch {
    url: String,
}

#[derive(Clone)]
struct Faults {
    kit: Kit,
    charge: Tool<Charge, String>,
    fetch: Tool<Fetch, String>,
}

fn twin(builder: AgentBuilder, kit: Kit) -> AgentBuilder {
    let k = kit.clone();
    let charge = define_tool("charge_card")
        .idempotency(Idempotency::AtMostOnce)
        .execute(move |a: Charge| {
            let k = k.clone();
            async move {
                k.mark("charge.started", &a.order);
                k.released(&format!("charge.{}", k.label)).await;
                Ok::<_, HandlerError>(format!("charged {} for {}", a.cents, a.order))
            }
        });
    let k = kit.clone();
    let fetch = define_tool("fetch").execute(move |a: Fetch| {
        let k = k.clone();
        async move {
            k.mark("fetch.started", &a.url);
            k.released(&format!("fetch.{}", k.label)).await;
            Ok::<_, HandlerError>(format!("body of {}", a.url))
        }
    });
    let faults = Faults { kit, charge, fetch };
    builder.handler_with_state(faults, |f: Faults, input: Value| async move {
        f.handle(input).await
    })
}

impl Faults {
    async fn handle(self, input: Value) -> Result<Value, HandlerError> {
        match input["case"].as_str().unwrap_or_default() {
            "crash" => {
                let kit = self.kit.clone();
                let order: String = step("new_order", || async move {
                    kit.mark("order.ran", "");
                    Ok::<_, HandlerError>("order-42".to_owned())
                })
                .await?;
                let cents = input["cents"].as_u64().unwrap_or_default();
                let charge = Charge {
                    order: order.clone(),
                    cents,
                };
                let receipt = self.charge.call(charge).await?;
                Ok(json!({ "order": order, "receipt": receipt }))
            }
            "crash_local" => {
                let kit = self.kit.clone();
                let held: String = Step::new("reserve")
                    .args(json!({ "sku": "sku-9" }))
                    .idempotency(Idempotency::AtMostOnce)
                    .run(|| async move {
                        kit.mark("reserve.started", "sku-9");
                        kit.released(&format!("reserve.{}", kit.label)).await;
                        Ok::<_, HandlerError>("reserved sku-9".to_owned())
                    })
                    .await?;
                Ok(json!({ "held": held }))
            }
            "lease" => {
                let url = input["url"].as_str().unwrap_or_default().to_owned();
                match self.fetch.call(Fetch { url: url.clone() }).await {
                    Ok(page) => Ok(json!({ "page": page })),
                    Err(e) if e.kind() == ErrorKind::LeaseSuperseded => {
                        self.kit.mark("superseded", &url);
                        Err(e.into())
                    }
                    Err(e) => Err(e.into()),
                }
            }
            other => Err(format!("unknown case {other}").into()),
        }
    }
}

/// SIGKILL (or a dropped runtime) while the body behind `started` runs, then a fresh process
/// gets attempt 2.
async fn crash_in(side: &mut Side, input: Value, started: &str) -> Vec<String> {
    let id = side.create(input).await;
    side.wait_marks(started, 1).await;
    side.kill(&side.label(0));
    side.serve().await;
    assert_eq!(side.kernel.redeliver(&id).expect("in flight"), 2);
    side.wait_terminal(&id).await;
    vec![id]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s20_crash_mid_at_most_once_then_redelivery_is_indeterminate() {
    let input = json!({ "case": "crash", "cents": 1250 });
    let drive = async |side: &mut Side| crash_in(side, input.clone(), "charge.started").await;
    differential("s20-crash", &GROUP, &[], drive).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s20b_crash_mid_at_most_once_local_step() {
    let input = json!({ "case": "crash_local" });
    let drive = async |side: &mut Side| crash_in(side, input.clone(), "reserve.started").await;
    differential("s20b-crash-local", &GROUP, &[], drive).await;
}

/// Attempt 2 goes to a second process while attempt 1 still runs; attempt 1 finishes first
/// and is refused, then attempt 2 completes.
async fn superseded(side: &mut Side) -> Vec<String> {
    let url = "https://example.test/a";
    let id = side.create(json!({ "case": "lease", "url": url })).await;
    side.wait_marks("fetch.started", 1).await;
    let old = side.label(0);
    let new = side.serve().await;
    assert_eq!(side.kernel.redeliver(&id).expect("in flight"), 2);
    side.wait_marks("fetch.started", 2).await;
    side.release(&format!("fetch.{old}"));
    side.wait_marks("superseded", 1).await;
    side.release(&format!("fetch.{new}"));
    side.wait_terminal(&id).await;
    vec![id]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s21_superseded_dispatch_is_fenced_off() {
    differential("s21-superseded", &GROUP, &[], superseded).await;
}

/// Attempt 2 reaches the same process while attempt 1 still runs there: the process drops the
/// old run for the new one (Python cancels its task, Rust aborts its run), so only attempt 2's
/// body finishes and nothing is refused.
async fn superseded_in_process(side: &mut Side) -> Vec<String> {
    let url = "https://example.test/b";
    let id = side.create(json!({ "case": "lease", "url": url })).await;
    side.wait_marks("fetch.started", 1).await;
    assert_eq!(side.kernel.redeliver(&id).expect("in flight"), 2);
    side.wait_marks("fetch.started", 2).await;
    side.release(&format!("fetch.{}", side.label(0)));
    side.wait_terminal(&id).await;
    vec![id]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s21b_redelivery_to_the_same_process_replaces_the_old_run() {
    differential(
        "s21b-superseded-in-process",
        &GROUP,
        &[],
        superseded_in_process,
    )
    .await;
}
