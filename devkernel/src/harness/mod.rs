//! [`DevKernel`]: an in-process kernel on a loopback port, with test-harness methods.
//!
//! One type per file: [`AgentSpec`] (`spec`), [`DevKernelBuilder`] (`builder`),
//! [`ServedAgent`] (`served`), [`DevKernelError`] (`error`), [`ExecutionExt`] (`output`).
//! `DevKernel`'s methods are grouped by what a test does with them: registering agents
//! (`agents`), creating, reading, cancelling and forking executions (`executions`), waiting on one (`wait`), deciding approvals
//! (`approvals`), serving an agent and moving time (`serve`). What they return is the SDK's
//! [`rebuno::wire`] (`wire` converts the kernel's records).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::kernel::Kernel;
use crate::store::{ExecCell, lock};

mod agents;
mod approvals;
mod builder;
mod error;
mod executions;
mod output;
mod serve;
mod served;
mod spec;
mod wait;
mod wire;

pub use builder::DevKernelBuilder;
pub use error::DevKernelError;
pub use output::{ExecutionExt, OutputError};
pub use served::ServedAgent;
pub use spec::AgentSpec;

/// An in-memory Rebuno kernel serving the `/v0` API on a local port.
///
/// Dropping it (or [`DevKernel::shutdown`]) stops the server and all deliveries. Execution,
/// step and approval ids are the strings the records carry (`execution.id`).
///
/// ```no_run
/// # async fn demo() -> Result<(), rebuno_devkernel::DevKernelError> {
/// use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
/// use std::time::Duration;
///
/// let kernel = DevKernel::start().await?;
/// kernel.register_agent(AgentSpec::new("hello", "http://127.0.0.1:5000/webhook", "dev-secret"))?;
/// let execution = kernel
///     .create_execution(NewExecution::new("hello", serde_json::json!({"name": "Ada"})))
///     .await?;
/// let done = kernel.wait_terminal(&execution.id, Duration::from_secs(10)).await?;
/// println!("{:?}", done.output);
/// kernel.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct DevKernel {
    kernel: Kernel,
    addr: SocketAddr,
    server: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl DevKernel {
    /// Starts a kernel on `127.0.0.1:0` in dev mode.
    ///
    /// # Errors
    ///
    /// [`DevKernelError::Bind`] when no port can be bound.
    pub async fn start() -> Result<Self, DevKernelError> {
        Self::builder().start().await
    }

    /// A builder for non-default settings.
    pub fn builder() -> DevKernelBuilder {
        DevKernelBuilder::default()
    }

    /// Base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the server and all background deliveries, waiting up to 5 s for open requests.
    pub async fn shutdown(self) {
        self.kernel.shutdown_token().cancel();
        let server = lock(&self.server).take();
        if let Some(mut server) = server
            && tokio::time::timeout(Duration::from_secs(5), &mut server)
                .await
                .is_err()
        {
            server.abort();
        }
    }

    /// An execution's cell, for waiting on it.
    fn cell(&self, id: &str) -> Result<Arc<ExecCell>, DevKernelError> {
        let cell = self.kernel.store().execution(known(id)?);
        cell.ok_or_else(|| DevKernelError::NotFound(id.to_owned()))
    }
}

impl Drop for DevKernel {
    fn drop(&mut self) {
        // Only the last handle stops the kernel.
        if Arc::strong_count(&self.server) == 1 {
            self.kernel.shutdown_token().cancel();
        }
    }
}

/// An id a test passes, as the kernel's: a string that is no UUID names nothing.
fn uuid(id: &str) -> Option<Uuid> {
    Uuid::parse_str(id).ok()
}

/// An execution id a test passes, as the kernel's.
///
/// # Errors
///
/// [`DevKernelError::NotFound`] when it is no UUID.
fn known(id: &str) -> Result<Uuid, DevKernelError> {
    uuid(id).ok_or_else(|| DevKernelError::NotFound(id.to_owned()))
}
