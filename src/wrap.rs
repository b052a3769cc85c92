//! `wrap_tool`: a durable tool from a name and an `invoke(args)` seam, for tools that are not
//! plain functions (framework tool objects, schema-only tools, MCP tools).

use std::future::Future;
use std::sync::Arc;

use serde_json::Value;

use crate::error::HandlerError;
use crate::rt::{MaybeSend, MaybeSync};
use crate::tool::{Idempotency, Tool, define_tool};

type Mapper = Arc<dyn Fn(Value) -> Value + Send + Sync>;

/// Starts wrapping a tool named `name`; finish with [`WrapTool::invoke`].
///
/// `name` is the tool id both the LLM and the kernel see, so put any namespace prefix in it.
///
/// ```no_run
/// use serde_json::{Value, json};
///
/// let search = rebuno::wrap_tool("docs_search")
///     .description("Search the docs")
///     .input_schema(json!({"type": "object", "properties": {"q": {"type": "string"}}}))
///     .transform_args(|args| strip_nulls(args))
///     .invoke(|args: Value| async move { Ok::<_, rebuno::HandlerError>(json!({"hits": [args["q"]]})) });
/// # fn strip_nulls(v: Value) -> Value { v }
/// ```
#[must_use = "a WrapTool does nothing until `invoke` is called"]
pub struct WrapTool {
    name: String,
    description: String,
    input_schema: Option<Value>,
    idempotency: Idempotency,
    resources: Vec<String>,
    to_result: Option<Mapper>,
    transform_args: Option<Mapper>,
}

/// See [`WrapTool`].
pub fn wrap_tool(name: impl Into<String>) -> WrapTool {
    WrapTool {
        name: name.into(),
        description: String::new(),
        input_schema: None,
        idempotency: Idempotency::default(),
        resources: Vec::new(),
        to_result: None,
        transform_args: None,
    }
}

impl std::fmt::Debug for WrapTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WrapTool")
            .field("name", &self.name)
            .field("idempotency", &self.idempotency)
            .finish_non_exhaustive()
    }
}

impl WrapTool {
    /// Shown to the LLM.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// JSON Schema of the arguments, passed through for frameworks that read it.
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = Some(schema);
        self
    }

    /// Replay behaviour; the default is [`Idempotency::SafeToRetry`].
    pub fn idempotency(mut self, idempotency: Idempotency) -> Self {
        self.idempotency = idempotency;
        self
    }

    /// The registered resources the tool may change.
    pub fn resources<I: IntoIterator<Item = S>, S: Into<String>>(mut self, keys: I) -> Self {
        self.resources = keys.into_iter().map(Into::into).collect();
        self
    }

    /// Maps `invoke`'s return value before it is recorded. Defaults to identity.
    pub fn to_result(mut self, map: impl Fn(Value) -> Value + Send + Sync + 'static) -> Self {
        self.to_result = Some(Arc::new(map));
        self
    }

    /// Maps the caller's arguments before they are recorded and passed to `invoke` (for example
    /// null-stripping). Defaults to identity.
    pub fn transform_args(mut self, map: impl Fn(Value) -> Value + Send + Sync + 'static) -> Self {
        self.transform_args = Some(Arc::new(map));
        self
    }

    /// The seam that performs the call.
    pub fn invoke<E, F, Fut>(self, invoke: F) -> Tool<Value, Value>
    where
        F: Fn(Value) -> Fut + MaybeSend + MaybeSync + 'static,
        Fut: Future<Output = Result<Value, E>> + MaybeSend + 'static,
        E: Into<HandlerError> + 'static,
    {
        let to_result = self.to_result;
        let mut builder = define_tool(self.name)
            .description(self.description)
            .idempotency(self.idempotency)
            .resources(self.resources);
        if let Some(schema) = self.input_schema {
            builder = builder.input_schema(schema);
        }
        let tool = builder.execute(move |args: Value| {
            let call = invoke(args);
            let to_result = to_result.clone();
            async move {
                let raw = call.await.map_err(Into::into)?;
                Ok::<_, HandlerError>(match to_result {
                    Some(map) => map(raw),
                    None => raw,
                })
            }
        });
        match self.transform_args {
            Some(transform) => tool.with_prepare(move |args| transform(args)),
            None => tool,
        }
    }
}
