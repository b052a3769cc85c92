//! `McpOptions`: how MCP descriptors become tools.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use super::spec::McpToolSpec;
use crate::idempotency::Idempotency;
use crate::rt::{MaybeSend, MaybeSync};
use crate::tool::Mapper;

type Chooser = Arc<dyn ChooseIdempotency>;

/// Picks a tool's idempotency from its descriptor (`Send + Sync` where the target has threads).
trait ChooseIdempotency: Fn(&McpToolSpec) -> Idempotency + MaybeSend + MaybeSync {}

impl<F: Fn(&McpToolSpec) -> Idempotency + MaybeSend + MaybeSync> ChooseIdempotency for F {}

/// Options for [`wrap_mcp_tool`](super::wrap_mcp_tool) and
/// [`wrap_mcp_tools`](super::wrap_mcp_tools). Cheap to clone.
///
/// Defaults: no prefix, [`Idempotency::SafeToRetry`], no resources, results [`flatten`]ed,
/// top-level null arguments stripped.
///
/// ```
/// use rebuno::Idempotency;
/// use rebuno::mcp::McpOptions;
///
/// let options = McpOptions::new()
///     .prefix("fs")
///     .tool_idempotency("write_file", Idempotency::AtMostOnce)
///     .resources(["workspace"]);
/// # drop(options);
/// ```
///
/// [`flatten`]: super::flatten
#[derive(Clone, Default)]
#[must_use]
pub struct McpOptions {
    pub(super) prefix: String,
    idempotency: Idempotency,
    per_tool: HashMap<String, Idempotency>,
    chooser: Option<Chooser>,
    pub(super) resources: Vec<String>,
    pub(super) to_result: Option<Mapper>,
    pub(super) keep_nulls: bool,
}

impl fmt::Debug for McpOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpOptions")
            .field("prefix", &self.prefix)
            .field("idempotency", &self.idempotency)
            .field("per_tool", &self.per_tool)
            .field("resources", &self.resources)
            .field("keep_nulls", &self.keep_nulls)
            .finish_non_exhaustive()
    }
}

impl McpOptions {
    /// The defaults.
    ///
    /// ```
    /// let options = rebuno::mcp::McpOptions::new();
    /// # drop(options);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Namespaces the tool ids: `{prefix}_{name}`. Empty (the default) keeps the bare name.
    ///
    /// ```
    /// use rebuno::mcp::{McpOptions, McpToolSpec};
    ///
    /// let options = McpOptions::new().prefix("docs");
    /// assert_eq!(options.tool_id(&McpToolSpec::new("search")), "docs_search");
    /// assert_eq!(McpOptions::new().tool_id(&McpToolSpec::new("search")), "search");
    /// ```
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The idempotency of every tool without a more specific setting; default
    /// [`Idempotency::SafeToRetry`].
    ///
    /// ```
    /// use rebuno::Idempotency;
    /// use rebuno::mcp::{McpOptions, McpToolSpec};
    ///
    /// let options = McpOptions::new().idempotency(Idempotency::AtMostOnce);
    /// assert_eq!(options.idempotency_of(&McpToolSpec::new("x")), Idempotency::AtMostOnce);
    /// ```
    pub fn idempotency(mut self, idempotency: Idempotency) -> Self {
        self.idempotency = idempotency;
        self
    }

    /// The idempotency of the tool whose bare name is `name`; wins over everything else.
    ///
    /// ```
    /// use rebuno::Idempotency;
    /// use rebuno::mcp::{McpOptions, McpToolSpec};
    ///
    /// let options = McpOptions::new().prefix("fs").tool_idempotency("write_file", Idempotency::AtMostOnce);
    /// assert_eq!(options.idempotency_of(&McpToolSpec::new("write_file")), Idempotency::AtMostOnce);
    /// assert_eq!(options.idempotency_of(&McpToolSpec::new("read_file")), Idempotency::SafeToRetry);
    /// ```
    pub fn tool_idempotency(mut self, name: impl Into<String>, idempotency: Idempotency) -> Self {
        self.per_tool.insert(name.into(), idempotency);
        self
    }

    /// Chooses each tool's idempotency from its descriptor (for example
    /// [`McpToolSpec::idempotency_from_hints`]); [`tool_idempotency`](Self::tool_idempotency)
    /// still wins.
    ///
    /// ```
    /// use rebuno::Idempotency;
    /// use rebuno::mcp::{McpOptions, McpToolSpec};
    ///
    /// let options = McpOptions::new().idempotency_with(|spec| {
    ///     if spec.name.starts_with("read") { Idempotency::SafeToRetry } else { Idempotency::AtMostOnce }
    /// });
    /// assert_eq!(options.idempotency_of(&McpToolSpec::new("move_file")), Idempotency::AtMostOnce);
    /// ```
    pub fn idempotency_with(
        mut self,
        choose: impl Fn(&McpToolSpec) -> Idempotency + MaybeSend + MaybeSync + 'static,
    ) -> Self {
        self.chooser = Some(Arc::new(choose));
        self
    }

    /// The registered resources every wrapped tool may change.
    ///
    /// ```
    /// let options = rebuno::mcp::McpOptions::new().resources(["workspace"]);
    /// # drop(options);
    /// ```
    pub fn resources<I: IntoIterator<Item = S>, S: Into<String>>(mut self, keys: I) -> Self {
        self.resources = keys.into_iter().map(Into::into).collect();
        self
    }

    /// Maps the raw `CallToolResult` JSON before it is recorded, instead of
    /// [`flatten`](super::flatten).
    ///
    /// ```
    /// use serde_json::{Value, json};
    ///
    /// // Keep the whole result, isError and all.
    /// let options = rebuno::mcp::McpOptions::new().to_result(|raw: Value| raw);
    /// # drop(options);
    /// ```
    pub fn to_result(
        mut self,
        map: impl Fn(Value) -> Value + MaybeSend + MaybeSync + 'static,
    ) -> Self {
        self.to_result = Some(Arc::new(map));
        self
    }

    /// Passes `null` arguments through to the server instead of stripping them.
    ///
    /// ```
    /// let options = rebuno::mcp::McpOptions::new().keep_nulls();
    /// # drop(options);
    /// ```
    pub fn keep_nulls(mut self) -> Self {
        self.keep_nulls = true;
        self
    }

    /// The tool id the LLM and the kernel see for `spec`.
    ///
    /// ```
    /// use rebuno::mcp::{McpOptions, McpToolSpec};
    ///
    /// assert_eq!(McpOptions::new().prefix("ev").tool_id(&McpToolSpec::new("get-sum")), "ev_get-sum");
    /// ```
    pub fn tool_id(&self, spec: &McpToolSpec) -> String {
        if self.prefix.is_empty() {
            spec.name.clone()
        } else {
            format!("{}_{}", self.prefix, spec.name)
        }
    }

    /// The idempotency `spec` gets: its [`tool_idempotency`](Self::tool_idempotency), else
    /// [`idempotency_with`](Self::idempotency_with)'s choice, else
    /// [`idempotency`](Self::idempotency).
    ///
    /// ```
    /// use rebuno::Idempotency;
    /// use rebuno::mcp::{McpOptions, McpToolSpec};
    ///
    /// assert_eq!(McpOptions::new().idempotency_of(&McpToolSpec::new("x")), Idempotency::SafeToRetry);
    /// ```
    pub fn idempotency_of(&self, spec: &McpToolSpec) -> Idempotency {
        if let Some(idempotency) = self.per_tool.get(&spec.name) {
            return *idempotency;
        }
        match &self.chooser {
            Some(choose) => choose(spec),
            None => self.idempotency,
        }
    }
}
