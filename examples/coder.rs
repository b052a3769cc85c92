//! The seeds' coding agent, ported: `write_file`, `read_file` and `run` tools on an E2B sandbox
//! ([`E2bSandbox`]), checkpointed by E2B snapshots every 5 affecting steps, driven by a chat
//! model whose every call is a durable `llm_call` step (through `rebuno::llm::fetch`). After the
//! run, the example forks the execution at the checkpoint taken after the fifth write: the fork
//! starts in a new sandbox created from that snapshot, replays the recorded model calls before
//! the fork point, and prints what it found.
//!
//! **Where the sandboxes are.** With `E2B_API_KEY` set, in E2B's cloud (`E2B_DOMAIN`,
//! `E2B_API_URL` and `E2B_SANDBOX_URL` are honoured as E2B's SDKs honour them; build with
//! `--features rustls`, a default, for https). Otherwise in a local E2B stand-in started
//! in-process (`tools/e2b-standin`: real directories and processes on this machine), so the
//! example runs offline.
//!
//! **Which model.** Any OpenAI-compatible chat-completions endpoint with tool calling when
//! `LLM_BASE_URL` (and `LLM_MODEL`) are set (`OPENAI_API_KEY` is sent as a bearer token when
//! set). Otherwise a scripted model on loopback.
//!
//! Run with: `cargo run --example coder` (the `e2b` feature is on for examples; elsewhere,
//! `cargo run --example coder --features e2b`).
//!
//! # From the seeds' TypeScript to this Rust
//!
//! | seeds (TypeScript) | here |
//! |---|---|
//! | `new E2BResource(600_000)`, a driver written by the user over `e2b`'s `Sandbox` | `E2bSandbox::from_env()?.timeout(Duration::from_secs(600))`, shipped (feature `e2b`) |
//! | `driverId = "example.e2b.v1"`, configuration `{ timeoutMs }` | `"rebuno.e2b.v1"`, configuration `{ template, timeout_ms }` |
//! | `checkpoints: { everySteps: 5 }` | `Checkpoints::every(5)` (also on completion, as the seeds' policy default) |
//! | `checkpoint`: `createSnapshot()` then `Sandbox.connect(id)` to refresh the handle | the same two calls; every clone of the handle sees the refreshed connection |
//! | `CheckpointUnavailable` when `Sandbox.create(ref)` answers 404 | the same, from the driver |
//! | the Vercel AI SDK's `generateText` loop, `stopWhen: stepCountIs(12)` | a plain loop over chat completions, at most `MAX_TURNS` model calls |
//! | `workspace.files.write/read` | `workspace.write(path, content)`, `workspace.read_to_string(path)` (async) |
//! | no command tool | a `run` tool: `workspace.run(Command::new(cmd))`, a non-zero exit is an output the model reads, not an error |
//! | a sandbox idle while the execution waits | `.pause_while_waiting(true)`: paused when the execution waits (an approval, subagents), resumed by the next delivery's `open` |
//! | a sandbox left running after the execution until its timeout | the same by default; `.kill_when_done(true)` deletes it once the execution completed, failed or was cancelled |
//! | the API key from `E2B_API_KEY` | the same; on Workers from a secret (`E2bSandbox::new(env.secret("E2B_API_KEY")?.to_string())`) |

#[path = "common/mod.rs"]
mod common;
#[path = "common/model.rs"]
mod model;

use std::sync::Arc;
use std::time::Duration;

use model::Reply;
use rebuno::client::Client;
use rebuno::resource::drivers::{E2bSandbox, RunOptions, Sandbox};
use rebuno::resource::{Checkpoints, resource};
use rebuno::{DynTool, HandlerError, Tool, define_tool};
use rebuno_devkernel::{DevKernel, NewExecution};
use rebuno_e2b_standin::{E2bStandin, StandinConfig};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Serialize, Deserialize, schemars::JsonSchema)]
struct WriteFile {
    path: String,
    content: String,
}

#[derive(Serialize, Deserialize, schemars::JsonSchema)]
struct ReadFile {
    path: String,
}

#[derive(Serialize, Deserialize, schemars::JsonSchema)]
struct Run {
    /// A shell command, run in the sandbox's home directory.
    command: String,
}

/// What the scripted stand-in decides on turn `n` (when no real model is configured).
fn script(n: usize) -> Reply {
    let write = |path: &str, content: &str| {
        Reply::Tool("write_file", json!({ "path": path, "content": content }))
    };
    let read = |path: &str| Reply::Tool("read_file", json!({ "path": path }));
    let run = |command: &str| Reply::Tool("run", json!({ "command": command }));
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
        // ↑ the fifth write: a snapshot covers the sandbox from here.
        run("grep -c 'fn ' src/lib.rs src/main.rs tests/fizz.rs"),
        write(
            "src/lib.rs",
            "pub fn fizz(n: u32) -> bool { n % 3 == 0 && n > 0 }\n",
        ),
        run("ls -a && cat src/lib.rs"),
    ];
    script
        .into_iter()
        .nth(n)
        .unwrap_or(Reply::Text("fizzbuzz is ready"))
}

