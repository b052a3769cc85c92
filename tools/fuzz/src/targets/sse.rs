//! `sse`: the live delta parser behind [`rebuno::client::Client::stream`], fed through a streaming
//! transport in chunks cut at random boundaries (UTF-8 sequences and line endings split).
//!
//! Well-formed streams must yield exactly the deltas they were built from; mutated streams
//! must yield the same items whatever the chunking (compared with the one-chunk parse); a
//! non-2xx answer must be an error; a broken body must end the stream.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http::StatusCode;
use rebuno::client::Client;
use rebuno::transport::{
    ByteStream, StreamingFuture, Transport, TransportError, TransportErrorKind, TransportFuture,
};
use rebuno::{BoxError, ErrorKind};
use serde_json::json;

use crate::Recorder;
use crate::exec::{drive, runtime};
use crate::mutate;
use crate::rng::Rng;

/// One prepared answer: status, body chunks, and where the body breaks.
#[derive(Debug, Clone)]
struct Answer {
    status: StatusCode,
    chunks: Vec<Vec<u8>>,
    break_at: Option<usize>,
    refuse: bool,
}

#[derive(Debug, Clone)]
struct StreamTransport(Arc<Mutex<Option<Answer>>>);

impl Transport for StreamTransport {
    fn send(&self, _: http::Request<Bytes>, _: Duration) -> TransportFuture {
        panic!("Client::stream must use send_streaming");
    }

    fn send_streaming(&self, request: http::Request<Bytes>, _: Duration) -> StreamingFuture {
        assert!(
            request.uri().path().ends_with("/stream"),
            "stream of {}",
            request.uri()
        );
        let answer = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .unwrap_or_else(|| panic!("Client::stream sent twice"));
        Box::pin(async move {
            if answer.refuse {
                return Err(TransportError::new(TransportErrorKind::Connect, "refused"));
            }
            let mut items: Vec<Result<Bytes, BoxError>> = answer
                .chunks
                .into_iter()
                .map(|c| Ok(Bytes::from(c)))
                .collect();
            if let Some(at) = answer.break_at {
                items.insert(at.min(items.len()), Err("stream broke (fuzz)".into()));
            }
            let mut response =
                http::Response::new(Box::pin(futures_util::stream::iter(items)) as ByteStream);
            *response.status_mut() = answer.status;
            Ok(response)
        })
    }
}

/// An item as compared: a delta, or the kind of error.
type Item = Result<(String, i64, String), ErrorKind>;

/// Runs `Client::stream` over `answer`; `Err` when the subscription itself failed.
fn parse(answer: Answer) -> Result<Vec<Item>, ErrorKind> {
    let (runtime, _) = runtime();
    let transport = StreamTransport(Arc::new(Mutex::new(Some(answer))));
    let client = match Client::builder()
        .base_url("http://127.0.0.1:1")
        .runtime(runtime)
        .transport(transport)
        .build()
    {
        Ok(client) => client,
        Err(error) => panic!("client build failed: {error}"),
    };
    drive(
        async {
            let mut deltas = client.stream("e/1 é").await.map_err(|e| e.kind())?;
            let mut items = Vec::new();
            while let Some(item) = deltas.next().await {
                items.push(
                    item.map(|d| (d.step_id, d.seq, d.data))
                        .map_err(|e| e.kind()),
                );
            }
            Ok(items)
        },
        1_000_000,
    )
}

