//! Rebuno tools handed to rig run through rig's own tool dispatch and still go through the
//! kernel: recorded, replayed, and refused by policy with a result the model can read.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;
use rebuno::wire::ExecutionStatus;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rebuno::{HandlerError, define_tool};
use rebuno_devkernel::AgentSpec;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use support::*;

#[derive(Serialize, Deserialize, schemars::JsonSchema)]
struct Query {
    q: String,
}

#[tokio::test]
async fn rig_dispatches_durable_tools_and_sees_denials_as_results() {
    let _trace = trace_init();
    let kernel = rebuno_devkernel::DevKernel::start().await.expect("kernel");
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = agent(&kernel, "rigged")
        .handler_with_state(Arc::clone(&runs), |runs, _: Value| async move {
            let search = define_tool("search")
                .description("Search the docs")
                .input_schema_for::<Query>()
                .execute(move |query: Query| {
                    runs.fetch_add(1, Ordering::SeqCst);
                    async move { Ok::<_, HandlerError>(json!({ "hits": [query.q] })) }
                });
            let shell = define_tool("shell")
                .execute(|_: Query| async { Ok::<_, HandlerError>("ran".to_owned()) });
            let search = rebuno::rig::dynamic_tool(search.into_dyn())?;
            let shell = rebuno::rig::dynamic_tool(shell.into_dyn())?;
            assert_eq!(
                search.definition().parameters["properties"]["q"]["type"],
                "string"
            );
            let found = search
                .execute(json!({ "q": "leases" }))
                .await
                .map_err(|e| e.to_string())?;
            let refused = shell
                .execute(json!({ "q": "rm -rf /" }))
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, HandlerError>(
                json!({ "found": found.as_json().cloned(), "refused": refused.as_json().cloned() }),
            )
        })
        .build()
        .expect("agent config");
    let served = serve(agent).await;
    let policy = "default_action: allow\nrules:\n  - id: no-shell\n    when: { target: shell }\n    then: { decision: deny, reason: off limits }\n";
    kernel
        .register_agent(AgentSpec::new("rigged", served.webhook_url(), SECRET).policy_yaml(policy))
        .expect("register");

    let done = run(&kernel, "rigged", json!({})).await;

    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    assert_eq!(
        done.output,
        Some(
            json!({ "found": { "hits": ["leases"] }, "refused": "shell not allowed. reason: off limits" })
        )
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let kinds = types(&kernel.events(&done.id));
    assert!(
        kinds.iter().any(|k| k == "step.succeeded") && kinds.iter().any(|k| k == "step.denied"),
        "{kinds:?}"
    );
    served.shutdown().await;
}
