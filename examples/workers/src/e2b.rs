//! The E2B path: a sandbox as the execution's `workspace` resource, driven through the Workers
//! fetch, with files written and a command run by declared tools.

use std::time::Duration;

use rebuno::resource::drivers::{E2bSandbox, RunOptions, Sandbox};
use rebuno::resource::{Checkpoints, resource};
use rebuno::{HandlerError, Secret, Tool, define_tool};
use serde::{Deserialize, Serialize};

/// What the sandbox did: its id, and the command's exit code and output.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Worked {
    pub(crate) sandbox: String,
    pub(crate) exit_code: i32,
    pub(crate) stdout: String,
}

/// Opens the execution's sandbox on the E2B API at `url` (the same URL for envd, as a local
/// stand-in serves both; leave both unset for E2B's cloud), checkpointed after every 2
/// affecting steps and paused while the execution waits on an approval, subagents or a rate
/// limit: writes `files` with the `write_file` tool, then runs `command` with the `run` tool.
///
/// A re-delivery reopens the recorded sandbox (resuming it if it was paused) and replays the
/// recorded calls without sending them again.
pub(crate) async fn work_in_sandbox(
    key: Option<Secret>,
    url: &str,
    files: &[(String, String)],
    command: &str,
) -> Result<Worked, HandlerError> {
    let key = key.ok_or("the E2B path needs the secret E2B_API_KEY")?;
    let driver = E2bSandbox::new(key)
        .api_url(url)
        .sandbox_url(url)
        .transport(rebuno_workers::FetchTransport::new())
        .pause_while_waiting(true);
    let workspace = resource("workspace", driver, Checkpoints::every(2)).await?;
    let write = write_file(&workspace);
    for (path, content) in files {
        write.call((path.clone(), content.clone())).await?;
    }
    let (exit_code, stdout) = run(&workspace).call(command.to_owned()).await?;
    Ok(Worked {
        sandbox: workspace.sandbox_id().to_owned(),
        exit_code,
        stdout,
    })
}

/// Writes `(path, content)` into the sandbox: it changes the sandbox, so it declares it.
fn write_file(workspace: &Sandbox) -> Tool<(String, String), String> {
    let workspace = workspace.clone();
    define_tool("write_file").resources(["workspace"]).execute(
        move |(path, content): (String, String)| {
            let workspace = workspace.clone();
            async move {
                workspace.write(&path, &content).await?;
                Ok::<_, HandlerError>(format!("wrote {path}"))
            }
        },
    )
}

/// Runs a shell command in the sandbox: `(exit code, stdout)`.
fn run(workspace: &Sandbox) -> Tool<String, (i32, String)> {
    let workspace = workspace.clone();
    define_tool("run")
        .resources(["workspace"])
        .execute(move |command: String| {
            let workspace = workspace.clone();
            async move {
                let options = RunOptions::new().timeout(Duration::from_secs(20));
                let out = workspace.run_with(&command, options).await?;
                Ok::<_, HandlerError>((out.exit_code, out.stdout))
            }
        })
}
