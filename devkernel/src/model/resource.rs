//! How a fork restored each resource (PROTOCOL.md §1.9; the registration response and fork
//! points are `rebuno::wire::ResourceView` and `rebuno::wire::ForkPoints`).

use serde::{Deserialize, Serialize};

/// How a fork restored one resource (`restoration` of the fork response).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Restoration {
    /// The checkpoint it was restored from (absent: the initial environment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) checkpoint_ref: Option<String>,
    /// `covered_seq` of that checkpoint in the source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) checkpoint_seq: Option<u64>,
    /// Whether the checkpoint covers the fork point exactly.
    pub(crate) covered: bool,
}
