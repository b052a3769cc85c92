//! MCP tools under policy: an agent works in a directory through the reference filesystem MCP
//! server (`@modelcontextprotocol/server-filesystem`, over stdio). Reads run freely; the policy
//! holds every write until someone grants it through `rebuno::client::Client`. The execution blocks,
//! then resumes: the reads replay from the record and the write runs exactly once.
//!
//! Run with (offline after the setup script has installed the pinned servers):
//!
//! ```sh
//! tests/integration/mcp/setup.sh
//! cargo run --example mcp_files
//! ```

#[path = "common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rebuno::client::Client;
use rebuno::mcp::McpOptions;
use rebuno::mcp::rmcp::McpClient;
use rebuno::{DynTool, HandlerError, Idempotency};
use rebuno_devkernel::DevKernel;
use serde_json::{Value, json};

const POLICY: &str = r#"
default_action: allow
rules:
  - id: writes-need-a-human
    when: { targets: [fs_write_file, fs_edit_file, fs_move_file, fs_create_directory] }
    then:
      decision: require_approval
      approval_config: { approvers: [alice], message: "The agent wants to change a file", timeout: 10m }
"#;

/// The tools the agent uses, by id.
#[derive(Clone)]
struct Files {
    list: Arc<dyn DynTool>,
    read: Arc<dyn DynTool>,
    write: Arc<dyn DynTool>,
}

impl Files {
    fn pick(tools: Vec<rebuno::Tool<Value, Value>>) -> Result<Self, String> {
        let find = |id: &str| {
            tools
                .iter()
                .find(|t| t.name() == id)
                .map(|t| t.clone().into_dyn())
                .ok_or_else(|| format!("the filesystem server has no {id}"))
        };
        Ok(Self {
            list: find("fs_list_directory")?,
            read: find("fs_read_text_file")?,
            write: find("fs_write_file")?,
        })
    }

    /// Lists the directory, reads the notes, and writes a summary (which needs approval).
    async fn summarize(self, dir: String) -> Result<Value, HandlerError> {
        let listing = self.list.call_json(json!({ "path": dir })).await?;
        let notes = self
            .read
            .call_json(json!({ "path": format!("{dir}/notes.txt"), "head": null }))
            .await?;
        let text = notes["content"].as_str().unwrap_or_default();
        let summary = format!(
            "{} lines; first: {}",
            text.lines().count(),
            text.lines().next().unwrap_or("")
        );
        let written = self
            .write
            .call_json(json!({ "path": format!("{dir}/summary.txt"), "content": summary }))
            .await?;
        Ok(json!({ "listing": listing, "summary": summary, "written": written }))
    }
}

fn server_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "tests/integration/mcp/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js",
    )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    rebuno_hyper::init_logging(); // RUST_LOG, info by default
    let script = server_script();
    if !script.is_file() {
        return Err(format!(
            "{} is missing: run tests/integration/mcp/setup.sh first",
            script.display()
        )
        .into());
    }
    let dir = std::env::temp_dir().join(format!("rebuno-mcp-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let dir = dir.canonicalize()?;
    std::fs::write(
        dir.join("notes.txt"),
        "ship the MCP tools\nwrite the docs\n",
    )?;

    let mut server = tokio::process::Command::new("node");
    server.arg(&script).arg(&dir).kill_on_drop(true);
    let mcp = McpClient::stdio(server)
        .await?
        .timeout(Duration::from_secs(30));
    let options =
        McpOptions::new()
            .prefix("fs")
            .idempotency_with(|spec| match spec.name.as_str() {
                "write_file" | "edit_file" | "move_file" | "create_directory" => {
                    Idempotency::AtMostOnce
                }
                _ => Idempotency::SafeToRetry,
            });
    let files = Files::pick(mcp.tools(&options).await?)?;
    println!("filesystem MCP server on {}", dir.display());

    let kernel = DevKernel::start().await?;
    let agent = common::agent(&kernel, "librarian")
        .handler_with_state(files, |files: Files, dir: String| files.summarize(dir))
        .build()?;
    common::serve(&kernel, agent, Some(POLICY)).await?;

    let client = Client::builder().base_url(kernel.url()).build()?;
    let created = client
        .create("librarian")
        .input(json!(dir.display().to_string()))
        .send()
        .await?;
    let approval = loop {
        if let Some(approval) = client.approvals().send().await?.into_iter().next() {
            break approval;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!(
        "blocked on approval {} ({:?}); summary.txt exists: {}; granting as alice",
        approval.id,
        approval.message,
        dir.join("summary.txt").exists()
    );
    client
        .grant(&approval.id)
        .by("alice")
        .rationale("looks fine")
        .send()
        .await?;

    let done = client.wait(&created.id, Duration::from_secs(30)).await?;
    common::report(&done, &kernel.events(&done.id));
    println!(
        "\nsummary.txt: {:?}",
        std::fs::read_to_string(dir.join("summary.txt"))?
    );
    mcp.close().await;
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
