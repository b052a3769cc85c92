//! Tools under a policy: a denied tool returns a refusal string the model can read, a denied
//! local step fails the execution.
//!
//! Run with: `cargo run --example policy`

#[path = "common/mod.rs"]
mod common;

use rebuno::{HandlerError, define_tool};
use rebuno_devkernel::{DevKernel, NewExecution};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

const POLICY: &str = r#"
default_action: allow
rules:
  - id: no-shell
    when: { target: shell }
    then: { decision: deny, reason: "the shell is off limits" }
"#;

#[derive(Serialize, Deserialize)]
struct Command {
    cmd: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    rebuno_hyper::init_logging(); // RUST_LOG, info by default
    let kernel = DevKernel::start().await?;
    let shell = define_tool("shell")
        .description("Run a shell command")
        .execute(|args: Command| async move { Ok::<_, HandlerError>(format!("ran {}", args.cmd)) });
    let read =
        define_tool("read_file")
            .description("Read a file")
            .execute(|args: Command| async move {
                Ok::<_, HandlerError>(format!("contents of {}", args.cmd))
            });
    let agent = common::agent(&kernel, "ops")
        .handler_with_state((shell, read), |(shell, read), _: Value| async move {
            // The way an LLM framework calls tools: JSON in, JSON out; a denial is a result.
            let refused = shell.call_json(json!({ "cmd": "rm -rf /" })).await?;
            let allowed = read.call_json(json!({ "cmd": "README.md" })).await?;
            Ok::<_, HandlerError>(json!({ "shell": refused, "read_file": allowed }))
        })
        .build()?;
    common::serve(&kernel, agent, Some(POLICY)).await?;

    let created = kernel
        .create_execution(NewExecution::new("ops", json!({})))
        .await?;
    let done = common::finish(&kernel, &created.id).await?;
    common::report(&done, &kernel.events(&done.id));
    Ok(())
}
