//! The pure part of the agent: what the `analyze_text` tool computes.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn analyzes_words() {
        let analysis = analyze("durable agents on the edge");
        assert_eq!((analysis.words, analysis.longest.as_str()), (5, "durable"));
        assert_eq!(analyze("").words, 0);
    }
}
