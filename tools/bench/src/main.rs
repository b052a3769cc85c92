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
//! kernel (pinned setup) or through `rebuno::client::Client` (deployed setup) and reads the
//! agent process's own CPU time, memory and context switches from `/proc` and its allocation
//! counters over its stdin. Every comparison runs interleaved, several times, and the medians
//! are printed. `--help` lists the options.

mod ack;
mod agent;
mod alloc_count;
mod bench;
mod control;
mod delay;
mod deployed;
mod floor;
mod gaps;
mod kernel;
mod llm;
mod measure;
mod options;
mod proc;
mod report;
// The campaign's parser, one copy for both tool crates.
#[path = "../../campaign/src/rfc3339.rs"]
#[allow(unreachable_pub)] // `pub` in the campaign library, where it is exported
mod rfc3339;
mod scale;
mod spawn;
mod stats;

use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use tokio::io::AsyncBufReadExt as _;

/// Answers every `stats` line on this process's stdin with one JSON line on stdout,
/// `{"allocs":N,"bytes":B}` (this process's allocation counters, [`alloc_count`]); resolves
/// when stdin reaches its end (the driver closed it or went away).
pub(crate) async fn stdin_closed() {
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if line.trim() == "stats" {
            // `println!` flushes at the newline: the driver reads the line at once.
            println!("{}", alloc_count::stats_line());
        }
    }
}

/// The Tokio runtime of a role: multi-thread (one worker per available CPU, what
/// `#[tokio::main]` gives) unless `current` asks for a current-thread one.
fn runtime(current: bool) -> Result<tokio::runtime::Runtime> {
    let mut builder = if current {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    builder
        .enable_all()
        .build()
        .context("building the Tokio runtime")
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
    match role {
        "kernel" => runtime(false)?.block_on(kernel::run()),
        "scale" => runtime(false)?.block_on(scale::run(&args[1..])),
        "agent" | "floor" => {
            let (Some(url), Some(secret)) = (args.get(1), args.get(2)) else {
                bail!("usage: rebuno-bench {role} KERNEL_URL SECRET [multi|current]");
            };
            let runtime = match args.get(3).map(String::as_str) {
                None | Some("multi") => runtime(false)?,
                Some("current") => runtime(true)?,
                Some(other) => bail!("unknown runtime {other:?} (multi, current)"),
            };
            if role == "agent" {
                runtime.block_on(agent::run(url, secret))
            } else {
                runtime.block_on(floor::run(url, secret))
            }
        }
        "-h" | "--help" | "help" => {
            println!("{}", options::USAGE);
            Ok(())
        }
        _ => {
            let options = options::Options::parse(&args)?;
            runtime(false)?.block_on(bench::run(options))
        }
    }
}
