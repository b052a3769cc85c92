//! Timestamps in Go's `time.Time` JSON form: RFC 3339, UTC, nanoseconds with trailing zeros
//! trimmed (`2026-08-18T12:00:00.123456789Z`).

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `9999-12-31T23:59:59.999999999Z` in nanoseconds since the epoch.
const MAX_NANOS: i128 = 253_402_300_799_999_999_999;

/// A UTC instant with nanosecond precision, serialized as RFC 3339.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Timestamp {
    /// Nanoseconds since the Unix epoch.
    nanos: i128,
}

impl Timestamp {
    /// The current wall-clock time.
    pub(crate) fn now() -> Self {
        Self::from(SystemTime::now())
    }

    /// Nanoseconds since the Unix epoch.
    pub(crate) fn unix_nanos(self) -> i128 {
        self.nanos
    }

    /// This instant plus `duration`, at the latest the end of year 9999 (the last instant
    /// RFC 3339 can write).
    pub(crate) fn plus(self, duration: Duration) -> Self {
        let nanos = i128::try_from(duration.as_nanos()).unwrap_or(MAX_NANOS);
        Self {
            nanos: self.nanos.saturating_add(nanos).min(MAX_NANOS),
        }
    }

    /// Parses the RFC 3339 form this type prints (`Z` or a numeric offset).
    pub(crate) fn parse(text: &str) -> Option<Self> {
        parse_rfc3339(text).map(|nanos| Self { nanos })
    }
}

impl From<SystemTime> for Timestamp {
    fn from(time: SystemTime) -> Self {
        let nanos = match time.duration_since(UNIX_EPOCH) {
            Ok(after) => i128::try_from(after.as_nanos()).unwrap_or(0),
            Err(before) => -i128::try_from(before.duration().as_nanos()).unwrap_or(0),
        };
        Self { nanos }
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.nanos.div_euclid(1_000_000_000);
        let frac = self.nanos.rem_euclid(1_000_000_000);
        let days = secs.div_euclid(86_400);
        let tod = secs.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
            tod / 3600,
            tod % 3600 / 60,
            tod % 60
        )?;
        if frac != 0 {
            let digits = format!("{frac:09}");
            write!(f, ".{}", digits.trim_end_matches('0'))?;
        }
        f.write_str("Z")
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).ok_or_else(|| serde::de::Error::custom("invalid RFC 3339 timestamp"))
    }
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar.
fn civil_from_days(days: i128) -> (i128, i128, i128) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i128::from(month <= 2);
    (year, month, day)
}

fn days_from_civil(year: i128, month: i128, day: i128) -> i128 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn parse_rfc3339(text: &str) -> Option<i128> {
    let bytes = text.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<i128> {
        let part = text.get(range)?;
        if !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    if bytes.len() < 20 || bytes[4] != b'-' || bytes[7] != b'-' || bytes[13] != b':' {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut rest = &text[19..];
    let mut frac = 0i128;
    if let Some(after) = rest.strip_prefix('.') {
        let len = after.bytes().take_while(u8::is_ascii_digit).count();
        if len == 0 {
            return None;
        }
        let digits = &after[..len.min(9)];
        frac = digits.parse::<i128>().ok()? * 10i128.pow(9 - u32::try_from(digits.len()).ok()?);
        rest = &after[len..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let hours: i128 = rest.get(1..3)?.parse().ok()?;
            let minutes: i128 = rest.get(4..6)?.parse().ok()?;
            sign * (hours * 3600 + minutes * 60)
        }
    };
    let secs =
        days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset;
    Some(secs * 1_000_000_000 + frac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_far_future_is_the_end_of_year_9999_and_reads_back() {
        let far = Timestamp::now().plus(Duration::from_secs(u64::MAX));
        assert_eq!(far.to_string(), "9999-12-31T23:59:59.999999999Z");
        assert_eq!(Timestamp::parse(&far.to_string()), Some(far));
    }

    #[test]
    fn formats_like_go() {
        let ts = Timestamp {
            nanos: 1_760_000_000_123_456_789,
        };
        assert_eq!(ts.to_string(), "2025-10-09T08:53:20.123456789Z");
        let whole = Timestamp {
            nanos: 1_760_000_000_000_000_000,
        };
        assert_eq!(whole.to_string(), "2025-10-09T08:53:20Z");
        let trimmed = Timestamp {
            nanos: 1_760_000_000_120_000_000,
        };
        assert_eq!(trimmed.to_string(), "2025-10-09T08:53:20.12Z");
    }

    #[test]
    fn round_trips() {
        let ts = Timestamp::now();
        assert_eq!(Timestamp::parse(&ts.to_string()), Some(ts));
        assert_eq!(
            Timestamp::parse("2025-10-09T10:53:20.5+02:00").map(Timestamp::unix_nanos),
            Some(1_760_000_000_500_000_000)
        );
    }
}
