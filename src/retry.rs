//! Retry policies: a failed tool body, local step body or LLM request tried again inside its
//! step, before the step's outcome is recorded.
//!
//! One type, [`RetryPolicy`], set with [`ToolBuilder::retry`](crate::ToolBuilder::retry),
//! [`Step::retry`](crate::Step::retry), [`DurableLlm::retry`](crate::llm::DurableLlm::retry)
//! and [`DurableLlmLayer::retry`](crate::llm::DurableLlmLayer::retry):
//!
//! ```no_run
//! use std::time::Duration;
//! use rebuno::RetryPolicy;
//!
//! let lookup = rebuno::define_tool("lookup_customer")
//!     .retry(
//!         RetryPolicy::new()
//!             .max_attempts(5)
//!             .initial_delay(Duration::from_millis(200))
//!             .max_elapsed(Duration::from_secs(20)),
//!     )
//!     .execute(|id: String| async move { Ok::<_, std::io::Error>(format!("customer {id}")) });
//! ```
//!
//! # What happens
//!
//! The kernel says `proceed` once; the body then runs until it succeeds or the policy stops,
//! and only that last attempt's outcome is recorded (`step.succeeded` or `step.failed`, or for
//! an LLM call its final answer). A replay serves the record and runs nothing, so a replayed
//! step never retries. Between attempts the run sleeps on the host's [`Sleep`](crate::rt::Sleep)
//! (Tokio on hyper and Lambda, `worker::Delay` on Workers), while the dispatch's heartbeat keeps
//! renewing its lease as it does during any long step.
//!
//! A failure is tried again when all of these hold:
//!
//! 1. it is not control flow, a policy denial or a rate limit (those keep their meaning);
//! 2. the policy's predicate ([`RetryPolicy::retry_if`], by default [`is_transient`]) says so;
//! 3. for an [`AtMostOnce`](crate::Idempotency::AtMostOnce) body, the error proves that the
//!    request never reached the other side ([`is_not_sent`]): a body whose request may have
//!    taken effect is never run again;
//! 4. attempts remain ([`RetryPolicy::max_attempts`]);
//! 5. the next attempt starts within [`RetryPolicy::max_elapsed`] of the first;
//! 6. the next attempt starts before the deadline's margin: the earlier of the host's
//!    [`Deadline`] and the execution's
//!    [`deadline_at`](crate::ExecutionContext::deadline_at).
//!
//! When 4, 5 or 6 stops the retries, the last error is the step's outcome, and its text says
//! why the retries stopped and what to change. An LLM answer whose status was retried is
//! recorded as it came when the retries stop, exactly as an answer that was never retried.
//!
//! # How an error says it was not sent, or is worth retrying
//!
//! [`is_not_sent`] looks through the error's source chain for: a [`Transient::not_sent`]
//! marker, a [`TransportError`](crate::transport::TransportError) of kind `Connect`, an
//! `std::io::Error` of kind `ConnectionRefused`, and a reqwest or hyper-util client error from
//! the connect phase (DNS, TCP, TLS). Wrap your own proof with [`Transient::not_sent`]:
//!
//! ```
//! use rebuno::retry::{Transient, is_not_sent};
//! let refused = std::io::Error::other("queue full, request rejected before enqueue");
//! let error: rebuno::BoxError = Transient::not_sent(refused).into();
//! assert!(is_not_sent(&*error));
//! ```
//!
//! The check reads the error the body returns: a body that makes several requests and returns
//! a later one's refused connection as its own error says "not sent" for the whole body. In an
//! `at_most_once` body, turn such an error into a plain one (`error.to_string()`) unless the
//! earlier requests may safely run again.
//!
//! [`is_transient`], the default predicate, also accepts the [`Transient::new`] marker, any
//! `TransportError`, I/O errors of a lost or timed-out connection, reqwest connect and timeout
//! errors, Rebuno [`Network`](crate::ErrorKind::Network) and
//! [`Timeout`](crate::ErrorKind::Timeout) errors, and an [`HttpStatus`] of 408, 429 or 5xx
//! (except 501 and 505): an LLM call's answer is judged as an `HttpStatus`.
//!
//! # Defaults, and how they compare
//!
//! | | attempts | delays | elapsed | retries |
//! |---|---|---|---|---|
//! | tool ([`RetryPolicy::new`]) | 3 | 1 s, ×2, at most 30 s, 20 % jitter | 60 s | [`is_transient`] |
//! | LLM call ([`RetryPolicy::llm`]) | 5 | 1 s, ×2, at most 30 s, 20 % jitter, at least `Retry-After` | 120 s | [`is_transient`]: connection failures, 408, 429, 5xx |
//! | local step ([`crate::step`]) | 1 | | | none unless [`Step::retry`](crate::Step::retry) |
//!
//! Temporal retries a failed activity by default without limit (1 s, ×2, at most 100 s,
//! bounded only by the activity's timeouts) and every error except the types listed as
//! non-retryable. Restate retries a failing `ctx.run` by default without limit too, until it
//! succeeds or throws a terminal error; its `RunRetryPolicy` adds a maximum of attempts and of
//! duration. Rebuno differs on purpose:
//!
//! - **Bounded by default.** A Rebuno step runs inside one dispatch on a host that may cut it
//!   short (Workers' 30 s, Lambda's 15 min), and its failure is recorded for the handler (or
//!   the LLM reading a tool result) to act on. Retrying a broken dependency forever would hide
//!   it behind an execution that never ends; a few attempts within a minute cover the blips
//!   (a refused connection while a service restarts, a 503) that the issue this came from hit.
//! - **Only what proves transient.** Temporal retries everything because an activity's error
//!   type is all it knows; a tool's error here is often an answer (`no such customer`) that a
//!   retry cannot change, so by default only errors that say they are transient are retried.
//!   Widen it with [`RetryPolicy::retry_if`].
//! - **`at_most_once` is never retried once it may have taken effect.** Temporal and Restate
//!   leave that to the activity's own idempotency; Rebuno knows the tool's idempotency, so it
//!   enforces it, and retries such a body only on proof that nothing was sent.
//! - **LLM calls retry more** (5 attempts, 2 minutes, `Retry-After` honoured): provider 429s
//!   and 5xx are routine and a retried completion costs nothing but time, and the call is
//!   always `safe_to_retry`. [`llm::fetch`](crate::llm::fetch) uses this default too: a single
//!   refused connection must not fail the execution.
//! - **Local steps do not retry by default.** They record non-determinism (the time, a random
//!   choice, a fresh id), which does not fail; their body is an `FnOnce`, and
//!   [`Step::retry`](crate::Step::retry) asks for an `FnMut` one that can run again.
//! - **Retries happen in the step, not by re-delivery.** Restate re-runs a failed `ctx.run` by
//!   retrying the invocation; Rebuno keeps the dispatch and its lease and runs the body again in
//!   place, so a replay never sees an attempt, only the recorded outcome.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;

