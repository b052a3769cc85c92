//! Configuring an [`Agent`].

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::handler::{ErasedHandler, FnHandler};
use super::{Agent, Config, Inner, Parts, Secrets};
use crate::Secret;
use crate::config;
use crate::error::{Error, ErrorKind, HandlerError, Result};
use crate::kernel::{BaseUrl, KernelClient};
use crate::rt::{MaybeSend, MaybeSync, Runtime};
use crate::transport::{SharedTransport, Transport};

/// Builds an [`Agent`]. Setters never fail; [`build`](Self::build) reports every problem at once.
///
/// ```no_run
/// let agent = rebuno::Agent::builder("hello")
///     .secret("dev-secret")               // or REBUNO_AGENT_SECRET
///     .base_url("http://127.0.0.1:8080")  // or REBUNO_URL
///     .handler(|name: String| async move { Ok::<_, rebuno::HandlerError>(format!("hello, {name}")) })
///     .build()?;
/// # Ok::<(), rebuno::Error>(())
/// ```
#[must_use = "call `build()` to get an Agent"]
pub struct AgentBuilder {
    agent_id: String,
    secret: Option<Secret>,
    previous_secret: Option<Secret>,
    base_url: Option<String>,
    webhook_path: String,
    kernel_timeout: Duration,
    description: Option<String>,
    input_schema: Option<Value>,
    output_schema: Option<Value>,
    runtime: Option<Runtime>,
    transport: Option<SharedTransport>,
    handler: Option<Arc<dyn ErasedHandler>>,
}

impl std::fmt::Debug for AgentBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("agent_id", &self.agent_id)
            .field("secret", &self.secret)
            .field("previous_secret", &self.previous_secret)
            .field("base_url", &self.base_url)
            .field("webhook_path", &self.webhook_path)
            .field("kernel_timeout", &self.kernel_timeout)
            .field("runtime", &self.runtime)
            .field("transport", &self.transport)
            .field("handler", &self.handler.is_some())
            .finish_non_exhaustive()
    }
}

impl AgentBuilder {
    pub(super) fn new(agent_id: String) -> Self {
        Self {
            agent_id,
            secret: None,
            previous_secret: None,
            base_url: None,
            webhook_path: "/webhook".to_owned(),
            kernel_timeout: config::DEFAULT_TIMEOUT,
            description: None,
            input_schema: None,
            output_schema: None,
            runtime: None,
            transport: None,
            handler: None,
        }
    }

    /// The handler: an async function of the execution's input.
    ///
    /// The input is decoded with `serde` (an input that does not fit fails the execution with
    /// `input_invalid: ...`); the output must serialize to JSON and becomes the execution's
    /// output. Every tool call, step, LLM call and resource inside the returned future is
    /// durable; from a task spawned off it they fail with [`ErrorKind::Context`].
    ///
    /// ```no_run
    /// #[derive(serde::Deserialize)]
    /// struct Input { name: String }
    ///
    /// let agent = rebuno::Agent::builder("hello")
    ///     .handler(|input: Input| async move {
    ///         Ok::<_, rebuno::HandlerError>(format!("hello, {}", input.name))
    ///     })
    ///     .build()?;
    /// # Ok::<(), rebuno::Error>(())
    /// ```
    pub fn handler<F, Fut, I, O, E>(mut self, handler: F) -> Self
    where
        F: Fn(I) -> Fut + MaybeSend + MaybeSync + 'static,
        Fut: Future<Output = Result<O, E>> + MaybeSend + 'static,
        I: DeserializeOwned + 'static,
        O: Serialize + 'static,
        E: Into<HandlerError> + 'static,
    {
        self.handler = Some(Arc::new(FnHandler(handler, PhantomData)));
        self
    }

    /// The handler with shared state: each run gets a clone of `state` beside its input, so the
    /// closure needs no clones of its own (put tools, clients and settings in it; wrap what is
    /// costly to clone in an `Arc`).
    ///
    /// ```no_run
    /// use rebuno::{HandlerError, Tool, define_tool};
    ///
    /// #[derive(Clone)]
    /// struct Tools { add: Tool<(i64, i64), i64> }
    ///
    /// let tools = Tools {
    ///     add: define_tool("add").execute(|(a, b): (i64, i64)| async move { Ok::<_, HandlerError>(a + b) }),
    /// };
    /// let agent = rebuno::Agent::builder("calculator")
    ///     .handler_with_state(tools, |tools: Tools, (a, b): (i64, i64)| async move {
    ///         Ok::<_, HandlerError>(tools.add.call((a, b)).await?)
    ///     })
    ///     .build()?;
    /// # Ok::<(), rebuno::Error>(())
    /// ```
    pub fn handler_with_state<S, F, Fut, I, O, E>(self, state: S, handler: F) -> Self
    where
        S: Clone + MaybeSend + MaybeSync + 'static,
        F: Fn(S, I) -> Fut + MaybeSend + MaybeSync + 'static,
        Fut: Future<Output = Result<O, E>> + MaybeSend + 'static,
        I: DeserializeOwned + 'static,
        O: Serialize + 'static,
        E: Into<HandlerError> + 'static,
    {
        self.handler(move |input: I| handler(state.clone(), input))
    }

