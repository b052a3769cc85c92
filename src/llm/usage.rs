//! Token usage in streamed answers: what the kernel meters token budgets from.
//!
//! An OpenAI-style streamed answer carries no usage unless the request asks for it with
//! `stream_options.include_usage`, so a token budget would let every streamed call through.
//! The SDK asks (see [`DurableLlm::include_usage`](super::DurableLlm::include_usage)), in what
//! it sends only: the step's `args` stay the request as the caller built it, so the step id is
//! the one a call had before the SDK asked (and the one the Python SDK gives it), and histories
//! recorded without the option replay.

use bytes::Bytes;
use serde_json::Value;

/// `request` with `stream_options.include_usage: true`, when it is an OpenAI-style stream (a
/// JSON body with `"stream": true` posted to a `…/completions` path, chat or legacy) that
/// does not say whether it wants usage; `None` for anything else (other providers report
/// usage unasked, or take no such option).
pub(super) fn requested(request: &http::Request<Bytes>) -> Option<http::Request<Bytes>> {
    if !request.uri().path().ends_with("/completions") {
        return None;
    }
    let Ok(Value::Object(mut body)) = serde_json::from_slice::<Value>(request.body()) else {
        return None;
    };
    if body.get("stream") != Some(&Value::Bool(true)) {
        return None;
    }
    let options = body
        .entry("stream_options")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    let Value::Object(options) = options else {
        return None;
    };
    if options.contains_key("include_usage") {
        return None;
    }
    options.insert("include_usage".to_owned(), Value::Bool(true));
    let bytes = serde_json::to_vec(&Value::Object(body)).ok()?;
    let mut asking = request.clone();
    if asking.headers().contains_key(http::header::CONTENT_LENGTH) {
        asking
            .headers_mut()
            .insert(http::header::CONTENT_LENGTH, bytes.len().into());
    }
    *asking.body_mut() = Bytes::from(bytes);
    Some(asking)
}

/// Whether a provider's answer to a request that asked for usage may be its refusal of the
/// option (some OpenAI-compatible gateways reject parameters they do not know): the request
/// is then sent again as the caller built it.
pub(super) fn maybe_refused(status: http::StatusCode) -> bool {
    matches!(status.as_u16(), 400 | 422)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAT: &str = "http://llm/v1/chat/completions";

    fn post(url: &str, body: Value) -> http::Request<Bytes> {
        let bytes = Bytes::from(body.to_string());
        http::Request::post(url)
            .header(http::header::CONTENT_LENGTH, bytes.len())
            .body(bytes)
            .unwrap()
    }

    fn body_of(request: &http::Request<Bytes>) -> Value {
        serde_json::from_slice(request.body()).unwrap()
    }

    #[test]
    fn an_openai_style_stream_asks_for_usage_the_same_way_every_time() {
        let request = post(CHAT, serde_json::json!({ "model": "m", "stream": true }));
        let asking = requested(&request).unwrap();
        assert_eq!(body_of(&asking)["stream_options"]["include_usage"], true);
        assert_eq!(
            asking.headers()[http::header::CONTENT_LENGTH],
            asking.body().len().to_string().as_str()
        );
        assert_eq!(
            body_of(&request),
            serde_json::json!({ "model": "m", "stream": true })
        );
        let again = requested(&request).unwrap();
        assert_eq!(asking.body(), again.body(), "deterministic");
        assert!(requested(&asking).is_none(), "asked once");
        let legacy = post("http://llm/v1/completions", body_of(&request));
        assert!(
            requested(&legacy).is_some(),
            "the legacy completions API too"
        );
        let options = serde_json::json!({ "stream": true, "stream_options": { "x": 1 } });
        let kept = requested(&post(CHAT, options)).unwrap();
        assert_eq!(
            body_of(&kept)["stream_options"],
            serde_json::json!({ "x": 1, "include_usage": true })
        );
    }

    #[test]
    fn a_choice_already_made_no_stream_or_another_api_is_left_alone() {
        for body in [
            serde_json::json!({ "stream": true, "stream_options": { "include_usage": false } }),
            serde_json::json!({ "stream": true, "stream_options": "odd" }),
            serde_json::json!({ "stream": false }),
            serde_json::json!({ "messages": [] }),
        ] {
            assert!(requested(&post(CHAT, body)).is_none());
        }
        let stream = serde_json::json!({ "model": "m", "stream": true });
        for url in [
            "http://llm/v1/messages",
            "http://llm/api/chat",
            "http://llm/v1/responses",
        ] {
            assert!(requested(&post(url, stream.clone())).is_none(), "{url}");
        }
        let other = http::Request::post(CHAT)
            .body(Bytes::from_static(b"not json"))
            .unwrap();
        assert!(requested(&other).is_none());
    }

    #[test]
    fn only_a_bad_request_may_be_a_refused_option() {
        assert!(maybe_refused(http::StatusCode::BAD_REQUEST));
        assert!(maybe_refused(http::StatusCode::UNPROCESSABLE_ENTITY));
        for status in [200, 401, 404, 429, 500] {
            assert!(!maybe_refused(http::StatusCode::from_u16(status).unwrap()));
        }
    }
}
