//! The Connect protocol's framing (connectrpc.com, JSON codec), as envd speaks it.
//!
//! Unary calls are plain JSON bodies; an error is a non-200 answer carrying
//! `{"code": "not_found", "message": ...}`. Server streams frame both directions as envelopes:
//! one flag byte, a 4-byte big-endian length, then that many bytes of JSON. The last response
//! envelope has the end-of-stream flag and carries `{}` or `{"error": {"code", "message"}}`.

use bytes::{Buf, Bytes, BytesMut};
use serde::Deserialize;

/// The envelope flag of a compressed message (never requested, so never expected).
const COMPRESSED: u8 = 0x01;
/// The envelope flag of the end-of-stream message.
const END_STREAM: u8 = 0x02;
/// The envelope header: the flag byte and the length.
const HEADER: usize = 5;
/// The largest envelope accepted: more is a corrupt length, not a message.
const MAX_ENVELOPE: usize = 64 * 1024 * 1024;

/// `message` framed as the single envelope of a server-stream request.
pub(super) fn envelope(message: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(HEADER + message.len());
    out.push(0);
    // Request messages are small JSON documents, far below 4 GiB.
    out.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    out.extend_from_slice(message);
    out.into()
}

/// One response envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Frame {
    /// A message of the stream.
    Message(Bytes),
    /// The end of the stream: `Ok` for `{}`, or the error it carries.
    End(Result<(), ConnectError>),
}

/// An error as Connect carries it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(super) struct ConnectError {
    /// The Connect code, e.g. `not_found` or `deadline_exceeded`.
    #[serde(default = "unknown")]
    pub(super) code: String,
    /// The server's message.
    #[serde(default)]
    pub(super) message: String,
}

fn unknown() -> String {
    "unknown".to_owned()
}

impl ConnectError {
    /// The error of a unary call's non-200 answer, or `None` when the body is not a Connect
    /// error (a proxy's page, say).
    pub(super) fn from_unary(body: &[u8]) -> Option<Self> {
        serde_json::from_slice::<Self>(body)
            .ok()
            .filter(|error| error.code != "unknown" || !error.message.is_empty())
    }
}

/// Reassembles envelopes from a response body that arrives in arbitrary chunks.
#[derive(Debug, Default)]
pub(super) struct Decoder {
    buffer: BytesMut,
}

impl Decoder {
    /// Adds `chunk` and returns the envelopes now complete, in order.
    ///
    /// # Errors
    ///
    /// A description of the framing error (a compressed message, an oversized length, an
    /// end-of-stream message that is not JSON).
    pub(super) fn push(&mut self, chunk: &[u8]) -> Result<Vec<Frame>, String> {
        self.buffer.extend_from_slice(chunk);
        let mut frames = Vec::new();
        while let Some(frame) = self.next_frame()? {
            frames.push(frame);
        }
        Ok(frames)
    }

    /// Whether bytes of an unfinished envelope are left over.
    pub(super) fn has_partial(&self) -> bool {
        !self.buffer.is_empty()
    }

    fn next_frame(&mut self) -> Result<Option<Frame>, String> {
        if self.buffer.len() < HEADER {
            return Ok(None);
        }
        let flags = self.buffer[0];
        let length = [1, 2, 3, 4].map(|i| self.buffer[i]);
        let length = usize::try_from(u32::from_be_bytes(length)).unwrap_or(usize::MAX);
        if length > MAX_ENVELOPE {
            return Err(format!("an envelope of {length} bytes"));
        }
        if self.buffer.len() < HEADER + length {
            return Ok(None);
        }
        self.buffer.advance(HEADER);
        let data = self.buffer.split_to(length).freeze();
        if flags & COMPRESSED != 0 {
            return Err("a compressed envelope (no compression was offered)".to_owned());
        }
        if flags & END_STREAM == 0 {
            return Ok(Some(Frame::Message(data)));
        }
        end_of_stream(&data).map(|end| Some(Frame::End(end)))
    }
}

/// The end-of-stream message: `{}`, or `{"error": {...}}` (and possibly `metadata`).
fn end_of_stream(data: &[u8]) -> Result<Result<(), ConnectError>, String> {
    #[derive(Deserialize)]
    struct End {
        #[serde(default)]
        error: Option<ConnectError>,
    }
    let end: End = serde_json::from_slice(data)
        .map_err(|e| format!("an end-of-stream message that is not JSON ({e})"))?;
    Ok(match end.error {
        Some(error) => Err(error),
        None => Ok(()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(flags: u8, json: &str) -> Vec<u8> {
        let mut out = vec![flags];
        out.extend_from_slice(&(json.len() as u32).to_be_bytes());
        out.extend_from_slice(json.as_bytes());
        out
    }

    #[test]
    fn a_request_is_one_uncompressed_envelope() {
        let framed = envelope(br#"{"a":1}"#);
        assert_eq!(&framed[..], &frame(0, r#"{"a":1}"#)[..]);
    }

    #[test]
    fn envelopes_split_across_chunks_are_reassembled() {
        let mut wire = frame(0, r#"{"event":{"start":{"pid":7}}}"#);
        wire.extend(frame(0, r#"{"event":{"keepalive":{}}}"#));
        wire.extend(frame(END_STREAM, "{}"));
        for size in [1, 2, 3, 5, 7, 64] {
            let mut decoder = Decoder::default();
            let mut frames = Vec::new();
            for chunk in wire.chunks(size) {
                frames.extend(decoder.push(chunk).unwrap());
            }
            assert!(!decoder.has_partial(), "chunks of {size}");
            assert_eq!(
                frames,
                [
                    Frame::Message(Bytes::from_static(br#"{"event":{"start":{"pid":7}}}"#)),
                    Frame::Message(Bytes::from_static(br#"{"event":{"keepalive":{}}}"#)),
                    Frame::End(Ok(())),
                ],
                "chunks of {size}"
            );
        }
    }

    #[test]
    fn the_end_of_stream_error_is_read() {
        let wire = frame(
            END_STREAM,
            r#"{"error":{"code":"deadline_exceeded","message":"too slow"},"metadata":{}}"#,
        );
        let frames = Decoder::default().push(&wire).unwrap();
        assert_eq!(
            frames,
            [Frame::End(Err(ConnectError {
                code: "deadline_exceeded".into(),
                message: "too slow".into(),
            }))]
        );
    }

    #[test]
    fn a_truncated_stream_leaves_a_partial_envelope() {
        let wire = frame(0, r#"{"event":{}}"#);
        let mut decoder = Decoder::default();
        assert!(decoder.push(&wire[..wire.len() - 1]).unwrap().is_empty());
        assert!(decoder.has_partial());
    }

    #[test]
    fn framing_errors_are_refused() {
        assert!(Decoder::default().push(&frame(COMPRESSED, "{}")).is_err());
        assert!(Decoder::default().push(&frame(END_STREAM, "nope")).is_err());
        let huge = [0, 0xff, 0xff, 0xff, 0xff];
        assert!(Decoder::default().push(&huge).is_err());
    }

    #[test]
    fn unary_errors_are_read_and_other_bodies_are_not() {
        let error = ConnectError::from_unary(br#"{"code":"not_found","message":"no such file"}"#);
        assert_eq!(error.map(|e| e.code), Some("not_found".to_owned()));
        assert_eq!(ConnectError::from_unary(b"<html>bad gateway</html>"), None);
        assert_eq!(ConnectError::from_unary(b"{}"), None);
    }
}
