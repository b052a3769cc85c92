//! The per-connection watchdog: closes connections that sit idle, and drains them on shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};

use crate::activity::{Activity, Snapshot};

/// How long a connection asked to close gracefully may take before it is dropped.
pub(crate) const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The timeouts a watchdog enforces while a connection has no request in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IdleRules {
    /// Close once no bytes have moved for this long.
    pub(crate) idle: Option<Duration>,
    /// Close once the next request has not arrived this long after the last one ended.
    pub(crate) next_request: Option<Duration>,
}

/// What the watchdog does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Look again at this moment.
    CheckAt(Instant),
    /// Close the connection.
    Close,
    /// Nothing to enforce.
    Never,
}

impl IdleRules {
    /// What to do about a connection seen in state `seen` at `now`.
    pub(crate) fn verdict(&self, seen: Snapshot, now: Instant) -> Verdict {
        let (Some(shortest), deadline) = (self.shortest(), self.deadline(seen)) else {
            return Verdict::Never;
        };
        if seen.in_flight > 0 {
            // Busy connections are never idle; look again once the request may have ended.
            return now
                .checked_add(shortest)
                .map_or(Verdict::Never, Verdict::CheckAt);
        }
        match deadline {
            Some(deadline) if deadline <= now => Verdict::Close,
            Some(deadline) => Verdict::CheckAt(deadline),
            None => Verdict::Never,
        }
    }

    fn shortest(&self) -> Option<Duration> {
        match (self.idle, self.next_request) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn deadline(&self, seen: Snapshot) -> Option<Instant> {
        // A timeout too long to add to an instant never expires.
        let idle = self
            .idle
            .and_then(|idle| seen.last_active.checked_add(idle));
        let next = self
            .next_request
            .and_then(|next| seen.idle_since.checked_add(next));
        match (idle, next) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// A connection that can be asked to finish gracefully (hyper's connections all can).
pub(crate) trait GracefulClose {
    /// Stop taking requests and close once the ones in flight are answered (h2: `GOAWAY`).
    fn close_gracefully(self: Pin<&mut Self>);
}

/// Drives `connection` to the end, asking it to close when `rules` find it idle or when
/// `shutdown` fires, and dropping it [`CLOSE_GRACE`] after an idle close if it has not finished.
pub(crate) async fn watch<C, E>(
    connection: C,
    activity: Arc<Activity>,
    rules: IdleRules,
    mut shutdown: watch::Receiver<()>,
    peer: SocketAddr,
) where
    C: Future<Output = Result<(), E>> + GracefulClose,
    E: std::fmt::Display,
{
    let mut connection = pin!(connection);
    let mut closing = false;
    let mut hard_stop: Option<Instant> = None;
    let mut check = rules.verdict(activity.snapshot(), Instant::now());
    loop {
        let next_check = match check {
            Verdict::CheckAt(at) => Some(at),
            Verdict::Close | Verdict::Never => None,
        };
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, %peer, "connection ended with an error");
                }
                return;
            }
            _ = shutdown.changed(), if !closing => {
                closing = true;
                connection.as_mut().close_gracefully();
            }
            () = sleep_until(next_check.unwrap_or_else(Instant::now)), if next_check.is_some() => {
                check = rules.verdict(activity.snapshot(), Instant::now());
                if check == Verdict::Close {
                    tracing::debug!(%peer, "closing idle connection");
                    if !closing {
                        closing = true;
                        connection.as_mut().close_gracefully();
                    }
                    hard_stop = Some(Instant::now() + CLOSE_GRACE);
                }
            }
            () = sleep_until(hard_stop.unwrap_or_else(Instant::now)), if hard_stop.is_some() => {
                tracing::debug!(%peer, "dropping idle connection that did not close in time");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: Duration = Duration::from_millis(300);
    const NEXT: Duration = Duration::from_secs(10);

    fn seen(in_flight: usize, last_active: Instant, idle_since: Instant) -> Snapshot {
        Snapshot {
            in_flight,
            last_active,
            idle_since,
        }
    }

    fn rules(idle: Option<Duration>, next_request: Option<Duration>) -> IdleRules {
        IdleRules { idle, next_request }
    }

    #[test]
    fn an_idle_connection_closes_once_silent_for_the_idle_timeout() {
        let t0 = Instant::now();
        let rules = rules(Some(IDLE), Some(NEXT));
        assert_eq!(
            rules.verdict(seen(0, t0, t0), t0),
            Verdict::CheckAt(t0 + IDLE)
        );
        assert_eq!(rules.verdict(seen(0, t0, t0), t0 + IDLE), Verdict::Close);
    }

    #[test]
    fn bytes_moving_put_the_idle_close_off_but_not_past_the_next_request_timeout() {
        let t0 = Instant::now();
        let rules = rules(Some(IDLE), Some(NEXT));
        let later = t0 + Duration::from_millis(200);
        assert_eq!(
            rules.verdict(seen(0, later, t0), t0 + IDLE),
            Verdict::CheckAt(later + IDLE)
        );
        let trickling = t0 + NEXT - Duration::from_millis(1);
        assert_eq!(
            rules.verdict(seen(0, trickling, t0), t0 + NEXT),
            Verdict::Close
        );
    }

    #[test]
    fn a_request_in_flight_is_never_idle() {
        let t0 = Instant::now();
        let rules = rules(Some(IDLE), Some(NEXT));
        let now = t0 + Duration::from_secs(60);
        assert_eq!(
            rules.verdict(seen(1, t0, t0), now),
            Verdict::CheckAt(now + IDLE)
        );
    }

    #[test]
    fn timeouts_too_long_for_the_clock_never_expire() {
        let t0 = Instant::now();
        let forever = rules(Some(Duration::MAX), Some(Duration::MAX));
        assert_eq!(forever.verdict(seen(0, t0, t0), t0), Verdict::Never);
        assert_eq!(forever.verdict(seen(1, t0, t0), t0), Verdict::Never);
    }

    #[test]
    fn without_timeouts_nothing_is_enforced() {
        let t0 = Instant::now();
        assert_eq!(
            rules(None, None).verdict(seen(0, t0, t0), t0 + NEXT),
            Verdict::Never
        );
        assert_eq!(
            rules(None, Some(NEXT)).verdict(seen(0, t0, t0), t0 + NEXT),
            Verdict::Close
        );
    }
}
