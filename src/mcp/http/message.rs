//! The JSON-RPC 2.0 messages the client sends, and reading the ones it receives.

use serde_json::{Map, Value, json};

/// The protocol version the client asks for in `initialize`.
pub(crate) const LATEST_VERSION: &str = "2025-11-25";

/// The versions the client speaks over streamable HTTP (2024-11-05 had the older HTTP+SSE
/// transport instead).
pub(crate) const SUPPORTED_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// A request: `{"jsonrpc": "2.0", "id", "method", "params"}` (`params` left out when `None`).
pub(crate) fn request(id: u64, method: &str, params: Option<Value>) -> Value {
    let mut message = json!({"jsonrpc": "2.0", "id": id, "method": method});
    if let (Some(params), Some(object)) = (params, message.as_object_mut()) {
        object.insert("params".to_owned(), params);
    }
    message
}

/// A notification: a request without an id, which gets no answer.
pub(crate) fn notification(method: &str) -> Value {
    json!({"jsonrpc": "2.0", "method": method})
}

/// The `initialize` request's params: the version asked for, no client capabilities (the
/// client never samples, elicits or lists roots), and who the client is.
pub(crate) fn initialize_params(client_name: &str, client_version: &str) -> Value {
    json!({
        "protocolVersion": LATEST_VERSION,
        "capabilities": {},
        "clientInfo": {"name": client_name, "version": client_version},
    })
}

/// The `tools/list` params: the cursor of the page to read, none for the first.
pub(crate) fn list_params(cursor: Option<&str>) -> Option<Value> {
    cursor.map(|cursor| json!({"cursor": cursor}))
}

/// The `tools/call` params, with the step's trace context in `_meta` when there is one.
pub(crate) fn call_params(
    name: &str,
    arguments: Map<String, Value>,
    traceparent: Option<&str>,
) -> Value {
    let mut params = json!({"name": name, "arguments": arguments});
    if let (Some(traceparent), Some(object)) = (traceparent, params.as_object_mut()) {
        object.insert("_meta".to_owned(), json!({"traceparent": traceparent}));
    }
    params
}

/// `notifications/cancelled` for the request `id`, which the client no longer waits for.
pub(crate) fn cancelled(id: u64, reason: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": id, "reason": reason},
    })
}

/// The answer to a request the server sent on a stream: `ping` gets the empty result, anything
/// else "method not found" (the client declared no capabilities that would invite one).
pub(crate) fn answer_to_server(id: &Value, method: &str) -> Value {
    if method == "ping" {
        json!({"jsonrpc": "2.0", "id": id, "result": {}})
    } else {
        json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": -32601, "message": format!("method not supported by this client: {method}")},
        })
    }
}

/// What one received message is.
#[derive(Debug, PartialEq)]
pub(crate) enum Incoming {
    /// The answer to the request with this id: its result, or its error.
    Response {
        id: Value,
        outcome: Result<Value, RpcError>,
    },
    /// A request from the server, which needs an answer.
    Request { id: Value, method: String },
    /// A notification from the server (progress, logging): nothing to do.
    Notification,
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RpcError {
    pub(crate) code: i64,
    pub(crate) message: String,
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JSON-RPC error {}: {}", self.code, self.message)
    }
}

/// Reads one message; `None` when it is not a JSON-RPC 2.0 message at all.
pub(crate) fn classify(message: &Value) -> Option<Incoming> {
    let object = message.as_object()?;
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return None;
    }
    let id = object.get("id").filter(|id| !id.is_null()).cloned();
    if let Some(method) = object.get("method").and_then(Value::as_str) {
        return Some(match id {
            Some(id) => Incoming::Request {
                id,
                method: method.to_owned(),
            },
            None => Incoming::Notification,
        });
    }
    let id = id?;
    if let Some(result) = object.get("result") {
        return Some(Incoming::Response {
            id,
            outcome: Ok(result.clone()),
        });
    }
    let error = object.get("error")?;
    Some(Incoming::Response {
        id,
        outcome: Err(RpcError {
            code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("(no message)")
                .to_owned(),
        }),
    })
}

/// Whether `id` (as received) is the request id `ours`: servers echo it, some as a string.
pub(crate) fn is_our_id(id: &Value, ours: u64) -> bool {
    id.as_u64() == Some(ours) || id.as_str() == Some(ours.to_string().as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_notifications_and_params_have_the_wire_shape() {
        assert_eq!(
            request(3, "tools/list", list_params(None)),
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
        );
        assert_eq!(
            request(4, "tools/list", list_params(Some("p2"))),
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"cursor": "p2"}})
        );
        assert_eq!(
            notification("notifications/initialized"),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        );
        let mut arguments = Map::new();
        arguments.insert("a".to_owned(), json!(2));
        assert_eq!(
            call_params("add", arguments, Some("00-aa-bb-01")),
            json!({"name": "add", "arguments": {"a": 2}, "_meta": {"traceparent": "00-aa-bb-01"}})
        );
        assert_eq!(
            call_params("add", Map::new(), None),
            json!({"name": "add", "arguments": {}})
        );
        assert_eq!(
            cancelled(7, "superseded"),
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7, "reason": "superseded"}})
        );
    }

    #[test]
    fn received_messages_are_told_apart() {
        let ok = classify(&json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}));
        assert_eq!(
            ok,
            Some(Incoming::Response {
                id: json!(1),
                outcome: Ok(json!({"tools": []}))
            })
        );
        let failed = classify(
            &json!({"jsonrpc": "2.0", "id": "1", "error": {"code": -32602, "message": "Unknown tool"}}),
        );
        let Some(Incoming::Response {
            id,
            outcome: Err(error),
        }) = failed
        else {
            panic!("an error response: {failed:?}");
        };
        assert!(is_our_id(&id, 1) && !is_our_id(&id, 2));
        assert_eq!(error.to_string(), "JSON-RPC error -32602: Unknown tool");
        assert_eq!(
            classify(&json!({"jsonrpc": "2.0", "id": 9, "method": "ping"})),
            Some(Incoming::Request {
                id: json!(9),
                method: "ping".to_owned()
            })
        );
        assert_eq!(
            classify(&json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}})),
            Some(Incoming::Notification)
        );
        assert_eq!(classify(&json!({"id": 1, "result": {}})), None);
        assert_eq!(classify(&json!([1, 2])), None);
    }

    #[test]
    fn a_ping_gets_the_empty_result_and_anything_else_method_not_found() {
        assert_eq!(
            answer_to_server(&json!(9), "ping"),
            json!({"jsonrpc": "2.0", "id": 9, "result": {}})
        );
        let refused = answer_to_server(&json!("s1"), "sampling/createMessage");
        assert_eq!(refused["error"]["code"], -32601);
        assert_eq!(refused["id"], "s1");
    }
}
