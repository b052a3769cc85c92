//! A coding agent with a checkpointed workspace: `write_file` and `read_file` tools on a local
//! [`DirectoryWorkspace`], checkpointed after every 5 writes. A scripted stand-in for the LLM
//! (a fixed list of tool calls) keeps it offline. After the run, the example forks the
//! execution at the checkpoint taken after the fifth write: the fork starts from a fresh
//! directory restored from that snapshot, and prints what it found there.
//!
//! Run with: `cargo run --example coder` (the `dir` feature is on for examples; elsewhere,
//! `cargo run --example coder --features dir`)

#[path = "common/mod.rs"]
mod common;

use std::time::Duration;

use rebuno::resource::drivers::{DirectoryWorkspace, Workspace};
use rebuno::resource::{Checkpoints, resource};
use rebuno::{Client, HandlerError, Tool, define_tool, step};
use rebuno_devkernel::{CreateExecution, DevKernel};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Serialize, Deserialize)]
struct WriteFile {
    path: String,
    content: String,
}

#[derive(Serialize, Deserialize)]
struct ReadFile {
    path: String,
}

/// One turn of the (scripted) model: a tool call, or the final answer.
#[derive(Serialize, Deserialize)]
#[serde(tag = "tool", rename_all = "snake_case")]
enum Turn {
    WriteFile(WriteFile),
    ReadFile(ReadFile),
    Answer { text: String },
}

/// What a model would decide on turn `n`: a fixed script, so the example runs offline.
fn scripted_model(n: usize) -> Turn {
    let write = |path: &str, content: &str| {
        Turn::WriteFile(WriteFile {
            path: path.into(),
            content: content.into(),
        })
    };
    let read = |path: &str| Turn::ReadFile(ReadFile { path: path.into() });
    let script = [
        write("Cargo.toml", "[package]\nname = \"fizzbuzz\"\n"),
        write("src/lib.rs", "pub fn fizz(n: u32) -> bool { n % 3 == 0 }\n"),
        read("src/lib.rs"),
        write(
            "src/main.rs",
            "fn main() { println!(\"{}\", fizzbuzz::fizz(3)); }\n",
        ),
        write("README.md", "# fizzbuzz\n"),
        write(
            "tests/fizz.rs",
            "#[test] fn three() { assert!(fizzbuzz::fizz(3)); }\n",
        ),
        // ↑ the fifth write: a checkpoint covers the workspace from here.
        write(
            "src/lib.rs",
            "pub fn fizz(n: u32) -> bool { n % 3 == 0 && n > 0 }\n",
        ),
        write(".gitignore", "target/\n"),
        read("src/lib.rs"),
    ];
    script.into_iter().nth(n).unwrap_or(Turn::Answer {
        text: "fizzbuzz is ready".into(),
    })
}

/// The `write_file` tool: it changes the workspace, so it declares it.
fn write_file(workspace: &Workspace) -> Tool<WriteFile, String> {
    let workspace = workspace.clone();
    define_tool("write_file")
        .description("Write a file in the workspace.")
        .resources(["workspace"])
        .execute(move |args: WriteFile| {
            let workspace = workspace.clone();
            async move {
                workspace.write(&args.path, &args.content)?;
                Ok::<_, HandlerError>(format!("wrote {}", args.path))
            }
        })
}

/// The `read_file` tool: it only reads.
fn read_file(workspace: &Workspace) -> Tool<ReadFile, String> {
    let workspace = workspace.clone();
    define_tool("read_file")
        .description("Read a file from the workspace.")
        .execute(move |args: ReadFile| {
            let workspace = workspace.clone();
            async move { Ok::<_, HandlerError>(workspace.read_to_string(&args.path)?) }
        })
}

/// The coder: asks the model for a turn (a recorded step, as an LLM call would be) and runs
/// the tool it picks, until it answers.
async fn coder(driver: DirectoryWorkspace, task: String) -> Result<Value, HandlerError> {
    let workspace = resource("workspace", driver, Checkpoints::every(5)).await?;
    let restored = workspace.list()?; // empty on a first run; a fork's restored files
    let (write, read) = (write_file(&workspace), read_file(&workspace));
    let mut transcript = vec![format!("task: {task}")];
    for n in 0.. {
        let model = || async move { Ok::<_, HandlerError>(scripted_model(n)) };
        let turn: Turn = step(&format!("model turn {n}"), model).await?;
        let observation = match turn {
            Turn::WriteFile(args) => write.call(args).await?,
            Turn::ReadFile(args) => read.call(args).await?,
            Turn::Answer { text } => {
                transcript.push(text);
                break;
            }
        };
        transcript.push(observation);
    }
    Ok(json!({
        "restored_files": restored,
        "files": workspace.list()?,
        "workspace": workspace.path(),
        "transcript": transcript,
    }))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::init_logs();
    let kernel = DevKernel::start().await?;
    let root = std::env::temp_dir().join(format!("rebuno-coder-{}", std::process::id()));
    // Every change goes through write_file, so a checkpoint stays valid until the next write.
    let driver = DirectoryWorkspace::new(&root).with_coverage_reuse(true);

    let agent = common::agent(&kernel, "coder")?;
    agent.bind(move |input: Value| {
        let driver = driver.clone();
        let task = input["task"]
            .as_str()
            .unwrap_or("write fizzbuzz")
            .to_owned();
        coder(driver, task)
    });
    common::serve(&kernel, agent, None).await?;

    let input = json!({ "task": "write fizzbuzz in Rust" });
    let created = kernel
        .create_execution(CreateExecution::new("coder", input))
        .await?;
    let done = common::finish(&kernel, created.id).await?;
    common::report(&done, &kernel.events(done.id));

    // Fork where the checkpoint taken after the fifth write starts covering the workspace.
    let client = Client::builder().base_url(kernel.url()).build()?;
    let id = done.id.to_string();
    let points = client.fork_points(&id).await?;
    println!("\ncheckpoints:");
    for checkpoint in &points.checkpoints {
        println!(
            "  {} covers from seq {}: {}",
            checkpoint.key, checkpoint.covered_seq, checkpoint.checkpoint_ref
        );
    }
    let at = points
        .checkpoints
        .get(1) // [0] is the baseline of the empty workspace
        .ok_or("no checkpoint after the fifth write")?
        .covered_seq;
    let fork = client.fork(&id, at, None, None).await?;
    println!("\nforked at seq {at} as {}", fork.id);
    if let Some(restoration) = &fork.restoration {
        println!("restoration: {restoration}");
    }
    let forked = client.wait(&fork.id, Duration::from_secs(30)).await?;
    let output = forked.output.unwrap_or_default();
    println!(
        "fork {:?}, workspace {}",
        forked.status, output["workspace"]
    );
    println!("the fork's restored workspace:");
    for file in output["restored_files"].as_array().into_iter().flatten() {
        println!("  {}", file.as_str().unwrap_or_default());
    }
    println!("after the fork's run: {}", output["files"]);

    let _ = std::fs::remove_dir_all(&root);
    Ok(())
}
