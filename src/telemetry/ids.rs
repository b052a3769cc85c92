//! Trace and span ids derived from what the kernel records, so that every host, and every
//! re-delivery, names the same spans the same way with no trace context in the kernel.

use sha2::{Digest, Sha256};

/// A 16-byte OpenTelemetry trace id.
pub(crate) type TraceId = [u8; 16];
/// An 8-byte OpenTelemetry span id.
pub(crate) type SpanId = [u8; 8];

/// The trace of an execution: its UUID's 128 bits when it is one (so a trace can be looked up
/// by execution id), else the first 16 bytes of the id's SHA-256.
pub(crate) fn trace_of_execution(execution_id: &str) -> TraceId {
    let hex: String = execution_id.chars().filter(|c| *c != '-').collect();
    let mut id = [0u8; 16];
    if hex.len() == 32 && decode_hex(&hex, &mut id) && id != [0; 16] {
        return id;
    }
    let digest = Sha256::digest(execution_id.as_bytes());
    id.copy_from_slice(&digest[..16]);
    non_zero_trace(id)
}

/// The span of a recorded step: the first 8 bytes of its 64-hex step id, the same id its
/// `traceparent` names ([`crate::spans::traceparent`]).
pub(crate) fn span_of_step(step_id: &str) -> Option<SpanId> {
    let mut id = [0u8; 8];
    (decode_hex(step_id.get(..16)?, &mut id) && id != [0; 8]).then_some(id)
}

/// A span id derived from `parts` (length-prefixed, so no two lists collide by concatenation).
pub(crate) fn derived_span(parts: &[&[u8]]) -> SpanId {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    let digest = hasher.finalize();
    let mut id = [0u8; 8];
    id.copy_from_slice(&digest[..8]);
    if id == [0; 8] {
        id[7] = 1;
    }
    id
}

/// The span of one delivery of a dispatch.
pub(crate) fn span_of_dispatch(dispatch_id: &str, attempt: u64) -> SpanId {
    derived_span(&[b"dispatch", dispatch_id.as_bytes(), &attempt.to_be_bytes()])
}

/// The span a `Client::create` call gets in the execution's trace.
pub(crate) fn span_of_creation(execution_id: &str) -> SpanId {
    derived_span(&[b"create", execution_id.as_bytes()])
}

/// Lowercase hex, as OTLP/JSON and W3C trace context write ids.
pub(crate) fn to_hex(bytes: &[u8]) -> String {
    crate::signing::hex(bytes)
}

/// Decodes lowercase hex into `out`; false unless `text` is exactly `out`'s length in hex.
pub(crate) fn decode_hex(text: &str, out: &mut [u8]) -> bool {
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    let bytes = text.as_bytes();
    if bytes.len() != out.len() * 2 {
        return false;
    }
    for (slot, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        match (digit(pair[0]), digit(pair[1])) {
            (Some(high), Some(low)) => *slot = (high << 4) | low,
            _ => return false,
        }
    }
    true
}

fn non_zero_trace(mut id: TraceId) -> TraceId {
    if id == [0; 16] {
        id[15] = 1;
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uuid_execution_is_its_own_trace_id() {
        let trace = trace_of_execution("0192f1a0-0000-7000-8000-000000000001");
        assert_eq!(to_hex(&trace), "0192f1a0000070008000000000000001");
        let other = trace_of_execution("exec-42");
        assert_eq!(other, trace_of_execution("exec-42"), "stable");
        assert_ne!(other, [0; 16]);
    }

    #[test]
    fn a_step_span_is_the_step_ids_prefix_as_in_its_traceparent() {
        let step = "66521f99aa0c6b1c9b5fd1c1e0b43e6f8ef7e77b3a3a2f4f5c1e6c1d2e3f4a5b";
        let span = span_of_step(step).map(|s| to_hex(&s));
        assert_eq!(span.as_deref(), Some("66521f99aa0c6b1c"));
        let parent = crate::spans::traceparent("0192f1a0-0000-7000-8000-000000000001", step);
        assert!(parent.unwrap_or_default().contains("-66521f99aa0c6b1c-"));
        assert_eq!(span_of_step("66521F99AA0C6B1C"), None, "uppercase");
        assert_eq!(span_of_step("0000000000000000ff"), None, "all zero");
    }

    #[test]
    fn derived_spans_separate_their_parts() {
        assert_ne!(derived_span(&[b"ab", b"c"]), derived_span(&[b"a", b"bc"]));
        assert_ne!(span_of_dispatch("d1", 1), span_of_dispatch("d1", 2));
        assert_eq!(span_of_dispatch("d1", 1), span_of_dispatch("d1", 1));
    }
}
