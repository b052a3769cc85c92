//! An input that does not fit the handler: with a published input schema every problem is named
//! (up to ten), each at its place in the input, and no input value is repeated; without one,
//! serde's first error, in serde's words.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;
use rebuno::HandlerError;
use rebuno::wire::ExecutionStatus;
use serde::Deserialize;
use serde_json::json;
use support::*;

#[derive(Deserialize, schemars::JsonSchema)]
struct Order {
    item: String,
    count: u32,
    #[serde(default)]
    notes: Vec<String>,
}

async fn take(order: Order) -> Result<String, HandlerError> {
    let notes = order.notes.len();
    Ok(format!("{} x {} ({notes} notes)", order.count, order.item))
}

#[tokio::test]
async fn an_input_with_two_errors_names_both() {
    let _trace = trace_init();
    let (kernel, served) = kernel_with("orders", |agent| {
        agent.input_schema_for::<Order>().handler(take)
    })
    .await;

    let done = run(
        &kernel,
        "orders",
        json!({ "count": "three", "notes": ["a"] }),
    )
    .await;

    assert_eq!(done.status, ExecutionStatus::Failed);
    assert_eq!(
        done.failure_reason,
        "input_invalid: input validation failed: 2 errors: input.item: missing; input.count: \
         expected an integer, got a string"
    );
    let fine = run(&kernel, "orders", json!({ "item": "tea", "count": 2 })).await;
    assert_eq!(
        fine.status,
        ExecutionStatus::Completed,
        "{}",
        fine.failure_reason
    );
    served.shutdown().await;
}

#[tokio::test]
async fn a_hand_written_schema_is_checked_too_and_values_stay_out_of_the_reason() {
    let _trace = trace_init();
    let schema = json!({
        "type": "object",
        "properties": {
            "item": { "type": "string", "enum": ["tea", "coffee"] },
            "count": { "type": "integer", "minimum": 1, "maximum": 10 }
        },
        "required": ["item", "count"],
        "additionalProperties": false
    });
    let (kernel, served) = kernel_with("strict-orders", |agent| {
        agent.input_schema(schema).handler(take)
    })
    .await;

    let input = json!({ "item": "secret-sauce", "count": 99, "coupon": "SECRET-CODE" });
    let done = run(&kernel, "strict-orders", input).await;

    assert_eq!(done.status, ExecutionStatus::Failed);
    let reason = done.failure_reason;
    assert!(
        reason.starts_with("input_invalid: input validation failed: 3 errors: "),
        "{reason}"
    );
    for problem in [
        "input.item: expected one of \"tea\", \"coffee\"",
        "input.count: expected a number at most 10",
        "input.coupon: unknown field",
    ] {
        assert!(reason.contains(problem), "{problem} in {reason}");
    }
    assert!(
        !reason.contains("secret-sauce") && !reason.contains("SECRET-CODE"),
        "{reason}"
    );
    served.shutdown().await;
}

#[tokio::test]
async fn without_a_schema_serde_names_its_first_error() {
    let _trace = trace_init();
    let (kernel, served) = kernel_with("loose-orders", |agent| agent.handler(take)).await;

    let done = run(&kernel, "loose-orders", json!({ "count": "three" })).await;

    assert_eq!(done.status, ExecutionStatus::Failed);
    // serde stops at its first error (here the type of `count`; `item` is missing too).
    assert_eq!(
        done.failure_reason,
        "input_invalid: invalid type: string \"three\", expected u32"
    );
    served.shutdown().await;
}
