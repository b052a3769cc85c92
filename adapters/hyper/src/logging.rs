//! [`init_logging`]: the one line that makes an agent's logs visible from its first run.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::util::SubscriberInitExt as _;

/// Installs a log subscriber for the whole process: human-readable lines on stdout, filtered by
/// `RUST_LOG` (`info` when it is unset; `RUST_LOG=rebuno=debug,info` shows the SDK's spans).
///
/// The SDK logs through `tracing` and, being a library, never installs a subscriber itself:
/// without one, a wrong secret or an unreachable kernel prints nothing. Call this first thing
/// in `main`. It does nothing when the process already has a global subscriber (one of yours,
/// or one exporting over OTLP: add a `tracing_subscriber::fmt::layer()` to that one instead).
///
/// ```no_run
/// #[tokio::main]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
///     rebuno_hyper::init_logging(); // RUST_LOG, info by default
///     let agent = rebuno::Agent::builder("hello")
///         .handler(|name: String| async move { Ok::<_, rebuno::HandlerError>(format!("hello, {name}")) })
///         .build()?;
///     let listener = tokio::net::TcpListener::bind("0.0.0.0:3000").await?;
///     rebuno_hyper::serve(listener, agent).await?;
///     Ok(())
/// }
/// ```
pub fn init_logging() {
    let filter = std::env::var("RUST_LOG").ok();
    // Also forwards `log` records (rustls's). Err only when a global subscriber or logger is
    // already set: that one stays, as documented.
    let _ = subscriber(filter.as_deref(), std::io::stdout).try_init();
}

/// The subscriber [`init_logging`] installs: `filter` as `RUST_LOG` directives (unset or empty:
/// `info`; directives it cannot parse are skipped), lines written to `writer`.
fn subscriber<W>(
    filter: Option<&str>,
    writer: W,
) -> impl tracing::Subscriber + Send + Sync + 'static
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let filter = EnvFilter::builder()
        .with_default_directive(LevelFilter::INFO.into())
        .parse_lossy(filter.unwrap_or_default());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .finish()
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

    /// Logs one line at each level under `filter` and returns what was written.
    fn logged(filter: Option<&str>) -> String {
        let lines = Lines::default();
        let sink = lines.clone();
        let subscriber = subscriber(filter, move || sink.clone());
        tracing::subscriber::with_default(subscriber, || {
            tracing::debug!(target: "rebuno", "a debug line");
            tracing::info!(target: "rebuno", "an info line");
            tracing::warn!(target: "rebuno", "a warn line");
        });
        let bytes = lines.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[test]
    fn info_by_default_and_rust_log_when_set() {
        for unset in [None, Some("")] {
            let text = logged(unset);
            assert!(
                text.contains("an info line") && !text.contains("a debug line"),
                "{text}"
            );
        }
        let warn = logged(Some("warn"));
        assert!(
            warn.contains("a warn line") && !warn.contains("an info line"),
            "{warn}"
        );
        let debug = logged(Some("rebuno=debug"));
        assert!(debug.contains("a debug line"), "{debug}");
    }
}
