//! What a resource driver implements.

use std::fmt;
use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::DispatchEnd;
#[cfg(doc)]
use crate::context::Suspension;
use crate::error::BoxError;
use crate::rt::{MaybeSend, MaybeSync};

/// Creates, reopens and checkpoints one kind of external state (a sandbox, a directory, a
/// database file).
///
/// The kernel stores the JSON `Binding` and the checkpoint references; the driver stores the
/// captured contents. Keep [`driver_id`](Self::driver_id) and
/// [`configuration`](Self::configuration) stable for each resource key.
///
/// ```no_run
/// use rebuno::resource::ResourceDriver;
/// use rebuno::BoxError;
///
/// #[derive(Clone)]
/// struct Counter(std::sync::Arc<std::sync::atomic::AtomicU64>);
///
/// struct Counters;
///
/// impl ResourceDriver for Counters {
///     type Handle = Counter;
///     type Binding = u64; // which counter
///
///     fn driver_id(&self) -> String { "example.counter.v1".into() }
///
///     async fn create(&self, checkpoint: Option<&str>) -> Result<(Counter, u64), BoxError> {
///         let start = checkpoint.map(str::parse).transpose()?.unwrap_or(0);
///         Ok((Counter(std::sync::Arc::new(start.into())), 7))
///     }
///
///     async fn open(&self, _binding: u64) -> Result<Counter, BoxError> {
///         Ok(Counter(std::sync::Arc::new(0.into())))
///     }
///
///     async fn checkpoint(&self, handle: &Counter) -> Result<String, BoxError> {
///         Ok(handle.0.load(std::sync::atomic::Ordering::SeqCst).to_string())
///     }
/// }
/// ```
pub trait ResourceDriver: MaybeSend + MaybeSync + 'static {
    /// What the handler and tools use: a client of the resource. Cloned for every caller.
    type Handle: Clone + MaybeSend + MaybeSync + 'static;
    /// Where the resource is (a sandbox id, a path): stored by the kernel, given back to
    /// [`open`](Self::open) on later dispatches. Never put credentials in it.
    type Binding: Serialize + DeserializeOwned + MaybeSend;

    /// A stable identifier of the implementation, e.g. `"example.e2b.v1"`.
    fn driver_id(&self) -> String;

    /// Settings that shape the resource, as JSON, without credentials. Defaults to `null`.
    fn configuration(&self) -> Value {
        Value::Null
    }

    /// Keep coverage until an affecting tool or local step starts, rather than until the next
    /// live step of any kind. Use it only when every change goes through declared tools and
    /// steps. Defaults to `false`.
    fn coverage_reuse(&self) -> bool {
        false
    }

    /// Creates an isolated resource from `checkpoint` (a fork's restored state) or, when
    /// `None`, from the initial environment. Return [`CheckpointUnavailable`] when the
    /// checkpoint is gone: the forked execution then fails.
    fn create(
        &self,
        checkpoint: Option<&str>,
    ) -> impl Future<Output = Result<(Self::Handle, Self::Binding), BoxError>> + MaybeSend;

    /// A handle for the resource created earlier in this execution.
    fn open(
        &self,
        binding: Self::Binding,
    ) -> impl Future<Output = Result<Self::Handle, BoxError>> + MaybeSend;

    /// Captures the current state and returns an immutable reference to it; the handle stays
    /// usable.
    ///
    /// Needed only with checkpointing on ([`Checkpoints::every`]). The default captures
    /// nothing: a resource registered with checkpoints on then fails in
    /// [`resource`](super::resource) with [`ErrorKind::Config`](crate::ErrorKind::Config),
    /// naming the driver, before any step runs.
    fn checkpoint(
        &self,
        handle: &Self::Handle,
    ) -> impl Future<Output = Result<String, BoxError>> + MaybeSend {
        let _ = handle;
        let unsupported = NoCheckpoints(self.driver_id());
        async move { Err(BoxError::from(unsupported)) }
    }

    /// Called once when a dispatch that opened this resource ends, after the kernel has its
    /// outcome: the execution [completed](DispatchEnd::Completed) or
    /// [failed](DispatchEnd::Failed) (nothing will open the resource again: forks start from
    /// checkpoints), or the dispatch [suspended](DispatchEnd::Suspended):
    /// [`Suspension::Blocked`] or [`Suspension::DeadlineReached`] (the execution is delivered
    /// again and [`open`](Self::open) reopens the binding), [`Suspension::Terminated`] (it ended
    /// elsewhere). Not called when a newer delivery took over ([`Suspension::LeaseSuperseded`]:
    /// that run owns the resource now), nor when the kernel could not be told the outcome (it
    /// delivers the execution again).
    ///
    /// Use it to stop paying for a resource: pause a sandbox while the execution waits, delete
    /// it once the execution is done. It runs inside the host's background continuation; an
    /// error is logged and changes nothing else. The default does nothing.
    fn release(
        &self,
        handle: &Self::Handle,
        end: DispatchEnd,
    ) -> impl Future<Output = Result<(), BoxError>> + MaybeSend {
        let _ = (handle, end);
        async { Ok(()) }
    }
}

/// What the default [`ResourceDriver::checkpoint`] answers: the driver captures nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NoCheckpoints(pub(crate) String);

impl fmt::Display for NoCheckpoints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "driver {:?} does not capture checkpoints: implement ResourceDriver::checkpoint, or \
             register the resource with Checkpoints::never()",
            self.0
        )
    }
}

impl std::error::Error for NoCheckpoints {}

/// The checkpoint a forked execution should start from no longer exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointUnavailable(pub String);

impl fmt::Display for CheckpointUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "checkpoint unavailable: {}", self.0)
    }
}

impl std::error::Error for CheckpointUnavailable {}

/// When to capture checkpoints of a resource.
///
/// Off by default ([`Checkpoints::never`]), as in the Python and TypeScript SDKs' current
/// docs: the resource is created and reopened, and a fork starts from the initial environment.
/// [`Checkpoints::every`] turns it on; its defaults (every step, and on completion) are the
/// seeds' defaults for a checkpoint policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Checkpoints {
    /// Capture after every Nth live tool call or local step that affects the resource; 0 never.
    pub every_steps: u32,
    /// Capture when the handler returns normally, if the resource is not covered.
    pub on_completion: bool,
}

impl Checkpoints {
    /// After every `n` affecting steps, and on completion. `n` must be at least 1:
    /// [`resource`](super::resource) refuses `every(0)` with
    /// [`ErrorKind::Config`](crate::ErrorKind::Config) (use [`Checkpoints::never`] to turn
    /// checkpoints off).
    pub fn every(n: u32) -> Self {
        Self {
            every_steps: n,
            on_completion: true,
        }
    }

    /// Never: the resource is created and reopened, but forks start from the initial
    /// environment.
    pub fn never() -> Self {
        Self {
            every_steps: 0,
            on_completion: false,
        }
    }

    /// Whether to capture on completion too.
    pub fn on_completion(mut self, capture: bool) -> Self {
        self.on_completion = capture;
        self
    }
}

impl Checkpoints {
    /// Why this policy cannot be used, if it cannot: a capture on completion asks for
    /// checkpoints while `every_steps` 0 turns them off, which is what `every(0)` builds.
    pub(crate) fn refusal(&self) -> Option<String> {
        (self.every_steps == 0 && self.on_completion).then(|| {
            "Checkpoints::every(0): every_steps must be at least 1; use Checkpoints::never() \
             to turn checkpoints off"
                .to_owned()
        })
    }
}

impl Default for Checkpoints {
    /// Off: [`Checkpoints::never`].
    fn default() -> Self {
        Self::never()
    }
}
