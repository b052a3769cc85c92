//! `rebuno::mcp::StreamableHttp`, the SDK's own MCP client (the one Cloudflare Workers use),
//! against the Python fixture on PyPI's `mcp` over streamable HTTP: tools recorded and replayed
//! through the dev kernel, every message it sends checked against the specification's JSON
//! Schema, a session the server forgot, and servers that answer wrongly or not at all.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::http::{HeaderMap, Method};
use bytes::Bytes;
use rebuno::mcp::{McpCall, McpOptions};
use rebuno::transport::{HyperTransport, StreamingFuture, Transport, TransportFuture};
use rebuno::{ErrorKind, Idempotency};
use serde_json::{Map, Value, json};

use super::*;

/// What the client sent: method, headers and body of each request.
type Sent = Arc<Mutex<Vec<(Method, HeaderMap, Bytes)>>>;

/// The hyper transport, keeping a copy of every request.
#[derive(Debug)]
struct Recording {
    inner: HyperTransport,
    sent: Sent,
}

impl Recording {
    fn new() -> (Self, Sent) {
        let sent = Sent::default();
        let inner = HyperTransport::new().expect("hyper transport");
        (
            Self {
                inner,
                sent: Arc::clone(&sent),
            },
            sent,
        )
    }

    fn keep(&self, request: &http::Request<Bytes>) {
        self.sent.lock().unwrap().push((
            request.method().clone(),
            request.headers().clone(),
            request.body().clone(),
        ));
    }
}

impl Transport for Recording {
    fn send(&self, request: http::Request<Bytes>, timeout: Duration) -> TransportFuture {
        self.keep(&request);
        self.inner.send(request, timeout)
    }

    fn send_streaming(&self, request: http::Request<Bytes>, timeout: Duration) -> StreamingFuture {
        self.keep(&request);
        self.inner.send_streaming(request, timeout)
    }
}

const HTTP_POLICY: &str = r#"
default_action: allow
rules:
  - id: no-weather
    when: { target: sh_weather }
    then: { decision: deny, reason: "no forecasts today" }
"#;

#[tokio::test]
async fn tools_over_the_sdks_own_client_are_recorded_replayed_stripped_and_denied() {
    let _trace = trace_init();
    let server = server().await;
    let client = StreamableHttp::connect(&server.url).await.expect("connect");
    assert_eq!(client.protocol_version(), "2025-11-25");
    assert_eq!(client.server_info()["name"], "rebuno-fixture");
    let log = CallLog::default();
    let options = McpOptions::new()
        .prefix("sh")
        .tool_idempotency("record", Idempotency::AtMostOnce);
    let specs = client.specs().await.unwrap();
    let mut names: Vec<_> = specs.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["add", "boom", "chatty", "greet", "record", "weather"]
    );
    let greet = specs.iter().find(|s| s.name == "greet").unwrap().clone();
    let mut tools = wrap_mcp_tools(specs, counting(client.call(), &log), &options);
    let keep_nulls = McpOptions::new().prefix("raw").keep_nulls();
    tools.push(wrap_mcp_tool(
        greet,
        counting(client.call(), &log),
        &keep_nulls,
    ));
    let h = harness("sdk-http", tools, Some(HTTP_POLICY)).await;

    let (first, done) = h
        .replayed(json!([
            ["sh_add", {"a": 2, "b": 3}],
            ["sh_greet", {"name": "ann", "title": null}],
            ["sh_record", {"note": "first"}],
            ["sh_chatty", {"note": "over the stream"}],
            ["sh_boom", {"msg": "kaput"}],
            ["sh_weather", {"city": "Oslo"}],
            ["raw_greet", {"name": "ann", "title": null}]
        ]))
        .await;
    assert_eq!(
        output(&done),
        &first,
        "the re-delivery replays every result"
    );
    assert_eq!(first[0], json!({"result": 5}));
    assert_eq!(
        first[1],
        json!({"result": "hello friend ann"}),
        "null stripped"
    );
    assert_eq!(first[2], json!({"result": "1"}));
    assert_eq!(
        first[3],
        json!({"result": "over the stream"}),
        "a log message and a ping came first on the call's stream"
    );
    assert_eq!(first[4], json!("Error executing tool boom"));
    assert_eq!(
        first[5],
        json!("sh_weather not allowed. reason: no forecasts today")
    );
    let raw = first[6].as_str().unwrap();
    assert!(
        raw.contains("valid string"),
        "title: null reaches pydantic: {raw}"
    );
    assert_eq!(
        *log.lock().unwrap(),
        ["add", "greet", "record", "chatty", "boom", "greet"],
        "each allowed call reached the server once, none on replay, the denied one never"
    );
    assert_eq!(
        std::fs::read_to_string(&server.effects).unwrap(),
        "first\n",
        "record ran exactly once"
    );
    let steps = h.steps(&done);
    assert_eq!(steps[1]["args"], json!({"name": "ann"}));
    assert_eq!(steps[2]["idempotency"], "at_most_once");
    assert_eq!(steps[5]["status"], "denied");

    h.served.shutdown().await;
    client.close().await;
}

