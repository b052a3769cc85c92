//! Input generation and mutation: byte-level (bit flips, inserts, deletes, truncation,
//! splicing, invalid UTF-8) and JSON-level (wrongly typed values, huge numbers, deep nesting,
//! long strings).

use serde_json::{Map, Number, Value};

use crate::rng::Rng;

/// Deepest nesting a generated value gets.
pub(crate) const MAX_DEPTH: usize = 200;
/// Longest string a generated value gets (occasionally).
pub(crate) const MAX_LONG: usize = 1 << 20;

/// Byte sequences that often matter to parsers.
const TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b":",
    b",",
    b"\\",
    b"\\u",
    b"\\ud800",
    b"\\udc00",
    b"\\ud83d\\ude00",
    b"\\u0000",
    b"null",
    b"true",
    b"false",
    b"-",
    b"0",
    b"-0",
    b"1e999",
    b"-1e999",
    b"1e-999",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"123456789012345678901234567890.5e300",
    b"NaN",
    b"Infinity",
    b"0x10",
    b"1.",
    b".5",
    b"\n",
    b"\r\n",
    b"\t",
    b" ",
    b"\x00",
    b"\xff",
    b"\xfe",
    b"\xc3",
    b"\xc3\x28",
    b"\xed\xa0\x80",
    b"\xf0\x9f\x98",
    b"\xc0\x80",
    b"\xe2\x80\xa8",
    b"\xef\xbb\xbf",
    b"<",
    b">",
    b"&",
    b"data:",
    b"data: ",
    b": ",
    b"- ",
    b"---",
    b"...",
    b"&a ",
    b"*a",
    b"!!str ",
    b"!!binary ",
    b"!!int ",
    b"? ",
    b"|",
    b">-",
    b"${",
    b"}",
    b"${X}",
    b"#",
    b"%YAML 1.2\n",
    b"'",
    b"~",
    b"\n  ",
    b"\n    ",
    b"\n- ",
];

/// Bytes that are never valid UTF-8 on their own or in sequence.
const INVALID_UTF8: &[&[u8]] = &[
    b"\xff",
    b"\xc3",
    b"\xc0\xaf",
    b"\xed\xa0\x80",
    b"\xed\xbf\xbf",
    b"\xf4\x90\x80\x80",
    b"\xe2\x82",
    b"\x80",
    b"\xf8\x88\x80\x80\x80",
];

/// Applies 1 to 8 random byte-level mutations; `samples` are spliced from.
pub(crate) fn mutate_bytes(rng: &mut Rng, data: &mut Vec<u8>, samples: &[&[u8]]) {
    let rounds = rng.range(1, 8);
    for _ in 0..rounds {
        mutate_once(rng, data, samples);
    }
}

/// One byte-level mutation, chosen at random (a choice that does not fit the data, like a
/// deletion from an empty input, falls through to inserting a run of punctuation).
fn mutate_once(rng: &mut Rng, data: &mut Vec<u8>, samples: &[&[u8]]) {
    let len = data.len();
    match rng.below(13) {
        0 if len > 0 => {
            let at = rng.below(len);
            data[at] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let at = rng.below(len);
            data[at] = rng.byte();
        }
        2 => insert_random(rng, data),
        3 if len > 0 => delete_range(rng, data),
        4 => data.truncate(rng.below(len + 1)),
        5 if !samples.is_empty() => splice_sample(rng, data, samples),
        6 => insert_token(rng, data, TOKENS),
        7 => insert_token(rng, data, INVALID_UTF8),
        8 if len > 1 => duplicate_range(rng, data),
        9 if len > 0 => replace_with_number(rng, data),
        10 if len > 1 => {
            // Swap two bytes.
            let a = rng.below(len);
            let b = rng.below(len);
            data.swap(a, b);
        }
        11 if len > 0 => flip_case(rng, data),
        _ => insert_punctuation(rng, data),
    }
}

/// Inserts up to 64 random bytes at a random place.
fn insert_random(rng: &mut Rng, data: &mut Vec<u8>) {
    let at = rng.below(data.len() + 1);
    let n = rng.len(64);
    let bytes = rng.bytes(n);
    data.splice(at..at, bytes);
}

/// Deletes 1 to 64 bytes from a random place (`data` is not empty).
fn delete_range(rng: &mut Rng, data: &mut Vec<u8>) {
    let len = data.len();
    let at = rng.below(len);
    let n = rng.range(1, (len - at).min(64));
    data.drain(at..at + n);
}