use crate::error::{BoxError, Error, ErrorKind};
use crate::idempotency::Idempotency;
use crate::rt::{Deadline, MaybeSend, MaybeSync, Runtime};

/// A predicate on a failed attempt's error.
trait Predicate: Fn(&(dyn StdError + 'static)) -> bool + MaybeSend + MaybeSync {}

impl<F: Fn(&(dyn StdError + 'static)) -> bool + MaybeSend + MaybeSync> Predicate for F {}

/// How a failed body or LLM request is tried again inside its step: exponential backoff with
/// jitter, a maximum of attempts and of elapsed time, and a predicate on the error. See the
/// [module docs](self) for the rules and the defaults.
///
/// Cheap to clone.
#[derive(Clone)]
pub struct RetryPolicy {
    max_attempts: u32,
    initial_delay: Duration,
    max_delay: Duration,
    multiplier: f64,
    jitter: f64,
    max_elapsed: Option<Duration>,
    /// `None`: [`is_transient`].
    retry_if: Option<Arc<dyn Predicate>>,
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("max_attempts", &self.max_attempts)
            .field("initial_delay", &self.initial_delay)
            .field("max_delay", &self.max_delay)
            .field("multiplier", &self.multiplier)
            .field("jitter", &self.jitter)
            .field("max_elapsed", &self.max_elapsed)
            .finish_non_exhaustive()
    }
}

impl Default for RetryPolicy {
    /// [`RetryPolicy::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl RetryPolicy {
    /// The tools' default: 3 attempts, 1 s then 2 s apart (less up to 20 % jitter), within
    /// 60 s, for errors [`is_transient`] accepts.
    pub fn new() -> Self {
        Self {
            max_attempts: 3,
            initial_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(30),
            multiplier: 2.0,
            jitter: 0.2,
            max_elapsed: Some(Duration::from_secs(60)),
            retry_if: None,
        }
    }

    /// The durable LLM calls' default: as [`new`](Self::new) with 5 attempts within 120 s,
    /// each wait at least what the provider's `Retry-After` (or `retry-after-ms`) asks.
    pub fn llm() -> Self {
        Self::new()
            .max_attempts(5)
            .max_elapsed(Duration::from_secs(120))
    }

    /// One attempt: never retry.
    pub fn none() -> Self {
        Self::new().max_attempts(1)
    }

    /// Attempts in all, the first included (0 counts as 1). `u32::MAX` leaves only
    /// [`max_elapsed`](Self::max_elapsed) and the deadlines to stop the retries.
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// The wait before the first retry (default 1 s).
    #[must_use]
    pub fn initial_delay(mut self, delay: Duration) -> Self {
        self.initial_delay = delay;
        self
    }

    /// The longest wait between two attempts (default 30 s); a `Retry-After` may ask longer.
    #[must_use]
    pub fn max_delay(mut self, delay: Duration) -> Self {
        self.max_delay = delay;
        self
    }

    /// How much each wait grows over the one before (default 2; below 1 counts as 1).
    #[must_use]
    pub fn multiplier(mut self, multiplier: f64) -> Self {
        self.multiplier = if multiplier.is_finite() {
            multiplier.max(1.0)
        } else {
            1.0
        };
        self
    }

    /// The share of each wait taken off at random, so many executions failing together do
    /// not retry together (default 0.2: a wait lands between 80 % and 100 % of its backoff;
    /// clamped to 0..=1).
    #[must_use]
    pub fn jitter(mut self, jitter: f64) -> Self {
        self.jitter = if jitter.is_finite() {
            jitter.clamp(0.0, 1.0)
        } else {
            0.0
        };
        self
    }

    /// No attempt starts later than this after the first one began (default 60 s, 120 s for
    /// LLM calls).
    #[must_use]
    pub fn max_elapsed(mut self, elapsed: Duration) -> Self {
        self.max_elapsed = Some(elapsed);
        self
    }

    /// Which errors are worth another attempt (default [`is_transient`]). Control flow,
    /// denials and rate limits are never retried, and an `at_most_once` body only on
    /// [`is_not_sent`], whatever this says.
    ///
    /// ```
    /// use rebuno::{RetryPolicy, retry::is_transient};
    /// let policy = RetryPolicy::new()
    ///     .retry_if(|error| is_transient(error) || error.to_string().contains("busy"));
    /// # drop(policy);
    /// ```
    #[must_use]
    pub fn retry_if(
        mut self,
        predicate: impl Fn(&(dyn StdError + 'static)) -> bool + MaybeSend + MaybeSync + 'static,
    ) -> Self {
        self.retry_if = Some(Arc::new(predicate));
        self
    }

    /// Whether this policy ever runs a body twice.
    pub(crate) fn retries(&self) -> bool {
        self.max_attempts > 1
    }

    /// The backoff before attempt `next` (2 = the first retry), before jitter.
    fn backoff(&self, next: u32) -> Duration {
        let exponent = i32::try_from(next.saturating_sub(2)).unwrap_or(i32::MAX);
        let factor = self.multiplier.powi(exponent);
        let delay = self.initial_delay.as_secs_f64() * factor;
        if !delay.is_finite() || delay >= self.max_delay.as_secs_f64() {
            return self.max_delay;
        }
        Duration::from_secs_f64(delay)
    }
}

/// Marks an error as worth another attempt (the default predicate, [`is_transient`], accepts
/// it), and with [`not_sent`](Self::not_sent) as proof that the request never reached the
/// other side, which lets even an `at_most_once` body run again.
///
/// Return it from a body: `Err(Transient::new(error))?` or `.map_err(Transient::not_sent)?`.
#[derive(Debug)]
pub struct Transient {
    source: BoxError,
    not_sent: bool,
}

impl Transient {
    /// `error`, worth another attempt; its request may have reached the other side.
    pub fn new(error: impl Into<BoxError>) -> Self {
        Self {
            source: error.into(),
            not_sent: false,
        }
    }

    /// `error`, raised before anything was sent: the other side never saw the request.
    pub fn not_sent(error: impl Into<BoxError>) -> Self {
        Self {
            source: error.into(),
            not_sent: true,
        }
    }

    /// Whether this marks a request that was never sent.
    pub fn is_not_sent(&self) -> bool {
        self.not_sent
    }
}

impl fmt::Display for Transient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.source, f)
    }
}

impl StdError for Transient {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.source)
    }
}

