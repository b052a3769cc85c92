//! Waiting on executions: [`DevKernel::run`], [`DevKernel::wait_terminal`],
//! [`DevKernel::wait_until`], [`DevKernel::wait_for_event`], and what a wait that gives up says.

use std::time::Duration;

use rebuno::wire::{Event, Execution, ExecutionStatus};

use super::error::{LAST_EVENTS, summary};
use super::{DevKernel, DevKernelError};
use crate::EventKind;
use crate::kernel::NewExecution;

/// How long [`DevKernel::run`] waits for an execution to end.
const RUN_TIMEOUT: Duration = Duration::from_secs(30);

impl DevKernel {
    /// Creates an execution of `agent_id` with `input` and waits up to 30 s for it to end
    /// (`completed`, `failed` or `cancelled`); see [`serve`](Self::serve) for an example.
    /// For a session, a parent or another timeout, use
    /// [`create_execution`](Self::create_execution) and [`wait_terminal`](Self::wait_terminal).
    /// [`run_completed`](Self::run_completed) also checks that it completed.
    ///
    /// ```no_run
    /// # async fn demo(kernel: rebuno_devkernel::DevKernel) -> Result<(), rebuno_devkernel::DevKernelError> {
    /// let done = kernel.run("hello", serde_json::json!({"name": "Ada"})).await?;
    /// println!("{:?} {:?}", done.status, done.output);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The errors of [`create_execution`](Self::create_execution) (an unknown agent is named,
    /// with the registered ones); [`DevKernelError::Timeout`] when the execution is still going
    /// after 30 s.
    pub async fn run(
        &self,
        agent_id: &str,
        input: serde_json::Value,
    ) -> Result<Execution, DevKernelError> {
        let created = self
            .create_execution(NewExecution::new(agent_id, input))
            .await
            .map_err(|error| match error {
                DevKernelError::Kernel(error) => self.unknown_agent(error, agent_id),
                other => other,
            })?;
        self.wait_terminal(&created.id, RUN_TIMEOUT).await
    }

    /// [`run`](Self::run), for a test that expects the execution to complete: an execution
    /// that failed or was cancelled is an error saying how it ended, why (its
    /// `failure_reason`) and its last events, so the test's `?` prints the cause.
    ///
    /// ```no_run
    /// # async fn demo(kernel: rebuno_devkernel::DevKernel) -> Result<(), Box<dyn std::error::Error>> {
    /// use rebuno_devkernel::ExecutionExt;
    /// let done = kernel.run_completed("hello", serde_json::json!("Ada")).await?;
    /// assert_eq!(done.output_as::<String>()?, "hello, Ada");
    /// // On failure, `?` returns: execution … of agent "hello" ended without completing:
    /// // it failed: agent_error: …; last events: step.failed `greet` (…), execution.failed (…)
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// Those of [`run`](Self::run), and [`DevKernelError::Ended`] when the execution ended
    /// otherwise than `completed`.
    pub async fn run_completed(
        &self,
        agent_id: &str,
        input: serde_json::Value,
    ) -> Result<Execution, DevKernelError> {
        let done = self.run(agent_id, input).await?;
        if done.status == ExecutionStatus::Completed {
            return Ok(done);
        }
        Err(DevKernelError::Ended {
            waited_for: "completing".to_owned(),
            last_events: self.last_events(&done.id),
            execution: Box::new(done),
        })
    }

    /// Waits until the execution is `completed`, `failed` or `cancelled`.
    ///
    /// # Errors
    ///
    /// [`DevKernelError::NotFound`]; [`DevKernelError::Timeout`], which says where the
    /// execution stands and its last events.
    pub async fn wait_terminal(
        &self,
        id: &str,
        timeout: Duration,
    ) -> Result<Execution, DevKernelError> {
        self.wait_status(id, timeout, "its end", ExecutionStatus::is_terminal)
            .await
    }

    /// Waits until the execution's status satisfies `done`. An execution that ends (or has
    /// ended) in a status `done` refuses never changes again, so the wait returns at once.
    ///
    /// ```no_run
    /// # async fn demo(kernel: rebuno_devkernel::DevKernel, id: &str) -> Result<(), rebuno_devkernel::DevKernelError> {
    /// use rebuno::wire::ExecutionStatus;
    /// let blocked = kernel
    ///     .wait_until(id, std::time::Duration::from_secs(10), |s| s == ExecutionStatus::Blocked)
    ///     .await?; // on a failed execution: "ended without …: it failed: <its failure reason>"
    /// # let _ = blocked;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`DevKernelError::NotFound`]; [`DevKernelError::Ended`] when it ended in a status
    /// `done` refuses; [`DevKernelError::Timeout`]. Both say how the execution stands (status,
    /// failure reason or output) and list its last events.
    pub async fn wait_until(
        &self,
        id: &str,
        timeout: Duration,
        done: impl Fn(ExecutionStatus) -> bool,
    ) -> Result<Execution, DevKernelError> {
        self.wait_status(id, timeout, "a status the wait accepts", done)
            .await
    }

