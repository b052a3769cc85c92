//! The campaign's agent: a real process serving `rebuno_hyper::serve` on `--port`, whose
//! handler interprets the program in the execution input (see `rebuno_campaign::Op`).
//!
//! Every effect body appends one JSON line to `--effects` (one `write` call on an `O_APPEND`
//! file) before it returns. A second listener on `--deadline-port` serves the same agent through
//! `Agent::fetch`, adding a `rebuno::rt::Deadline` when the request carries
//! [`DEADLINE_HEADER`]: the host-deadline cut of Lambda and Workers.
//!
//! ```text
//! campaign-agent --port 5001 --deadline-port 5002 --effects effects.jsonl
//!     (REBUNO_URL and REBUNO_AGENT_SECRET from the environment)
//! ```

use std::convert::Infallible;
use std::future::IntoFuture;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rebuno::rt::{Clock, Deadline, Spawner, SystemClock, TokioRuntime};
use rebuno::{Agent, HandlerError, Idempotency, Step, Subagent, Tool, define_tool, execution};
use rebuno_campaign::{
    AGENT_ID, AT_MOST_ONCE, DEADLINE_HEADER, DENIED, EffectArgs, EffectLine, GATED, MODEL, Op,
    Program, SPAWN, SpawnArgs, TOOL,
};
use serde_json::{Value, json};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    port: u16,
    deadline_port: Option<u16>,
    effects: String,
}

fn args() -> Result<Args, BoxError> {
    let mut port = None;
    let mut deadline_port = None;
    let mut effects = std::env::var("CAMPAIGN_EFFECTS").ok();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--port" => port = Some(value.parse()?),
            "--deadline-port" => deadline_port = Some(value.parse()?),
            "--effects" => effects = Some(value),
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    Ok(Args {
        port: port.ok_or("--port is required")?,
        deadline_port,
        effects: effects.ok_or("--effects (or CAMPAIGN_EFFECTS) is required")?,
    })
}

/// The effect log: one line per effect, appended whole.
#[derive(Clone)]
struct EffectLog(Arc<Mutex<std::fs::File>>);

impl EffectLog {
    fn open(path: &str) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Self(Arc::new(Mutex::new(file))))
    }

    fn append(&self, effect: u32, kind: &str) -> Result<(), HandlerError> {
        let context = execution()?;
        self.append_for(context.id(), effect, kind, context.dispatch_attempt())
    }

    fn append_for(
        &self,
        execution: &str,
        effect: u32,
        kind: &str,
        attempt: u64,
    ) -> Result<(), HandlerError> {
        let line = EffectLine {
            execution: execution.to_owned(),
            effect,
            kind: kind.to_owned(),
            pid: std::process::id(),
            attempt,
        };
        let mut text = serde_json::to_string(&line)?;
        text.push('\n');
        let mut file = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        file.write_all(text.as_bytes())?;
        Ok(())
    }
}

/// `CAMPAIGN_SABOTAGE`: breaks the agent on purpose, to show the driver's checks catch it
/// (`at-most-once-twice`: every at-most-once effect is logged twice; `output`: results reversed).
fn sabotage() -> String {
    std::env::var("CAMPAIGN_SABOTAGE").unwrap_or_default()
}

/// Sleeps, logs the effect, sleeps: a kill or a cut can land before, during or after it.
async fn effect(log: &EffectLog, args: &EffectArgs, kind: &str) -> Result<(), HandlerError> {
    tokio::time::sleep(Duration::from_millis(args.before_ms)).await;
    log.append(args.id, kind)?;
    if kind == "at_most_once" && sabotage() == "at-most-once-twice" {
        log.append(args.id, kind)?;
    }
    tokio::time::sleep(Duration::from_millis(args.after_ms)).await;
    Ok(())
}