/// Which definition of the schema a message the client sent must match.
fn definition_of(message: &Value) -> &'static str {
    match message["method"].as_str() {
        Some("initialize") => "InitializeRequest",
        Some("notifications/initialized") => "InitializedNotification",
        Some("tools/list") => "ListToolsRequest",
        Some("tools/call") => "CallToolRequest",
        Some(other) => panic!("the client sent an unexpected {other}"),
        None => "JSONRPCResultResponse",
    }
}

/// Runs tests/integration/mcp/validate_messages.py on `items`; its output lines, and whether all passed.
fn validate(items: &[Value]) -> (Vec<String>, bool) {
    let out = run_python("validate_messages.py", &items);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.trim().is_empty(), "validator: {stderr}");
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    (lines, out.status.success())
}

#[tokio::test]
async fn every_message_the_client_sends_matches_the_specifications_schema() {
    let _trace = trace_init();
    let server = server().await;
    let (transport, sent) = Recording::new();
    let client = StreamableHttp::builder(&server.url)
        .transport(transport)
        .header("authorization", "Bearer fixture-token")
        .connect()
        .await
        .expect("connect");
    assert_eq!(client.specs().await.unwrap().len(), 6);
    let mut args = Map::new();
    args.insert("note".into(), json!("hi"));
    let chatty = client.call().call_tool("chatty".into(), args).await;
    assert_eq!(
        chatty.unwrap()["structuredContent"],
        json!({"result": "hi"})
    );
    client.close().await;

    let sent = sent.lock().unwrap().clone();
    let posts: Vec<(HeaderMap, Value)> = sent
        .iter()
        .filter(|(method, _, _)| method == Method::POST)
        .map(|(_, headers, body)| (headers.clone(), serde_json::from_slice(body).unwrap()))
        .collect();
    let methods: Vec<&str> = posts
        .iter()
        .map(|(_, m)| m["method"].as_str().unwrap_or("(answer)"))
        .collect();
    assert_eq!(
        methods,
        [
            "initialize",
            "notifications/initialized",
            "tools/list",
            "tools/call",
            "(answer)"
        ],
        "the ping on the call's stream was answered"
    );
    let items: Vec<Value> = posts
        .iter()
        .map(|(_, message)| json!({"def": definition_of(message), "message": message}))
        .collect();
    let (lines, passed) = validate(&items);
    assert!(passed, "{lines:#?}");
    assert_eq!(lines.len(), items.len());

    // The rules the schema cannot say: no id on a notification, an empty result for a ping,
    // the headers of the transport.
    assert!(posts[1].1.get("id").is_none());
    assert_eq!(posts[4].1["result"], json!({}));
    let session = posts[1].0.get("mcp-session-id").cloned();
    assert!(session.is_some(), "the fixture keeps sessions");
    for (i, (headers, _)) in posts.iter().enumerate() {
        let accept = headers["accept"].to_str().unwrap();
        assert!(accept.contains("application/json") && accept.contains("text/event-stream"));
        assert_eq!(headers["content-type"], "application/json");
        assert_eq!(headers["authorization"], "Bearer fixture-token");
        if i == 0 {
            assert!(headers.get("mcp-session-id").is_none());
            assert!(headers.get("mcp-protocol-version").is_none());
        } else {
            assert_eq!(headers.get("mcp-session-id"), session.as_ref());
            assert_eq!(headers["mcp-protocol-version"], "2025-11-25");
        }
    }
    let delete = sent.iter().find(|(method, _, _)| method == Method::DELETE);
    let (_, headers, _) = delete.expect("close ends the session");
    assert_eq!(headers.get("mcp-session-id"), session.as_ref());

    // The validator does catch a malformed message.
    let mut broken = posts[3].1.clone();
    broken["params"].as_object_mut().unwrap().remove("name");
    let (lines, passed) = validate(&[json!({"def": "CallToolRequest", "message": broken})]);
    assert!(
        !passed && lines[0].contains("'name' is a required property"),
        "{lines:?}"
    );
}

