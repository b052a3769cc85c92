//! Accepting connections: back off while the process is out of resources, log once per episode.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The first wait after an accept error that is not about one connection.
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(10);

/// The longest wait between accept attempts.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// What the accept loop does after a failed `accept`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// The error was about one connection (it was reset or aborted before we took it): try again.
    Now,
    /// The process or system is out of something (file descriptors, buffers): wait, then try.
    After {
        /// How long to wait.
        delay: Duration,
        /// Whether this error starts an episode (the first since the last success).
        first: bool,
    },
}

/// The accept back-off policy: 10 ms doubling to 1 s while accepts keep failing, reset by the
/// first success. An episode is the run of failures between two successes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Backoff {
    failures: u64,
    delay: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            failures: 0,
            delay: FIRST_BACKOFF,
        }
    }
}

impl Backoff {
    /// Records a failed accept and says when to try again.
    pub(crate) fn failed(&mut self, error: &io::Error) -> Retry {
        if is_per_connection(error) {
            return Retry::Now;
        }
        self.failures += 1;
        let delay = self.delay;
        self.delay = (self.delay * 2).min(MAX_BACKOFF);
        Retry::After {
            delay,
            first: self.failures == 1,
        }
    }

    /// Records a successful accept; returns how many accepts failed in the episode it ends, if
    /// one was going on.
    pub(crate) fn succeeded(&mut self) -> Option<u64> {
        let failures = std::mem::take(&mut self.failures);
        self.delay = FIRST_BACKOFF;
        (failures > 0).then_some(failures)
    }
}

/// Errors that concern one pending connection, not the listener or the process.
fn is_per_connection(error: &io::Error) -> bool {
    use io::ErrorKind::{
        ConnectionAborted, ConnectionReset, HostUnreachable, Interrupted, NetworkDown,
        NetworkUnreachable,
    };
    matches!(
        error.kind(),
        ConnectionAborted
            | ConnectionReset
            | Interrupted
            | NetworkDown
            | NetworkUnreachable
            | HostUnreachable
    )
}

/// A connection accepted under the connection limit; the permit is its slot.
#[derive(Debug)]
pub(crate) struct Accepted {
    pub(crate) stream: TcpStream,
    pub(crate) peer: SocketAddr,
    pub(crate) permit: OwnedSemaphorePermit,
}

/// Waits for a free connection slot, then accepts one connection, backing off on errors.
/// Cancel-safe: dropping it loses no connection.
pub(crate) async fn accept(
    listener: &TcpListener,
    slots: &Arc<Semaphore>,
    backoff: &mut Backoff,
) -> Option<Accepted> {
    // Taking the slot first leaves connections over the limit in the kernel's backlog.
    let permit = Arc::clone(slots).acquire_owned().await.ok()?;
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                if let Some(failures) = backoff.succeeded() {
                    tracing::info!(failures, "accepting connections again");
                }
                return Some(Accepted {
                    stream,
                    peer,
                    permit,
                });
            }
            Err(error) => match backoff.failed(&error) {
                Retry::Now => tracing::debug!(%error, "accept failed for one connection"),
                Retry::After { delay, first } => {
                    if first {
                        tracing::warn!(
                            %error,
                            "accept failed; backing off (up to 1 s) until it succeeds again"
                        );
                    }
                    tokio::time::sleep(delay).await;
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn emfile() -> io::Error {
        io::Error::from_raw_os_error(24)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn exhaustion_backs_off_doubling_to_a_second_and_starts_one_episode() {
        let mut backoff = Backoff::default();
        let retries: Vec<Retry> = (0..10).map(|_| backoff.failed(&emfile())).collect();
        let delays: Vec<Duration> = retries
            .iter()
            .map(|retry| match retry {
                Retry::After { delay, .. } => *delay,
                Retry::Now => Duration::ZERO,
            })
            .collect();
        assert_eq!(
            delays,
            [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000].map(ms)
        );
        let firsts = retries
            .iter()
            .filter(|retry| matches!(retry, Retry::After { first: true, .. }))
            .count();
        assert_eq!(firsts, 1, "one warning per episode");
        assert!(matches!(retries[0], Retry::After { first: true, .. }));
    }

    #[test]
    fn success_ends_the_episode_with_its_failure_count_and_resets_the_delay() {
        let mut backoff = Backoff::default();
        assert_eq!(backoff.succeeded(), None, "no episode, nothing to report");
        for _ in 0..3 {
            backoff.failed(&emfile());
        }
        assert_eq!(backoff.succeeded(), Some(3));
        assert_eq!(backoff.succeeded(), None);
        assert_eq!(
            backoff.failed(&emfile()),
            Retry::After {
                delay: ms(10),
                first: true
            }
        );
    }

    #[test]
    fn per_connection_errors_retry_at_once_without_touching_the_episode() {
        let mut backoff = Backoff::default();
        for kind in [
            io::ErrorKind::ConnectionAborted,
            io::ErrorKind::ConnectionReset,
        ] {
            assert_eq!(backoff.failed(&io::Error::from(kind)), Retry::Now);
        }
        assert_eq!(backoff, Backoff::default());
        backoff.failed(&emfile());
        assert_eq!(
            backoff.failed(&io::Error::from(io::ErrorKind::ConnectionAborted)),
            Retry::Now
        );
        assert_eq!(
            backoff.failed(&emfile()),
            Retry::After {
                delay: ms(20),
                first: false
            }
        );
        assert_eq!(backoff.succeeded(), Some(2));
    }

    #[test]
    fn other_errors_back_off_too() {
        let mut backoff = Backoff::default();
        for code in [23, 105, 12] {
            // ENFILE, ENOBUFS, ENOMEM
            assert!(matches!(
                backoff.failed(&io::Error::from_raw_os_error(code)),
                Retry::After { .. }
            ));
        }
    }
}
