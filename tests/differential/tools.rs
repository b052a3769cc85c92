//! Scenarios 1-5: tool calls (`safe_to_retry`, `at_most_once`), local steps, and the policy
//! denying a tool (its refusal string returned to the handler) and a local step (the denial
//! fails the execution); and a handler that returns no output. Python: `py/tools.py`.

use rebuno::{AgentBuilder, HandlerError, Idempotency, Step, Tool, define_tool, step};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::engine::Justified;
use crate::kit::Kit;
use crate::run::{differential, one};
use crate::world::{Group, Side};

const POLICY: &str = "\
default_action: allow
rules:
  - id: no-user-deletes
    when: { target: delete_all, arguments: { table: { equals: users } } }
    then: { decision: deny, reason: deleting users is forbidden }
  - id: no-drops
    when: { target: drop_db, step_kind: local }
    then: { decision: deny, reason: dropping is forbidden }
";

pub static GROUP: Group = Group {
    agent_id: "diff-tools",
    py_module: "tools",
    policy: Some(POLICY),
    rust: twin,
};

/// The Python SDK's refusal string is `f"{tool} not allowed. reason: {PolicyError}"`, and
/// `str(PolicyError)` is APIError's display form `[policy_denied] <reason> (HTTP 403)`. The Rust
/// SDK writes `<tool> not allowed. reason: <reason>`, the form seeds/tools.md ("search not
/// allowed. reason: <the rule's reason>") and PROTOCOL.md §4.2 specify.
pub const REFUSAL_STRING: &str = "the Python refusal string embeds APIError's display form \
     `[policy_denied] <reason> (HTTP 403)`; Rust writes the bare reason as seeds/tools.md says";

#[derive(Serialize, Deserialize)]
struct Search {
    query: String,
    limit: u32,
}

#[derive(Serialize, Deserialize)]
struct Charge {
    order: String,
    cents: u64,
}

#[derive(Serialize, Deserialize)]
struct Rank {
    threshold: f64,
}

#[derive(Serialize, Deserialize)]
struct Table {
    table: String,
}

#[derive(Clone)]
struct Tools {
    kit: Kit,
    search: Tool<Search, Vec<String>>,
    charge: Tool<Charge, String>,
    delete_all: Tool<Table, String>,
    rank: Tool<Rank, String>,
}

fn twin(builder: AgentBuilder, kit: Kit) -> AgentBuilder {
    let k = kit.clone();
    let search =
        define_tool("search").execute(move |a: Search| {
            k.mark("search.ran", &a.query);
            async move {
                Ok::<_, HandlerError>((1..=a.limit).map(|i| format!("{}-{i}", a.query)).collect())
            }
        });
    let k = kit.clone();
    let charge = define_tool("charge_card")
        .idempotency(Idempotency::AtMostOnce)
        .execute(move |a: Charge| {
            k.mark("charge.ran", &a.order);
            async move { Ok::<_, HandlerError>(format!("charged {} for {}", a.cents, a.order)) }
        });
    let k = kit.clone();
    let delete_all = define_tool("delete_all").execute(move |a: Table| {
        k.mark("delete_all.ran", &a.table);
        async move { Ok::<_, HandlerError>(format!("deleted {}", a.table)) }
    });
    let k = kit.clone();
    let rank = define_tool("rank").execute(move |a: Rank| {
        k.mark("rank.ran", "");
        let _ = a.threshold;
        async move { Ok::<_, HandlerError>("ranked".to_owned()) }
    });
    let tools = Tools {
        kit,
        search,
        charge,
        delete_all,
        rank,
    };
    builder.handler_with_state(tools, |t: Tools, input: Value| async move {
        t.handle(input).await
    })
}

