//! A lead agent whose tool runs a `researcher` subagent per topic, concurrently. The lead
//! suspends while the subagents work and replays their outputs when it reruns.
//!
//! Run with: `cargo run --example researcher`

#[path = "common/mod.rs"]
mod common;

use rebuno::{HandlerError, Subagent, define_tool, execution};
use rebuno_devkernel::{DevKernel, NewExecution};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Serialize, Deserialize)]
struct Topic {
    topic: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    rebuno_hyper::init_logging(); // RUST_LOG, info by default
    let kernel = DevKernel::start().await?;

    let researcher = common::agent(&kernel, "researcher")
        .handler(|input: Topic| async move {
            let turn = rebuno::previous().await?["turns"].as_u64().unwrap_or(0) + 1;
            execution()?.set_state(json!({ "turns": turn }))?;
            Ok::<_, HandlerError>(json!({ "topic": input.topic, "summary": format!("notes on {}", input.topic), "turn": turn }))
        })
        .build()?;
    common::serve(&kernel, researcher, None).await?;

    let research = define_tool("research")
        .description("Research a topic with a subagent")
        .execute(|args: Topic| async move {
            // One conversation per topic and per lead execution.
            let session = format!("researcher:{}:{}", execution()?.id(), args.topic);
            Ok::<Value, HandlerError>(
                Subagent::new("researcher", &args)
                    .session(session)
                    .run()
                    .await?,
            )
        });
    let lead = common::agent(&kernel, "lead")
        .handler_with_state(research, |research, topics: Vec<String>| async move {
            let calls = topics
                .into_iter()
                .map(|topic| research.call(Topic { topic }));
            Ok::<_, HandlerError>(futures_util::future::try_join_all(calls).await?)
        })
        .build()?;
    common::serve(&kernel, lead, None).await?;

    let created = kernel
        .create_execution(NewExecution::new("lead", json!(["leases", "replay"])))
        .await?;
    let done = common::finish(&kernel, &created.id).await?;
    common::report(&done, &kernel.events(&done.id));
    Ok(())
}
