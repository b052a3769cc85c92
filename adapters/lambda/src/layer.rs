//! The outermost runtime layer: holds each invocation's request id from the moment the runtime
//! receives it until its response has been posted, whatever the event or the handler's outcome.
//!
//! It sits outside lambda_http's event parsing, so an event the handler never sees (a payload
//! that is not an HTTP event) is released as soon as the runtime has reported it, instead of
//! keeping the extension waiting until the function times out.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use lambda_runtime::LambdaInvocation;
use lambda_runtime::tower::{Layer, Service};
use pin_project_lite::pin_project;

use crate::holds::{Hold, Holds};

/// Wraps the runtime's service in [`HoldService`].
#[derive(Clone, Debug)]
pub(crate) struct HoldLayer {
    holds: Holds,
}

impl HoldLayer {
    pub(crate) fn new(holds: Holds) -> Self {
        Self { holds }
    }
}

impl<S> Layer<S> for HoldLayer {
    type Service = HoldService<S>;

    fn layer(&self, inner: S) -> HoldService<S> {
        HoldService {
            inner,
            holds: self.holds.clone(),
        }
    }
}

/// Holds the request id while the inner service handles the invocation and posts its response.
#[derive(Clone, Debug)]
pub(crate) struct HoldService<S> {
    inner: S,
    holds: Holds,
}

impl<S: Service<LambdaInvocation>> Service<LambdaInvocation> for HoldService<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = Held<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, invocation: LambdaInvocation) -> Held<S::Future> {
        let hold = self.holds.hold(&invocation.context.request_id);
        if hold.is_none() {
            tracing::warn!(
                request_id = invocation.context.request_id.as_str(),
                "invocation delivered twice; not holding the sandbox for the repeat"
            );
        }
        Held {
            inner: self.inner.call(invocation),
            hold,
        }
    }
}

pin_project! {
    /// The inner future, with the hold released as soon as it completes.
    #[derive(Debug)]
    pub(crate) struct Held<F> {
        #[pin]
        inner: F,
        hold: Option<Hold>,
    }
}

impl<F: Future> Future for Held<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let output = std::task::ready!(this.inner.poll(cx));
        this.hold.take();
        Poll::Ready(output)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use lambda_runtime::tower::{Service, ServiceExt, service_fn};
    use lambda_runtime::{Context, LambdaInvocation};
    use tokio::sync::oneshot;

    use super::*;

    fn invocation(request_id: &str) -> LambdaInvocation {
        let mut context = Context::default();
        context.request_id = request_id.to_owned();
        LambdaInvocation {
            parts: http::Response::new(()).into_parts().0,
            body: bytes::Bytes::new(),
            context,
        }
    }

    #[tokio::test]
    async fn holds_the_invocation_until_the_inner_service_is_done() {
        let holds = Holds::default();
        let (finish, finished) = oneshot::channel::<()>();
        let finished = std::sync::Mutex::new(Some(finished));
        let inner = service_fn(move |_: LambdaInvocation| {
            let finished = finished.lock().unwrap().take();
            async move {
                if let Some(finished) = finished {
                    finished.await.ok();
                }
                Ok::<(), rebuno::BoxError>(())
            }
        });
        let mut service = HoldLayer::new(holds.clone()).layer(inner);
        let call = service.ready().await.unwrap().call(invocation("r1"));
        let call = tokio::spawn(call);
        let released = tokio::spawn({
            let holds = holds.clone();
            async move { holds.wait("r1").await }
        });
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!released.is_finished(), "held while the runtime is on it");
        finish.send(()).unwrap();
        call.await.unwrap().unwrap();
        tokio::time::timeout(Duration::from_secs(1), released)
            .await
            .expect("released once the response is posted")
            .unwrap();
    }
}
