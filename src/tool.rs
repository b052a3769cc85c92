//! Tools: actions routed through the kernel, recorded as `tool_call` steps.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::{Effect, current};
use crate::error::{BoxError, Error, ErrorKind, HandlerError, Result};
use crate::idempotency::Idempotency;
use crate::retry::RetryPolicy;
use crate::rt::{BoxFuture, MaybeSend, MaybeSync};

/// What a tool is, as frameworks and LLMs see it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolSpec {
    /// The tool id both the LLM and the kernel see.
    pub name: String,
    /// Shown to the LLM.
    pub description: String,
    /// JSON Schema of the arguments, for frameworks that read it.
    pub input_schema: Option<Value>,
    /// Replay behaviour.
    pub idempotency: Idempotency,
    /// Registered resources the tool may change.
    pub resources: Vec<String>,
}

/// Starts defining a tool named `name`.
///
/// ```no_run
/// use serde::Deserialize;
///
/// #[derive(serde::Serialize, Deserialize)]
/// struct Search { query: String }
///
/// let search = rebuno::define_tool("search")
///     .description("Search the corpus")
///     .execute(|args: Search| async move {
///         Ok::<_, std::io::Error>(vec![format!("result for {}", args.query)])
///     });
/// # async fn run(search: rebuno::Tool<Search, Vec<String>>) -> rebuno::Result<()> {
/// let hits = search.call(Search { query: "rust".into() }).await?;
/// # Ok(()) }
/// ```
pub fn define_tool(name: impl Into<String>) -> ToolBuilder {
    ToolBuilder {
        spec: ToolSpec {
            name: name.into(),
            description: String::new(),
            input_schema: None,
            idempotency: Idempotency::default(),
            resources: Vec::new(),
        },
        transform_args: None,
        to_result: None,
        retry: RetryPolicy::new(),
    }
}

/// The same builder as [`define_tool`], named as in the other Rebuno SDKs for tools that are
/// not plain functions (framework tool objects, schema-only tools): finish it with
/// [`invoke`](ToolBuilder::invoke), the JSON seam.
///
/// ```no_run
/// use serde_json::{Value, json};
///
/// let search = rebuno::wrap_tool("docs_search")
///     .description("Search the docs")
///     .input_schema(json!({"type": "object", "properties": {"q": {"type": "string"}}}))
///     .transform_args(rebuno::mcp::strip_nulls)
///     .invoke(|args: Value| async move { Ok::<_, rebuno::HandlerError>(json!({"hits": [args["q"]]})) });
/// ```
pub fn wrap_tool(name: impl Into<String>) -> ToolBuilder {
    define_tool(name)
}

/// A JSON-to-JSON mapping of a tool's arguments or result, `Send + Sync` where the target has
/// threads (trait objects cannot name `MaybeSend` beside `Fn` directly).
pub(crate) trait JsonMap: Fn(Value) -> Value + MaybeSend + MaybeSync {}

impl<F: Fn(Value) -> Value + MaybeSend + MaybeSync> JsonMap for F {}

pub(crate) type Mapper = Arc<dyn JsonMap>;

/// Builds a [`Tool`]; finish with [`execute`](Self::execute) (a typed body) or
/// [`invoke`](Self::invoke) (a JSON body).
#[derive(Clone)]
#[must_use = "a ToolBuilder does nothing until `execute` or `invoke` is called"]
pub struct ToolBuilder {
    spec: ToolSpec,
    transform_args: Option<Mapper>,
    to_result: Option<Mapper>,
    retry: RetryPolicy,
}

impl fmt::Debug for ToolBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolBuilder")
            .field("spec", &self.spec)
            .field("transform_args", &self.transform_args.is_some())
            .field("to_result", &self.to_result.is_some())
            .field("retry", &self.retry)
            .finish()
    }
}

