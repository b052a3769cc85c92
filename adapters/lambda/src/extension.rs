//! The internal extension: on each INVOKE event it waits until the runtime and the acknowledged
//! run of that request id are done, so Lambda does not freeze the sandbox under the run.

use std::convert::Infallible;

use lambda_extension::{Extension, InvokeEvent, LambdaEvent, NextEvent, RegisteredExtension};
use lambda_runtime::tower::Service;

use crate::deadline::{DeadlinePolicy, time_left, unix_millis};
use crate::error::Error;
use crate::holds::Holds;

/// Registers the extension for INVOKE events. Must finish before the runtime's first `/next`.
///
/// # Errors
///
/// [`ErrorKind::Extension`](crate::ErrorKind::Extension) when the Extensions API refuses it.
pub(crate) async fn register(
    name: &str,
    holds: Holds,
) -> Result<RegisteredExtension<impl Service<LambdaEvent, Response = (), Error = Infallible>>, Error>
{
    let processor = lambda_extension::service_fn(move |event: LambdaEvent| {
        let holds = holds.clone();
        async move {
            if let NextEvent::Invoke(invoke) = event.next {
                wait_for_release(&holds, &invoke).await;
            }
            Ok::<(), Infallible>(())
        }
    });
    Extension::new()
        .with_extension_name(name)
        .with_events(&["INVOKE"])
        .with_events_processor(processor)
        .register()
        .await
        .map_err(Error::extension)
}

/// Waits for the invocation's holds, but never past its deadline: Lambda ends the invocation
/// there anyway, and an emulator that lost the runtime's side must not hang forever.
async fn wait_for_release(holds: &Holds, invoke: &InvokeEvent) {
    let request_id = invoke.request_id.as_str();
    let now = unix_millis();
    // Never hold longer than Lambda's longest invocation, whatever an emulator sends.
    let deadline = DeadlinePolicy::Follow
        .resolve(invoke.deadline_ms, now)
        .unwrap_or_else(|| now.saturating_add(MAX_HOLD_MS));
    let budget = time_left(deadline, now);
    tracing::debug!(
        request_id,
        ?budget,
        "holding the sandbox for the background run"
    );
    if tokio::time::timeout(budget, holds.wait(request_id))
        .await
        .is_err()
    {
        holds.forget(request_id);
        tracing::warn!(
            request_id,
            "invocation deadline reached with the run still going; the kernel re-delivers after the lease"
        );
    }
}

/// The longest a hold may last when the deadline cannot be read: Lambda's 15-minute limit.
const MAX_HOLD_MS: u64 = 15 * 60 * 1000;

#[cfg(test)]
mod tests {
    use super::*;

    use std::time::Duration;

    #[test]
    fn time_left_saturates() {
        assert_eq!(time_left(1_500, 1_000), Duration::from_millis(500));
        assert_eq!(time_left(1_000, 1_500), Duration::ZERO);
    }

    #[tokio::test]
    async fn gives_up_at_the_deadline() {
        let holds = Holds::default();
        let _run = holds.hold("late").unwrap();
        let invoke: InvokeEvent = serde_json::from_value(serde_json::json!({
            "deadlineMs": unix_millis() + 50,
            "requestId": "late",
            "invokedFunctionArn": "arn:aws:lambda:us-east-1:000000000000:function:f",
        }))
        .unwrap();
        tokio::time::timeout(Duration::from_secs(2), wait_for_release(&holds, &invoke))
            .await
            .expect("the deadline bounds the wait");
    }
}