    async fn wait_status(
        &self,
        id: &str,
        timeout: Duration,
        waited_for: &str,
        done: impl Fn(ExecutionStatus) -> bool,
    ) -> Result<Execution, DevKernelError> {
        let cell = self.cell(id)?;
        let mut status = cell.subscribe();
        // The watch's guard is dropped before the execution is read: holding it while taking
        // the execution's lock deadlocks with `publish`, which sends under that lock.
        let watched = async {
            let settled = status.wait_for(|s| done(*s) || s.is_terminal()).await;
            settled.map(|s| *s)
        };
        match tokio::time::timeout(timeout, watched).await {
            Ok(Ok(reached)) if done(reached) => self
                .execution(id)
                .ok_or_else(|| DevKernelError::NotFound(id.to_owned())),
            Ok(Ok(_)) => Err(self.gave_up(id, waited_for, None)),
            Ok(Err(_)) => Err(DevKernelError::NotFound(id.to_owned())),
            Err(_) => Err(self.gave_up(id, waited_for, Some(timeout))),
        }
    }

    /// Waits, without polling, until the execution's log holds an event of `kind`, and
    /// returns the first one. An execution that has ended without one never will: the wait
    /// returns at once.
    ///
    /// ```no_run
    /// # async fn demo(kernel: rebuno_devkernel::DevKernel, id: &str) -> Result<(), rebuno_devkernel::DevKernelError> {
    /// use rebuno_devkernel::EventKind;
    /// let granted = kernel.wait_for_event(id, EventKind::ApprovalRequested, std::time::Duration::from_secs(5)).await?;
    /// println!("{}", granted.payload);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`DevKernelError::NotFound`]; [`DevKernelError::Ended`] when the execution ended
    /// without such an event; [`DevKernelError::Timeout`]. Both say how the execution stands
    /// and list its last events.
    pub async fn wait_for_event(
        &self,
        id: &str,
        kind: EventKind,
        timeout: Duration,
    ) -> Result<Event, DevKernelError> {
        let cell = self.cell(id)?;
        let mut seq = cell.subscribe_seq();
        let find = || {
            self.events(id)
                .into_iter()
                .find(|e| e.kind == kind.as_str())
        };
        // The terminal event is the last one an execution logs, in the same critical section
        // as its status: ended without the event, it never comes.
        let ended = || self.execution(id).is_none_or(|e| e.status.is_terminal());
        let waited = tokio::time::timeout(timeout, async {
            loop {
                seq.borrow_and_update();
                if let Some(event) = find() {
                    return Some(Ok(event));
                }
                if ended() {
                    return Some(Err(()));
                }
                seq.changed().await.ok()?;
            }
        });
        let waited_for = format!("event `{}`", kind.as_str());
        match waited.await {
            Ok(Some(Ok(event))) => Ok(event),
            Ok(Some(Err(()))) => Err(self.gave_up(id, &waited_for, None)),
            Ok(None) => Err(DevKernelError::NotFound(id.to_owned())),
            Err(_) => Err(self.gave_up(id, &waited_for, Some(timeout))),
        }
    }

    /// The error of a wait that gave up: [`DevKernelError::Ended`] when the execution has
    /// ended, else [`DevKernelError::Timeout`] after `after`.
    fn gave_up(&self, id: &str, waited_for: &str, after: Option<Duration>) -> DevKernelError {
        let Some(execution) = self.execution(id) else {
            return DevKernelError::NotFound(id.to_owned());
        };
        let (waited_for, last_events) = (waited_for.to_owned(), self.last_events(id));
        let execution = Box::new(execution);
        match after {
            Some(after) if !execution.status.is_terminal() => DevKernelError::Timeout {
                after,
                waited_for,
                execution,
                last_events,
            },
            _ => DevKernelError::Ended {
                waited_for,
                execution,
                last_events,
            },
        }
    }

    /// The execution's last events, one short line each, for an error.
    fn last_events(&self, id: &str) -> Vec<String> {
        let events = self.events(id);
        let from = events.len().saturating_sub(LAST_EVENTS);
        events[from..].iter().map(summary).collect()
    }
}

#[cfg(test)]
mod wait_tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::DevKernel;
    use crate::NewExecution;

    /// `wait_until` must not hold the status watch while it reads the execution: `publish`
    /// sends to that watch under the execution's lock, so the two used to deadlock.
    #[test]
    fn waiting_never_deadlocks_with_a_publishing_kernel() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let kernel = runtime.block_on(DevKernel::start()).unwrap();
        kernel
            .register_agent(crate::AgentSpec::new(
                "nobody",
                "http://127.0.0.1:9/webhook",
                "s",
            ))
            .unwrap();
        let id = runtime
            .block_on(kernel.create_execution(NewExecution::new("nobody", serde_json::json!({}))))
            .unwrap()
            .id;
        let cell = kernel.cell(&id).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let publisher = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    cell.publish();
                }
            })
        };
        let (done, finished) = std::sync::mpsc::channel();
        let waiter = kernel.clone();
        let handle = runtime.handle().clone();
        std::thread::spawn(move || {
            for _ in 0..20_000 {
                let waited =
                    handle.block_on(waiter.wait_until(&id, Duration::from_secs(5), |_| true));
                waited.unwrap();
            }
            let _ = done.send(());
        });
        let result = finished.recv_timeout(Duration::from_secs(20));
        stop.store(true, Ordering::Relaxed);
        if result.is_err() {
            // Deadlocked threads never finish: leak the runtime rather than wait on them.
            std::mem::forget(runtime);
            std::mem::forget(kernel);
            panic!("wait_until deadlocked with publish");
        }
        publisher.join().unwrap();
    }
}
