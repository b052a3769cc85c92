//! A human approval: the policy holds `send_email` until someone grants it through
//! `rebuno::client::Client`; the execution blocks, then resumes and sends exactly once.
//!
//! Run with: `cargo run --example approval`

#[path = "common/mod.rs"]
mod common;

use std::time::Duration;

use rebuno::client::Client;
use rebuno::{HandlerError, Idempotency, define_tool};
use rebuno_devkernel::DevKernel;
use serde::{Deserialize, Serialize};
use serde_json::json;

const POLICY: &str = r#"
default_action: allow
rules:
  - id: mail-needs-a-human
    when: { target: send_email }
    then:
      decision: require_approval
      approval_config: { approvers: [alice], message: "Check the recipient", timeout: 10m }
"#;

#[derive(Serialize, Deserialize)]
struct Email {
    to: String,
    body: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    rebuno_hyper::init_logging(); // RUST_LOG, info by default
    let kernel = DevKernel::start().await?;
    let send = define_tool("send_email")
        .idempotency(Idempotency::AtMostOnce)
        .execute(|email: Email| async move {
            println!("(sending to {})", email.to);
            Ok::<_, HandlerError>(format!("sent to {}", email.to))
        });
    let agent = common::agent(&kernel, "mailer")
        .handler_with_state(send, |send, to: String| async move {
            Ok::<_, HandlerError>(
                send.call(Email {
                    to,
                    body: "quarterly report".into(),
                })
                .await?,
            )
        })
        .build()?;
    common::serve(&kernel, agent, Some(POLICY)).await?;

    let client = Client::builder().base_url(kernel.url()).build()?;
    let created = client
        .create("mailer")
        .input(json!("ops@example.com"))
        .send()
        .await?;
    let approval = loop {
        if let Some(approval) = client.approvals().send().await?.into_iter().next() {
            break approval;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!(
        "blocked on approval {} ({:?}); granting as alice",
        approval.id, approval.message
    );
    client
        .grant(&approval.id)
        .by("alice")
        .rationale("recipient checked")
        .send()
        .await?;

    let done = client.wait(&created.id, Duration::from_secs(30)).await?;
    common::report(&done, &kernel.events(&done.id));
    Ok(())
}
