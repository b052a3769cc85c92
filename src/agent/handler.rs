//! The user's handler, with its input and output types erased, and the input check against the
//! schema the agent publishes.

use std::future::Future;
use std::sync::Arc;

use futures_util::FutureExt as _;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::HandlerError;
use crate::rt::{BoxFuture, MaybeSend, MaybeSync};

/// A handler run: the output as JSON, or the handler's error.
pub(crate) type HandlerFuture = BoxFuture<'static, Result<Value, HandlerError>>;

/// A handler set on the builder: decodes the input, runs, encodes the output.
pub(crate) trait ErasedHandler: MaybeSend + MaybeSync {
    /// Starts a run, or says why the input does not fit (for `input_invalid`). The input is
    /// borrowed from the execution's context, which keeps the one copy of it.
    fn start(&self, input: &Value) -> Result<HandlerFuture, String>;
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
    fn start(&self, input: &Value) -> Result<HandlerFuture, String> {
        let input = I::deserialize(input).map_err(|e| e.to_string())?;
        // A combinator, not an `async move` block awaiting the future: such a block keeps the
        // future twice (once captured, once being awaited), which doubled the memory of every
        // execution waiting in its handler.
        Ok(Box::pin((self.0)(input).map(|outcome| {
            let output = outcome.map_err(Into::into)?;
            serde_json::to_value(output).map_err(HandlerError::from)
        })))
    }
}

/// A handler whose input is first checked against the input schema the agent publishes.
struct SchemaChecked {
    schema: Value,
    handler: Arc<dyn ErasedHandler>,
}

impl ErasedHandler for SchemaChecked {
    fn start(&self, input: &Value) -> Result<HandlerFuture, String> {
        if let Some(problems) = crate::schema::check(&self.schema, input) {
            return Err(format!("input validation failed: {problems}"));
        }
        self.handler.start(input)
    }
}

/// `handler`, checking every input against `schema` (the agent's published input schema) before
/// decoding it, so an input that breaks several rules reports each of them (up to
/// [`MAX_PROBLEMS`](crate::schema::MAX_PROBLEMS)) instead of serde's first error only.
pub(crate) fn checked(
    handler: Arc<dyn ErasedHandler>,
    schema: Option<&Value>,
) -> Arc<dyn ErasedHandler> {
    match schema {
        Some(schema) => Arc::new(SchemaChecked {
            schema: schema.clone(),
            handler,
        }),
        None => handler,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Order {
        item: String,
        count: u32,
    }

    fn order_handler() -> Arc<dyn ErasedHandler> {
        Arc::new(FnHandler(
            |order: Order| async move { Ok::<_, HandlerError>(order.count) },
            std::marker::PhantomData,
        ))
    }

    fn detail(handler: &dyn ErasedHandler, input: Value) -> String {
        handler.start(&input).err().unwrap_or_default()
    }

    /// The boxed run holds the user's future once: an `async move` block awaiting it held it
    /// twice (measured on 2026-12-04: 4,312 bytes for the benchmark's 2,152-byte handler).
    #[test]
    fn a_handler_future_is_held_once() {
        let handler = FnHandler(
            |_: Value| async move {
                let kept = [1u8; 4096];
                std::future::ready(()).await;
                Ok::<_, HandlerError>(std::hint::black_box(&kept).len())
            },
            std::marker::PhantomData,
        );
        let run = handler.start(&Value::Null).unwrap();
        let size = std::mem::size_of_val(&*run);
        assert!(
            (4096..4096 + 256).contains(&size),
            "the run is {size} bytes"
        );
    }

    #[test]
    fn without_a_schema_serde_names_its_first_error() {
        let plain = checked(order_handler(), None);
        assert_eq!(detail(&*plain, json!({})), "missing field `item`");
    }

    #[test]
    fn with_a_schema_every_problem_is_named() {
        let schema = json!({
            "type": "object",
            "properties": { "item": { "type": "string" }, "count": { "type": "integer", "minimum": 0 } },
            "required": ["item", "count"]
        });
        let strict = checked(order_handler(), Some(&schema));
        assert_eq!(
            detail(&*strict, json!({"count": -1})),
            "input validation failed: 2 errors: input.item: missing; input.count: expected a \
             number at least 0"
        );
        assert!(strict.start(&json!({"item": "tea", "count": 2})).is_ok());
    }
}
