//! UTC milliseconds since the Unix epoch to and from text: RFC 3339 (`2026-11-27T10:00:00Z`,
//! `...10:00:00.250+01:00`) and plain Unix milliseconds (`1795773600000`).
//!
//! Why here: the API's `from`/`to` and the file names are times a peer or the disk
//! writes; one small parser, fuzzed, serves both. Leap seconds do not exist (as in Unix
//! time); years 0000 to 9999 only.

use thiserror::Error;

/// A time that is not RFC 3339 UTC or Unix milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("not a time (RFC 3339 like 2026-11-27T10:00:00Z, or Unix milliseconds): {0}")]
pub struct TimeError(&'static str);

const MS_PER_DAY: i64 = 86_400_000;

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date (year, month, day) of a day count since 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The calendar fields of `ms` in UTC: (year, month, day, hour, minute, second, milli).
pub fn fields(ms: i64) -> (i64, u32, u32, u32, u32, u32, u32) {
    let days = ms.div_euclid(MS_PER_DAY);
    let rest = ms.rem_euclid(MS_PER_DAY);
    let (y, mo, d) = civil_from_days(days);
    let s = rest / 1000;
    (
        y,
        mo,
        d,
        (s / 3600) as u32,
        (s / 60 % 60) as u32,
        (s % 60) as u32,
        (rest % 1000) as u32,
    )
}

/// `ms` as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn format_rfc3339(ms: i64) -> String {
    let (y, mo, d, h, mi, s, milli) = fields(ms);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{milli:03}Z")
}

/// The number written by ASCII digits `text` (at most 18 of them).
fn digits(text: &[u8]) -> Option<i64> {
    if text.is_empty() || text.len() > 18 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(text.iter().fold(0i64, |n, d| n * 10 + i64::from(d - b'0')))
}

/// Unix ms of a UTC calendar time, with its fields checked.
pub fn from_fields(
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
) -> Result<i64, TimeError> {
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let month_days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return Err(TimeError("month out of range")),
    };
    if !(0..=9999).contains(&year) || day == 0 || day > month_days {
        return Err(TimeError("date out of range"));
    }
    if hour > 23 || minute > 59 || second > 59 {
        return Err(TimeError("time of day out of range"));
    }
    let days = days_from_civil(year, month, day);
    Ok(days * MS_PER_DAY + i64::from(hour * 3600 + minute * 60 + second) * 1000)
}

/// Parses Unix milliseconds (digits, optionally after `-`) or RFC 3339 with `Z` or an
/// offset; fractions of a second past milliseconds are truncated.
pub fn parse(text: &str) -> Result<i64, TimeError> {
    let b = text.as_bytes();
    if let Some(n) = b.strip_prefix(b"-").and_then(digits) {
        return Ok(-n);
    }
    if let Some(n) = digits(b) {
        return Ok(n);
    }
    let field = |from: usize, len: usize| b.get(from..from + len).and_then(digits);
    let sep = |at: usize, c: &[u8]| b.get(at).is_some_and(|x| c.contains(x));
    let (Some(y), Some(mo), Some(d), Some(h), Some(mi), Some(s)) = (
        field(0, 4),
        field(5, 2),
        field(8, 2),
        field(11, 2),
        field(14, 2),
        field(17, 2),
    ) else {
        return Err(TimeError("expected YYYY-MM-DDTHH:MM:SS"));
    };
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return Err(TimeError("expected YYYY-MM-DDTHH:MM:SS"));
    }
    let base = from_fields(y, mo as u32, d as u32, h as u32, mi as u32, s as u32)?;
    let mut at = 19;
    let mut milli = 0;
    if sep(at, b".") {
        at += 1;
        let start = at;
        while b.get(at).is_some_and(u8::is_ascii_digit) {
            at += 1;
        }
        if at == start || at - start > 9 {
            return Err(TimeError("bad fraction of a second"));
        }
        let frac = b.get(start..at.min(start + 3)).unwrap_or_default();
        milli = digits(frac).unwrap_or(0) * 10i64.pow(3 - frac.len() as u32);
    }
    let offset_ms = match b.get(at..) {
        Some(b"Z" | b"z") => 0,
        Some(tz @ [sign @ (b'+' | b'-'), _, _, b':', _, _]) => {
            let (Some(oh), Some(om)) =
                (tz.get(1..3).and_then(digits), tz.get(4..6).and_then(digits))
            else {
                return Err(TimeError("bad offset"));
            };
            if oh > 23 || om > 59 {
                return Err(TimeError("bad offset"));
            }
            let ms = (oh * 60 + om) * 60_000;
            if *sign == b'+' {
                ms
            } else {
                -ms
            }
        }
        _ => return Err(TimeError("expected Z or an offset like +01:00")),
    };
    Ok(base + milli - offset_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_known_values() {
        let ms = 1_709_210_096_789; // 2024-02-29T12:34:56.789Z
        assert_eq!(format_rfc3339(ms), "2024-02-29T12:34:56.789Z");
        assert_eq!(parse("2024-02-29T12:34:56.789Z"), Ok(ms));
        assert_eq!(parse("2024-02-29T13:34:56.789123+01:00"), Ok(ms));
        assert_eq!(parse("2024-02-29t12:34:56.7z"), Ok(ms - 89));
        assert_eq!(parse("1709210096789"), Ok(ms));
        assert_eq!(parse("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(format_rfc3339(-1), "1969-12-31T23:59:59.999Z");
        for ms in [0, 951_782_400_000, 4_102_444_800_000, -86_400_000 * 400] {
            assert_eq!(parse(&format_rfc3339(ms)), Ok(ms));
        }
    }

    #[test]
    fn rejects_what_is_not_a_time() {
        for bad in [
            "",
            "2023-02-29T00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-01-01T24:00:00Z",
            "2024-01-01T00:00:00",
            "2024-01-01T00:00:00.Z",
            "2024-01-01T00:00:00+1:00",
            "12345678901234567890",
            "tomorrow",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
