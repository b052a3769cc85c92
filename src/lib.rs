#![doc = include_str!("../docs/crate.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
// On wasm32 `MaybeSend` is empty, so shared state is deliberately not Send there.
#![cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]

mod agent;
#[cfg(feature = "async-openai")]
pub mod async_openai;
mod body;
pub mod client;
mod config;
mod context;
mod error;
mod idempotency;
mod kernel;
pub mod llm;
pub mod mcp;
mod observe;
mod panic;
mod refusal;
pub mod resource;
pub mod retry;
#[cfg(feature = "rig")]
pub mod rig;
pub mod rt;
mod schema;
mod secret;
pub mod signing;
pub mod spans;
mod sse;
mod step;
mod subagent;
#[cfg(feature = "opentelemetry")]
pub mod telemetry;
mod tool;
pub mod transport;
pub mod wire;

pub use agent::{Agent, AgentBuilder, Dispatch, ResponseFuture, Route};
pub use body::Body;
pub use context::{ExecutionContext, Scoped, Suspension, execution, previous};
pub use error::{BoxError, Error, ErrorKind, HandlerError, Result};
pub use idempotency::Idempotency;
pub use resource::resource;
pub use retry::RetryPolicy;
pub use secret::Secret;
pub use step::{Step, step};
pub use subagent::{Subagent, subagent};
pub use tool::{DynTool, Tool, ToolBuilder, ToolSpec, define_tool, wrap_tool};

#[allow(dead_code)]
fn _assert_impls() {
    fn clone<T: Clone>() {}
    clone::<Agent>();
    clone::<ExecutionContext>();
    clone::<client::Client>();
    #[cfg(not(target_arch = "wasm32"))]
    {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Agent>();
        send_sync::<ExecutionContext>();
        send_sync::<Error>();
        send_sync::<client::Client>();
    }
}

/// The README's Rust snippets, compiled as doctests so they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
