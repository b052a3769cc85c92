//! The user's handler, with its input and output types erased.

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::HandlerError;
use crate::rt::{BoxFuture, MaybeSend, MaybeSync};

/// A handler run: the output as JSON, or the handler's error.
pub(crate) type HandlerFuture = BoxFuture<'static, Result<Value, HandlerError>>;

/// A handler set on the builder: decodes the input, runs, encodes the output.
pub(crate) trait ErasedHandler: MaybeSend + MaybeSync {
    /// Starts a run, or says why the input does not fit (for `input_invalid`).
    fn start(&self, input: Value) -> Result<HandlerFuture, String>;
}

/// Adapts `Fn(I) -> Future<Output = Result<O, E>>`.
pub(crate) struct FnHandler<F, I>(pub(crate) F, pub(crate) std::marker::PhantomData<fn(I)>);

impl<F, I, O, E, Fut> ErasedHandler for FnHandler<F, I>
where
    F: Fn(I) -> Fut + MaybeSend + MaybeSync + 'static,
    Fut: Future<Output = Result<O, E>> + MaybeSend + 'static,
    I: DeserializeOwned,
    O: Serialize,
    E: Into<HandlerError>,
{
    fn start(&self, input: Value) -> Result<HandlerFuture, String> {
        let input: I = serde_json::from_value(input).map_err(|e| e.to_string())?;
        let future = (self.0)(input);
        Ok(Box::pin(async move {
            let output = future.await.map_err(Into::into)?;
            serde_json::to_value(output).map_err(HandlerError::from)
        }))
    }
}