/// Where the model is.
#[derive(Clone)]
struct Model(model::Endpoint);

impl Model {
    /// One chat completion offering `tools`: a durable `llm_call` step. Returns the assistant
    /// message.
    async fn complete(
        &self,
        messages: &[Value],
        tools: &[Arc<dyn DynTool>],
    ) -> Result<Value, HandlerError> {
        let body =
            json!({ "model": self.0.name, "messages": messages, "tools": function_specs(tools) });
        let mut request = http::Request::post(format!("{}/chat/completions", self.0.base_url))
            .header(http::header::CONTENT_TYPE, "application/json");
        if let Some(key) = &self.0.api_key {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {key}"));
        }
        let response = rebuno::llm::fetch(request.body(body.to_string().into())?).await?;
        let status = response.status();
        let text = response.into_body().text().await?;
        if !status.is_success() {
            return Err(format!("the model answered {status}: {text}").into());
        }
        let completion: Value = serde_json::from_str(&text)?;
        Ok(completion["choices"][0]["message"].clone())
    }
}

/// The tools as the model sees them (OpenAI function calling), from their own specs.
fn function_specs(tools: &[Arc<dyn DynTool>]) -> Value {
    let functions = tools.iter().map(|tool| {
        let spec = tool.spec();
        json!({ "type": "function", "function": {
            "name": spec.name, "description": spec.description, "parameters": spec.input_schema,
        } })
    });
    Value::Array(functions.collect())
}

/// The `write_file` tool: it changes the sandbox, so it declares it.
fn write_file(workspace: &Sandbox) -> Tool<WriteFile, String> {
    let workspace = workspace.clone();
    define_tool("write_file")
        .description("Write a file in the workspace.")
        .input_schema_for::<WriteFile>()
        .resources(["workspace"])
        .execute(move |args: WriteFile| {
            let workspace = workspace.clone();
            async move {
                workspace.write(&args.path, &args.content).await?;
                Ok::<_, HandlerError>(format!("wrote {}", args.path))
            }
        })
}

/// The `read_file` tool: it only reads.
fn read_file(workspace: &Sandbox) -> Tool<ReadFile, String> {
    let workspace = workspace.clone();
    define_tool("read_file")
        .description("Read a file from the workspace.")
        .input_schema_for::<ReadFile>()
        .execute(move |args: ReadFile| {
            let workspace = workspace.clone();
            async move { Ok::<_, HandlerError>(workspace.read_to_string(&args.path).await?) }
        })
}

/// The `run` tool: a command may change anything, so it declares the sandbox. A non-zero exit
/// is an answer for the model, not a failed step.
fn run(workspace: &Sandbox) -> Tool<Run, String> {
    let workspace = workspace.clone();
    define_tool("run")
        .description("Run a shell command in the workspace; returns its exit code and output.")
        .input_schema_for::<Run>()
        .resources(["workspace"])
        .execute(move |args: Run| {
            let workspace = workspace.clone();
            async move {
                let options = RunOptions::new().timeout(Duration::from_secs(120));
                let out = workspace.run_with(&args.command, options).await?;
                Ok::<_, HandlerError>(format!(
                    "exit code {}\n{}{}",
                    out.exit_code, out.stdout, out.stderr
                ))
            }
        })
}

/// The files under the sandbox's home, for the report (read directly, not a recorded step).
async fn files(workspace: &Sandbox) -> Result<Vec<String>, HandlerError> {
    let listed = workspace
        .run("find . -type f -not -path './.*' | sort")
        .await?;
    Ok(listed.stdout.lines().map(str::to_owned).collect())
}

/// The coder: asks the model what to do and runs the tools it calls, until it answers.
async fn coder(driver: E2bSandbox, model: Model, task: String) -> Result<Value, HandlerError> {
    let workspace = resource("workspace", driver, Checkpoints::every(5)).await?;
    let restored = files(&workspace).await?; // empty on a first run; a fork's restored files
    let tools = [
        write_file(&workspace).into_dyn(),
        read_file(&workspace).into_dyn(),
        run(&workspace).into_dyn(),
    ];
    let mut messages = vec![
        json!({ "role": "system", "content": "You write code with the tools you have. Answer briefly when done." }),
        json!({ "role": "user", "content": task }),
    ];
    let mut transcript = Vec::new();
    for _ in 0..MAX_TURNS {
        let message = model.complete(&messages, &tools).await?;
        messages.push(message.clone());
        let Some(calls) = message["tool_calls"].as_array().filter(|c| !c.is_empty()) else {
            transcript.push(message["content"].as_str().unwrap_or_default().to_owned());
            break;
        };
        for call in calls {
            let observation = call_tool(&tools, call).await?;
            transcript.push(observation.clone());
            messages.push(
                json!({ "role": "tool", "tool_call_id": call["id"], "content": observation }),
            );
        }
    }
    Ok(json!({
        "restored_files": restored,
        "files": files(&workspace).await?,
        "sandbox": workspace.sandbox_id(),
        "transcript": transcript,
    }))
}

