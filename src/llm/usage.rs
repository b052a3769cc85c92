//! Token usage in recorded answers: what the kernel meters token budgets from.
//!
//! An OpenAI-style streamed answer carries no usage unless the request asks for it with
//! `stream_options.include_usage`; [`DurableLlm::include_usage`](super::DurableLlm::include_usage)
//! adds it. The change is made before the call is submitted, the same way on every delivery,
//! so the step's identity stays the same when it replays.

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use serde_json::Value;

/// Keys under which providers report token counts (OpenAI, Anthropic, Gemini, Ollama…).
const TOKEN_KEYS: &[&str] = &[
    "prompt_tokens",
    "completion_tokens",
    "input_tokens",
    "output_tokens",
    "inputTokens",
    "outputTokens",
    "promptTokenCount",
    "candidatesTokenCount",
    "prompt_eval_count",
    "eval_count",
];

/// `request` with `stream_options.include_usage: true` when it asks for a stream (`"stream":
/// true` in a JSON body) and does not say whether it wants usage. Anything else is unchanged.
pub(super) fn requested(mut request: http::Request<Bytes>) -> http::Request<Bytes> {
    let Ok(Value::Object(mut body)) = serde_json::from_slice::<Value>(request.body()) else {
        return request;
    };
    if body.get("stream") != Some(&Value::Bool(true)) {
        return request;
    }
    let options = body
        .entry("stream_options")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    let Value::Object(options) = options else {
        return request;
    };
    if options.contains_key("include_usage") {
        return request;
    }
    options.insert("include_usage".to_owned(), Value::Bool(true));
    let Ok(bytes) = serde_json::to_vec(&Value::Object(body)) else {
        return request;
    };
    if request.headers().contains_key(http::header::CONTENT_LENGTH) {
        request
            .headers_mut()
            .insert(http::header::CONTENT_LENGTH, bytes.len().into());
    }
    *request.body_mut() = Bytes::from(bytes);
    request
}

/// Whether a recorded answer (a JSON body, or server-sent events) reports token counts.
pub(super) fn reported(body: &str) -> bool {
    let reports = |value: &Value| has_tokens(value);
    if let Ok(value) = serde_json::from_str::<Value>(body) {
        return reports(&value);
    }
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .any(|value| reports(&value))
}

fn has_tokens(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.iter().any(|(key, child)| {
            (TOKEN_KEYS.contains(&key.as_str()) && child.as_f64().is_some_and(|n| n > 0.0))
                || has_tokens(child)
        }),
        Value::Array(items) => items.iter().any(has_tokens),
        _ => false,
    }
}

/// Warned once per process: the first answer recorded without usage.
static WARNED: AtomicBool = AtomicBool::new(false);

/// Warns (once per process) that a recorded answer has no token usage, so a token budget
/// cannot count it.
pub(super) fn warn_if_unreported(body: &str, streamed: bool) {
    if reported(body) || WARNED.swap(true, Ordering::Relaxed) {
        return;
    }
    let hint = if streamed {
        " (a streamed OpenAI-style answer needs stream_options.include_usage: \
         DurableLlm::include_usage(true) adds it)"
    } else {
        ""
    };
    tracing::warn!(
        "an LLM answer was recorded without token usage; token budgets cannot count it{hint}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(body: Value) -> http::Request<Bytes> {
        let bytes = Bytes::from(body.to_string());
        http::Request::post("http://llm/v1/chat/completions")
            .header(http::header::CONTENT_LENGTH, bytes.len())
            .body(bytes)
            .unwrap()
    }

    fn body_of(request: &http::Request<Bytes>) -> Value {
        serde_json::from_slice(request.body()).unwrap()
    }

    #[test]
    fn a_stream_asks_for_usage_once_and_the_same_way_every_time() {
        let request = post(serde_json::json!({ "model": "m", "stream": true }));
        let first = requested(request);
        assert_eq!(body_of(&first)["stream_options"]["include_usage"], true);
        assert_eq!(
            first.headers()[http::header::CONTENT_LENGTH],
            first.body().len().to_string().as_str()
        );
        let again = requested(post(serde_json::json!({ "model": "m", "stream": true })));
        assert_eq!(
            first.body(),
            again.body(),
            "deterministic: the step id stays"
        );
        let twice = requested(first);
        assert_eq!(twice.body(), again.body(), "idempotent");
    }

    #[test]
    fn a_choice_already_made_or_no_stream_is_left_alone() {
        for body in [
            serde_json::json!({ "stream": true, "stream_options": { "include_usage": false } }),
            serde_json::json!({ "stream": false }),
            serde_json::json!({ "messages": [] }),
        ] {
            let request = post(body.clone());
            assert_eq!(body_of(&requested(request)), body);
        }
        let other = http::Request::post("http://llm")
            .body(Bytes::from_static(b"not json"))
            .unwrap();
        assert_eq!(requested(other).body().as_ref(), b"not json");
    }

    #[test]
    fn usage_is_found_in_json_and_in_event_streams() {
        assert!(reported(
            r#"{"usage":{"prompt_tokens":3,"completion_tokens":1}}"#
        ));
        assert!(reported(
            "data: {\"choices\":[]}\n\ndata: {\"usage\":{\"completion_tokens\":4}}\n\ndata: [DONE]\n"
        ));
        assert!(!reported(
            "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n"
        ));
        assert!(!reported(r#"{"usage":{"prompt_tokens":0}}"#));
    }
}
