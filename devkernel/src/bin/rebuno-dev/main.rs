//! `rebuno-dev`: serve the in-memory kernel (the default command), or talk to a running one
//! (`exec`, `approvals`). `rebuno-dev --help` prints every command, option, environment
//! variable and exit status (`cli::USAGE`). Serving without `REBUNO_BEARER_TOKEN` runs the
//! kernel in dev mode (requests without `Authorization` are admitted), as `rebuno dev` does.

mod cli;
/// Go's duration syntax, the same parser the policy language uses.
#[path = "../../policy/duration.rs"]
mod go;
/// RFC 3339 times, the kernel's own reader (the timeline's axis); the binary only reads them.
#[path = "../../model/time.rs"]
#[allow(dead_code)]
mod time;

use std::process::ExitCode;
use std::time::Duration;

use cli::{Command, ServeArgs};

use rebuno_devkernel::{DevKernel, DevKernelBuilder, Manifest};

fn init_tracing(default: &str) {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default)),
        )
        .init();
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = cli::usage_for(&args);
    let command = match cli::parse(args, |name| std::env::var(name).ok()) {
        Ok(command) => command,
        Err(error) => {
            eprintln!("rebuno-dev: {error}\n\n{usage}");
            return ExitCode::from(error.exit_code());
        }
    };
    if let Command::Serve(args) = command {
        init_tracing("info");
        return match serve(args).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(message) => {
                tracing::error!("{message}");
                ExitCode::FAILURE
            }
        };
    }
    init_tracing("warn");
    let code = cli::execute(command, &mut std::io::stdout(), &mut std::io::stderr()).await;
    ExitCode::from(code)
}

async fn serve(args: ServeArgs) -> Result<(), String> {
    let mut builder = from_env(DevKernel::builder())
        .addr(args.addr)
        .bearer_token(std::env::var("REBUNO_BEARER_TOKEN").ok());
    if let Some(dir) = &args.data_dir {
        tracing::info!(dir = %dir.display(), "event log and registry persisted");
        builder = builder.data_dir(dir);
    }
    let mut retry = args.dispatch;
    if let Some(path) = &args.config {
        let manifest = Manifest::load(path).map_err(|e| e.to_string())?;
        retry = retry.or(manifest.dispatch);
        for agent in manifest.agents {
            tracing::info!(agent = agent.id(), "provisioning agent");
            builder = builder.agent(agent);
        }
    }
    builder = builder.dispatch_retry(retry).map_err(|e| e.to_string())?;
    let kernel = builder.start().await.map_err(|e| e.to_string())?;
    tracing::info!(url = %kernel.url(), "rebuno dev kernel ready");
    tokio::signal::ctrl_c().await.map_err(|e| e.to_string())?;
    tracing::info!("shutting down");
    kernel.shutdown().await;
    Ok(())
}

/// The settings `rebuno dev` also takes from its environment: the delivery pool and retention.
/// A value that does not parse is ignored (with a warning), as the Go kernel ignores it.
fn from_env(mut builder: DevKernelBuilder) -> DevKernelBuilder {
    if let Ok(text) = std::env::var("REBUNO_DISPATCH_CONCURRENCY") {
        match text.trim().parse::<usize>() {
            Ok(workers) if workers > 0 => builder = builder.dispatch_concurrency(workers),
            _ => tracing::warn!(value = %text, "REBUNO_DISPATCH_CONCURRENCY ignored"),
        }
    }
    if let Ok(text) = std::env::var("REBUNO_RETENTION") {
        match go_duration(&text) {
            Some(retention) => builder = builder.execution_retention(retention),
            None => tracing::warn!(value = %text, "REBUNO_RETENTION ignored"),
        }
    }
    builder
}

/// A duration in Go's `time.ParseDuration` syntax (`24h`, `1h30m`, `90s`, `0`); a negative
/// one is zero (retention off, as Go's `retain <= 0`).
fn go_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    match text.strip_prefix('-') {
        Some(rest) => go::parse_go_duration(rest).map(|_| Duration::ZERO),
        None => go::parse_go_duration(text.strip_prefix('+').unwrap_or(text)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_reads_go_durations() {
        assert_eq!(go_duration("24h"), Some(Duration::from_secs(24 * 3600)));
        assert_eq!(go_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(go_duration("0"), Some(Duration::ZERO));
        assert_eq!(go_duration("-1h"), Some(Duration::ZERO));
        assert_eq!(go_duration("24"), None);
        assert_eq!(go_duration("1d"), None);
        assert_eq!(go_duration(""), None);
    }
}