/// Splice: our prefix, then another sample's suffix (or a piece of it).
fn splice_sample(rng: &mut Rng, data: &mut Vec<u8>, samples: &[&[u8]]) {
    let other = *rng.pick(samples);
    let cut = rng.below(data.len() + 1);
    let from = rng.below(other.len() + 1);
    let to = rng.range(from, other.len());
    data.truncate(cut);
    data.extend_from_slice(&other[from..to]);
    if rng.coin() {
        let rest = rng.below(other.len() + 1);
        data.extend_from_slice(&other[rest..]);
    }
}

/// Inserts one of `tokens` (interesting to parsers, or invalid UTF-8) at a random place.
fn insert_token(rng: &mut Rng, data: &mut Vec<u8>, tokens: &[&[u8]]) {
    let token = *rng.pick(tokens);
    let at = rng.below(data.len() + 1);
    data.splice(at..at, token.iter().copied());
}

/// Duplicate a range (repeats keys, lines, brackets); `data` has at least two bytes.
fn duplicate_range(rng: &mut Rng, data: &mut Vec<u8>) {
    let len = data.len();
    let from = rng.below(len);
    let to = rng.range(from, len.min(from + 128));
    let piece = data[from..to].to_vec();
    let at = rng.below(len + 1);
    data.splice(at..at, piece);
}

/// Replace a digit run or a byte with an interesting number (`data` is not empty).
fn replace_with_number(rng: &mut Rng, data: &mut Vec<u8>) {
    let at = rng.below(data.len());
    let token = *rng.pick(&[
        &b"1e999"[..],
        b"-0",
        b"18446744073709551616",
        b"99999999999999999999999999999999999999",
        b"4294967296",
        b"-1",
        b"0.0000000000000000000000001",
        b"1.7976931348623157e309",
    ]);
    data.splice(at..at + 1, token.iter().copied());
}

/// Case-flip an ASCII letter (`data` is not empty; a byte that is no letter stays).
fn flip_case(rng: &mut Rng, data: &mut [u8]) {
    let at = rng.below(data.len());
    if data[at].is_ascii_alphabetic() {
        data[at] ^= 0x20;
    }
}

/// Inserts a run of 1 to 4 copies of one JSON/YAML/SSE punctuation byte at a random place.
fn insert_punctuation(rng: &mut Rng, data: &mut Vec<u8>) {
    let at = rng.below(data.len() + 1);
    let n = rng.range(1, 4);
    let byte = *rng.pick(b"{[\"\\\n -:");
    data.splice(at..at, std::iter::repeat_n(byte, n));
}

/// A random short identifier-like string (sometimes empty, odd or non-ASCII).
pub(crate) fn ident(rng: &mut Rng) -> String {
    match rng.below(12) {
        0 => String::new(),
        1 => "é/ \u{0}?#%".to_owned(),
        2 => "../../etc".to_owned(),
        3 => "x".repeat(rng.range(100, 3000)),
        4 => "日本語🙂".to_owned(),
        5 => "a b\tc\r\n".to_owned(),
        _ => {
            let n = rng.range(1, 12);
            (0..n)
                .map(|_| char::from(*rng.pick(b"abcdefghijklmnopqrstuvwxyz0123456789-_.")))
                .collect()
        }
    }
}

/// A random string: usually short, sometimes with escapes and control characters, rarely up
/// to [`MAX_LONG`] bytes.
pub(crate) fn string(rng: &mut Rng) -> String {
    if rng.one_in(20_000) {
        let n = rng.range(1 << 16, MAX_LONG);
        return "ab\u{e9}\"\\\n".repeat(n / 8);
    }
    match rng.below(6) {
        0 => ident(rng),
        1 => String::new(),
        2 => {
            let n = rng.len(64);
            (0..n)
                .map(|_| char::from_u32(rng.below(0x11_0000) as u32).unwrap_or('\u{fffd}'))
                .collect()
        }
        3 => "\u{0}\u{1f}\u{7f}\u{2028}\u{2029}<>&\"\\/".to_owned(),
        4 => {
            let n = rng.len(300);
            "lorem ipsum ".repeat(n / 12 + 1)
        }
        _ => {
            let n = rng.len(32);
            String::from_utf8_lossy(&rng.bytes(n)).into_owned()
        }
    }
}

