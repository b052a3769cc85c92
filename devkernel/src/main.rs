//! `rebuno-dev`: serve the in-memory kernel.
//!
//! ```text
//! rebuno-dev [--config FILE] [--addr HOST:PORT]
//! ```
//!
//! `REBUNO_BEARER_TOKEN`, when set, is required from clients; otherwise the kernel runs in dev
//! mode (requests without `Authorization` are admitted). `RUST_LOG` sets the log filter.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use rebuno_devkernel::{DevKernel, Manifest};

const USAGE: &str = "usage: rebuno-dev [--config FILE] [--addr HOST:PORT]";

#[derive(Debug)]
struct Args {
    config: Option<PathBuf>,
    addr: SocketAddr,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args {
        config: None,
        addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
    };
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_owned(), Some(value.to_owned())),
            None => (arg, None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or(format!("{name} needs a value"))
        };
        match flag.as_str() {
            "--config" | "-c" => parsed.config = Some(PathBuf::from(value("--config")?)),
            "--addr" | "-a" => {
                let text = value("--addr")?;
                parsed.addr = text
                    .parse()
                    .map_err(|e| format!("bad --addr {text:?}: {e}"))?;
            }
            "--help" | "-h" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(parsed)
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            tracing::error!("{message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let mut builder = DevKernel::builder()
        .addr(args.addr)
        .bearer_token(std::env::var("REBUNO_BEARER_TOKEN").ok());
    if let Some(path) = &args.config {
        let manifest = Manifest::load(path).map_err(|e| e.to_string())?;
        for agent in manifest.agents {
            tracing::info!(agent = agent.id(), "provisioning agent");
            builder = builder.agent(agent);
        }
    }
    let kernel = builder.start().await.map_err(|e| e.to_string())?;
    tracing::info!(url = %kernel.url(), "rebuno dev kernel ready");
    tokio::signal::ctrl_c().await.map_err(|e| e.to_string())?;
    tracing::info!("shutting down");
    kernel.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<Args, String> {
        parse_args(list.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn parses_flags() {
        let parsed = args(&["--config", "dev.yaml", "--addr=0.0.0.0:9000"]).unwrap();
        assert_eq!(parsed.config, Some(PathBuf::from("dev.yaml")));
        assert_eq!(parsed.addr, "0.0.0.0:9000".parse().unwrap());
        assert_eq!(args(&[]).unwrap().addr, "127.0.0.1:8080".parse().unwrap());
        assert!(args(&["--bogus"]).is_err());
        assert!(args(&["--addr"]).is_err());
    }
}