impl Tools {
    async fn handle(self, input: Value) -> Result<Value, HandlerError> {
        match input["case"].as_str().unwrap_or_default() {
            "safe_to_retry" => self.reads().await,
            "at_most_once" => {
                let order = "order-42".to_owned();
                let receipt = self.charge.call(Charge { order, cents: 1250 }).await?;
                Ok(json!({ "receipt": receipt }))
            }
            "local" => self.local().await,
            "denied_tool" => {
                let users = self
                    .delete_all
                    .call_json(json!({ "table": "users" }))
                    .await?;
                let logs = self
                    .delete_all
                    .call_json(json!({ "table": "logs" }))
                    .await?;
                Ok(json!({ "users": users, "logs": logs }))
            }
            "denied_step" => {
                let kit = self.kit.clone();
                let _: String = step("drop_db", || async move {
                    kit.mark("drop_db.ran", "");
                    Ok::<_, HandlerError>("dropped".to_owned())
                })
                .await?;
                Ok(json!({ "unreachable": true }))
            }
            "float_args" => {
                let ranked = self.rank.call(Rank { threshold: 0.00001 }).await?;
                Ok(json!({ "ranked": ranked }))
            }
            "quiet" => {
                let quiet = Search {
                    query: "quiet".to_owned(),
                    limit: 1,
                };
                self.search.call(quiet).await?;
                Ok(Value::Null)
            }
            other => Err(format!("unknown case {other}").into()),
        }
    }

    async fn reads(&self) -> Result<Value, HandlerError> {
        let rust = |limit| Search {
            query: "rust".to_owned(),
            limit,
        };
        let first = self.search.call(rust(2)).await?;
        let again = self.search.call(rust(2)).await?;
        let wide = self.search.call(rust(3)).await?;
        Ok(json!({ "first": first, "again": again, "wide": wide }))
    }

    async fn local(&self) -> Result<Value, HandlerError> {
        let kit = self.kit.clone();
        let stamped: Value = step("stamp", || async move {
            kit.mark("stamp.ran", "");
            Ok::<_, HandlerError>(json!({ "at": 1_700_000_000, "nonce": "n-7" }))
        })
        .await?;
        let kit = self.kit.clone();
        let found = json!(["a", "b", "c"]);
        let picked: usize = Step::new("pick")
            .args(json!({ "found": found }))
            .run(|| async move {
                kit.mark("pick.ran", "");
                Ok::<_, HandlerError>(2)
            })
            .await?;
        Ok(json!({ "stamped": stamped, "picked": picked }))
    }
}

async fn case(side: &mut Side, case: &str) -> Vec<String> {
    one(side, json!({ "case": case })).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s01_tool_safe_to_retry() {
    let drive = async |side: &mut Side| case(side, "safe_to_retry").await;
    differential("s01-safe-to-retry", &GROUP, &[], drive).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s02_tool_at_most_once() {
    let drive = async |side: &mut Side| case(side, "at_most_once").await;
    differential("s02-at-most-once", &GROUP, &[], drive).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s03_local_steps() {
    let drive = async |side: &mut Side| case(side, "local").await;
    differential("s03-local", &GROUP, &[], drive).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s04_tool_denied_by_policy_returns_the_refusal_string() {
    let justified = [Justified {
        why: REFUSAL_STRING,
        on: "execution.completed",
        python: "reason: [policy_denied] deleting users is forbidden (HTTP 403)",
        rust: "reason: deleting users is forbidden",
    }];
    let drive = async |side: &mut Side| case(side, "denied_tool").await;
    differential("s04-denied-tool", &GROUP, &justified, drive).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s05_local_step_denied_by_policy_fails_the_execution() {
    let drive = async |side: &mut Side| case(side, "denied_step").await;
    differential("s05-denied-step", &GROUP, &[], drive).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s03b_no_output() {
    let drive = async |side: &mut Side| case(side, "quiet").await;
    differential("s03b-no-output", &GROUP, &[], drive).await;
}

/// The kernel hashes number literals verbatim (PROTOCOL.md §1.5), so the same float argument
/// must be written the same way by both SDKs, or the step gets another identity in each: a
/// history Python recorded would not replay in Rust (and an `at_most_once` call would run
/// again). Python's `json.dumps(0.00001)` writes `1e-05`; this SDK now spells floats in kernel
/// requests the same way (`src/kernel/floats.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s01b_float_argument_has_one_identity() {
    let drive = async |side: &mut Side| case(side, "float_args").await;
    differential("s01b-float-args", &GROUP, &[], drive).await;
}