/// A random number, often at the edges.
pub(crate) fn number(rng: &mut Rng) -> Value {
    match rng.below(10) {
        0 => Value::from(u64::MAX),
        1 => Value::from(i64::MIN),
        2 => Number::from_f64(f64::MAX).map_or(Value::Null, Value::Number),
        3 => Number::from_f64(f64::MIN_POSITIVE).map_or(Value::Null, Value::Number),
        4 => Number::from_f64(-0.0).map_or(Value::Null, Value::Number),
        5 => Value::from(0),
        6 => {
            Number::from_f64(rng.next_u64() as f64 / 1e3 - 1e15).map_or(Value::Null, Value::Number)
        }
        7 => Value::from(rng.next_u64() as i64),
        _ => Value::from(rng.below(1000) as u64),
    }
}

/// A random JSON value, nested at most `depth` levels.
pub(crate) fn value(rng: &mut Rng, depth: usize) -> Value {
    let kinds = if depth == 0 { 4 } else { 7 };
    match rng.below(kinds) {
        0 => Value::Null,
        1 => Value::Bool(rng.coin()),
        2 => number(rng),
        3 => Value::String(string(rng)),
        4 | 5 if rng.coin() => {
            let n = rng.len(6).min(rng.range(1, 6));
            Value::Array((0..n).map(|_| value(rng, depth - 1)).collect())
        }
        _ => {
            let n = rng.len(6).min(rng.range(1, 6));
            let mut map = Map::new();
            for _ in 0..n {
                map.insert(ident(rng), value(rng, depth - 1));
            }
            Value::Object(map)
        }
    }
}

/// `inner` wrapped in `levels` arrays or objects.
pub(crate) fn nest(rng: &mut Rng, inner: Value, levels: usize) -> Value {
    let as_array = rng.coin();
    (0..levels).fold(inner, |acc, _| {
        if as_array {
            Value::Array(vec![acc])
        } else {
            let mut map = Map::new();
            map.insert("k".to_owned(), acc);
            Value::Object(map)
        }
    })
}

/// A value of another JSON type than `original` (string ↔ number ↔ array ↔ object ↔ null).
pub(crate) fn wrong_type(rng: &mut Rng, original: &Value) -> Value {
    loop {
        let candidate = match rng.below(7) {
            0 => Value::Null,
            1 => Value::Bool(rng.coin()),
            2 => number(rng),
            3 => Value::String(string(rng)),
            4 => Value::Array(vec![value(rng, 2)]),
            5 => Value::Object(Map::new()),
            _ => {
                let levels = rng.range(1, MAX_DEPTH);
                nest(rng, Value::Null, levels)
            }
        };
        if std::mem::discriminant(&candidate) != std::mem::discriminant(original) || rng.one_in(8) {
            return candidate;
        }
    }
}

/// Applies 1 to 4 structural mutations at random places in `root`.
pub(crate) fn mutate_json(rng: &mut Rng, root: &mut Value) {
    let rounds = rng.range(1, 4);
    for _ in 0..rounds {
        let target = random_node(rng, root);
        match rng.below(9) {
            0..=2 => {
                let replacement = wrong_type(rng, target);
                *target = replacement;
            }
            3 => *target = number(rng),
            4 => {
                let levels = rng.range(1, MAX_DEPTH);
                let inner = std::mem::take(target);
                *target = nest(rng, inner, levels);
            }
            5 => *target = Value::String(string(rng)),
            6 => match target {
                Value::Object(map) if !map.is_empty() => {
                    let key = map
                        .keys()
                        .nth(rng.below(map.len()))
                        .cloned()
                        .unwrap_or_default();
                    map.remove(&key);
                }
                Value::Array(items) if !items.is_empty() => {
                    items.remove(rng.below(items.len()));
                }
                _ => *target = Value::Null,
            },
            7 => match target {
                Value::Object(map) => {
                    map.insert(ident(rng), value(rng, 3));
                }
                Value::Array(items) => items.push(value(rng, 3)),
                _ => *target = value(rng, 3),
            },
            _ => *target = value(rng, 4),
        }
    }
}

