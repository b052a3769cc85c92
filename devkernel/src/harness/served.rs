//! [`ServedAgent`]: an agent [`DevKernel::serve`](super::DevKernel::serve) serves.

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// An agent [`DevKernel::serve`](crate::DevKernel::serve) serves on a loopback port and registered with the kernel.
///
/// Dropping it stops the server too, without waiting; [`shutdown`](Self::shutdown) waits for
/// in-flight runs.
#[derive(Debug)]
#[must_use = "dropping a ServedAgent stops its server"]
pub struct ServedAgent {
    pub(super) agent: rebuno::Agent,
    pub(super) webhook_url: String,
    pub(super) stop: oneshot::Sender<()>,
    pub(super) done: JoinHandle<std::io::Result<()>>,
}

impl ServedAgent {
    /// The agent being served.
    pub fn agent(&self) -> &rebuno::Agent {
        &self.agent
    }

    /// Where the kernel delivers its webhooks, e.g. `http://127.0.0.1:41235/webhook`.
    pub fn webhook_url(&self) -> String {
        self.webhook_url.clone()
    }

    /// Graceful shutdown: stops accepting, then waits for the in-flight runs (up to
    /// `rebuno-hyper`'s drain timeout). A server error is logged.
    pub async fn shutdown(self) {
        let _ = self.stop.send(());
        match self.done.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::error!(%error, "served agent failed"),
            Err(error) => tracing::error!(%error, "served agent task failed"),
        }
    }
}
