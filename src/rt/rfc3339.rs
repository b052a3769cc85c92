//! RFC 3339 timestamps as the kernel writes them (Go's `time.Time`: `2026-12-02T06:33:00Z`,
//! fractions of a second and numeric offsets allowed) to Unix milliseconds.

/// The Unix milliseconds of `text`, or `None` when it is not an RFC 3339 date-time.
pub(crate) fn unix_millis(text: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    let digits = |from: usize, len: usize| -> Option<i64> {
        let part = text.get(from..from + len)?;
        part.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let separated = bytes.get(4) == Some(&b'-')
        && bytes.get(7) == Some(&b'-')
        && matches!(bytes.get(10), Some(b'T' | b't' | b' '))
        && bytes.get(13) == Some(&b':')
        && bytes.get(16) == Some(&b':');
    if !separated {
        return None;
    }
    let (year, month, day) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    let (hour, minute, second) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut rest = &text[19..];
    let mut millis = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let len = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if len == 0 {
            return None;
        }
        let padded = format!("{:0<3}", &fraction[..len.min(3)]);
        millis = padded.parse::<i64>().ok()?;
        rest = &fraction[len..];
    }
    let offset_minutes = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first() {
                Some(b'+') => 1,
                Some(b'-') => -1,
                _ => return None,
            };
            if rest.len() != 6 || rest.as_bytes()[3] != b':' {
                return None;
            }
            let hours: i64 = rest[1..3].parse().ok()?;
            let minutes: i64 = rest[4..6].parse().ok()?;
            sign * (hours * 60 + minutes)
        }
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_minutes * 60;
    u64::try_from(seconds * 1_000 + millis).ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
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
    use super::*;

    #[test]
    fn go_timestamps_become_unix_millis() {
        assert_eq!(unix_millis("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(unix_millis("2000-03-01T00:00:00Z"), Some(951_868_800_000));
        assert_eq!(
            unix_millis("2026-12-02T06:33:00.123456789Z"),
            Some(1_796_193_180_123)
        );
        assert_eq!(
            unix_millis("2026-12-02T08:33:00.5+02:00"),
            Some(1_796_193_180_500)
        );
        assert_eq!(
            unix_millis("2024-02-29T23:59:59-00:30"),
            Some(1_709_252_999_000)
        );
    }

    #[test]
    fn anything_else_is_none() {
        for text in [
            "",
            "2026-12-02",
            "2026-13-02T00:00:00Z",
            "2026-12-02T00:00:00",
            "2026-12-02T00:00:00.Z",
            "2026-12-02T00:00:00+0200",
            "yesterday",
        ] {
            assert_eq!(unix_millis(text), None, "{text}");
        }
    }
}