/// A well-formed stream of `deltas`, with comments, other fields and either line ending.
fn render(rng: &mut Rng, deltas: &[(String, i64, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    let crlf_stream = rng.one_in(3);
    for (step_id, seq, data) in deltas {
        let eol: &[u8] = if crlf_stream || rng.one_in(10) {
            b"\r\n"
        } else {
            b"\n"
        };
        let line = |out: &mut Vec<u8>, text: &[u8]| {
            out.extend_from_slice(text);
            out.extend_from_slice(eol);
        };
        if rng.one_in(3) {
            line(&mut out, b": keep-alive");
            line(&mut out, b"");
        }
        if rng.one_in(3) {
            line(&mut out, b"event: delta");
        }
        if rng.one_in(4) {
            line(&mut out, format!("id: {seq}").as_bytes());
        }
        if rng.one_in(6) {
            line(&mut out, b"retry: 1000");
        }
        let value = json!({"step_id": step_id, "seq": seq, "data": data});
        if rng.one_in(4) {
            // Pretty JSON over several data lines, rejoined with "\n" by the parser.
            let pretty = serde_json::to_string_pretty(&value).unwrap_or_default();
            for piece in pretty.lines() {
                let prefix: &[u8] = if rng.coin() { b"data: " } else { b"data:" };
                line(&mut out, &[prefix, piece.as_bytes()].concat());
            }
        } else {
            let prefix: &[u8] = if rng.coin() { b"data: " } else { b"data:" };
            line(&mut out, &[prefix, value.to_string().as_bytes()].concat());
        }
        line(&mut out, b"");
    }
    out
}

fn delta(rng: &mut Rng) -> (String, i64, String) {
    let seq = match rng.below(6) {
        0 => i64::MAX,
        1 => i64::MIN,
        2 => -1,
        _ => rng.below(100) as i64,
    };
    (format!("{:064x}", rng.below(3)), seq, mutate::string(rng))
}

const SPLICE: &[&[u8]] = &[
    b"data: {\"step_id\":\"s\",\"seq\":0,\"data\":\"x\"}\n\n",
    b": comment\r\n\r\n",
    b"data: {\"step_id\":\"s\",\r\ndata: \"seq\":1,\"data\":\"\xc3\xa9\"}\r\n\r\n",
    b"event: x\nid: 1\nretry: 5\n\n",
];

pub(crate) fn case(rng: &mut Rng, recorder: &Recorder) {
    let n = rng.below(8);
    let mut deltas: Vec<_> = (0..n).map(|_| delta(rng)).collect();
    let mut body = render(rng, &deltas);
    if rng.one_in(300) {
        append_long(rng, &mut body, &mut deltas);
    }
    let mode = rng.below(10);
    let mutated = mode >= 5;
    if mutated {
        mutate::mutate_bytes(rng, &mut body, SPLICE);
    }
    let status = answer_status(rng);
    let chunks = mutate::chunks(rng, &body);
    let break_at = rng.one_in(12).then(|| rng.below(chunks.len() + 1));
    let refuse = rng.one_in(40);
    recorder.note("status", status.as_str().as_bytes());
    recorder.note("body", &body);
    recorder.note(
        "chunk sizes",
        format!("{:?}", chunks.iter().map(Vec::len).collect::<Vec<_>>()).as_bytes(),
    );

    let chunked = parse(Answer {
        status,
        chunks,
        break_at,
        refuse,
    });
    let Some(items) = check_failures(chunked, status, refuse, break_at.is_some()) else {
        return;
    };
    if !mutated {
        let expected: Vec<Item> = deltas.into_iter().map(Ok).collect();
        assert_eq!(items, expected, "a well-formed stream parsed differently");
        return;
    }
    let whole = parse(Answer {
        status,
        chunks: vec![body],
        break_at: None,
        refuse: false,
    });
    assert_eq!(Ok(items), whole, "the parse depends on the chunking");
}

/// A long event, or a long run without any event end, appended to `body` (and the event's
/// delta to `deltas`).
fn append_long(rng: &mut Rng, body: &mut Vec<u8>, deltas: &mut Vec<(String, i64, String)>) {
    let n = rng.range(1 << 16, mutate::MAX_LONG);
    let data = "y".repeat(n);
    if rng.coin() {
        let event = json!({"step_id": "s", "seq": 0, "data": data});
        body.extend_from_slice(format!("data: {event}\n\n").as_bytes());
        deltas.push(("s".to_owned(), 0, data));
    } else {
        body.extend_from_slice(data.as_bytes());
    }
}

/// The answer's status: mostly `200`, sometimes another success, a redirect or an error.
fn answer_status(rng: &mut Rng) -> StatusCode {
    if rng.one_in(8) {
        StatusCode::from_u16(*rng.pick(&[201, 204, 301, 400, 401, 404, 410, 500, 503]))
            .unwrap_or(StatusCode::NOT_FOUND)
    } else {
        StatusCode::OK
    }
}

/// Checks the answers that must fail: a refused connection, a non-2xx status (the subscription
/// fails) and a broken body (the break surfaces). Returns the items of any other answer, for
/// the comparisons that need them.
fn check_failures(
    chunked: Result<Vec<Item>, ErrorKind>,
    status: StatusCode,
    refuse: bool,
    broken: bool,
) -> Option<Vec<Item>> {
    if refuse {
        assert_eq!(chunked, Err(ErrorKind::Network), "a refused stream");
        return None;
    }
    if !status.is_success() {
        assert!(
            chunked.is_err(),
            "status {status} must fail the subscription"
        );
        return None;
    }
    let Ok(items) = chunked else {
        panic!("a {status} subscription failed: {chunked:?}")
    };
    if broken {
        // The break surfaces as one network error; no later assertion on order.
        assert!(
            items.contains(&Err(ErrorKind::Network)),
            "a broken body must surface: {items:?}"
        );
        return None;
    }
    Some(items)
}