impl ToolBuilder {
    /// The description shown to the LLM.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.spec.description = description.into();
        self
    }

    /// The JSON Schema of the arguments.
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.spec.input_schema = Some(schema);
        self
    }

    /// The JSON Schema of the arguments, derived from their Rust type.
    #[cfg(feature = "schemars")]
    pub fn input_schema_for<A: schemars::JsonSchema>(self) -> Self {
        self.input_schema(crate::schema::of::<A>())
    }

    /// Replay behaviour; the default is [`Idempotency::SafeToRetry`].
    pub fn idempotency(mut self, idempotency: Idempotency) -> Self {
        self.spec.idempotency = idempotency;
        self
    }

    /// The registered resources the tool may change.
    pub fn resources<I, S>(mut self, keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.spec.resources = keys.into_iter().map(Into::into).collect();
        self
    }

    /// How a failing body is run again before its outcome is recorded; the default,
    /// [`RetryPolicy::new`], retries errors that say they are transient up to 3 attempts
    /// within 60 s, and an [`Idempotency::AtMostOnce`] body only when its error proves nothing
    /// was sent. [`RetryPolicy::none`] runs the body once. See [`crate::retry`].
    ///
    /// Each retry gets the arguments decoded again from their recorded JSON.
    ///
    /// ```no_run
    /// use rebuno::{Idempotency, RetryPolicy};
    ///
    /// let reply = rebuno::define_tool("send_reply")
    ///     .idempotency(Idempotency::AtMostOnce)
    ///     .retry(RetryPolicy::new().max_attempts(4))
    ///     .execute(|text: String| async move { Ok::<_, std::io::Error>(text.len()) });
    /// ```
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Maps the caller's arguments, as JSON, before they are recorded and reach the body (for
    /// example [`mcp::strip_nulls`](crate::mcp::strip_nulls)). With a typed body the mapped JSON
    /// must still fit the argument type, or the call fails with [`ErrorKind::Serde`].
    pub fn transform_args(
        mut self,
        map: impl Fn(Value) -> Value + MaybeSend + MaybeSync + 'static,
    ) -> Self {
        self.transform_args = Some(Arc::new(map));
        self
    }

    /// Maps the body's result, as JSON, before it is recorded (for example
    /// [`mcp::flatten`](crate::mcp::flatten)); replays return the mapped value. With a typed
    /// body the mapped JSON must still fit the result type, or the call fails as a tool error.
    pub fn to_result(
        mut self,
        map: impl Fn(Value) -> Value + MaybeSend + MaybeSync + 'static,
    ) -> Self {
        self.to_result = Some(Arc::new(map));
        self
    }

    /// The typed body: runs only when the kernel says `proceed`.
    ///
    /// Its result is recorded as JSON and decoded again on replay, so `R` must own its data
    /// (`String`, not `&str`).
    pub fn execute<A, R, E, F, Fut>(self, body: F) -> Tool<A, R>
    where
        A: Serialize + DeserializeOwned + MaybeSend + 'static,
        R: Serialize + DeserializeOwned + MaybeSend + 'static,
        F: Fn(A) -> Fut + MaybeSend + MaybeSync + 'static,
        Fut: Future<Output = std::result::Result<R, E>> + MaybeSend + 'static,
        E: Into<HandlerError>,
    {
        let to_result = self.to_result;
        let body = move |args: A| {
            let future = body(args);
            let to_result = to_result.clone();
            Box::pin(async move {
                let result = future.await.map_err(|e| e.into().into_inner())?;
                match to_result {
                    Some(map) => remap(result, map.as_ref()).map_err(|e| {
                        format!("to_result's value does not fit the tool's result type: {e}").into()
                    }),
                    None => Ok(result),
                }
            }) as BoxFuture<'static, _>
        };
        let prepare = self.transform_args.map(|map| {
            Arc::new(move |args: A| {
                remap(args, map.as_ref()).map_err(|e| {
                    Error::serde(
                        "transform_args' value does not fit the tool's argument type",
                        e,
                    )
                })
            }) as Arc<dyn Prepare<A>>
        });
        Tool {
            spec: Arc::new(self.spec),
            body: Arc::new(body),
            prepare,
            retry: self.retry,
            _types: PhantomData,
        }
    }

    /// The JSON body, for tools whose arguments and result are plain JSON (framework tool
    /// objects, MCP tools): runs only when the kernel says `proceed`.
    pub fn invoke<E, F, Fut>(self, body: F) -> Tool<Value, Value>
    where
        F: Fn(Value) -> Fut + MaybeSend + MaybeSync + 'static,
        Fut: Future<Output = std::result::Result<Value, E>> + MaybeSend + 'static,
        E: Into<HandlerError>,
    {
        self.execute(body)
    }
}

