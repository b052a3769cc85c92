//! `rebuno-bench`: the performance benchmark of rebuno-rs (see BENCHMARKS.md at the
//! repository root). Not part of the test suite.
//!
//! ```text
//! cargo run --release -p rebuno-bench -- [all|live|replay|idle|ack|llm] [options]
//! ```
//!
//! The driver starts a dev kernel in its own process (this binary in the `kernel` role), serves
//! the agent in another (the `agent` role: rebuno + rebuno-hyper; the official Python SDK under
//! uvicorn; or the `floor` role, the protocol's bare minimum), drives the workload through the
//! kernel and reads the agent process's own CPU time and memory from `/proc`. Every comparison
//! runs interleaved, several times, and the medians are printed. `--help` lists the options.

mod ack;
mod agent;
mod bench;
mod control;
mod floor;
mod kernel;
mod llm;
mod proc;
mod stats;

use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use tokio::io::AsyncReadExt as _;

/// Resolves when this process's stdin reaches its end (the driver closed it or went away).
pub(crate) async fn stdin_closed() {
    let mut stdin = tokio::io::stdin();
    let mut buffer = [0u8; 256];
    while matches!(stdin.read(&mut buffer).await, Ok(n) if n > 0) {}
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("rebuno-bench: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let role = args.first().map(String::as_str).unwrap_or("all");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("building the Tokio runtime")?;
    match role {
        "kernel" => runtime.block_on(kernel::run()),
        "agent" | "floor" => {
            let (Some(url), Some(secret)) = (args.get(1), args.get(2)) else {
                bail!("usage: rebuno-bench {role} KERNEL_URL SECRET");
            };
            if role == "agent" {
                runtime.block_on(agent::run(url, secret))
            } else {
                runtime.block_on(floor::run(url, secret))
            }
        }
        "-h" | "--help" | "help" => {
            println!("{}", bench::USAGE);
            Ok(())
        }
        _ => {
            let options = bench::Options::parse(&args)?;
            runtime.block_on(bench::run(options))
        }
    }
}
