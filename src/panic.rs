//! Panics in user code (a handler, a tool or step body, a resource driver) turned into errors
//! at the boundary where the SDK can record them.
//!
//! On wasm32 panics abort, so these boundaries only matter on native targets.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;

/// Runs `future`, and returns the panic's message instead of unwinding if it panics.
///
/// The future is user code polled to completion or abandoned here; nothing it shares with the
/// SDK is left half-updated by an unwind (locks are taken poison-tolerantly), so asserting
/// unwind safety is sound.
pub(crate) async fn catch_panic<F: Future>(future: F) -> Result<F::Output, String> {
    AssertUnwindSafe(future)
        .catch_unwind()
        .await
        .map_err(|payload| message(payload.as_ref()).to_owned())
}

/// The text a panic was raised with, when it has one.
fn message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&'static str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_become_their_message() {
        let run = |f: fn()| {
            let mut caught = std::pin::pin!(catch_panic(async move { f() }));
            let mut context = std::task::Context::from_waker(std::task::Waker::noop());
            match caught.as_mut().poll(&mut context) {
                std::task::Poll::Ready(outcome) => outcome,
                std::task::Poll::Pending => panic!("the future never waits"),
            }
        };
        assert_eq!(run(|| panic!("static")), Err("static".to_owned()));
        assert_eq!(
            run(|| panic!("formatted {}", 7)),
            Err("formatted 7".to_owned())
        );
        assert_eq!(
            run(|| std::panic::panic_any(42_u8)),
            Err("(no message)".to_owned())
        );
        assert_eq!(run(|| ()), Ok(()));
    }
}
