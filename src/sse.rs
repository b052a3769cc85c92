//! Server-sent events: splitting a byte stream into events, as the HTML standard's
//! `text/event-stream` parsing does (the fields the SDK reads: `event`, `data`, `id`).

use bytes::{Buf, BytesMut};

/// One event: its `data` lines joined with `\n`, and its `event` and `id` fields when present.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SseEvent {
    /// The `event:` field, `None` for the default type (`message`).
    pub(crate) event: Option<String>,
    /// The `data:` lines joined with `\n`; empty when the event had none.
    pub(crate) data: String,
    /// The `id:` field.
    pub(crate) id: Option<String>,
    /// The `retry:` field: how long to wait before reconnecting, in milliseconds.
    pub(crate) retry: Option<u64>,
    /// Whether any `data:` line was present (an event of comments only has none).
    pub(crate) has_data: bool,
}

/// Bytes received so far, split into events as their blank-line separators arrive.
#[derive(Debug, Default)]
pub(crate) struct SseBuffer {
    buffer: BytesMut,
}

impl SseBuffer {
    /// Adds a received chunk.
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.buffer.extend_from_slice(chunk);
    }

    /// The next complete event, if its separator has arrived. Comment-only blocks come out
    /// as events without data (`has_data == false`), so callers can skip them.
    pub(crate) fn next_event(&mut self) -> Option<SseEvent> {
        let (length, separator) = find_event_end(&self.buffer)?;
        let block = self.buffer.split_to(length);
        self.buffer.advance(separator);
        Some(parse_block(&block))
    }
}

/// Where the first event ends: (its length, the separator's length). A separator is a blank
/// line, whichever of `\n`, `\r\n` or `\r` ends the lines.
fn find_event_end(buffer: &[u8]) -> Option<(usize, usize)> {
    let mut line_start = 0;
    let mut index = 0;
    while index < buffer.len() {
        let end_of_line = match buffer[index] {
            b'\n' => Some(1),
            // A lone `\r` at the end of the buffer may be the start of `\r\n`: wait for more.
            b'\r' if index + 1 == buffer.len() => return None,
            b'\r' if buffer[index + 1] == b'\n' => Some(2),
            b'\r' => Some(1),
            _ => None,
        };
        if let Some(width) = end_of_line {
            if index == line_start && index > 0 {
                // A blank line: the event is everything before it.
                return Some((line_start, width));
            }
            if index == 0 {
                // A blank line at the very start: an empty event.
                return Some((0, width));
            }
            index += width;
            line_start = index;
        } else {
            index += 1;
        }
    }
    None
}

/// The fields of one event block.
fn parse_block(block: &[u8]) -> SseEvent {
    let text = String::from_utf8_lossy(block);
    let mut event = SseEvent::default();
    let mut data: Vec<&str> = Vec::new();
    for line in text.split(['\n', '\r']).filter(|line| !line.is_empty()) {
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => data.push(value),
            "event" => event.event = Some(value.to_owned()),
            "id" if !value.contains('\0') => event.id = Some(value.to_owned()),
            "retry" => event.retry = value.parse().ok().or(event.retry),
            _ => {}
        }
    }
    event.has_data = !data.is_empty();
    event.data = data.join("\n");
    event
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events_of(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut buffer = SseBuffer::default();
        let mut events = Vec::new();
        for chunk in chunks {
            buffer.push(chunk);
            while let Some(event) = buffer.next_event() {
                events.push(event);
            }
        }
        events
    }

    #[test]
    fn events_split_anywhere_are_reassembled_with_their_fields() {
        let whole: &[u8] =
            b"event: message\nid: 7\nretry: 500\ndata: {\"a\":\ndata: 1}\n\n: ping\n\ndata:x\n\n";
        for cut in 0..whole.len() {
            let events = events_of(&[&whole[..cut], &whole[cut..]]);
            let with_data: Vec<_> = events.iter().filter(|e| e.has_data).collect();
            assert_eq!(with_data.len(), 2, "cut at {cut}: {events:?}");
            assert_eq!(with_data[0].data, "{\"a\":\n1}");
            assert_eq!(with_data[0].event.as_deref(), Some("message"));
            assert_eq!(with_data[0].id.as_deref(), Some("7"));
            assert_eq!(with_data[0].retry, Some(500));
            assert_eq!(with_data[1].data, "x");
        }
    }

    #[test]
    fn crlf_and_lone_cr_line_endings_separate_events_too() {
        let crlf = events_of(&[b"data: a\r\n\r\ndata: b\r\n", b"\r\n"]);
        assert_eq!(
            crlf.iter().map(|e| e.data.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        // A `\r` that ends the bytes so far may begin a `\r\n`: the event waits for the next.
        let cr = events_of(&[b"data: a\r\r", b"data: b\r\r", b"data: c"]);
        assert_eq!(
            cr.iter().map(|e| e.data.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
    }

    #[test]
    fn comments_give_events_without_data_and_a_torn_tail_waits() {
        let mut buffer = SseBuffer::default();
        buffer.push(b": keep-alive\n\ndata: unfinished");
        let comment = buffer.next_event().unwrap_or_default();
        assert!(!comment.has_data);
        assert!(buffer.next_event().is_none());
    }
}