/// Passes `value` through `map` as JSON and decodes it back into its type.
fn remap<T: Serialize + DeserializeOwned>(value: T, map: &dyn JsonMap) -> serde_json::Result<T> {
    serde_json::from_value(map(serde_json::to_value(value)?))
}

/// A tool body with its types erased to one shape.
trait Body<A, R>: MaybeSend + MaybeSync {
    fn run(&self, args: A) -> BoxFuture<'static, std::result::Result<R, BoxError>>;
}

impl<A, R, F> Body<A, R> for F
where
    F: Fn(A) -> BoxFuture<'static, std::result::Result<R, BoxError>> + MaybeSend + MaybeSync,
{
    fn run(&self, args: A) -> BoxFuture<'static, std::result::Result<R, BoxError>> {
        self(args)
    }
}

/// A durable tool: every call is submitted to the kernel first, so policy applies, recorded
/// results replay on resume, and the call shows in the audit trail.
///
/// Cheap to clone.
pub struct Tool<A, R> {
    spec: Arc<ToolSpec>,
    body: Arc<dyn Body<A, R>>,
    prepare: Option<Arc<dyn Prepare<A>>>,
    retry: RetryPolicy,
    _types: PhantomData<fn(A) -> R>,
}

/// Maps the caller's arguments before they are recorded and passed to the body.
trait Prepare<A>: MaybeSend + MaybeSync {
    fn apply(&self, args: A) -> Result<A>;
}

impl<A, F: Fn(A) -> Result<A> + MaybeSend + MaybeSync> Prepare<A> for F {
    fn apply(&self, args: A) -> Result<A> {
        self(args)
    }
}

impl<A, R> Clone for Tool<A, R> {
    fn clone(&self) -> Self {
        Self {
            spec: Arc::clone(&self.spec),
            body: Arc::clone(&self.body),
            prepare: self.prepare.clone(),
            retry: self.retry.clone(),
            _types: PhantomData,
        }
    }
}

impl<A, R> fmt::Debug for Tool<A, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Tool").field(&self.spec).finish()
    }
}

impl<A, R> Tool<A, R> {
    /// The tool's name, description, schema, idempotency and resources.
    pub fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    /// The tool id.
    pub fn name(&self) -> &str {
        &self.spec.name
    }
}

