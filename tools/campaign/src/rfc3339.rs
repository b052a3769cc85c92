//! RFC 3339 timestamps as the kernel writes them (Go's `time.Time`:
//! `2026-08-18T12:00:00.123456789Z`, fractions trimmed, a numeric offset allowed) to Unix
//! nanoseconds, so that they can be ordered and subtracted (the strings cannot: `…:00Z` sorts
//! after `…:00.5Z`).

/// Nanoseconds since the Unix epoch of `text`, or `None` when it is not an RFC 3339 date-time.
pub fn unix_nanos(text: &str) -> Option<i128> {
    let bytes = text.as_bytes();
    let separated = bytes.get(4) == Some(&b'-')
        && bytes.get(7) == Some(&b'-')
        && matches!(bytes.get(10), Some(b'T' | b't'))
        && bytes.get(13) == Some(&b':')
        && bytes.get(16) == Some(&b':');
    if !separated {
        return None;
    }
    let (year, month, day) = (
        digits(text, 0, 4)?,
        digits(text, 5, 2)?,
        digits(text, 8, 2)?,
    );
    let (hour, minute, second) = (
        digits(text, 11, 2)?,
        digits(text, 14, 2)?,
        digits(text, 17, 2)?,
    );
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let (nanos, rest) = fraction(text.get(19..)?)?;
    let offset = offset_seconds(rest)?;
    let seconds =
        days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second - offset;
    Some(seconds * 1_000_000_000 + nanos)
}

/// The `len` ASCII digits of `text` from `from`, as a number.
fn digits(text: &str, from: usize, len: usize) -> Option<i128> {
    let part = text.get(from..from + len)?;
    if !part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    part.parse().ok()
}

/// A leading `.digits` in nanoseconds (0 without one; digits past the ninth are dropped) and
/// what follows it.
fn fraction(text: &str) -> Option<(i128, &str)> {
    let Some(after) = text.strip_prefix('.') else {
        return Some((0, text));
    };
    let len = after.bytes().take_while(u8::is_ascii_digit).count();
    if len == 0 {
        return None;
    }
    let nanos = format!("{:0<9}", &after[..len.min(9)]).parse().ok()?;
    Some((nanos, &after[len..]))
}

/// `Z` or `±hh:mm`, in seconds east of UTC.
fn offset_seconds(text: &str) -> Option<i128> {
    if text.eq_ignore_ascii_case("z") {
        return Some(0);
    }
    let sign = match text.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    if text.len() != 6 || text.as_bytes().get(3) != Some(&b':') {
        return None;
    }
    Some(sign * (digits(text, 1, 2)? * 3_600 + digits(text, 4, 2)? * 60))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i128, month: i128, day: i128) -> i128 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::unix_nanos;

    #[test]
    fn kernel_timestamps_become_unix_nanos() {
        assert_eq!(unix_nanos("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            unix_nanos("2025-10-09T08:53:20.123456789Z"),
            Some(1_760_000_000_123_456_789)
        );
        assert_eq!(
            unix_nanos("2025-10-09T08:53:20.12Z"),
            Some(1_760_000_000_120_000_000)
        );
        assert_eq!(
            unix_nanos("2025-10-09T10:53:20.5+02:00"),
            Some(1_760_000_000_500_000_000)
        );
        assert_eq!(
            unix_nanos("9999-12-31T23:59:59.999999999Z"),
            Some(253_402_300_799_999_999_999)
        );
    }

    #[test]
    fn other_text_is_refused() {
        for bad in [
            "",
            "2025-10-09",
            "2025-10-09T08:53:20",
            "2025-10-09T08:53:20.Z",
            "x",
        ] {
            assert_eq!(unix_nanos(bad), None, "{bad}");
        }
    }
}
