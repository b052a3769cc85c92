//! A dispatch row: one queued delivery of an execution (PROTOCOL.md §1.3).

use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use crate::event::DeliveryOutcome;
use crate::model::Timestamp;

/// Delivery status of a dispatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DispatchStatus {
    /// Due for a claim.
    Pending,
    /// Claimed; the lease is live.
    InFlight,
    /// The last delivery failed; due again at `next_attempt_at`.
    Failed,
    /// Retired.
    Exhausted,
}

/// One dispatch of an execution.
#[derive(Debug, Clone)]
pub(crate) struct Dispatch {
    /// UUIDv7 id, stable across attempts.
    pub(crate) id: Uuid,
    /// Current status.
    pub(crate) status: DispatchStatus,
    /// 0 until the first claim.
    pub(crate) attempt: u32,
    /// When the next claim may happen.
    pub(crate) next_attempt_at: Instant,
    /// Last claim or renewal.
    pub(crate) locked_at: Instant,
    /// Lease period handed out with the current attempt.
    pub(crate) lease: Duration,
    /// When the lease runs out on the wall clock, as of the last claim or renewal (what a
    /// data directory keeps, since monotonic instants do not survive a restart).
    pub(crate) expires_wall: Option<Timestamp>,
    /// What the newest unsuccessful attempt met.
    pub(crate) last_outcome: Option<DeliveryOutcome>,
}

impl Dispatch {
    /// Starts or renews the lease at `now` (`wall` on the wall clock).
    pub(crate) fn lock_at(&mut self, now: Instant, wall: Timestamp) {
        self.locked_at = now;
        self.expires_wall = Some(wall.plus(self.lease));
    }

    /// A new pending dispatch due at `due`.
    pub(crate) fn new(due: Instant) -> Self {
        Self {
            id: Uuid::now_v7(),
            status: DispatchStatus::Pending,
            attempt: 0,
            next_attempt_at: due,
            locked_at: due,
            lease: Duration::ZERO,
            expires_wall: None,
            last_outcome: None,
        }
    }
}