impl<A, R> Tool<A, R>
where
    A: Serialize + DeserializeOwned + MaybeSend + 'static,
    R: Serialize + DeserializeOwned + MaybeSend + 'static,
{
    /// Calls the tool durably. A failing body runs again as the tool's
    /// [retry policy](ToolBuilder::retry) allows, before the outcome is recorded.
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::Policy`] when policy denies the call (see [`call_json`](Self::call_json)
    ///   for the LLM-facing form that turns a denial into a result string);
    /// * [`ErrorKind::Tool`] when the body fails now (after its retries; a failure whose
    ///   retries a limit stopped says so) or failed when recorded, including the
    ///   `indeterminate` outcome of an interrupted [`Idempotency::AtMostOnce`] call;
    /// * control flow ([`ErrorKind::Blocked`], [`ErrorKind::Terminated`],
    ///   [`ErrorKind::LeaseSuperseded`], [`ErrorKind::DeadlineReached`]) to propagate with `?`;
    /// * [`ErrorKind::Context`] outside an execution.
    pub async fn call(&self, args: A) -> Result<R> {
        let context = current()
            .ok_or_else(|| Error::outside_execution(&format!("tool {:?}", self.spec.name)))?;
        let args = match &self.prepare {
            Some(prepare) => prepare.apply(args)?,
            None => args,
        };
        let recorded = serde_json::to_value(&args)
            .map_err(|e| Error::serde("tool arguments are not JSON", e))?;
        // Retries decode the arguments again from their record: the first attempt took them.
        // Kept as JSON text, not a `Value` clone: it waits as long as the body runs, and a
        // `Value` map costs a whole B-tree node (632 bytes) even for one field.
        let again = self
            .retry
            .retries()
            .then(|| serde_json::to_vec(&recorded))
            .transpose()
            .map_err(|e| Error::serde("tool arguments are not JSON", e))?;
        let effect = Effect {
            kind: "tool_call",
            target: &self.spec.name,
            args: recorded,
            idempotency: self.spec.idempotency,
            resources: &self.spec.resources,
        };
        let body = Arc::clone(&self.body);
        let mut first = Some(args);
        // Boxed, and lent to the funnel: its levels hold a pointer instead of a copy each.
        let mut each = Box::new(move || {
            let args = match first.take() {
                Some(args) => Ok(args),
                None => decode_again(again.as_deref()),
            };
            let body = Arc::clone(&body);
            async move { body.run(args?).await }
        });
        let outcome = context
            .run_effect(effect, Some(&self.retry), &mut *each)
            .await?;
        outcome.into_value(&self.spec.name)
    }
}

/// A retry's arguments, decoded from the first attempt's record (its JSON text).
fn decode_again<A: DeserializeOwned>(recorded: Option<&[u8]>) -> std::result::Result<A, BoxError> {
    let recorded = recorded.ok_or("a tool without retries ran twice")?;
    serde_json::from_slice(recorded).map_err(|e| {
        format!("the recorded arguments do not decode into the tool's argument type again: {e}")
            .into()
    })
}

impl<A, R> Tool<A, R>
where
    A: Serialize + DeserializeOwned + MaybeSend + 'static,
    R: Serialize + DeserializeOwned + MaybeSend + 'static,
{
    /// Calls the tool with JSON arguments, the way an LLM framework does.
    ///
    /// A policy denial does not fail: it returns the string
    /// `"<name> not allowed. reason: <reason>"` as the result, so the model can pick another
    /// path.
    ///
    /// # Errors
    ///
    /// As [`call`](Self::call), except denials; and [`ErrorKind::Serde`] when `args` do not fit
    /// the tool's argument type.
    pub async fn call_json(&self, args: Value) -> Result<Value> {
        let typed: A = serde_json::from_value(args).map_err(|e| {
            Error::serde(
                &format!("arguments do not fit tool {:?}", self.spec.name),
                e,
            )
        })?;
        match self.call(typed).await {
            Ok(result) => {
                serde_json::to_value(result).map_err(|e| Error::serde("tool result is not JSON", e))
            }
            Err(error) => denial_as_result(&self.spec.name, error),
        }
    }
}

/// A tool with its argument and result types erased, for lists of mixed tools handed to an LLM
/// framework. Every [`Tool`] is one; see [`Tool::into_dyn`].
pub trait DynTool: MaybeSend + MaybeSync + fmt::Debug {
    /// Name, description, schema, idempotency and resources.
    fn spec(&self) -> &ToolSpec;

    /// Calls the tool with JSON arguments; a denial becomes the result string.
    fn call_json(&self, args: Value) -> BoxFuture<'static, Result<Value>>;
}

impl<A, R> DynTool for Tool<A, R>
where
    A: Serialize + DeserializeOwned + MaybeSend + 'static,
    R: Serialize + DeserializeOwned + MaybeSend + 'static,
{
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call_json(&self, args: Value) -> BoxFuture<'static, Result<Value>> {
        let tool = self.clone();
        Box::pin(async move { Tool::call_json(&tool, args).await })
    }
}

impl<A, R> Tool<A, R>
where
    A: Serialize + DeserializeOwned + MaybeSend + 'static,
    R: Serialize + DeserializeOwned + MaybeSend + 'static,
{
    /// This tool as a shared [`DynTool`].
    pub fn into_dyn(self) -> Arc<dyn DynTool> {
        Arc::new(self)
    }
}

/// Turns a policy denial into the result string an LLM reads; passes other errors on.
pub(crate) fn denial_as_result(name: &str, error: Error) -> Result<Value> {
    if error.kind() == ErrorKind::Policy {
        let reason = error.reason().unwrap_or("policy_denied");
        return Ok(Value::String(format!(
            "{name} not allowed. reason: {reason}"
        )));
    }
    Err(error)
}
