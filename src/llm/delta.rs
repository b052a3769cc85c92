//! Live deltas of a streamed answer: decoded text, batched the way the Python SDK batches it.
//!
//! Bytes are decoded incrementally, so a character split across two network chunks is never
//! split in a delta (invalid sequences become U+FFFD). Pending text is flushed once 2000
//! characters wait or 50 ms have passed since the last flush, in pieces of at most 1750
//! characters (the kernel caps a delta at 7000 bytes, and a character takes up to four), each
//! with the next `seq` from 0.

/// Characters that trigger a flush.
const FLUSH_CHARS: usize = 2000;
/// Milliseconds after the last flush that trigger one.
const FLUSH_MILLIS: u64 = 50;
/// The most characters one delta carries.
pub(super) const MAX_PIECE_CHARS: usize = 1750;

/// One delta to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Delta {
    pub(super) seq: u64,
    pub(super) data: String,
}

/// Decodes a byte stream and batches its text into deltas.
#[derive(Debug)]
pub(super) struct Deltas {
    /// The undecoded end of the last chunk: the first bytes of a character (at most three).
    carry: Vec<u8>,
    pending: String,
    pending_chars: usize,
    next_seq: u64,
    last_flush: u64,
}

impl Deltas {
    /// A batcher whose flush timer starts at `now` (milliseconds).
    pub(super) fn new(now: u64) -> Self {
        Self {
            carry: Vec::new(),
            pending: String::new(),
            pending_chars: 0,
            next_seq: 0,
            last_flush: now,
        }
    }

    /// Decodes `chunk` (after any carried bytes) and returns the text it completes.
    pub(super) fn push(&mut self, chunk: &[u8]) -> String {
        let mut bytes = std::mem::take(&mut self.carry);
        bytes.extend_from_slice(chunk);
        let mut text = String::new();
        let mut rest = bytes.as_slice();
        loop {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    text.push_str(valid);
                    break;
                }
                Err(error) => {
                    let (valid, after) = rest.split_at(error.valid_up_to());
                    text.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match error.error_len() {
                        None => {
                            self.carry = after.to_vec();
                            break;
                        }
                        Some(bad) => {
                            text.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[bad..];
                        }
                    }
                }
            }
        }
        self.add(&text);
        text
    }

    /// Ends the stream: carried bytes that never completed a character become U+FFFD.
    pub(super) fn finish(&mut self) -> String {
        if self.carry.is_empty() {
            return String::new();
        }
        self.carry.clear();
        let tail = char::REPLACEMENT_CHARACTER.to_string();
        self.add(&tail);
        tail
    }

    /// Whether a flush is due at `now`.
    pub(super) fn due(&self, now: u64) -> bool {
        self.pending_chars >= FLUSH_CHARS || now.saturating_sub(self.last_flush) >= FLUSH_MILLIS
    }

    /// Takes the pending text as deltas and restarts the timer at `now`.
    pub(super) fn flush(&mut self, now: u64) -> Vec<Delta> {
        self.last_flush = now;
        self.pending_chars = 0;
        let pending = std::mem::take(&mut self.pending);
        let mut deltas = Vec::new();
        let mut piece = String::new();
        let mut chars = 0;
        for c in pending.chars() {
            piece.push(c);
            chars += 1;
            if chars == MAX_PIECE_CHARS {
                deltas.push(self.delta(std::mem::take(&mut piece)));
                chars = 0;
            }
        }
        if !piece.is_empty() {
            deltas.push(self.delta(piece));
        }
        deltas
    }

    fn add(&mut self, text: &str) {
        self.pending.push_str(text);
        self.pending_chars += text.chars().count();
    }

    fn delta(&mut self, data: String) -> Delta {
        let seq = self.next_seq;
        self.next_seq += 1;
        Delta { seq, data }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_split_across_chunks_is_decoded_once_whole() {
        let mut deltas = Deltas::new(0);
        let bytes = "añ😀b".as_bytes();
        let mut text = String::new();
        for chunk in [&bytes[..2], &bytes[2..4], &bytes[4..6], &bytes[6..]] {
            text.push_str(&deltas.push(chunk));
        }
        assert_eq!(text, "añ😀b");
        assert_eq!(deltas.flush(1).concat_data(), "añ😀b");
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let mut deltas = Deltas::new(0);
        assert_eq!(deltas.push(b"a\xffb"), "a\u{fffd}b");
        assert_eq!(deltas.push(b"\xe2\x82"), "");
        assert_eq!(deltas.finish(), "\u{fffd}");
    }

    #[test]
    fn two_thousand_pending_characters_flush_at_once() {
        let mut deltas = Deltas::new(0);
        deltas.push("é".repeat(1999).as_bytes());
        assert!(!deltas.due(10));
        deltas.push(b"x");
        assert!(deltas.due(10));
    }

    #[test]
    fn fifty_milliseconds_after_the_last_flush_a_flush_is_due() {
        let mut deltas = Deltas::new(1000);
        deltas.push(b"hi");
        assert!(!deltas.due(1049));
        assert!(deltas.due(1050));
        let flushed = deltas.flush(1050);
        assert_eq!(
            flushed,
            [Delta {
                seq: 0,
                data: "hi".into()
            }]
        );
        assert!(!deltas.due(1099));
    }

    #[test]
    fn pieces_hold_at_most_1750_characters_and_fit_the_kernel_cap() {
        let mut deltas = Deltas::new(0);
        deltas.push("😀".repeat(4000).as_bytes());
        let pieces = deltas.flush(0);
        let sizes: Vec<usize> = pieces.iter().map(|d| d.data.chars().count()).collect();
        assert_eq!(sizes, [1750, 1750, 500]);
        assert!(pieces.iter().all(|d| d.data.len() <= 7000));
        let seqs: Vec<u64> = pieces.iter().map(|d| d.seq).collect();
        assert_eq!(seqs, [0, 1, 2]);
        deltas.push(b"more");
        assert_eq!(deltas.flush(0)[0].seq, 3, "seq continues across flushes");
    }

    trait Concat {
        fn concat_data(&self) -> String;
    }

    impl Concat for Vec<Delta> {
        fn concat_data(&self) -> String {
            self.iter().map(|d| d.data.as_str()).collect()
        }
    }
}
