//! Token usage of `llm_call` results (PROTOCOL.md §5 item 4).

use serde_json::Value;

const INPUT_KEYS: &[&str] = &[
    "prompt_tokens",
    "input_tokens",
    "inputTokens",
    "promptTokenCount",
    "prompt_eval_count",
];
const OUTPUT_KEYS: &[&str] = &[
    "completion_tokens",
    "output_tokens",
    "outputTokens",
    "candidatesTokenCount",
    "eval_count",
];

/// `(input, output)` tokens found in an LLM step result, if either is positive.
pub(crate) fn parse(result: &Value) -> Option<(u64, u64)> {
    let documents = match result.get("body").and_then(Value::as_str) {
        Some(body) if !body.is_empty() => parse_text(body),
        _ => match result {
            Value::String(text) => parse_text(text),
            other => vec![other.clone()],
        },
    };
    let (mut input, mut output) = (0, 0);
    for doc in &documents {
        scan(doc, &mut input, &mut output);
    }
    (input > 0 || output > 0).then_some((input, output))
}

/// A JSON document, or the JSON `data:` lines of an SSE stream.
fn parse_text(text: &str) -> Vec<Value> {
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        return vec![value];
    }
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str(data.trim()).ok())
        .collect()
}

fn scan(value: &Value, input: &mut u64, output: &mut u64) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                if let Some(n) = child.as_f64().filter(|n| *n > 0.0) {
                    // Token counts are small integers; truncation is intended.
                    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                    let n = n as u64;
                    if INPUT_KEYS.contains(&key.as_str()) {
                        *input = (*input).max(n);
                    } else if OUTPUT_KEYS.contains(&key.as_str()) {
                        *output = (*output).max(n);
                    }
                }
                scan(child, input, output);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| scan(item, input, output)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_envelope_body_and_sse() {
        let envelope = json!({"status": 200, "body": "{\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3}}"});
        assert_eq!(parse(&envelope), Some((12, 3)));
        let sse = json!({"body": "data: {\"usage\":{\"input_tokens\":5}}\n\ndata: {\"usage\":{\"output_tokens\":7}}\n\ndata: [DONE]\n"});
        assert_eq!(parse(&sse), Some((5, 7)));
        assert_eq!(parse(&json!({"ok": true})), None);
    }
}
