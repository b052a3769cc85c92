//! A coding agent with a checkpointed workspace: `write_file` and `read_file` tools on a local
//! [`DirectoryWorkspace`], checkpointed after every 5 writes, driven by a chat model whose every
//! call is a durable `llm_call` step (through `rebuno::llm::fetch`): recorded once, replayed
//! after a crash or in a fork, and subject to policy.
//!
//! The model is any OpenAI-compatible chat-completions endpoint with tool calling when
//! `LLM_BASE_URL` (and `LLM_MODEL`) are set (`OPENAI_API_KEY` is sent as a bearer token when set),
//! e.g. `LLM_BASE_URL=https://api.openai.com/v1 LLM_MODEL=gpt-4o-mini` (build with `--features
//! rustls` for https). Otherwise a scripted model is served on loopback, so the example runs
//! offline. After the run, the example forks the execution at the checkpoint taken after the
//! fifth write: the fork starts from a fresh directory restored from that snapshot, replays the
//! recorded model calls before the fork point, and prints what it found.
//!
//! Run with: `cargo run --example coder` (the `dir` feature is on for examples; elsewhere,
//! `cargo run --example coder --features dir`)

#[path = "common/mod.rs"]
mod common;
#[path = "common/model.rs"]
mod model;

use std::sync::Arc;
use std::time::Duration;

use model::Reply;
use rebuno::client::Client;
use rebuno::resource::drivers::{DirectoryWorkspace, Workspace};
use rebuno::resource::{Checkpoints, resource};
use rebuno::{DynTool, HandlerError, Tool, define_tool};
use rebuno_devkernel::{DevKernel, NewExecution};
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

/// What the scripted stand-in decides on turn `n` (when no real model is configured).
fn script(n: usize) -> Reply {
    let write = |path: &str, content: &str| {
        Reply::Tool("write_file", json!({ "path": path, "content": content }))
    };
    let read = |path: &str| Reply::Tool("read_file", json!({ "path": path }));
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

/// The `write_file` tool: it changes the workspace, so it declares it.
fn write_file(workspace: &Workspace) -> Tool<WriteFile, String> {
    let workspace = workspace.clone();
    define_tool("write_file")
        .description("Write a file in the workspace.")
        .input_schema_for::<WriteFile>()
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
        .input_schema_for::<ReadFile>()
        .execute(move |args: ReadFile| {
            let workspace = workspace.clone();
            async move { Ok::<_, HandlerError>(workspace.read_to_string(&args.path)?) }
        })
}

/// The coder: asks the model what to do and runs the tools it calls, until it answers.
async fn coder(
    driver: DirectoryWorkspace,
    model: Model,
    task: String,
) -> Result<Value, HandlerError> {
    let workspace = resource("workspace", driver, Checkpoints::every(5)).await?;
    let restored = workspace.list()?; // empty on a first run; a fork's restored files
    let tools = [
        write_file(&workspace).into_dyn(),
        read_file(&workspace).into_dyn(),
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
            let arguments = call["function"]["arguments"].as_str().unwrap_or("{}");
            let name = call["function"]["name"].as_str().unwrap_or_default();
            // A policy denial comes back as text the model can read, not as a failed run.
            let observation = match tools.iter().find(|tool| tool.spec().name == name) {
                Some(tool) => match tool.call_json(serde_json::from_str(arguments)?).await? {
                    Value::String(text) => text,
                    other => other.to_string(),
                },
                None => format!("no tool named {name:?}"),
            };
            transcript.push(observation.clone());
            messages.push(
                json!({ "role": "tool", "tool_call_id": call["id"], "content": observation }),
            );
        }
    }
    Ok(json!({
        "restored_files": restored,
        "files": workspace.list()?,
        "workspace": workspace.path(),
        "transcript": transcript,
    }))
}

/// The most model calls one run makes.
const MAX_TURNS: usize = 30;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    rebuno_hyper::init_logging(); // RUST_LOG, info by default
    let kernel = DevKernel::start().await?;
    let root = std::env::temp_dir().join(format!("rebuno-coder-{}", std::process::id()));
    // Every change goes through write_file, so a checkpoint stays valid until the next write.
    let driver = DirectoryWorkspace::new(&root).with_coverage_reuse(true);

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
    let fork = client.fork(&id, at).send().await?;
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
