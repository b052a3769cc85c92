//! Deciding an approval: [`Client::grant`] and [`Client::deny`].

use http::Method;
use serde_json::json;

use super::{Client, encode};
use crate::error::Result;
use crate::kernel::{Replayable, encode_segment};

/// Which way an approval is decided.
#[derive(Debug, Clone, Copy)]
pub(super) enum Verdict {
    Grant,
    Deny,
}

/// A decision on an approval; finish with [`send`](Self::send). See [`Client::grant`] and
/// [`Client::deny`].
#[derive(Debug)]
#[must_use = "call `send()` to decide"]
pub struct Decide {
    client: Client,
    approval_id: String,
    verdict: Verdict,
    decided_by: String,
    rationale: String,
}

impl Decide {
    pub(super) fn new(client: Client, approval_id: String, verdict: Verdict) -> Self {
        Self {
            client,
            approval_id,
            verdict,
            decided_by: String::new(),
            rationale: String::new(),
        }
    }

    /// Who decides: must be one of the approval's approvers when it names any.
    pub fn by(mut self, decided_by: impl Into<String>) -> Self {
        self.decided_by = decided_by.into();
        self
    }

    /// Why, recorded with the decision.
    pub fn rationale(mut self, rationale: impl Into<String>) -> Self {
        self.rationale = rationale.into();
        self
    }

    /// Sends the decision.
    ///
    /// # Errors
    ///
    /// `forbidden` when the decider is not an approver; `conflict` when already decided;
    /// `not_found`; network errors.
    pub async fn send(self) -> Result<()> {
        let verb = match self.verdict {
            Verdict::Grant => "grant",
            Verdict::Deny => "deny",
        };
        let path = format!("/v0/approvals/{}/{verb}", encode_segment(&self.approval_id));
        let body = json!({ "decided_by": self.decided_by, "rationale": self.rationale });
        self.client
            .send(Method::POST, &path, Some(encode(&body)?), Replayable::Yes)
            .await
            .map(drop)
    }
}