/// Runs the tool a model's `call` names; a policy denial comes back as text the model can
/// read, not as a failed run.
async fn call_tool(tools: &[Arc<dyn DynTool>], call: &Value) -> Result<String, HandlerError> {
    let arguments = call["function"]["arguments"].as_str().unwrap_or("{}");
    let name = call["function"]["name"].as_str().unwrap_or_default();
    let Some(tool) = tools.iter().find(|tool| tool.spec().name == name) else {
        return Ok(format!("no tool named {name:?}"));
    };
    Ok(
        match tool.call_json(serde_json::from_str(arguments)?).await? {
            Value::String(text) => text,
            other => other.to_string(),
        },
    )
}

/// The most model calls one run makes.
const MAX_TURNS: usize = 30;

/// E2B's cloud when `E2B_API_KEY` is set; else a stand-in on loopback (kept alive by the
/// returned guard).
fn sandboxes() -> Result<(E2bSandbox, Option<E2bStandin>), Box<dyn std::error::Error>> {
    let lifetime = Duration::from_secs(600);
    if std::env::var_os("E2B_API_KEY").is_some() {
        return Ok((E2bSandbox::from_env()?.timeout(lifetime), None));
    }
    let root = std::env::temp_dir().join(format!("rebuno-coder-e2b-{}", std::process::id()));
    let standin = E2bStandin::start(StandinConfig::new(&root, "e2b_offline_example_key"))?;
    let driver = E2bSandbox::new(standin.api_key())
        .api_url(standin.url())
        .sandbox_url(standin.url())
        .timeout(lifetime);
    Ok((driver, Some(standin)))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    rebuno_hyper::init_logging(); // RUST_LOG, info by default
    let kernel = DevKernel::start().await?;
    let (driver, standin) = sandboxes()?;
    match &standin {
        Some(standin) => println!("sandboxes: a local E2B stand-in at {}", standin.url()),
        None => println!("sandboxes: E2B (E2B_API_KEY is set)"),
    }
    // Every change goes through write_file and run, so a snapshot stays valid until the next;
    // the fork below starts from a snapshot, so the finished run's sandbox can go.
    let driver = driver.with_coverage_reuse(true).kill_when_done(true);

    let model = Model(model::endpoint(script).await?);
    println!("model: {} at {}", model.0.name, model.0.base_url);

    let agent = common::agent(&kernel, "coder")
        .handler_with_state((driver, model), |(driver, model), input: Value| {
            let task = input["task"]
                .as_str()
                .unwrap_or("write fizzbuzz")
                .to_owned();
            coder(driver, model, task)
        })
        .build()?;
    common::serve(&kernel, agent, None).await?;

    let input = json!({ "task": "write fizzbuzz in Rust" });
    let created = kernel
        .create_execution(NewExecution::new("coder", input))
        .await?;
    let done = common::finish(&kernel, &created.id).await?;
    common::report(&done, &kernel.events(&done.id));
    fork_after_fifth_write(&kernel, &done.id.to_string()).await?;
    if let Some(standin) = standin {
        let root = standin.root().to_owned();
        standin.shutdown().await;
        let _ = std::fs::remove_dir_all(root);
    }
    Ok(())
}

/// Forks `id` where the snapshot taken after the fifth write starts covering the sandbox, and
/// prints what the fork's new sandbox held when it started.
async fn fork_after_fifth_write(
    kernel: &DevKernel,
    id: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::builder().base_url(kernel.url()).build()?;
    let points = client.fork_points(id).await?;
    println!("\ncheckpoints (E2B snapshots):");
    for checkpoint in &points.checkpoints {
        println!(
            "  {} covers from seq {}: {}",
            checkpoint.key, checkpoint.covered_seq, checkpoint.checkpoint_ref
        );
    }
    let at = points
        .checkpoints
        .get(1) // [0] is the baseline of the empty sandbox
        .ok_or("no checkpoint after the fifth write")?
        .covered_seq;
    let fork = client.fork(id, at).send().await?;
    println!("\nforked at seq {at} as {}", fork.id);
    if let Some(restoration) = &fork.restoration {
        println!("restoration: {restoration}");
    }
    let forked = client.wait(&fork.id, Duration::from_secs(60)).await?;
    let output = forked.output.unwrap_or_default();
    println!("fork {:?}, sandbox {}", forked.status, output["sandbox"]);
    println!("the fork's sandbox, created from the snapshot, held:");
    for file in output["restored_files"].as_array().into_iter().flatten() {
        println!("  {}", file.as_str().unwrap_or_default());
    }
    println!("after the fork's run: {}", output["files"]);
    Ok(())
}