    /// The HMAC secret shared with the kernel. Defaults to `REBUNO_AGENT_SECRET`.
    pub fn secret(mut self, secret: impl Into<Secret>) -> Self {
        self.secret = Some(secret.into());
        self
    }

    /// The secret before a rotation, still accepted on incoming webhooks but never used to
    /// sign. Defaults to `REBUNO_AGENT_SECRET_PREVIOUS`.
    ///
    /// Rotating without downtime: make the kernel accept the new secret beside the old one,
    /// deploy the agent with `secret(new)` and `previous_secret(old)`, switch the kernel to
    /// signing with the new one, then drop the previous secret on both sides. Webhooks signed
    /// with either secret are accepted throughout; the agent's own requests carry the new one.
    ///
    /// ```no_run
    /// let agent = rebuno::Agent::builder("hello")
    ///     .secret("new-secret")
    ///     .previous_secret("old-secret")
    ///     .base_url("http://127.0.0.1:8080")
    ///     .handler(|name: String| async move { Ok::<_, rebuno::HandlerError>(format!("hello, {name}")) })
    ///     .build()?;
    /// # Ok::<(), rebuno::Error>(())
    /// ```
    pub fn previous_secret(mut self, secret: impl Into<Secret>) -> Self {
        self.previous_secret = Some(secret.into());
        self
    }

    /// The kernel's URL, with any path prefix. Defaults to `REBUNO_URL`.
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = Some(url.into());
        self
    }

    /// The path [`rebuno-hyper`](https://docs.rs/rebuno-hyper) serves the webhook on. Defaults
    /// to `/webhook`. [`Agent::fetch`] itself answers on any path.
    pub fn webhook_path(mut self, path: impl Into<String>) -> Self {
        self.webhook_path = path.into();
        self
    }

    /// Timeout of each agent → kernel request. Defaults to 35 s.
    pub fn kernel_timeout(mut self, timeout: Duration) -> Self {
        self.kernel_timeout = timeout;
        self
    }

    /// A description of the agent, published to the kernel.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// The JSON Schema of the input, published to the kernel. Every input the kernel hands over
    /// is checked against it before it is decoded: an input that breaks it fails the execution
    /// with `input_invalid: input validation failed: <n> errors: <place>: <problem>; ...`, each
    /// problem named (up to 10), where serde alone names only its first.
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = Some(schema);
        self
    }

    /// The JSON Schema of the input, derived from the handler's input type.
    #[cfg(feature = "schemars")]
    pub fn input_schema_for<T: schemars::JsonSchema>(self) -> Self {
        self.input_schema(crate::schema::of::<T>())
    }

    /// The JSON Schema of the output, published to the kernel.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// The JSON Schema of the output, derived from the handler's output type.
    #[cfg(feature = "schemars")]
    pub fn output_schema_for<T: schemars::JsonSchema>(self) -> Self {
        self.output_schema(crate::schema::of::<T>())
    }

    /// Spawner, sleeper and clock. Defaults to [`Runtime::tokio`] with feature `rt-tokio`.
    pub fn runtime(mut self, runtime: Runtime) -> Self {
        self.runtime = Some(runtime);
        self
    }

    /// How kernel requests are sent. Defaults to reqwest with feature `reqwest`.
    pub fn transport(mut self, transport: impl Transport + 'static) -> Self {
        self.transport = Some(SharedTransport::new(transport));
        self
    }

    /// Checks the configuration and builds the agent.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Config`] naming every missing or invalid setting.
    pub fn build(mut self) -> Result<Agent> {
        let mut problems = Vec::new();
        match self.resolve(&mut problems) {
            Some(resolved) if problems.is_empty() => Ok(self.assemble(resolved)),
            _ => Err(Error::new(
                ErrorKind::Config,
                format!("invalid agent configuration: {}", problems.join("; ")),
            )),
        }
    }

    /// Checks every setting in turn, filling the unset ones from the environment and the
    /// defaults, and takes out those [`assemble`](Self::assemble) needs: all of them when they
    /// are present, `None` when one is missing. Each problem found goes to `problems`.
    fn resolve(&mut self, problems: &mut Vec<String>) -> Option<Resolved> {
        problems.extend(agent_id_problem(&self.agent_id));
        let secret = secret_or_env(self.secret.take(), "REBUNO_AGENT_SECRET");
        problems.extend(secret.is_none().then(missing_secret_problem));
        problems.extend(webhook_path_problem(&self.webhook_path));
        problems.extend(kernel_timeout_problem(self.kernel_timeout));
        let base = config::base_url(
            self.base_url.take().or_else(|| config::env("REBUNO_URL")),
            problems,
        );
        problems.extend(self.handler.is_none().then(missing_handler_problem));
        let runtime = config::runtime(self.runtime.take(), problems);
        let transport = config::transport(self.transport.take(), base.as_ref(), problems);
        let previous = secret_or_env(self.previous_secret.take(), "REBUNO_AGENT_SECRET_PREVIOUS");
        Some(Resolved {
            secrets: Secrets {
                current: secret?,
                previous,
            },
            base: base?,
            runtime: runtime?,
            transport: transport?,
            handler: self.handler.take()?,
        })
    }

    /// The agent, from the settings left in the builder and the ones [`resolve`](Self::resolve)
    /// took out.
    fn assemble(self, resolved: Resolved) -> Agent {
        let Resolved {
            secrets,
            base,
            runtime,
            transport,
            handler,
        } = resolved;
        let config = Config {
            agent_id: self.agent_id.clone(),
            webhook_path: self.webhook_path,
            description: self.description,
            input_schema: self.input_schema,
            output_schema: self.output_schema,
            base_url: base.as_string(),
        };
        let kernel = KernelClient::new(
            base,
            self.agent_id,
            secrets.current.clone(),
            transport,
            runtime.clone(),
            self.kernel_timeout,
        );
        let parts = Parts {
            kernel,
            runtime,
            handler: super::handler::checked(handler, config.input_schema.as_ref()),
        };
        Agent {
            inner: Arc::new(Inner::new(config, secrets, parts)),
        }
    }
}

