//! `rebuno-dev`: serve the in-memory kernel, or talk to a running one.
//!
//! ```text
//! rebuno-dev [serve] [--config FILE] [--addr HOST:PORT] [--data-dir DIR]
//!            [--dispatch-max-attempts N] [--dispatch-base-delay D] [--dispatch-max-delay D]
//! rebuno-dev exec create <agent> ['<json>'] [--session S] [--watch]
//! rebuno-dev exec list|get|events|timeline|export|cancel|redeliver ...
//! rebuno-dev approvals list|grant|deny ...
//! ```
//!
//! Serving: `REBUNO_BEARER_TOKEN`, when set, is required from clients; otherwise the kernel
//! runs in dev mode (requests without `Authorization` are admitted). As with the Go kernel's
//! `rebuno dev`, `REBUNO_DISPATCH_CONCURRENCY` (a positive count, default 8) bounds the webhook
//! deliveries in flight and `REBUNO_RETENTION` (a Go duration, default `24h`; `0` keeps
//! everything) is how long ended executions are kept. Delivery retries: `--dispatch-max-attempts`
//! (`REBUNO_DISPATCH_MAX_ATTEMPTS`, as Go's), `--dispatch-base-delay` and
//! `--dispatch-max-delay` (`REBUNO_DISPATCH_BASE_DELAY`, `REBUNO_DISPATCH_MAX_DELAY`), then the
//! manifest's `dispatch_*` keys; a bad value is refused. `RUST_LOG` sets the log filter.
//! Client commands: `--url`/`REBUNO_URL`, `--token`/`REBUNO_API_KEY`, in any
//! position; `--help` on any command group. Exit status: 0 success, 1 failure (a kernel
//! error, an unreachable kernel, a watched execution that did not complete, or serving that
//! could not start), 2 usage error.

/// Go's duration syntax, the same parser the policy language uses.
#[path = "policy/duration.rs"]
mod go;

use std::process::ExitCode;

use rebuno_devkernel::cli::{self, Command, ServeArgs};
use std::time::Duration;

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
    builder = retry.apply(builder).map_err(|e| e.to_string())?;
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
