//! Scenarios 10-12 (and a failing tool body): an input the handler's parameters reject, a
//! handler that returns an error, a Rust handler that panics where the Python one raises an
//! unexpected exception, and a tool whose body fails. Python: `py/failures.py`.
//!
//! Justified differences, all in the detail after the failure reason's stable token (PROTOCOL.md
//! §4.5: "the text before the first colon is a stable token"): Python names the exception type
//! (`agent_error: RuntimeError: ...`), which Rust errors do not have; a Rust panic is reported
//! as `agent_error: handler panicked: <message>` (docs/crate.md); an input that does not bind
//! is described by pydantic's binder in Python and by serde in Rust.

use rebuno::{AgentBuilder, HandlerError, Step, Tool, define_tool};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::engine::Justified;
use crate::kit::Kit;
use crate::run::{differential, one};
use crate::world::{Group, Side};

pub static GROUP: Group = Group {
    agent_id: "diff-fail",
    py_module: "failures",
    policy: None,
    rust: twin,
};

/// The handler's input: both fields required.
#[derive(Deserialize)]
struct FailInput {
    case: String,
    count: i64,
}

#[derive(Serialize, Deserialize)]
struct Count {
    count: i64,
}

fn twin(builder: AgentBuilder, kit: Kit) -> AgentBuilder {
    let flaky: Tool<Count, String> = define_tool("flaky").execute(move |a: Count| {
        kit.mark("flaky.ran", &a.count.to_string());
        async move { Err::<String, _>(HandlerError::from(format!("flaky broke after {}", a.count))) }
    });
    builder.handler_with_state(
        flaky,
        |flaky: Tool<Count, String>, input: FailInput| async move {
            let count = input.count;
            let doubled: i64 = Step::new("prepare")
                .args(json!({ "count": count }))
                .run(|| async move { Ok::<_, HandlerError>(count * 2) })
                .await?;
            match input.case.as_str() {
                "handler_error" => Err(format!("the handler gave up at {doubled}").into()),
                "exception" => panic!("kaboom at {doubled}"),
                "tool_error" => Ok(json!({ "never": flaky.call(Count { count }).await? })),
                _ => Ok::<Value, HandlerError>(json!({ "doubled": doubled })),
            }
        },
    )
}

async fn case(side: &mut Side, input: Value) -> Vec<String> {
    one(side, input).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s10_input_validation_failure() {
    let justified = [Justified {
        why: "the binding error's detail is the binder's own: Python's names the missing \
              fields, serde's the missing field",
        on: "execution.failed",
        python: "input_invalid: missing required input fields: count",
        rust: "input_invalid: missing field `count`",
    }];
    let drive = async |side: &mut Side| case(side, json!({ "case": "validate" })).await;
    differential("s10-input-invalid", &GROUP, &justified, drive).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s11_handler_error() {
    let justified = [Justified {
        why: "Python prefixes the detail with the exception's type name; a Rust error has none",
        on: "execution.failed",
        python: "agent_error: RuntimeError: ",
        rust: "agent_error: ",
    }];
    let input = json!({ "case": "handler_error", "count": 3 });
    let drive = async |side: &mut Side| case(side, input.clone()).await;
    differential("s11-handler-error", &GROUP, &justified, drive).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s12_handler_panic_vs_exception() {
    let justified = [Justified {
        why: "a Rust panic is reported as `handler panicked: <message>` (docs/crate.md), a \
              Python exception by its type name",
        on: "execution.failed",
        python: "agent_error: ZeroDivisionError: ",
        rust: "agent_error: handler panicked: ",
    }];
    let input = json!({ "case": "exception", "count": 3 });
    let drive = async |side: &mut Side| case(side, input.clone()).await;
    differential("s12-panic", &GROUP, &justified, drive).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s11b_tool_body_error() {
    let input = json!({ "case": "tool_error", "count": 3 });
    let drive = async |side: &mut Side| case(side, input.clone()).await;
    differential("s11b-tool-error", &GROUP, &[], drive).await;
}