/// A random node of `root` (itself included), reached by a random walk.
fn random_node<'a>(rng: &mut Rng, root: &'a mut Value) -> &'a mut Value {
    let mut path = Vec::new();
    let mut node: &Value = root;
    while !rng.one_in(3) {
        node = match node {
            Value::Object(map) if !map.is_empty() => {
                let at = rng.below(map.len());
                path.push(at);
                match map.values().nth(at) {
                    Some(child) => child,
                    None => unreachable!("index below the map's length"),
                }
            }
            Value::Array(items) if !items.is_empty() => {
                let at = rng.below(items.len());
                path.push(at);
                &items[at]
            }
            _ => break,
        };
    }
    let mut node = root;
    for at in path {
        node = match node {
            Value::Object(map) => match map.values_mut().nth(at) {
                Some(child) => child,
                None => unreachable!("index below the map's length"),
            },
            Value::Array(items) => &mut items[at],
            _ => unreachable!("the path follows containers"),
        };
    }
    node
}

/// Renders `value` as JSON text, sometimes pretty, sometimes with extra whitespace, sometimes
/// with a duplicated key.
pub(crate) fn render(rng: &mut Rng, value: &Value) -> Vec<u8> {
    let mut text = match rng.below(4) {
        0 => serde_json::to_vec_pretty(value).unwrap_or_default(),
        _ => serde_json::to_vec(value).unwrap_or_default(),
    };
    if rng.one_in(8) {
        text.splice(0..0, b" \n\t".iter().copied());
        text.extend_from_slice(b"\r\n ");
    }
    text
}

/// Bytes a parser should never like: random, or random with JSON punctuation.
pub(crate) fn garbage(rng: &mut Rng) -> Vec<u8> {
    let n = rng.len(512);
    if rng.coin() {
        rng.bytes(n)
    } else {
        (0..n)
            .map(|_| *rng.pick(b"{}[]\":,\\ntrufalse0123456789.eE+- \n"))
            .collect()
    }
}

/// A JSON document: mostly `sample`, often mutated at the JSON level, sometimes at the byte
/// level, sometimes garbage, truncated or huge. Returns the bytes and whether they are
/// exactly the (unmutated) sample.
pub(crate) fn json_variant(rng: &mut Rng, sample: &Value, splice: &[&[u8]]) -> (Vec<u8>, bool) {
    match rng.below(20) {
        0..=7 => (render(rng, sample), true),
        8..=12 => {
            let mut value = sample.clone();
            mutate_json(rng, &mut value);
            (render(rng, &value), false)
        }
        13..=15 => {
            let mut bytes = render(rng, sample);
            mutate_bytes(rng, &mut bytes, splice);
            (bytes, false)
        }
        16 => {
            let mut bytes = render(rng, sample);
            let cut = rng.below(bytes.len().max(1));
            bytes.truncate(cut);
            (bytes, false)
        }
        17 => (garbage(rng), false),
        18 => (Vec::new(), false),
        _ => {
            if rng.one_in(50) {
                let n = rng.range(1 << 16, MAX_LONG);
                let mut big = b"{\"x\":\"".to_vec();
                big.extend(std::iter::repeat_n(b'a', n));
                big.extend_from_slice(b"\"}");
                (big, false)
            } else {
                {
                    let random = value(rng, 5);
                    (render(rng, &random), false)
                }
            }
        }
    }
}

/// `bytes` split into 1 to 16 chunks at random boundaries (UTF-8 sequences and lines split
/// included), sometimes with empty chunks.
pub(crate) fn chunks(rng: &mut Rng, bytes: &[u8]) -> Vec<Vec<u8>> {
    if bytes.is_empty() || rng.one_in(6) {
        return vec![bytes.to_vec()];
    }
    let mode = rng.below(3);
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let step = match mode {
            0 => 1,
            1 => rng.range(1, 7),
            _ => rng.range(1, bytes.len().max(1)),
        };
        let end = (at + step).min(bytes.len());
        out.push(bytes[at..end].to_vec());
        if rng.one_in(10) {
            out.push(Vec::new());
        }
        at = end;
        if out.len() > 4096 {
            out.push(bytes[at..].to_vec());
            break;
        }
    }
    out
}

/// A short escaped rendering of `bytes` for failure reports (`\xNN` for non-printables).
pub(crate) fn escape(bytes: &[u8], limit: usize) -> String {
    let mut out = String::new();
    for &b in bytes.iter().take(limit) {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    if bytes.len() > limit {
        out.push_str(&format!("... ({} bytes in all)", bytes.len()));
    }
    out
}
