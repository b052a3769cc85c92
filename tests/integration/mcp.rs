//! MCP tools (`rebuno::mcp`): descriptors wrapped as durable tools, against a fake server and
//! against real ones that run offline: the npm reference servers `server-everything` and
//! `server-filesystem` over stdio, and a fixture on PyPI's `mcp` over streamable HTTP. Each goes
//! through the dev kernel: results recorded, then replayed after a re-delivery without calling
//! the server again; null stripping; `at_most_once` writes; policy denials; unknown tools; and
//! flattening parity with the Python SDK.
//!
//! The real servers come from `tests/integration/mcp/setup.sh` (npm ci + a venv under target/), which the
//! tests run on first use; when it cannot install them the tests fail, they do not skip.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;
use rebuno::wire::ExecutionStatus;

mod streamable;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rebuno::mcp::rmcp::McpClient;
use rebuno::mcp::{
    McpCall, McpOptions, McpToolSpec, StreamableHttp, flatten, strip_nulls, wrap_mcp_tool,
    wrap_mcp_tools,
};
use rebuno::wire::Execution;
use rebuno::{DynTool, ErrorKind, HandlerError, Idempotency, Tool, execution};
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde_json::{Map, Value, json};
use support::*;

// ---------------------------------------------------------------------------------------------
// Harness: an agent that runs a script of tool calls; attempt 1 parks after them, so a
// re-delivery replays them.
// ---------------------------------------------------------------------------------------------

/// Names of the tools that reached the server (the `call` seam), in order.
type CallLog = Arc<Mutex<Vec<String>>>;

/// Counts every call that reaches `call`.
fn counting(call: impl McpCall, log: &CallLog) -> impl McpCall {
    let call = Arc::new(call);
    let log = Arc::clone(log);
    move |name: String, args: Map<String, Value>| {
        log.lock().unwrap().push(name.clone());
        call.call_tool(name, args)
    }
}

/// Counts calls; the first one reaches the server and then never returns, as if the agent
/// process died after the server acted but before the result was recorded.
fn dying_once(call: impl McpCall, log: &CallLog) -> impl McpCall {
    let call = Arc::new(call);
    let log = Arc::clone(log);
    move |name: String, args: Map<String, Value>| {
        let first = {
            let mut log = log.lock().unwrap();
            log.push(name.clone());
            log.len() == 1
        };
        let result = call.call_tool(name, args);
        async move {
            let result = result.await;
            if first {
                std::future::pending::<()>().await;
            }
            result
        }
    }
}

/// What each attempt's handler got back from its calls.
type Attempts = Arc<Mutex<Vec<Value>>>;

struct Harness {
    kernel: DevKernel,
    served: Served,
    attempts: Attempts,
    agent_id: String,
}

/// Serves an agent whose input is `{"calls": [[tool_id, args], ...], "park": bool}`: it calls
/// each tool with `call_json` (as an LLM framework does), keeps the results per attempt, and
/// on attempt 1 with `park` waits forever after the calls.
async fn harness(agent_id: &str, tools: Vec<Tool<Value, Value>>, policy: Option<&str>) -> Harness {
    let kernel = DevKernel::start().await.expect("kernel");
    let tools: Arc<HashMap<String, Arc<dyn DynTool>>> = Arc::new(
        tools
            .into_iter()
            .map(|t| (t.name().to_owned(), t.into_dyn()))
            .collect(),
    );
    let attempts = Attempts::default();
    let seen = Arc::clone(&attempts);
    let agent = agent(&kernel, agent_id)
        .handler_with_state((tools, seen), |(tools, seen), input: Value| async move {
            let results = run_script(&tools, &input).await?;
            seen.lock().unwrap().push(results.clone());
            if input["park"] == true && execution()?.dispatch_attempt() == 1 {
                std::future::pending::<()>().await;
            }
            Ok::<_, HandlerError>(results)
        })
        .build()
        .expect("agent config");
    let served = serve(agent).await;
    let mut spec = AgentSpec::new(agent_id, served.webhook_url(), SECRET);
    if let Some(policy) = policy {
        spec = spec.policy_yaml(policy);
    }
    kernel.register_agent(spec).expect("register");
    Harness {
        kernel,
        served,
        attempts,
        agent_id: agent_id.to_owned(),
    }
}

