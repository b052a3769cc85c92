//! Floats in kernel requests written as the Python SDK writes them (`json.dumps`, that is
//! Python's `repr`): the kernel hashes a step's arguments with their number literals as written
//! (PROTOCOL.md §1.5), so `0.00001` written `1e-5` here and `1e-05` by Python would give the same
//! call two identities, and a history one SDK recorded would not replay in the other (an
//! `at_most_once` call would run again). Integers are untouched; only the spelling of floats
//! changes, never their value.
//!
//! Python's rule: the shortest digits that read back to the same float; positional notation
//! when the decimal exponent is in `-4..16` (with `.0` for a whole number), else scientific with
//! a signed exponent of at least two digits (`1e-05`, `1.5e+16`).

use std::io;

use serde_json::ser::Formatter;

/// serde_json's compact output with Python's float spelling.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PythonFloats;

impl Formatter for PythonFloats {
    fn write_f64<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: f64) -> io::Result<()> {
        writer.write_all(python_repr(value).as_bytes())
    }
}

/// Serializes `value` as compact JSON with Python's float spelling.
pub(crate) fn to_vec(value: &impl serde::Serialize) -> serde_json::Result<Vec<u8>> {
    let mut out = Roomy(Vec::with_capacity(128));
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, PythonFloats);
    value.serialize(&mut serializer)?;
    Ok(out.0)
}

/// A `Vec` writer that leaves an eighth spare when a write outgrows it. A large string arrives
/// as one fragment; a plain `Vec` grows to fit it exactly, and the closing quote after it then
/// doubles the buffer (a 1 MiB result took 3 MiB of allocations, 2 MiB kept, instead of ~1.1).
struct Roomy(Vec<u8>);

impl io::Write for Roomy {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        if buf.len() > self.0.capacity() - self.0.len() {
            self.0.reserve(buf.len() + buf.len() / 8);
        }
        self.0.extend_from_slice(buf);
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Python's `repr` of a finite float (serde_json writes `null` for the others before asking).
fn python_repr(value: f64) -> String {
    let scientific = format!("{value:e}"); // shortest round-trip digits: "-1.25e-5"
    let (mantissa, exponent) = scientific
        .split_once('e')
        .unwrap_or((scientific.as_str(), "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    if (-4..16).contains(&exponent) {
        let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
        format!("{sign}{}", positional(&digits, exponent))
    } else {
        let exponent_sign = if exponent < 0 { '-' } else { '+' };
        format!(
            "{sign}{mantissa}e{exponent_sign}{:02}",
            exponent.unsigned_abs()
        )
    }
}

/// `digits` (d1 d2 ...) as d1.d2... × 10^`exponent`, written positionally.
fn positional(digits: &str, exponent: i32) -> String {
    let Ok(point @ 1..) = usize::try_from(exponent + 1) else {
        let zeros = "0".repeat(usize::try_from(-1 - exponent).unwrap_or(0));
        return format!("0.{zeros}{digits}");
    };
    if digits.len() > point {
        format!("{}.{}", &digits[..point], &digits[point..])
    } else {
        format!("{digits}{}.0", "0".repeat(point - digits.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each value beside what CPython 3.11's `json.dumps` writes for it.
    #[test]
    fn floats_are_spelled_as_python_spells_them() {
        for (value, python) in [
            (0.00001, "1e-05"),
            (0.0001, "0.0001"),
            (0.5, "0.5"),
            (1.0, "1.0"),
            (-2.5, "-2.5"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (123.456, "123.456"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (-1.25e-7, "-1.25e-07"),
            (123456789.125, "123456789.125"),
        ] {
            assert_eq!(python_repr(value), python, "{value:?}");
        }
    }

    #[test]
    fn a_large_string_leaves_room_for_what_follows_it() {
        let big = "x".repeat(1 << 20);
        let body = to_vec(&serde_json::json!({ "result": big })).unwrap();
        assert_eq!(body.len(), (1 << 20) + 13);
        assert!(body.capacity() < (1 << 20) * 5 / 4, "{}", body.capacity());
    }

    #[test]
    fn only_floats_change() {
        let value = serde_json::json!({"a": 1, "b": [0.00001, -3, 1e16], "c": "1e-5", "d": 2.0});
        let text = String::from_utf8(to_vec(&value).unwrap()).unwrap();
        assert_eq!(text, r#"{"a":1,"b":[1e-05,-3,1e+16],"c":"1e-5","d":2.0}"#);
    }
}