/// An LLM provider's answer with an error status, as a retry predicate sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpStatus {
    status: StatusCode,
    retry_after: Option<Duration>,
}

impl HttpStatus {
    /// The answer's status and the wait its `retry-after-ms` or `Retry-After` asked for.
    pub(crate) fn of(status: StatusCode, headers: &http::HeaderMap, now_millis: u64) -> Self {
        Self {
            status,
            retry_after: retry_after(headers, now_millis),
        }
    }

    /// The answer's status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// How long the provider asked to wait, if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
}

impl fmt::Display for HttpStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the provider answered {}", self.status)
    }
}

impl StdError for HttpStatus {}

/// The wait a response asks for: `retry-after-ms` (OpenAI, Azure), else `Retry-After` in
/// seconds or as an HTTP date.
fn retry_after(headers: &http::HeaderMap, now_millis: u64) -> Option<Duration> {
    let text = |name: &str| headers.get(name)?.to_str().ok().map(str::trim);
    if let Some(millis) = text("retry-after-ms").and_then(|t| t.parse::<f64>().ok()) {
        return Duration::try_from_secs_f64(millis / 1e3).ok();
    }
    let value = text("retry-after")?;
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = http_date_millis(value)?;
    Some(Duration::from_millis(at.saturating_sub(now_millis)))
}

