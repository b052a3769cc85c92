//! Listing builders of the [`Client`]: an execution's steps and the approvals.

use super::Client;
use crate::error::Result;
use crate::kernel::encode_segment;
use crate::wire::{Approval, ApprovalStatus, StepRecord};

/// An execution's recorded steps; finish with [`send`](Self::send). See [`Client::steps`].
#[derive(Debug)]
#[must_use = "call `send()` to list"]
pub struct ListSteps {
    client: Client,
    execution_id: String,
    terminal_only: bool,
}

impl ListSteps {
    pub(super) fn new(client: Client, execution_id: String) -> Self {
        Self {
            client,
            execution_id,
            terminal_only: false,
        }
    }

    /// Only settled steps (succeeded, failed or denied), not those still running or waiting.
    pub fn terminal_only(mut self) -> Self {
        self.terminal_only = true;
        self
    }

    /// Fetches the steps in the order they were recorded.
    ///
    /// # Errors
    ///
    /// `not_found`; network errors.
    pub async fn send(self) -> Result<Vec<StepRecord>> {
        let query = if self.terminal_only {
            "?status=terminal"
        } else {
            ""
        };
        let path = format!(
            "/v0/executions/{}/steps{query}",
            encode_segment(&self.execution_id)
        );
        self.client.read_list(&path).await
    }
}

/// Approvals with one status (pending by default); finish with [`send`](Self::send). See
/// [`Client::approvals`].
#[derive(Debug)]
#[must_use = "call `send()` to list"]
pub struct ListApprovals {
    client: Client,
    status: ApprovalStatus,
}

impl ListApprovals {
    pub(super) fn new(client: Client) -> Self {
        Self {
            client,
            status: ApprovalStatus::Pending,
        }
    }

    /// Only approvals with this status.
    pub fn status(mut self, status: ApprovalStatus) -> Self {
        self.status = status;
        self
    }

    /// Fetches the approvals.
    ///
    /// # Errors
    ///
    /// Network errors; `forbidden` without `approvals:read`.
    pub async fn send(self) -> Result<Vec<Approval>> {
        let path = format!("/v0/approvals?status={}", self.status.as_str());
        self.client.read_list(&path).await
    }
}