/// Calls the script's tools in order; a tool error becomes `{"error": kind, "message": ..}`.
async fn run_script(
    tools: &HashMap<String, Arc<dyn DynTool>>,
    input: &Value,
) -> Result<Value, HandlerError> {
    let mut results = Vec::new();
    for call in input["calls"].as_array().into_iter().flatten() {
        let id = call[0].as_str().unwrap_or_default();
        let tool = tools.get(id).unwrap_or_else(|| panic!("no tool {id}"));
        match tool.call_json(call[1].clone()).await {
            Ok(result) => results.push(result),
            Err(error) if error.kind() == ErrorKind::Tool => {
                results.push(json!({ "error": "tool", "message": error.to_string() }));
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(Value::Array(results))
}

impl Harness {
    /// Runs `calls` to the end in one attempt.
    async fn run(&self, calls: Value) -> Execution {
        run(&self.kernel, &self.agent_id, json!({ "calls": calls })).await
    }

    /// Runs `calls` in attempt 1, re-delivers, and returns attempt 1's results and the
    /// execution attempt 2 finished.
    async fn replayed(&self, calls: Value) -> (Value, Execution) {
        let created = self
            .kernel
            .create_execution(NewExecution::new(
                &self.agent_id,
                json!({ "calls": calls, "park": true }),
            ))
            .await
            .expect("create");
        let first = self.wait_attempts(1).await;
        assert_eq!(self.kernel.redeliver(&created.id).expect("redeliver"), 2);
        let done = self
            .kernel
            .wait_terminal(&created.id, WAIT)
            .await
            .expect("ends");
        (first, done)
    }

    /// Waits until `n` attempts have finished their calls; returns the last one's results.
    async fn wait_attempts(&self, n: usize) -> Value {
        for _ in 0..2000 {
            if let Some(last) = self.attempts.lock().unwrap().get(n - 1) {
                return last.clone();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("attempt {n} did not finish its calls");
    }

    /// The recorded steps as wire JSON, in the order they were proposed.
    fn steps(&self, execution: &Execution) -> Vec<Value> {
        let steps: Vec<Value> = self
            .kernel
            .steps(&execution.id)
            .iter()
            .map(|s| serde_json::to_value(s).unwrap())
            .collect();
        self.kernel
            .events(&execution.id)
            .iter()
            .filter(|e| e.kind == "step.proposed")
            .map(|e| {
                steps
                    .iter()
                    .find(|s| s["step_id"] == e.payload["step_id"])
                    .cloned()
                    .unwrap()
            })
            .collect()
    }
}

fn output(done: &Execution) -> &Value {
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    done.output.as_ref().expect("output")
}

fn calls_to(log: &CallLog, name: &str) -> usize {
    log.lock().unwrap().iter().filter(|n| *n == name).count()
}

// ---------------------------------------------------------------------------------------------
// Core behaviour, no servers
// ---------------------------------------------------------------------------------------------

#[test]
fn flatten_follows_the_python_sdk_on_every_result_shape() {
    let cases = [
        // one text block
        (
            json!({"content": [{"type": "text", "text": "Echo: hi"}]}),
            json!("Echo: hi"),
        ),
        // text blocks joined; other blocks as compact JSON (Python prints a repr instead)
        (
            json!({"content": [
                {"type": "text", "text": "Here's the image you requested:"},
                {"type": "image", "data": "iVBOR", "mimeType": "image/png"},
                {"type": "text", "text": "The image above is the MCP logo."}
            ]}),
            json!(format!(
                "Here's the image you requested:\n{}\nThe image above is the MCP logo.",
                json!({"type": "image", "data": "iVBOR", "mimeType": "image/png"})
            )),
        ),
        // structured content preferred over text
        (
            json!({"content": [{"type": "text", "text": "{\"result\":5}"}], "structuredContent": {"result": 5}}),
            json!({"result": 5}),
        ),
        // Python models dumped without aliases
        (
            json!({"content": [], "structured_content": [1, 2]}),
            json!([1, 2]),
        ),
        // structured null falls back to content
        (
            json!({"content": [{"type": "text", "text": "t"}], "structuredContent": null}),
            json!("t"),
        ),
        // structured content may be any JSON (2026-07-28), even a falsy one
        (json!({"content": [], "structuredContent": 0}), json!(0)),
        // isError is a result like any other
        (
            json!({"content": [{"type": "text", "text": "MCP error -32602: Tool no-such-tool not found"}], "isError": true}),
            json!("MCP error -32602: Tool no-such-tool not found"),
        ),
        // no blocks
        (json!({"content": []}), json!("")),
        // a resource link alone
        (
            json!({"content": [{"type": "resource_link", "uri": "demo://1", "name": "r"}]}),
            json!(json!({"type": "resource_link", "uri": "demo://1", "name": "r"}).to_string()),
        ),
        // not a CallToolResult: returned as is
        (json!({"answer": 42}), json!({"answer": 42})),
        (json!("plain"), json!("plain")),
        (
            json!({"content": "not a list"}),
            json!({"content": "not a list"}),
        ),
    ];
    for (raw, flat) in cases {
        assert_eq!(flatten(raw.clone()), flat, "flatten({raw})");
    }
}

#[test]
fn strip_nulls_is_shallow_and_leaves_non_objects_alone() {
    assert_eq!(
        strip_nulls(json!({"a": 1, "b": null, "c": {"d": null}, "e": [null]})),
        json!({"a": 1, "c": {"d": null}, "e": [null]})
    );
    assert_eq!(strip_nulls(json!([null])), json!([null]));
    assert_eq!(strip_nulls(Value::Null), Value::Null);
}

#[test]
fn descriptors_carry_over_with_prefixed_ids_and_per_tool_idempotency() {
    let listed = json!({"tools": [
        {"name": "read_file", "description": "Read", "inputSchema": {"type": "object", "required": ["path"]},
         "annotations": {"readOnlyHint": true}},
        {"name": "write_file", "input_schema": {"type": "object"}},
        {"name": "move_file", "description": null}
    ]});
    let specs = McpToolSpec::list_from_json(&listed).unwrap();
    let never = |_: String, _: Map<String, Value>| async {
        Err::<Value, _>(std::io::Error::other("not called"))
    };

    let options = McpOptions::new()
        .prefix("fs")
        .idempotency_with(McpToolSpec::idempotency_from_hints)
        .tool_idempotency("write_file", Idempotency::SafeToRetry)
        .resources(["workspace"]);
    let tools = wrap_mcp_tools(specs.clone(), never, &options);
    let view: Vec<_> = tools
        .iter()
        .map(|t| {
            let s = t.spec();
            (
                s.name.as_str(),
                s.description.as_str(),
                s.input_schema.clone(),
                s.idempotency,
                s.resources.clone(),
            )
        })
        .collect();
    assert_eq!(
        view,
        [
            (
                "fs_read_file",
                "Read",
                Some(json!({"type": "object", "required": ["path"]})),
                Idempotency::SafeToRetry,
                vec!["workspace".to_owned()]
            ),
            (
                "fs_write_file",
                "",
                Some(json!({"type": "object"})),
                Idempotency::SafeToRetry,
                vec!["workspace".to_owned()]
            ),
            (
                "fs_move_file",
                "",
                Some(json!({})),
                Idempotency::AtMostOnce,
                vec!["workspace".to_owned()]
            ),
        ]
    );

    let bare = wrap_mcp_tool(specs[0].clone(), never, &McpOptions::new());
    assert_eq!(
        (bare.name(), bare.spec().idempotency),
        ("read_file", Idempotency::SafeToRetry),
        "an empty prefix keeps the name; default idempotency is safe_to_retry"
    );
    assert!(McpToolSpec::list_from_json(&json!({"tools": [{"description": "nameless"}]})).is_err());
    assert!(McpToolSpec::list_from_json(&json!({"nope": []})).is_err());
}

/// A fake server: `echo` answers with its arguments as text, `fail` has no result.
fn fake_server(log: &CallLog) -> impl McpCall {
    counting(
        |name: String, args: Map<String, Value>| async move {
            match name.as_str() {
                "echo" => Ok(json!({"content": [{"type": "text", "text": canonical(&args)}]})),
                "sum" => Ok(json!({
                    "content": [{"type": "text", "text": "{\"sum\":3}"}],
                    "structuredContent": {"sum": args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)}
                })),
                _ => Err(std::io::Error::other(format!(
                    "transport closed while calling {name}"
                ))),
            }
        },
        log,
    )
}

/// `k=v` pairs sorted by key, whatever order the map keeps.
fn canonical(args: &Map<String, Value>) -> String {
    let mut pairs: Vec<_> = args.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.sort();
    pairs.join(",")
}

const FAKE_POLICY: &str = r#"
default_action: allow
rules:
  - id: no-deletes
    when: { target: fake_delete }
    then: { decision: deny, reason: "deletes are off" }
"#;

#[tokio::test]
async fn a_wrapped_mcp_tool_records_flattened_results_and_replays_them_without_the_server() {
    let _trace = trace_init();
    let log = CallLog::default();
    let specs = ["echo", "sum", "delete", "broken"].map(McpToolSpec::new);
    let mut tools = wrap_mcp_tools(specs, fake_server(&log), &McpOptions::new().prefix("fake"));
    tools.push(wrap_mcp_tool(
        McpToolSpec::new("echo"),
        fake_server(&log),
        &McpOptions::new()
            .prefix("raw")
            .keep_nulls()
            .to_result(|raw| json!({"kept": raw})),
    ));
    let h = harness("fake-mcp", tools, Some(FAKE_POLICY)).await;

    let (first, done) = h
        .replayed(json!([
            ["fake_echo", {"q": "lease", "limit": null}],
            ["fake_sum", {"a": 1, "b": 2}],
            ["fake_delete", {"path": "/"}],
            ["fake_broken", {}],
            ["raw_echo", {"q": "x", "limit": null}]
        ]))
        .await;

    let expected = json!([
        "q=\"lease\"",
        {"sum": 3},
        "fake_delete not allowed. reason: deletes are off",
        {"error": "tool", "message": first[3]["message"]},
        {"kept": {"content": [{"type": "text", "text": "limit=null,q=\"x\""}]}}
    ]);
    assert_eq!(first, expected, "attempt 1");
    assert!(
        first[3]["message"]
            .as_str()
            .unwrap()
            .contains("transport closed while calling broken"),
        "{first}"
    );
    assert_eq!(
        output(&done),
        &expected,
        "attempt 2 replays the same results"
    );
    assert_eq!(
        *log.lock().unwrap(),
        ["echo", "sum", "broken", "echo"],
        "the server saw bare names, once each, and never the denied delete"
    );

    let steps = h.steps(&done);
    let targets: Vec<_> = steps
        .iter()
        .map(|s| s["target"].as_str().unwrap())
        .collect();
    assert_eq!(
        targets,
        [
            "fake_echo",
            "fake_sum",
            "fake_delete",
            "fake_broken",
            "raw_echo"
        ]
    );
    assert_eq!(
        steps[0]["args"],
        json!({"q": "lease"}),
        "nulls stripped before recording"
    );
    assert_eq!(steps[0]["result"], json!("q=\"lease\""));
    assert_eq!(steps[2]["status"], "denied");
    assert_eq!(steps[3]["status"], "failed");
    assert_eq!(
        steps[4]["args"],
        json!({"q": "x", "limit": null}),
        "keep_nulls"
    );
    h.served.shutdown().await;
}

#[tokio::test]
async fn non_object_arguments_fail_the_step_before_the_server() {
    let _trace = trace_init();
    let log = CallLog::default();
    let echo = wrap_mcp_tool(
        McpToolSpec::new("echo"),
        fake_server(&log),
        &McpOptions::new(),
    );
    let h = harness("fake-args", vec![echo], None).await;
    let done = h.run(json!([["echo", [1, 2]], ["echo", null]])).await;
    let out = output(&done);
    assert!(
        out[0]["message"]
            .as_str()
            .unwrap()
            .contains("takes a JSON object of arguments"),
        "{out}"
    );
    assert_eq!(out[1], json!(""), "null arguments mean none");
    assert_eq!(*log.lock().unwrap(), ["echo"]);
    h.served.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Real servers: installation
// ---------------------------------------------------------------------------------------------

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `tests/integration/mcp/setup.sh` once; returns the venv's python. Fails (never skips) when the
/// servers cannot be installed.
fn setup() -> &'static Path {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let python = PYTHON.get_or_init(|| {
        let script = repo().join("tests/integration/mcp/setup.sh");
        let out = std::process::Command::new("bash")
            .arg(&script)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if !out.status.success() || stdout.is_empty() {
            return Err(format!(
                "{} failed ({}):\n{}",
                script.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(PathBuf::from(stdout))
    });
    match python {
        Ok(python) => python,
        Err(why) => panic!(
            "the MCP tests need the pinned MCP servers (Node.js 20+ with npm, Python 3.11+ with \
             venv, and access to the npm and PyPI registries); run tests/integration/mcp/setup.sh.\n{why}"
        ),
    }
}

fn node_server(package: &str) -> tokio::process::Command {
    setup();
    let script = repo().join(format!(
        "tests/integration/mcp/node_modules/@modelcontextprotocol/{package}/dist/index.js"
    ));
    let mut command = tokio::process::Command::new("node");
    command.arg(script).stderr(Stdio::null()).kill_on_drop(true);
    command
}

async fn everything() -> McpClient {
    let mut command = node_server("server-everything");
    command.arg("stdio");
    McpClient::stdio(command)
        .await
        .expect("server-everything over stdio")
        .timeout(Duration::from_secs(20))
}

// ---------------------------------------------------------------------------------------------
// server-everything over stdio
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn server_everything_results_are_recorded_and_replayed_without_calling_it_again() {
    let _trace = trace_init();
    let client = everything().await;
    let specs = client.specs().await.unwrap();
    let mut names: Vec<_> = specs.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "echo",
            "get-annotated-message",
            "get-env",
            "get-resource-links",
            "get-resource-reference",
            "get-structured-content",
            "get-sum",
            "get-tiny-image",
            "gzip-file-as-resource",
            "simulate-research-query",
            "toggle-simulated-logging",
            "toggle-subscriber-updates",
            "trigger-long-running-operation"
        ]
    );
    let echo = specs.iter().find(|s| s.name == "echo").unwrap();
    assert!(
        echo.input_schema["properties"]["message"].is_object(),
        "{echo:?}"
    );

    let log = CallLog::default();
    let call = Arc::new(counting(client.call(), &log));
    let mut tools = wrap_mcp_tools(
        specs.clone(),
        Arc::clone(&call),
        &McpOptions::new().prefix("ev"),
    );
    // a descriptor the server does not have (a stale list)
    tools.push(wrap_mcp_tool(
        McpToolSpec::new("no-such-tool"),
        Arc::clone(&call),
        &McpOptions::new().prefix("ev"),
    ));
    // the same tool, nulls kept: proves the stripping is what makes the call pass
    tools.push(wrap_mcp_tool(
        specs
            .iter()
            .find(|s| s.name == "get-annotated-message")
            .unwrap()
            .clone(),
        Arc::clone(&call),
        &McpOptions::new().prefix("raw").keep_nulls(),
    ));
    let h = harness("everything", tools, None).await;

    let (first, done) = h
        .replayed(json!([
            ["ev_echo", {"message": "hi"}],
            ["ev_get-sum", {"a": 2, "b": 3}],
            ["ev_get-structured-content", {"location": "Chicago"}],
            ["ev_get-annotated-message", {"messageType": "success", "includeImage": null}],
            ["raw_get-annotated-message", {"messageType": "success", "includeImage": null}],
            ["ev_get-resource-reference", {"resourceType": "Text", "resourceId": 1}],
            ["ev_get-tiny-image", {}],
            ["ev_no-such-tool", {}]
        ]))
        .await;
    let replayed = output(&done);
    assert_eq!(replayed, &first, "attempt 2 got attempt 1's results");
    assert_eq!(
        log.lock().unwrap().len(),
        8,
        "8 calls reached the server, none on replay"
    );

    assert_eq!(first[0], json!("Echo: hi"));
    assert_eq!(first[1], json!("The sum of 2 and 3 is 5."));
    assert_eq!(
        first[2],
        json!({"temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82})
    );
    assert_eq!(
        first[3],
        json!("Operation completed successfully"),
        "includeImage: null stripped"
    );
    let raw = first[4].as_str().unwrap();
    assert!(
        raw.contains("expected boolean, received null"),
        "kept nulls are rejected: {raw}"
    );
    let reference = first[5].as_str().unwrap();
    assert!(reference.contains("\"type\":\"resource\""), "{reference}");
    let image = first[6].as_str().unwrap();
    assert!(
        image.starts_with("Here's the image you requested:\n{")
            && image.contains("\"type\":\"image\"")
            && image.contains("\"data\":\"iVBOR")
            && image.ends_with("}\nThe image above is the MCP logo."),
        "{image}"
    );
    assert_eq!(
        first[7],
        json!("MCP error -32602: Tool no-such-tool not found"),
        "in-band isError recorded"
    );

    let steps = h.steps(&done);
    assert_eq!(steps[3]["args"], json!({"messageType": "success"}));
    assert!(
        steps.iter().all(|s| s["status"] == "succeeded"),
        "{steps:?}"
    );

    // The resource text embeds the wall clock: a fresh call differs, the replay did not.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut args = Map::new();
    args.insert("resourceType".into(), json!("Text"));
    args.insert("resourceId".into(), json!(1));
    let fresh = flatten(
        client
            .call()
            .call_tool("get-resource-reference".into(), args)
            .await
            .unwrap(),
    );
    assert_ne!(&fresh, &first[5], "a fresh call returns a new timestamp");
    assert_eq!(
        replayed[5], first[5],
        "the replay returned the recorded one"
    );

    h.served.shutdown().await;
    client.close().await;
}

// ---------------------------------------------------------------------------------------------
// server-filesystem over stdio, in a temporary directory
// ---------------------------------------------------------------------------------------------

/// A fresh directory under target/ (the filesystem server resolves symlinks, so canonicalize).
fn temp_dir(label: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = repo()
        .join("target/tmp")
        .join(format!("mcp-{label}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

async fn filesystem(root: &Path) -> McpClient {
    let mut command = node_server("server-filesystem");
    command.arg(root);
    McpClient::stdio(command)
        .await
        .expect("server-filesystem over stdio")
        .timeout(Duration::from_secs(20))
}

const FS_POLICY: &str = r#"
default_action: allow
rules:
  - id: no-moves
    when: { target: fs_move_file }
    then: { decision: deny, reason: "files stay put" }
"#;

fn fs_options() -> McpOptions {
    McpOptions::new()
        .prefix("fs")
        .tool_idempotency("write_file", Idempotency::AtMostOnce)
}

#[tokio::test]
async fn server_filesystem_writes_once_reads_structured_and_denied_moves_never_reach_it() {
    let _trace = trace_init();
    let root = temp_dir("fs");
    std::fs::write(root.join("a.txt"), "hello from file\n").unwrap();
    let client = filesystem(&root).await;
    let log = CallLog::default();
    let tools = wrap_mcp_tools(
        client.specs().await.unwrap(),
        counting(client.call(), &log),
        &fs_options(),
    );
    assert_eq!(tools.len(), 14);
    let h = harness("files", tools, Some(FS_POLICY)).await;
    let (a, b) = (root.join("a.txt"), root.join("b.txt"));

    let (first, done) = h
        .replayed(json!([
            ["fs_read_text_file", {"path": a, "head": null, "tail": null}],
            ["fs_write_file", {"path": b, "content": "written once"}],
            ["fs_move_file", {"source": a, "destination": root.join("c.txt")}],
            ["fs_read_text_file", {"path": "/etc/hostname"}]
        ]))
        .await;
    let replayed = output(&done);
    assert_eq!(replayed, &first);
    assert_eq!(first[0], json!({"content": "hello from file\n"}));
    assert_eq!(
        first[1],
        json!({"content": format!("Successfully wrote to {}", b.display())})
    );
    assert_eq!(
        first[2],
        json!("fs_move_file not allowed. reason: files stay put")
    );
    let outside = first[3].as_str().unwrap();
    assert!(
        outside.contains("Access denied - path outside allowed directories"),
        "{outside}"
    );

    assert_eq!(std::fs::read_to_string(&b).unwrap(), "written once");
    assert!(a.exists(), "the denied move never ran");
    assert_eq!(
        *log.lock().unwrap(),
        ["read_text_file", "write_file", "read_text_file"],
        "each allowed call reached the server once, none on replay, the move never"
    );
    let steps = h.steps(&done);
    assert_eq!(steps[0]["args"], json!({"path": a}));
    assert_eq!(steps[1]["idempotency"], "at_most_once");
    assert_eq!(steps[2]["status"], "denied");

    h.served.shutdown().await;
    client.close().await;
    std::fs::remove_dir_all(&root).unwrap();
}

#[tokio::test]
async fn an_interrupted_at_most_once_write_is_not_repeated_by_the_next_attempt() {
    let _trace = trace_init();
    let root = temp_dir("fs-crash");
    let client = filesystem(&root).await;
    let log = CallLog::default();
    let tools = wrap_mcp_tools(
        client.specs().await.unwrap(),
        dying_once(client.call(), &log),
        &fs_options(),
    );
    let h = harness("files-crash", tools, None).await;
    let note = root.join("note.txt");

    let created = h
        .kernel
        .create_execution(NewExecution::new(
            "files-crash",
            json!({"calls": [["fs_write_file", {"path": note, "content": "once"}]]}),
        ))
        .await
        .unwrap();
    for _ in 0..2000 {
        if std::fs::read_to_string(&note).is_ok_and(|text| text == "once") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        std::fs::read_to_string(&note).unwrap(),
        "once",
        "the server wrote"
    );
    h.kernel.redeliver(&created.id).unwrap();
    let done = h.kernel.wait_terminal(&created.id, WAIT).await.unwrap();

    let out = output(&done);
    let message = out[0]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("fs_write_file: outcome unknown"),
        "{out}"
    );
    assert_eq!(h.steps(&done)[0]["error"]["reason"], "indeterminate");
    assert_eq!(
        calls_to(&log, "write_file"),
        1,
        "the write was not sent again"
    );

    h.served.shutdown().await;
    client.close().await;
    std::fs::remove_dir_all(&root).unwrap();
}

// ---------------------------------------------------------------------------------------------
// The Python fixture (PyPI `mcp` 2.3.0) over streamable HTTP on 127.0.0.1
// ---------------------------------------------------------------------------------------------

/// A fixture process on a port of its own.
struct Server {
    url: String,
    port: u16,
    effects: PathBuf,
    process: tokio::process::Child,
}

/// The fixture server over streamable HTTP on `port`, appending its effects to `effects`.
fn spawn_python_fixture(port: u16, effects: &Path) -> tokio::process::Child {
    spawn_python_fixture_with(port, effects, &[])
}

/// [`spawn_python_fixture`] with more arguments (`resumable`).
fn spawn_python_fixture_with(port: u16, effects: &Path, more: &[&str]) -> tokio::process::Child {
    tokio::process::Command::new(setup())
        .arg(repo().join("tests/integration/mcp/fixture_server.py"))
        .args(["streamable-http", &port.to_string()])
        .args(more)
        .env("EFFECT_LOG", effects)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("python fixture server")
}

use crate::support::ports::free_port;

async fn wait_listening(port: u16) {
    for _ in 0..1500 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the python fixture is not listening on 127.0.0.1:{port}");
}

async fn server() -> Server {
    let effects = temp_dir("http-effects").join("effects.log");
    let port = free_port();
    let process = spawn_python_fixture(port, &effects);
    wait_listening(port).await;
    Server {
        url: format!("http://127.0.0.1:{port}/mcp"),
        port,
        effects,
        process,
    }
}

// ---------------------------------------------------------------------------------------------
// Parity with the Python SDK's flattening on the same real results
// ---------------------------------------------------------------------------------------------

/// Runs `script` (under tests/integration/mcp/) with the venv's python, `input` as JSON on its stdin.
fn run_python(script: &str, input: &impl serde::Serialize) -> std::process::Output {
    use std::io::Write;

    let mut child = std::process::Command::new(setup())
        .arg(repo().join("tests/integration/mcp").join(script))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string(input).unwrap().as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The Python SDK's `_default_flatten` (rebuno 0.29.2) on each raw result.
fn python_flatten(raw: &[Value]) -> Vec<Value> {
    let out = run_python("flatten_parity.py", &raw);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

async fn raw_call(call: &impl McpCall, name: &str, args: Value) -> Value {
    let Value::Object(args) = args else {
        panic!("object")
    };
    call.call_tool(name.to_owned(), args).await.unwrap()
}

#[tokio::test]
async fn flattening_matches_the_python_sdk_on_text_and_structured_results() {
    let _trace = trace_init();
    let everything = everything().await;
    let ev = everything.call();
    let server = server().await;
    let py = StreamableHttp::connect(&server.url).await.expect("connect");
    let raw = vec![
        raw_call(&ev, "echo", json!({"message": "hi"})).await,
        raw_call(&ev, "get-sum", json!({"a": 1, "b": 2})).await,
        raw_call(
            &ev,
            "get-structured-content",
            json!({"location": "Chicago"}),
        )
        .await,
        raw_call(
            &ev,
            "get-annotated-message",
            json!({"messageType": "success"}),
        )
        .await,
        raw_call(
            &ev,
            "get-annotated-message",
            json!({"messageType": "success", "includeImage": null}),
        )
        .await,
        raw_call(&ev, "no-such-tool", json!({})).await,
        raw_call(&py.call(), "add", json!({"a": 2, "b": 3})).await,
        raw_call(&py.call(), "greet", json!({"name": "ann"})).await,
        raw_call(&py.call(), "weather", json!({"city": "Oslo"})).await,
        raw_call(&py.call(), "boom", json!({"msg": "x"})).await,
        json!({"content": []}),
        json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}),
    ];
    let rust: Vec<Value> = raw.iter().cloned().map(flatten).collect();
    let python = python_flatten(&raw);
    assert_eq!(rust, python);
    assert_eq!(rust[0], json!("Echo: hi"));
    assert_eq!(rust[1], json!("The sum of 1 and 2 is 3."));
    assert_eq!(rust[6], json!({"result": 5}));

    // Non-text blocks: Rust writes the block's JSON, Python its model's repr.
    let image = vec![raw_call(&ev, "get-tiny-image", json!({})).await];
    let (rust, python) = (flatten(image[0].clone()), python_flatten(&image).remove(0));
    assert!(
        rust.as_str().unwrap().contains("\"data\":\"iVBOR"),
        "{rust}"
    );
    assert!(
        python
            .as_str()
            .unwrap()
            .contains("type='image' data='iVBOR"),
        "{python}"
    );

    everything.close().await;
    py.close().await;
}

#[tokio::test]
async fn a_call_past_the_timeout_fails_and_the_connection_stays_usable() {
    let _trace = trace_init();
    let client = everything().await.timeout(Duration::from_millis(300));
    let mut slow = Map::new();
    slow.insert("duration".into(), json!(3));
    slow.insert("steps".into(), json!(1));
    let error = client
        .call()
        .call_tool("trigger-long-running-operation".into(), slow)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("timed out after 300ms"),
        "{error}"
    );
    let mut hi = Map::new();
    hi.insert("message".into(), json!("still here"));
    let echoed = client.call().call_tool("echo".into(), hi).await.unwrap();
    assert_eq!(flatten(echoed), json!("Echo: still here"));
    client.close().await;
}

/// Offline parity: results captured from the real servers with the Python SDK's flattening
/// of each (`tests/integration/mcp/capture_fixtures.py`).
#[test]
fn flatten_matches_the_python_sdk_on_captured_results() {
    let text = std::fs::read_to_string(repo().join("tests/integration/mcp/fixtures/flatten.json"))
        .unwrap();
    let cases: Vec<Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(cases.len(), 14);
    let mut same = 0;
    for case in &cases {
        let (rust, python) = (flatten(case["raw"].clone()), &case["python"]);
        let non_text = case["raw"]["content"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["type"] != "text");
        if non_text && case["raw"]["structuredContent"].is_null() {
            // Python prints the block model's repr, Rust the block's JSON; the text blocks match.
            let (rust, python) = (rust.as_str().unwrap(), python.as_str().unwrap());
            assert_eq!(
                rust.lines().next(),
                python.lines().next(),
                "{}",
                case["call"]
            );
            assert!(
                python.contains("uri='") || python.contains("type='image'"),
                "{python}"
            );
        } else {
            assert_eq!(&rust, python, "{}", case["call"]);
            same += 1;
        }
    }
    assert_eq!(same, 12, "every text and structured result matches");
    let golden = |i: usize| flatten(cases[i]["raw"].clone());
    assert_eq!(golden(0), json!("Echo: hi"));
    assert_eq!(golden(1), json!("The sum of 1 and 2 is 3."));
    assert_eq!(
        golden(2),
        json!({"temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82})
    );
    assert_eq!(golden(3), json!("Operation completed successfully"));
    assert_eq!(golden(9), json!({"result": 5}));
}