/// A loopback chat-completions provider: logs the effect (the execution and op are in the body),
/// waits `delay_ms`, answers `llm-<id>`.
async fn serve_llm_stub(listener: tokio::net::TcpListener, log: EffectLog) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let log = log.clone();
        let service =
            hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let log = log.clone();
                async move {
                    use http_body_util::BodyExt;
                    let body = request
                        .into_body()
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    let payload: Value = serde_json::from_slice(&body).unwrap_or_default();
                    let id = payload["id"].as_u64().unwrap_or(0);
                    let delay = payload["delay_ms"].as_u64().unwrap_or(0);
                    let execution = payload["execution"].as_str().unwrap_or("").to_owned();
                    tokio::time::sleep(Duration::from_millis(delay / 2)).await;
                    let _ = log.append_for(&execution, u32::try_from(id).unwrap_or(0), "llm", 0);
                    tokio::time::sleep(Duration::from_millis(delay / 2)).await;
                    let answer = json!({
                        "id": format!("chatcmpl-{id}"),
                        "object": "chat.completion",
                        "model": MODEL,
                        "choices": [{"index": 0, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": format!("llm-{id}")}}],
                        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
                    });
                    let mut response = http::Response::new(http_body_util::Full::new(
                        bytes::Bytes::from(answer.to_string()),
                    ));
                    response.headers_mut().insert(
                        http::header::CONTENT_TYPE,
                        http::HeaderValue::from_static("application/json"),
                    );
                    Ok::<_, Infallible>(response)
                }
            });
        tokio::spawn(async move {
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// One durable LLM call to the stub; the answer's content.
async fn llm_call(url: &str, id: u32, delay_ms: u64) -> Result<String, HandlerError> {
    let body = json!({
        "model": MODEL,
        "id": id,
        "delay_ms": delay_ms,
        "execution": execution()?.id(),
        "messages": [{"role": "user", "content": format!("campaign op {id}")}],
    });
    let request = http::Request::post(url)
        .header("content-type", "application/json")
        .body(bytes::Bytes::from(body.to_string()))?;
    let response = rebuno::llm::fetch(request).await?;
    let status = response.status();
    let text = response.into_body().text().await?;
    if !status.is_success() {
        return Err(format!("llm stub answered {status}: {text}").into());
    }
    let answer: Value = serde_json::from_str(&text)?;
    Ok(answer["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned())
}

#[derive(Clone)]
struct Tools {
    log: EffectLog,
    llm_url: String,
    tool: Tool<EffectArgs, String>,
    charge: Tool<EffectArgs, String>,
    forbidden: Tool<EffectArgs, String>,
    gated: Tool<EffectArgs, String>,
    spawn: Tool<SpawnArgs, Value>,
}

impl Tools {
    fn new(log: &EffectLog, llm_url: String) -> Self {
        let l = log.clone();
        let tool = define_tool(TOOL).execute(move |args: EffectArgs| {
            let log = l.clone();
            async move {
                effect(&log, &args, "tool").await?;
                Ok::<_, HandlerError>(format!("tool-{}", args.id))
            }
        });
        let l = log.clone();
        let charge = define_tool(AT_MOST_ONCE)
            .idempotency(Idempotency::AtMostOnce)
            .execute(move |args: EffectArgs| {
                let log = l.clone();
                async move {
                    effect(&log, &args, "at_most_once").await?;
                    Ok::<_, HandlerError>(format!("charged-{}", args.id))
                }
            });
        let l = log.clone();
        let forbidden = define_tool(DENIED).execute(move |args: EffectArgs| {
            let log = l.clone();
            async move {
                // Policy denies this tool: reaching the body at all is logged, and flagged.
                effect(&log, &args, "denied").await?;
                Ok::<_, HandlerError>(format!("forbidden-{}", args.id))
            }
        });
        let l = log.clone();
        let gated = define_tool(GATED).execute(move |args: EffectArgs| {
            let log = l.clone();
            async move {
                effect(&log, &args, "approval").await?;
                Ok::<_, HandlerError>(format!("approved-{}", args.id))
            }
        });
        let spawn = define_tool(SPAWN).execute(move |args: SpawnArgs| async move {
            let session = format!("campaign:{}:{}", execution()?.id(), args.id);
            let output: Value = Subagent::new(AGENT_ID, &args.program)
                .session(session)
                .run()
                .await?;
            Ok::<_, HandlerError>(output)
        });
        Self {
            log: log.clone(),
            llm_url,
            tool,
            charge,
            forbidden,
            gated,
            spawn,
        }
    }

    async fn leaf(&self, op: &Op) -> Result<Value, HandlerError> {
        let args = |id: u32, before_ms: u64, after_ms: u64| EffectArgs {
            id,
            before_ms,
            after_ms,
        };
        Ok(match op {
            Op::Tool {
                id,
                before_ms,
                after_ms,
            } => json!(self.tool.call(args(*id, *before_ms, *after_ms)).await?),
            Op::AtMostOnce {
                id,
                before_ms,
                after_ms,
            } => json!(self.charge.call(args(*id, *before_ms, *after_ms)).await?),
            Op::Step {
                id,
                before_ms,
                after_ms,
            } => {
                let a = args(*id, *before_ms, *after_ms);
                let log = self.log.clone();
                let value: u64 = Step::new(format!("op-{id}"))
                    .args(json!({ "id": id }))
                    .run(|| async move {
                        effect(&log, &a, "step").await?;
                        Ok::<_, HandlerError>(u64::from(a.id) * 1000 + 7)
                    })
                    .await?;
                json!(value)
            }
            Op::Llm { id, delay_ms } => json!(llm_call(&self.llm_url, *id, *delay_ms).await?),
            Op::Denied { id } => {
                self.forbidden
                    .call_json(json!({ "id": id, "before_ms": 0, "after_ms": 0 }))
                    .await?
            }
            Op::Approval { id, before_ms } => {
                json!(self.gated.call(args(*id, *before_ms, 0)).await?)
            }
            Op::Subagent { id, program } => {
                self.spawn
                    .call(SpawnArgs {
                        id: *id,
                        program: program.clone(),
                    })
                    .await?
            }
            Op::Parallel { .. } => return Err("nested parallel ops are not supported".into()),
        })
    }

    async fn run(&self, program: Program) -> Result<Value, HandlerError> {
        let mut results = Vec::with_capacity(program.ops.len());
        for op in &program.ops {
            let result = match op {
                Op::Parallel { ops, .. } => {
                    let outcomes = join_all(ops.iter().map(|member| self.leaf(member))).await;
                    let mut values = Vec::with_capacity(outcomes.len());
                    for outcome in outcomes {
                        values.push(outcome?);
                    }
                    Value::Array(values)
                }
                other => self.leaf(other).await?,
            };
            results.push(result);
        }
        if sabotage() == "output" {
            results.reverse();
        }
        Ok(json!({ "label": program.label, "results": results }))
    }
}

/// `Agent::fetch` behind a plain hyper server, with a host deadline when the request asks.
async fn serve_deadline(listener: tokio::net::TcpListener, agent: Agent) {
    let spawner = Spawner(Arc::new(TokioRuntime::new()));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let (agent, spawner) = (agent.clone(), spawner.clone());
        let service =
            hyper::service::service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
                let agent = agent.clone();
                request.extensions_mut().insert(spawner.clone());
                let budget = request
                    .headers()
                    .get(DEADLINE_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok());
                if let Some(budget) = budget {
                    let deadline =
                        Deadline::at_unix_millis(SystemClock::default().unix_millis() + budget)
                            .margin(Duration::from_millis(100));
                    request.extensions_mut().insert(deadline);
                }
                async move { Ok::<_, Infallible>(agent.fetch(request).await) }
            });
        tokio::spawn(async move {
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn bind(port: u16) -> std::io::Result<tokio::net::TcpListener> {
    let mut last = None;
    // The port was just freed by a killed predecessor: retry briefly.
    for _ in 0..50 {
        match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
            Ok(listener) => return Ok(listener),
            Err(error) => last = Some(error),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("bind failed")))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = args()?;
    let log = EffectLog::open(&args.effects)?;
    let stub = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let llm_url = format!("http://{}/v1/chat/completions", stub.local_addr()?);
    tokio::spawn(serve_llm_stub(stub, log.clone()));
    let tools = Tools::new(&log, llm_url);
    let agent = Agent::builder(AGENT_ID)
        .kernel_timeout(Duration::from_secs(10))
        .handler_with_state(tools, |tools, program: Program| async move {
            tools.run(program).await
        })
        .build()?;
    let listener = bind(args.port).await?;
    if let Some(port) = args.deadline_port {
        let deadline = bind(port).await?;
        tokio::spawn(serve_deadline(deadline, agent.clone()));
    }
    eprintln!(
        "campaign-agent pid={} port={} ready",
        std::process::id(),
        args.port
    );
    rebuno_hyper::serve(listener, agent).into_future().await?;
    Ok(())
}
