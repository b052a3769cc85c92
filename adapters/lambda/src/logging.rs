//! [`init_logging`]: the one line that makes the function's logs reach CloudWatch.

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// Installs a log subscriber for the function: plain lines on stdout, which Lambda sends to
/// CloudWatch (no colours; no timestamps, CloudWatch stamps each line), at the level of
/// `AWS_LAMBDA_LOG_LEVEL` (Lambda's advanced logging controls) or else `RUST_LOG`, `info` when
/// neither is set. `cargo lambda watch` prints the same lines in its terminal.
///
/// The SDK logs through `tracing` and, being a library, never installs a subscriber itself:
/// without one, `RUST_LOG=info` shows nothing, not even a wrong secret or the warning about an
/// emulator's deadline. Call this first thing in `main`. It does nothing when the process
/// already has a global subscriber (one of yours, or one exporting over OTLP: add a
/// `tracing_subscriber::fmt::layer()` to that one instead).
///
/// `RUST_LOG` is read as a list of `target=level` directives (`info`, `rebuno=debug,warn`),
/// without `EnvFilter`'s span and field filters, whose regex engine would add about 270 KB to
/// the `bootstrap`; a value that is not such a list logs `info` and says so.
///
/// ```no_run
/// #[tokio::main(flavor = "current_thread")]
/// async fn main() -> Result<(), rebuno_lambda::Error> {
///     rebuno_lambda::init_logging(); // RUST_LOG (or AWS_LAMBDA_LOG_LEVEL), info by default
///     let agent = rebuno::Agent::builder("hello")
///         .handler(|name: String| async move { Ok::<_, rebuno::HandlerError>(format!("hello, {name}")) })
///         .build()?;
///     rebuno_lambda::run(agent).await
/// }
/// ```
pub fn init_logging() {
    let level = std::env::var("AWS_LAMBDA_LOG_LEVEL").ok();
    let rust_log = std::env::var("RUST_LOG").ok();
    let (filter, rejected) = filter(level.as_deref(), rust_log.as_deref());
    let subscriber = subscriber(filter, std::io::stdout);
    // Also forwards `log` records (rustls's). Err only when a global subscriber or logger is
    // already set: that one stays, as documented.
    if subscriber.try_init().is_ok()
        && let Some(value) = rejected
    {
        tracing::warn!(
            "RUST_LOG={value:?} is not a list of target=level directives (e.g. `info` or \
             `rebuno=debug,warn`); logging at info"
        );
    }
}

/// The filter: `AWS_LAMBDA_LOG_LEVEL` (`DEBUG`, `INFO`, ...) over `RUST_LOG` over `info`, and
/// the `RUST_LOG` value that did not parse, if it did not.
fn filter(lambda_level: Option<&str>, rust_log: Option<&str>) -> (Targets, Option<String>) {
    let info = || Targets::new().with_default(LevelFilter::INFO);
    if let Some(level) = lambda_level.and_then(|level| level.trim().parse::<LevelFilter>().ok()) {
        return (Targets::new().with_default(level), None);
    }
    match rust_log.map(str::trim).filter(|value| !value.is_empty()) {
        None => (info(), None),
        Some(value) => match value.parse::<Targets>() {
            Ok(targets) => (targets, None),
            Err(_) => (info(), Some(value.to_owned())),
        },
    }
}

/// fmt lines without colours or timestamps, written to `writer`, under `filter`.
fn subscriber<W>(filter: Targets, writer: W) -> impl tracing::Subscriber + Send + Sync + 'static
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        // `filter` decides; the builder's own default would stop everything below info.
        .with_max_level(LevelFilter::TRACE)
        .with_ansi(false)
        .without_time()
        .with_writer(writer)
        .finish()
        .with(filter)
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Logs one line at each level through the subscriber `init_logging` would install.
    fn logged(lambda_level: Option<&str>, rust_log: Option<&str>) -> String {
        let lines = Lines::default();
        let sink = lines.clone();
        let (filter, _) = filter(lambda_level, rust_log);
        let subscriber = subscriber(filter, move || sink.clone());
        tracing::subscriber::with_default(subscriber, || {
            tracing::debug!(target: "rebuno", "a debug line");
            tracing::info!(target: "rebuno", "an info line");
            tracing::warn!(target: "rebuno_lambda", "a warn line");
        });
        let bytes = lines.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[test]
    fn info_by_default_plain_lines_for_cloudwatch() {
        let text = logged(None, None);
        assert!(
            text.contains("an info line") && !text.contains("a debug line"),
            "{text}"
        );
        assert!(!text.contains('\u{1b}'), "no ANSI colours: {text:?}");
        assert!(
            text.starts_with(" INFO") || text.starts_with("INFO"),
            "no timestamp: {text:?}"
        );
    }

    #[test]
    fn rust_log_and_lambdas_log_level_are_read() {
        let warn = logged(None, Some("warn"));
        assert!(
            warn.contains("a warn line") && !warn.contains("an info line"),
            "{warn}"
        );
        assert!(logged(None, Some("rebuno=debug,warn")).contains("a debug line"));
        let lambda = logged(Some("DEBUG"), Some("warn"));
        assert!(
            lambda.contains("a debug line"),
            "AWS_LAMBDA_LOG_LEVEL wins: {lambda}"
        );
    }

    #[test]
    fn a_rust_log_that_does_not_parse_logs_info_and_is_named() {
        let (_, rejected) = filter(None, Some("rebuno[span{x=1}]=debug"));
        assert_eq!(rejected.as_deref(), Some("rebuno[span{x=1}]=debug"));
        assert!(logged(None, Some("rebuno[span{x=1}]=debug")).contains("an info line"));
    }
}
