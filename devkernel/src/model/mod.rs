//! The protocol's JSON objects (PROTOCOL.md §2.4, §1.12), public so tests can inspect them.

mod agent;
mod approval;
mod decision;
mod event;
mod execution;
mod step;
mod time;

pub use agent::Agent;
pub use approval::{Approval, ApprovalStatus};
pub use decision::{StepDecision, StepResource};
pub use event::Event;
pub use execution::{Execution, ExecutionStatus, SpawnedBy};
pub use step::{Step, StepStatus};
pub use time::Timestamp;
