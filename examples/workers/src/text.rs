//! The pure part of the agent: what the `analyze_text` tool computes, and the text of an
//! OpenAI-style answer.

use serde::{Deserialize, Serialize};

/// The tool's arguments, recorded by the kernel with the call.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Analyze {
    pub(crate) text: String,
}

/// The tool's result.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Analysis {
    pub(crate) words: usize,
    pub(crate) longest: String,
}

/// Counts the words of `text` and finds the longest one.
pub(crate) fn analyze(text: &str) -> Analysis {
    let words: Vec<&str> = text.split_whitespace().collect();
    let longest = words
        .iter()
        .copied()
        .max_by_key(|word| word.chars().count())
        .unwrap_or_default();
    Analysis {
        words: words.len(),
        longest: longest.to_owned(),
    }
}

/// The answer's text: `choices[0].message.content` of a JSON answer, or the
/// `choices[0].delta.content` of every `data:` event of a stream, joined.
pub(crate) fn answer_text(body: &str) -> String {
    let text = |value: &serde_json::Value, field: &str| {
        value["choices"][0][field]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    if let Ok(answer) = serde_json::from_str::<serde_json::Value>(body) {
        return text(&answer, "message");
    }
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<serde_json::Value>(data.trim()).ok())
        .map(|event| text(&event, "delta"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn analyzes_words() {
        let analysis = analyze("durable agents on the edge");
        assert_eq!((analysis.words, analysis.longest.as_str()), (5, "durable"));
        assert_eq!(analyze("").words, 0);
    }

    #[test]
    fn reads_answers_whole_and_streamed() {
        let whole = r#"{"choices":[{"message":{"role":"assistant","content":"hi there"}}]}"#;
        assert_eq!(answer_text(whole), "hi there");
        let events = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n\
                      data: {\"choices\":[{\"delta\":{\"content\":\" there\"}}]}\n\n\
                      data: [DONE]\n\n";
        assert_eq!(answer_text(events), "hi there");
    }
}