#[tokio::test]
async fn a_session_the_server_forgot_is_initialized_again_and_the_call_goes_through() {
    let _trace = trace_init();
    let mut server = server().await;
    let (transport, sent) = Recording::new();
    let client = StreamableHttp::builder(&server.url)
        .transport(transport)
        .connect()
        .await
        .expect("connect");
    let add = |a: i64| {
        let mut args = Map::new();
        args.insert("a".into(), json!(a));
        args.insert("b".into(), json!(1));
        client.call().call_tool("add".into(), args)
    };
    assert_eq!(
        add(1).await.unwrap()["structuredContent"],
        json!({"result": 2})
    );

    // The server restarts on the same port and knows no session any more.
    server.process.kill().await.unwrap();
    let _restarted = spawn_python_fixture(server.port, &server.effects);
    wait_listening(server.port).await;
    assert_eq!(
        add(2).await.unwrap()["structuredContent"],
        json!({"result": 3})
    );

    let sent = sent.lock().unwrap();
    let methods: Vec<String> = sent
        .iter()
        .map(|(_, _, body)| {
            let message: Value = serde_json::from_slice(body).unwrap();
            message["method"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    assert_eq!(
        methods,
        [
            "initialize",
            "notifications/initialized",
            "tools/call",
            "tools/call",
            "initialize",
            "notifications/initialized",
            "tools/call"
        ],
        "one 404, one new session, the call sent again"
    );
    let sessions: Vec<_> = sent
        .iter()
        .filter_map(|(_, headers, _)| headers.get("mcp-session-id"))
        .collect();
    assert_ne!(sessions.first(), sessions.last(), "a new session");
}

#[tokio::test]
async fn servers_that_are_gone_or_answer_wrongly_give_clear_errors() {
    let _trace = trace_init();
    let nobody = format!("http://127.0.0.1:{}/mcp", free_port());
    let refused = StreamableHttp::connect(&nobody).await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Network, "{refused}");
    assert!(
        refused.to_string().starts_with("MCP initialize failed"),
        "{refused}"
    );

    let server = server().await;
    let wrong_path = format!("http://127.0.0.1:{}/elsewhere", server.port);
    let missing = StreamableHttp::connect(&wrong_path).await.unwrap_err();
    assert!(missing.to_string().contains("HTTP 404"), "{missing}");

    let bad_header = StreamableHttp::builder(&server.url)
        .header("bad header", "x")
        .connect()
        .await
        .unwrap_err();
    assert_eq!(bad_header.kind(), ErrorKind::Config);
    let bad_url = StreamableHttp::connect("not a url").await.unwrap_err();
    assert_eq!(bad_url.kind(), ErrorKind::Config);

    let client = StreamableHttp::connect(&server.url).await.unwrap();
    let invalid = client.request("no/such/method", None).await.unwrap_err();
    assert_eq!(invalid.kind(), ErrorKind::Api, "{invalid}");
    assert!(invalid.to_string().contains("-32601"), "{invalid}");
    client.close().await;

    // A server that takes the connection and never answers: the request times out.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://{}/mcp", silent.local_addr().unwrap());
    let started = std::time::Instant::now();
    let timed_out = StreamableHttp::builder(&silent_url)
        .timeout(Duration::from_millis(300))
        .connect()
        .await
        .unwrap_err();
    assert_eq!(timed_out.kind(), ErrorKind::Timeout, "{timed_out}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

// ---------------------------------------------------------------------------------------------
// A scripted server: what real servers rarely do (JSON answers, batches, pagination, server
// requests, garbage), answered by an axum stub on loopback.
// ---------------------------------------------------------------------------------------------

/// How the stub answers one method.
#[derive(Clone)]
enum Reply {
    /// `200 application/json` with this body (`{id}` in it becomes the request's id).
    Json(&'static str),
    /// `200 text/event-stream` with these events' data (`{id}` as above), then the end.
    Events(Vec<&'static str>),
    /// This status, content type and body.
    Raw(u16, &'static str, &'static str),
    /// No answer, ever.
    Hang,
}

type Received = Arc<Mutex<Vec<(HeaderMap, Value)>>>;

/// Serves `script` (method → reply; notifications and answers get `202`) at `/mcp`; the
/// `initialize` answer names session `s-1` unless the script answers it.
async fn stub(script: Vec<(&'static str, Reply)>) -> (String, Received) {
    use axum::response::IntoResponse;

    let received = Received::default();
    let seen = Arc::clone(&received);
    let script = Arc::new(script);
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let seen = Arc::clone(&seen);
            let script = Arc::clone(&script);
            async move {
                let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                seen.lock().unwrap().push((headers, message.clone()));
                let method = message["method"].as_str().unwrap_or_default();
                let id = message["id"].to_string();
                if message.get("id").is_none() || method.is_empty() {
                    return (axum::http::StatusCode::ACCEPTED, "").into_response();
                }
                let fill = |text: &str| text.replace("{id}", &id);
                let reply = script.iter().find(|(m, _)| *m == method).map(|(_, r)| r.clone());
                let reply = reply.unwrap_or(match method {
                    "initialize" => Reply::Json(
                        r#"{"jsonrpc":"2.0","id":{id},"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"stub","version":"1"}}}"#,
                    ),
                    _ => Reply::Raw(500, "text/plain", "unscripted"),
                });
                if matches!(reply, Reply::Hang) {
                    std::future::pending::<()>().await;
                }
                let mut response = match reply {
                    Reply::Hang => unreachable!("never answered"),
                    Reply::Json(body) => {
                        ([("content-type", "application/json")], fill(body)).into_response()
                    }
                    Reply::Events(events) => {
                        let stream: String = events
                            .iter()
                            .map(|data| format!("event: message\ndata: {}\n\n", fill(data)))
                            .collect();
                        ([("content-type", "text/event-stream")], stream).into_response()
                    }
                    Reply::Raw(status, content_type, body) => (
                        axum::http::StatusCode::from_u16(status).unwrap(),
                        [("content-type", content_type)],
                        body,
                    )
                        .into_response(),
                };
                if method == "initialize" {
                    response
                        .headers_mut()
                        .insert("mcp-session-id", "s-1".parse().unwrap());
                }
                response
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}/mcp"), received)
}

fn call(
    client: &StreamableHttp,
    name: &str,
) -> rebuno::rt::BoxFuture<'static, Result<Value, rebuno::BoxError>> {
    client.call().call_tool(name.to_owned(), Map::new())
}

#[tokio::test]
async fn json_answers_batches_pages_and_server_requests_are_all_understood() {
    let _trace = trace_init();
    let (url, received) = stub(vec![(
        "tools/call",
        // A 2025-03-26 batch: a notification, then the response.
        Reply::Json(
            r#"[{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"hi"}},
                {"jsonrpc":"2.0","id":{id},"result":{"content":[{"type":"text","text":"done"}]}}]"#,
        ),
    )])
    .await;
    let client = StreamableHttp::connect(&url).await.unwrap();
    assert_eq!(client.protocol_version(), "2025-06-18");
    let done = call(&client, "a").await.unwrap();
    assert_eq!(done["content"][0]["text"], "done");
    let headers = received.lock().unwrap()[2].0.clone();
    assert_eq!(headers["mcp-session-id"], "s-1");
    assert_eq!(headers["mcp-protocol-version"], "2025-06-18");

    // On an event stream: a notification, a request the client has no capability for, then
    // the response. The request gets "method not found" back, posted to the endpoint.
    let (url, received) = stub(vec![(
        "tools/list",
        Reply::Events(vec![
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#,
            r#"{"jsonrpc":"2.0","id":"srv-1","method":"sampling/createMessage","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":{id},"result":{"tools":[{"name":"only"}]}}"#,
        ]),
    )])
    .await;
    let client = StreamableHttp::connect(&url).await.unwrap();
    let specs = client.specs().await.unwrap();
    assert_eq!(specs.len(), 1);
    let answers: Vec<Value> = received
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, m)| m.get("method").is_none())
        .map(|(_, m)| m.clone())
        .collect();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0]["id"], "srv-1");
    assert_eq!(answers[0]["error"]["code"], -32601);
}

#[tokio::test]
async fn every_page_of_tools_list_is_read() {
    let _trace = trace_init();
    // The cursor the client sends picks the page.
    let received = Received::default();
    let seen = Arc::clone(&received);
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post(move |body: Bytes| {
            let seen = Arc::clone(&seen);
            async move {
                use axum::response::IntoResponse;
                let message: Value = serde_json::from_slice(&body).unwrap();
                seen.lock().unwrap().push((HeaderMap::new(), message.clone()));
                let id = message["id"].clone();
                let result = match (message["method"].as_str(), message["params"]["cursor"].as_str()) {
                    (Some("initialize"), _) => json!({"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "pages", "version": "1"}}),
                    (Some("tools/list"), None) => json!({"tools": [{"name": "one"}], "nextCursor": "2"}),
                    (Some("tools/list"), Some("2")) => json!({"tools": [{"name": "two"}], "nextCursor": "3"}),
                    (Some("tools/list"), Some("3")) => json!({"tools": [{"name": "three"}]}),
                    _ => return (axum::http::StatusCode::ACCEPTED, "").into_response(),
                };
                ([("content-type", "application/json")], json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()).into_response()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = StreamableHttp::connect(&url).await.unwrap();
    let names: Vec<String> = client
        .specs()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["one", "two", "three"]);
    let cursors: Vec<Value> = received
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, m)| m["method"] == "tools/list")
        .map(|(_, m)| m["params"]["cursor"].clone())
        .collect();
    assert_eq!(cursors, [Value::Null, json!("2"), json!("3")]);
}

#[tokio::test]
async fn garbage_and_refusals_fail_the_call_with_what_came_back() {
    let _trace = trace_init();
    let cases: Vec<(&str, Reply, ErrorKind, &str)> = vec![
        (
            "html",
            Reply::Raw(200, "text/html", "<html>bad gateway</html>"),
            ErrorKind::Protocol,
            "<html>bad gateway</html>",
        ),
        (
            "denied",
            Reply::Raw(401, "text/plain", "no token"),
            ErrorKind::Network,
            "HTTP 401 Unauthorized: no token",
        ),
        (
            // A long error page: its start is quoted, the rest not read.
            "overloaded",
            Reply::Raw(
                503,
                "text/plain",
                Box::leak("busy ".repeat(2000).into_boxed_str()),
            ),
            ErrorKind::Network,
            "HTTP 503 Service Unavailable: busy busy",
        ),
        (
            "accepted",
            Reply::Raw(202, "", ""),
            ErrorKind::Protocol,
            "expected a JSON or event-stream answer",
        ),
        (
            "cut",
            Reply::Events(vec![
                r#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#,
            ]),
            ErrorKind::Protocol,
            "ended before the response",
        ),
        (
            "noise",
            Reply::Events(vec!["not json"]),
            ErrorKind::Protocol,
            "is not JSON",
        ),
        (
            "wrong-id",
            Reply::Json(r#"{"jsonrpc":"2.0","id":999,"result":{}}"#),
            ErrorKind::Protocol,
            "no response to request",
        ),
        (
            "rpc",
            Reply::Json(
                r#"{"jsonrpc":"2.0","id":{id},"error":{"code":-32602,"message":"Unknown tool: rpc"}}"#,
            ),
            ErrorKind::Api,
            "JSON-RPC error -32602: Unknown tool: rpc",
        ),
    ];
    for (name, reply, kind, text) in cases {
        let (url, _) = stub(vec![("tools/call", reply)]).await;
        let client = StreamableHttp::connect(&url).await.unwrap();
        let error = call(&client, name).await.unwrap_err();
        let error = error.downcast::<rebuno::Error>().expect("an SDK error");
        assert_eq!(error.kind(), kind, "{name}: {error}");
        assert!(error.to_string().contains(text), "{name}: {error}");
        assert!(
            error
                .to_string()
                .contains(&format!("tools/call \"{name}\"")),
            "{error}"
        );
    }

    let (url, _) = stub(vec![(
        "initialize",
        Reply::Json(r#"{"jsonrpc":"2.0","id":{id},"result":{"protocolVersion":"2024-11-05","capabilities":{},"serverInfo":{"name":"old","version":"1"}}}"#),
    )])
    .await;
    let old = StreamableHttp::connect(&url).await.unwrap_err();
    assert_eq!(old.kind(), ErrorKind::Protocol);
    assert!(old.to_string().contains("\"2024-11-05\""), "{old}");
}

#[tokio::test]
async fn concurrent_calls_share_one_session_and_each_gets_its_own_answer() {
    let _trace = trace_init();
    let server = server().await;
    let (transport, sent) = Recording::new();
    let client = StreamableHttp::builder(&server.url)
        .transport(transport)
        .connect()
        .await
        .unwrap();
    // As an LLM's parallel tool calls arrive: 24 calls at once on one session.
    let calls = (0..24_i64).map(|a| {
        let mut args = Map::new();
        args.insert("a".into(), json!(a));
        args.insert("b".into(), json!(1000));
        client.call().call_tool("add".into(), args)
    });
    let answers = futures_util::future::join_all(calls).await;
    for (a, answer) in answers.into_iter().enumerate() {
        assert_eq!(
            answer.unwrap()["structuredContent"],
            json!({"result": a as i64 + 1000}),
            "call {a}"
        );
    }
    let sent = sent.lock().unwrap();
    let mut ids: Vec<u64> = sent
        .iter()
        .filter_map(|(_, _, body)| serde_json::from_slice::<Value>(body).ok())
        .filter(|m| m["method"] == "tools/call")
        .map(|m| m["id"].as_u64().unwrap())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 24, "every request has an id of its own");
    let sessions: std::collections::HashSet<_> = sent
        .iter()
        .filter_map(|(_, headers, _)| headers.get("mcp-session-id"))
        .collect();
    assert_eq!(sessions.len(), 1, "one session throughout");
}

#[tokio::test]
async fn a_call_abandoned_by_a_superseded_dispatch_is_cancelled_on_the_server() {
    let _trace = trace_init();
    let (url, received) = stub(vec![("tools/call", Reply::Hang)]).await;
    let client = StreamableHttp::connect(&url).await.unwrap();
    let tools = wrap_mcp_tools(
        [rebuno::mcp::McpToolSpec::new("hang")],
        client.call(),
        &McpOptions::new().prefix("st"),
    );
    let h = harness("abandoning", tools, None).await;
    let created = h
        .kernel
        .create_execution(rebuno_devkernel::NewExecution::new(
            "abandoning",
            json!({ "calls": [["st_hang", {}]] }),
        ))
        .await
        .unwrap();
    let posted = |method: &str| -> Vec<Value> {
        received
            .lock()
            .unwrap()
            .iter()
            .map(|(_, m)| m.clone())
            .filter(|m| m["method"] == method)
            .collect()
    };
    eventually(|| posted("tools/call").len() == 1).await;
    let first = posted("tools/call")[0]["id"].clone();
    // A new attempt supersedes the one waiting on the server: its call is dropped.
    assert_eq!(h.kernel.redeliver(&created.id).unwrap(), 2);
    eventually(|| !posted("notifications/cancelled").is_empty()).await;
    let sent = posted("notifications/cancelled");
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["params"]["requestId"], first);
    assert!(sent[0].get("id").is_none(), "a notification");
    let (lines, passed) = validate(&[json!({"def": "CancelledNotification", "message": sent[0]})]);
    assert!(passed, "{lines:?}");
    // Attempt 2 calls again (the step was never recorded) and waits in turn.
    eventually(|| posted("tools/call").len() == 2).await;
    let calls = || posted("tools/call");
    assert_eq!(calls().len(), 2);
    assert_ne!(calls()[1]["id"], first);
}

/// Waits up to 5 s for `check` to hold.
async fn eventually(check: impl Fn() -> bool) {
    for _ in 0..500 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_stream_the_server_closes_before_answering_is_resumed_with_last_event_id() {
    let _trace = trace_init();
    let effects = temp_dir("resumable").join("effects.log");
    let port = free_port();
    let _process = spawn_python_fixture_with(port, &effects, &["resumable"]);
    wait_listening(port).await;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let (transport, sent) = Recording::new();
    let client = StreamableHttp::builder(&url)
        .transport(transport)
        .connect()
        .await
        .unwrap();
    let tools = wrap_mcp_tools(
        client.specs().await.unwrap(),
        client.call(),
        &McpOptions::new().prefix("rs"),
    );
    let h = harness("resuming", tools, None).await;
    let done = h
        .run(json!([["rs_interrupted", {"note": "after the break"}], ["rs_add", {"a": 1, "b": 2}]]))
        .await;
    assert_eq!(
        output(&done),
        &json!([{"result": "after the break"}, {"result": 3}])
    );
    let resumed: Vec<HeaderMap> = sent
        .lock()
        .unwrap()
        .iter()
        .filter(|(method, _, _)| method == Method::GET)
        .map(|(_, headers, _)| headers.clone())
        .collect();
    assert_eq!(resumed.len(), 1, "one resumption");
    assert!(resumed[0].get("last-event-id").is_some());
    assert_eq!(resumed[0]["accept"], "text/event-stream");
    assert!(resumed[0].get("mcp-session-id").is_some());

    // Outside an execution there is no clock to wait the server's retry delay with: the call
    // fails, saying how the stream ended.
    let mut args = Map::new();
    args.insert("note".into(), json!("alone"));
    let alone = client.call().call_tool("interrupted".into(), args).await;
    let error = alone.unwrap_err().to_string();
    assert!(error.contains("ended before the response"), "{error}");
}