/// The Unix milliseconds of an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
fn http_date_millis(text: &str) -> Option<u64> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let parts: Vec<&str> = text.split_whitespace().collect();
    let [_, day, month, year, time, "GMT"] = parts.as_slice() else {
        return None;
    };
    let month = MONTHS.iter().position(|m| m == month)? + 1;
    let stamp = format!("{year}-{month:02}-{day:0>2}T{time}Z");
    crate::rt::rfc3339::unix_millis(&stamp)
}

/// Errors in `error`'s source chain, itself first.
fn chain<'a>(
    error: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(error), |e: &&'a (dyn StdError + 'static)| {
        (*e).source()
    })
}

/// Whether `error` proves its request never reached the other side (see the
/// [module docs](self#how-an-error-says-it-was-not-sent-or-is-worth-retrying)).
pub fn is_not_sent(error: &(dyn StdError + 'static)) -> bool {
    chain(error).any(|e| {
        e.downcast_ref::<Transient>()
            .is_some_and(Transient::is_not_sent)
            || e.downcast_ref::<crate::transport::TransportError>()
                .is_some_and(crate::transport::TransportError::is_connect)
            || e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
            || client_connect_error(e)
    })
}

/// A reqwest or hyper-util client error from the connect phase.
fn client_connect_error(error: &(dyn StdError + 'static)) -> bool {
    #[cfg(all(feature = "reqwest", not(target_arch = "wasm32")))]
    if error
        .downcast_ref::<reqwest::Error>()
        .is_some_and(reqwest::Error::is_connect)
    {
        return true;
    }
    #[cfg(all(feature = "rt-tokio", not(target_arch = "wasm32")))]
    if error
        .downcast_ref::<hyper_util::client::legacy::Error>()
        .is_some_and(hyper_util::client::legacy::Error::is_connect)
    {
        return true;
    }
    let _ = error;
    false
}

/// The default predicate: whether `error` says another attempt may succeed (see the
/// [module docs](self#how-an-error-says-it-was-not-sent-or-is-worth-retrying)).
pub fn is_transient(error: &(dyn StdError + 'static)) -> bool {
    is_not_sent(error) || chain(error).any(transient_here)
}

fn transient_here(error: &(dyn StdError + 'static)) -> bool {
    use std::io::ErrorKind as Io;
    if let Some(status) = error.downcast_ref::<HttpStatus>() {
        let code = status.status();
        return code == StatusCode::REQUEST_TIMEOUT
            || code == StatusCode::TOO_MANY_REQUESTS
            || (code.is_server_error()
                && code != StatusCode::NOT_IMPLEMENTED
                && code != StatusCode::HTTP_VERSION_NOT_SUPPORTED);
    }
    #[cfg(all(feature = "reqwest", not(target_arch = "wasm32")))]
    if let Some(error) = error.downcast_ref::<reqwest::Error>() {
        return error.is_connect() || error.is_timeout();
    }
    error.is::<Transient>()
        || error.is::<crate::transport::TransportError>()
        || error
            .downcast_ref::<Error>()
            .is_some_and(|e| matches!(e.kind(), ErrorKind::Network | ErrorKind::Timeout))
        || error.downcast_ref::<std::io::Error>().is_some_and(|io| {
            matches!(
                io.kind(),
                Io::ConnectionRefused
                    | Io::ConnectionReset
                    | Io::ConnectionAborted
                    | Io::NotConnected
                    | Io::BrokenPipe
                    | Io::TimedOut
                    | Io::UnexpectedEof
            )
        })
}

/// A local step without a retry policy: its body, an `FnOnce`, runs at most once per
/// delivery. [`Step::retry`](crate::Step::retry) replaces it with a [`RetryPolicy`].
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct NoRetry;

/// Which deadline bounds a step's retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bound {
    /// The host's (Lambda's invocation deadline, Workers' `waitUntil` limit).
    Host,
    /// The execution's `deadline_at`.
    Execution,
}

/// What to do after a failed attempt.
#[derive(Debug)]
pub(crate) enum Next {
    /// Sleep this long, then try again.
    Retry(Duration),
    /// Give up; with a note saying why when a limit (not the predicate) stopped the retries.
    Stop(Option<String>),
}

/// The attempts of one step under a policy.
#[derive(Debug)]
pub(crate) struct Attempts {
    policy: RetryPolicy,
    runtime: Runtime,
    deadline: Option<(Deadline, Bound)>,
    idempotency: Idempotency,
    started: u64,
    made: u32,
}

impl Attempts {
    /// The first attempt is about to start.
    pub(crate) fn start(
        policy: &RetryPolicy,
        runtime: &Runtime,
        deadline: Option<(Deadline, Bound)>,
        idempotency: Idempotency,
    ) -> Self {
        Self {
            policy: policy.clone(),
            started: runtime.unix_millis(),
            runtime: runtime.clone(),
            deadline,
            idempotency,
            made: 1,
        }
    }

    /// Whether the failed attempt's `error` is tried again, and after how long (at least
    /// `asked`, a provider's `Retry-After`).
    pub(crate) fn after(&self, error: &(dyn StdError + 'static), asked: Option<Duration>) -> Next {
        let retry = match &self.policy.retry_if {
            Some(predicate) => predicate(error),
            None => is_transient(error),
        };
        if passes_through(error) || !retry {
            return Next::Stop(None);
        }
        if self.idempotency == Idempotency::AtMostOnce && !is_not_sent(error) {
            tracing::info!(
                attempt = self.made,
                "not retried: an at_most_once body whose request may have reached the other side"
            );
            return Next::Stop(None);
        }
        if self.made >= self.policy.max_attempts {
            return Next::Stop((self.made > 1).then(|| {
                format!(
                    "gave up after {} attempts; raise RetryPolicy::max_attempts to try more",
                    self.made
                )
            }));
        }
        let backoff = self.jittered(self.policy.backoff(self.made + 1));
        let delay = asked.map_or(backoff, |asked| asked.max(backoff));
        match self.limit(delay) {
            Some(note) => Next::Stop(Some(note)),
            None => Next::Retry(delay),
        }
    }

    /// Why an attempt after `delay` may not start, if it may not.
    fn limit(&self, delay: Duration) -> Option<String> {
        let now = self.runtime.unix_millis();
        let at = now.saturating_add(millis(delay));
        let made = self.made;
        if let Some(max) = self.policy.max_elapsed
            && at.saturating_sub(self.started) > millis(max)
        {
            return Some(format!(
                "retries stopped after {made} attempts: the next, in {delay:?}, would start past \
                 RetryPolicy::max_elapsed ({max:?}); raise it to keep trying"
            ));
        }
        let (deadline, bound) = self.deadline?;
        deadline.is_near(at).then(|| {
            let whose = match bound {
                Bound::Host => "the host's deadline (rebuno::rt::Deadline)",
                Bound::Execution => "the execution's deadline_at",
            };
            format!(
                "retries stopped after {made} attempts: the next, in {delay:?}, would start \
                 within the margin of {whose}; give the step more time or shorten the delays"
            )
        })
    }

    /// `delay` less up to the policy's jitter share, at random.
    fn jittered(&self, delay: Duration) -> Duration {
        use std::hash::BuildHasher;
        let seed = std::collections::hash_map::RandomState::new().hash_one((
            self.runtime.unix_millis(),
            self.made,
            self.started,
        ));
        let unit = (seed >> 11) as f64 / (1u64 << 53) as f64;
        delay.mul_f64(1.0 - self.policy.jitter * unit)
    }

    /// Logs the failed attempt on the current span, sleeps `delay`, and counts the next one.
    pub(crate) async fn wait(&mut self, span: &tracing::Span, delay: Duration, error: &str) {
        tracing::info!(
            parent: span,
            attempt = self.made,
            delay_ms = millis(delay),
            error,
            "attempt failed; retrying"
        );
        self.runtime.sleep(delay).await;
        self.made += 1;
        span.record("attempts", self.made);
    }
}

/// Errors that keep their own meaning and are never retried: control flow, denials and rate
/// limits (a body's nested durable call).
fn passes_through(error: &(dyn StdError + 'static)) -> bool {
    crate::error::find_rebuno(error).is_some_and(|e| {
        e.is_control_flow() || matches!(e.kind(), ErrorKind::Policy | ErrorKind::RateLimited)
    })
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `error` with `note` (why the retries stopped) appended to its text; its source is `error`.
#[derive(Debug)]
pub(crate) struct GaveUp {
    note: String,
    source: BoxError,
}

impl GaveUp {
    /// `error`, noted when a limit stopped its retries.
    pub(crate) fn wrap(error: BoxError, note: Option<String>) -> BoxError {
        match note {
            Some(note) => Box::new(Self {
                note,
                source: error,
            }),
            None => error,
        }
    }
}

impl fmt::Display for GaveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.source, self.note)
    }
}

impl StdError for GaveUp {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rt::{Clock, Delay, Sleep, Spawn, Task};

    #[derive(Debug)]
    struct Fixed(u64);

    impl Clock for Fixed {
        fn unix_millis(&self) -> u64 {
            self.0
        }
    }

    #[derive(Debug)]
    struct Never;

    impl Spawn for Never {
        fn spawn(&self, _: Task) {}
    }

    impl Sleep for Never {
        fn sleep(&self, _: Duration) -> Delay {
            Delay::new(async {})
        }
    }

    const NOW: u64 = 1_000_000;

    fn attempts(policy: &RetryPolicy, idempotency: Idempotency) -> Attempts {
        let runtime = Runtime::new(Never, Never, Fixed(NOW));
        Attempts::start(policy, &runtime, None, idempotency)
    }

    fn refused() -> std::io::Error {
        std::io::Error::from(std::io::ErrorKind::ConnectionRefused)
    }

    fn reset() -> std::io::Error {
        std::io::Error::from(std::io::ErrorKind::ConnectionReset)
    }

    #[test]
    fn delays_grow_by_the_multiplier_up_to_the_cap() {
        let policy = RetryPolicy::new().max_delay(Duration::from_secs(5));
        let delays: Vec<_> = (2..=6).map(|n| policy.backoff(n).as_millis()).collect();
        assert_eq!(delays, [1000, 2000, 4000, 5000, 5000]);
        assert_eq!(policy.backoff(u32::MAX), Duration::from_secs(5));
    }

    #[test]
    fn jitter_only_shortens_a_wait_by_its_share() {
        let policy = RetryPolicy::new().jitter(0.5).max_attempts(10);
        let state = attempts(&policy, Idempotency::SafeToRetry);
        for _ in 0..50 {
            let wait = state.jittered(Duration::from_secs(10));
            assert!(
                wait <= Duration::from_secs(10) && wait >= Duration::from_secs(5),
                "{wait:?}"
            );
        }
    }

    #[test]
    fn connection_failures_are_transient_and_a_refusal_was_not_sent() {
        assert!(is_not_sent(&refused()));
        assert!(is_transient(&refused()));
        assert!(
            !is_not_sent(&reset()),
            "a reset may follow a delivered request"
        );
        assert!(is_transient(&reset()));
        let wrapped = Error::new(ErrorKind::Network, "provider").with_source(refused());
        assert!(is_not_sent(&wrapped), "found in the source chain");
        assert!(!is_transient(&std::io::Error::other("no such customer")));
        let marked: BoxError = Transient::not_sent("queue full").into();
        assert!(is_not_sent(&*marked));
        let maybe: BoxError = Transient::new("flaky").into();
        assert!(is_transient(&*maybe) && !is_not_sent(&*maybe));
    }

    #[test]
    fn provider_statuses_408_429_and_5xx_are_transient() {
        let status = |code: u16| HttpStatus {
            status: StatusCode::from_u16(code).unwrap(),
            retry_after: None,
        };
        for code in [408, 429, 500, 502, 503, 504, 529] {
            assert!(is_transient(&status(code)), "{code}");
        }
        for code in [400, 401, 403, 404, 409, 422, 501, 505] {
            assert!(!is_transient(&status(code)), "{code}");
        }
    }

    #[test]
    fn retry_after_is_read_in_milliseconds_seconds_or_as_a_date() {
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut map = http::HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, value.parse().unwrap());
            }
            map
        };
        let at = |pairs| retry_after(&headers(pairs), 784_111_777_000);
        assert_eq!(at(&[("retry-after", "3")]), Some(Duration::from_secs(3)));
        assert_eq!(
            at(&[("retry-after-ms", "250"), ("retry-after", "3")]),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            at(&[("retry-after", "Sun, 06 Nov 1994 08:49:40 GMT")]),
            Some(Duration::from_secs(3))
        );
        assert_eq!(at(&[("retry-after", "soon")]), None);
        assert_eq!(at(&[("retry-after-ms", "-1")]), None);
        assert_eq!(at(&[]), None);
    }

    #[test]
    fn an_at_most_once_body_is_retried_only_when_nothing_was_sent() {
        let policy = RetryPolicy::new();
        let state = attempts(&policy, Idempotency::AtMostOnce);
        assert!(matches!(state.after(&reset(), None), Next::Stop(None)));
        assert!(matches!(state.after(&refused(), None), Next::Retry(_)));
        let safe = attempts(&policy, Idempotency::SafeToRetry);
        assert!(matches!(safe.after(&reset(), None), Next::Retry(_)));
    }

    #[test]
    fn control_flow_and_denials_are_never_retried() {
        let state = attempts(
            &RetryPolicy::new().retry_if(|_| true),
            Idempotency::SafeToRetry,
        );
        for error in [
            Error::blocked(),
            Error::superseded(),
            Error::new(ErrorKind::Policy, "no"),
        ] {
            assert!(
                matches!(state.after(&error, None), Next::Stop(None)),
                "{error}"
            );
        }
    }

    #[test]
    fn the_limits_stop_retrying_and_say_what_to_change() {
        let mut state = attempts(
            &RetryPolicy::new().max_attempts(2),
            Idempotency::SafeToRetry,
        );
        state.made = 2;
        let Next::Stop(Some(note)) = state.after(&refused(), None) else {
            panic!("should stop")
        };
        assert!(note.contains("max_attempts"), "{note}");

        let policy = RetryPolicy::llm().max_elapsed(Duration::from_secs(10));
        let state = attempts(&policy, Idempotency::SafeToRetry);
        let Next::Stop(Some(note)) = state.after(&refused(), Some(Duration::from_secs(11))) else {
            panic!("a Retry-After past max_elapsed stops")
        };
        assert!(note.contains("max_elapsed"), "{note}");
        assert!(matches!(
            state.after(&refused(), Some(Duration::from_secs(4))),
            Next::Retry(delay) if delay == Duration::from_secs(4)
        ));
    }

    #[test]
    fn a_near_deadline_stops_retrying() {
        let runtime = Runtime::new(Never, Never, Fixed(NOW));
        let deadline = Deadline::at_unix_millis(NOW + 3_000).margin(Duration::from_millis(500));
        let policy = RetryPolicy::new().jitter(0.0);
        let state = Attempts::start(
            &policy,
            &runtime,
            Some((deadline, Bound::Host)),
            Idempotency::SafeToRetry,
        );
        assert!(
            matches!(state.after(&refused(), None), Next::Retry(_)),
            "1 s fits"
        );
        let Next::Stop(Some(note)) = state.after(&refused(), Some(Duration::from_secs(3))) else {
            panic!("3 s does not")
        };
        assert!(note.contains("host's deadline"), "{note}");
    }
}