/// The settings [`AgentBuilder::build`] cannot do without, once checked.
struct Resolved {
    secrets: Secrets,
    base: BaseUrl,
    runtime: Runtime,
    transport: SharedTransport,
    handler: Arc<dyn ErasedHandler>,
}

/// `secret`, else the environment variable `var`; an empty one counts as none.
fn secret_or_env(secret: Option<Secret>, var: &str) -> Option<Secret> {
    secret
        .or_else(|| config::env(var).map(Secret::new))
        .filter(|s| !s.is_empty())
}

/// The problem of a missing secret.
fn missing_secret_problem() -> String {
    "secret required: set REBUNO_AGENT_SECRET (or call .secret()) to the secret the kernel has \
     for this agent"
        .to_owned()
}

/// What is wrong with the webhook path, if anything: it must be a path, starting with `/`.
fn webhook_path_problem(path: &str) -> Option<String> {
    (!path.starts_with('/')).then(|| {
        format!(
            "webhook path {path:?} must start with '/' (e.g. \"/webhook\", the path of the \
             kernel's webhook_url for this agent)"
        )
    })
}

/// What is wrong with the kernel timeout, if anything: zero would fail every request.
fn kernel_timeout_problem(timeout: Duration) -> Option<String> {
    timeout.is_zero().then(|| {
        "kernel timeout must be positive: pass .kernel_timeout() a duration above zero \
         (default 35 s)"
            .to_owned()
    })
}

/// The problem of a builder without a handler.
fn missing_handler_problem() -> String {
    "no handler: call .handler(f) or .handler_with_state(state, f) before build()".to_owned()
}

/// What is wrong with an agent id, if anything: it travels in the `Rebuno-Agent-Id` header of
/// every request to the kernel, which looks it up as registered.
fn agent_id_problem(id: &str) -> Option<String> {
    if id.trim().is_empty() {
        return Some(
            "agent id must not be empty: pass Agent::builder the id the kernel has registered"
                .to_owned(),
        );
    }
    if id.trim() != id {
        return Some(format!(
            "agent id {id:?} has whitespace around it (a newline from a file?): pass \
             Agent::builder the id exactly as the kernel has registered it"
        ));
    }
    if http::HeaderValue::from_str(id).is_err() {
        return Some(format!(
            "agent id {id:?} has control characters, which the Rebuno-Agent-Id header cannot \
             carry: register and use an id without them"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_id_problems_say_what_to_change() {
        assert_eq!(agent_id_problem("hello"), None);
        assert_eq!(agent_id_problem("team/triage agent"), None);
        for (id, says) in [
            ("", "must not be empty"),
            ("hello\n", "whitespace around it"),
            ("hel\u{7}lo", "control characters"),
        ] {
            let problem = agent_id_problem(id).unwrap_or_default();
            assert!(problem.contains(says), "{id:?}: {problem}");
        }
    }
}
