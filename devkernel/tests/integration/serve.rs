//! `DevKernel::serve` and `DevKernel::run`: a real agent under test in five lines.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use rebuno::{Agent, HandlerError};
use rebuno_devkernel::{DevKernel, DevKernelError};
use serde_json::json;

#[tokio::test]
async fn a_served_agent_runs_to_completion() -> Result<(), DevKernelError> {
    let kernel = DevKernel::start().await?;
    let served =
        kernel
            .serve(Agent::builder("hello").handler(|name: String| async move {
                Ok::<_, HandlerError>(format!("hello, {name}"))
            }))
            .await?;
    let done = kernel.run("hello", json!("Ada")).await?;
    assert_eq!(done.output, Some(json!("hello, Ada")));
    served.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_served_agent_is_reachable_at_its_webhook_path() {
    let kernel = DevKernel::start().await.unwrap();
    let served = kernel
        .serve(
            Agent::builder("pathed")
                .webhook_path("/hooks/rebuno")
                .handler(|n: u32| async move { Ok::<_, HandlerError>(n + 1) }),
        )
        .await
        .unwrap();
    assert_eq!(served.agent().id(), "pathed");
    assert_eq!(served.agent().base_url(), kernel.url());
    let url = served.webhook_url();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/hooks/rebuno"),
        "{url}"
    );
    let done = kernel.run("pathed", json!(41)).await.unwrap();
    assert_eq!(done.output, Some(json!(42)));
    served.shutdown().await;
}

#[tokio::test]
async fn serve_reports_an_agent_without_a_handler() {
    let kernel = DevKernel::start().await.unwrap();
    let error = kernel.serve(Agent::builder("idle")).await.unwrap_err();
    assert!(matches!(error, DevKernelError::Agent(_)), "{error:?}");
    assert!(error.to_string().contains(".handler"), "{error}");
}
