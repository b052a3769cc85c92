//! The signals a deployment stops a server with.

/// Resolves on Ctrl-C, or on `SIGTERM` on Unix: what `docker stop`, Kubernetes, systemd and
/// most platforms send before they kill a process. Pass it to
/// [`Serve::with_graceful_shutdown`](crate::Serve::with_graceful_shutdown), or to axum's own
/// `with_graceful_shutdown`, so a deploy drains the runs in flight instead of cutting them.
///
/// If a handler cannot be installed (no signal support in this process), that signal is never
/// seen, and the other still stops the server.
///
/// ```no_run
/// # async fn demo(agent: rebuno::Agent) -> std::io::Result<()> {
/// let listener = tokio::net::TcpListener::bind("0.0.0.0:5000").await?;
/// rebuno_hyper::serve(listener, agent)
///     .with_graceful_shutdown(rebuno_hyper::shutdown_signal())
///     .await
/// # }
/// ```
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = ctrl_c => tracing::info!("Ctrl-C: shutting down"),
        () = terminate() => tracing::info!("SIGTERM: shutting down"),
    }
}

#[cfg(unix)]
async fn terminate() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut stream) => {
            stream.recv().await;
        }
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGTERM; only Ctrl-C stops the server");
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(not(unix))]
async fn terminate() {
    std::future::pending::<()>().await;
}
