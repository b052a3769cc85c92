//! The agent publishes its description and schemas to the kernel on its first dispatch.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;

use rebuno::{Agent, HandlerError};
use rebuno_devkernel::{AgentSpec, DevKernel};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use support::*;

#[derive(Deserialize, schemars::JsonSchema)]
struct Question {
    /// What to research.
    topic: String,
    limit: Option<u32>,
}

#[derive(Serialize, schemars::JsonSchema)]
struct Answer {
    text: String,
}

#[tokio::test]
async fn description_and_schemas_reach_the_kernel() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.expect("kernel");
    let agent = Agent::builder("documented")
        .secret(SECRET)
        .base_url(kernel.url())
        .description("Answers questions")
        .input_schema_for::<Question>()
        .output_schema_for::<Answer>()
        .handler(|q: Question| async move {
            Ok::<_, HandlerError>(Answer {
                text: format!("{} ({:?})", q.topic, q.limit),
            })
        })
        .build()
        .expect("agent");
    let served = serve(agent).await;
    kernel
        .register_agent(AgentSpec::new("documented", served.webhook_url(), SECRET))
        .expect("register");

    let done = run(&kernel, "documented", json!({ "topic": "leases" })).await;
    assert_eq!(done.output, Some(json!({ "text": "leases (None)" })));

    let published: Value = reqwest::get(format!("{}/v0/agents/documented", kernel.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(published["description"], "Answers questions");
    assert_eq!(
        published["input_schema"]["properties"]["topic"]["type"],
        "string"
    );
    assert_eq!(published["input_schema"]["required"], json!(["topic"]));
    assert_eq!(
        published["output_schema"]["properties"]["text"]["type"],
        "string"
    );
    served.shutdown().await;
}
