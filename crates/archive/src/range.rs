//! The time range of a recorded stream in a URL: `APP/NAME@FROM..TO`, one form for
//! every protocol that plays recordings (HLS, the MP4 download; later RTSP, RTMP and
//! HTTP-FLV).
//!
//! Why `@` and `..`: `@` does not occur in stream keys made by common clients and needs
//! no escaping in a URL path; `..` cannot occur in a time, so the two bounds split
//! without ambiguity, and either may be left out (an open end).
//!
//! A bound is one of:
//! - an absolute time, RFC 3339 (`2026-11-27T10:00:00Z`, offsets, fractions) or Unix
//!   milliseconds, as [`crate::time::parse`] reads them;
//! - `now`;
//! - a time relative to now: `-` then one or more `<number><unit>` with units `s`, `m`,
//!   `h`, `d` (`-15m`, `-1h30m`);
//! - nothing: open (from the first recording on, or on to the end).
//!
//! Sans-IO: `now` is an argument, never read here.
//!
//! # Invariants
//! - A parsed range with both ends has `from < to`.
//! - Nothing a peer writes panics or overflows: numbers are bounded by
//!   [`MAX_RELATIVE_MS`], sums are checked.

use crate::time::{self, TimeError};
use thiserror::Error;

/// Separates a stream key from its range.
pub const KEY_SEPARATOR: char = '@';
/// Separates the bounds.
pub const BOUND_SEPARATOR: &str = "..";
/// Longest relative bound: 100 years back is far beyond any retention, and keeps every
/// sum within `i64`.
pub const MAX_RELATIVE_MS: i64 = 100 * 366 * 86_400_000;
/// Longest range text accepted: two RFC 3339 times with offsets and nanoseconds are
/// about 70 bytes.
pub const MAX_RANGE_LEN: usize = 128;

/// A time range in UTC ms; `None` is an open end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRange {
    /// First instant wanted, or from the first recording.
    pub from: Option<i64>,
    /// First instant not wanted, or on to the end (the live edge).
    pub to: Option<i64>,
}

impl TimeRange {
    /// The range as a half-open interval, open ends at the extremes of `i64`.
    pub fn bounds(&self) -> (i64, i64) {
        (self.from.unwrap_or(i64::MIN), self.to.unwrap_or(i64::MAX))
    }

    /// Whether the range has no end (it goes on into the live stream).
    pub fn open_ended(&self) -> bool {
        self.to.is_none()
    }
}

/// Which bound of a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// The one before `..`.
    From,
    /// The one after `..`.
    To,
}

impl std::fmt::Display for Which {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Which::From => "from",
            Which::To => "to",
        })
    }
}

/// Why a range is not one; every variant is the client's mistake (400).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RangeError {
    /// No `..` between the bounds.
    #[error("a range is FROM..TO (either may be empty), e.g. 2026-11-27T10:00:00Z..2026-11-27T10:15:00Z or -15m..")]
    NoSeparator,
    /// Longer than [`MAX_RANGE_LEN`].
    #[error("range of {0} bytes is longer than {MAX_RANGE_LEN}")]
    TooLong(usize),
    /// A bound that is neither a time, `now` nor a relative time.
    #[error("{which}: {source}")]
    Time {
        /// Which bound.
        which: Which,
        /// What the time parser said.
        source: TimeError,
    },
    /// A relative bound that is malformed.
    #[error("{which}: relative times are -<number><s|m|h|d>..., e.g. -15m or -1h30m: {what}")]
    Relative {
        /// Which bound.
        which: Which,
        /// What is wrong.
        what: &'static str,
    },
    /// `from` is not before `to`.
    #[error("the range is empty: from is not before to")]
    Empty,
}

/// Splits `app/name@range` into the stream key and the range text, when the key's last
/// segment holds an `@` (an `@` in an app name is not a range).
pub fn split_key(key: &str) -> Option<(&str, &str)> {
    let last = key.rfind('/').map_or(0, |i| i + 1);
    let at = key.get(last..)?.find(KEY_SEPARATOR)? + last;
    Some((key.get(..at)?, key.get(at + 1..)?))
}

/// Parses `FROM..TO` with relative bounds taken from `now_ms`.
pub fn parse(text: &str, now_ms: i64) -> Result<TimeRange, RangeError> {
    if text.len() > MAX_RANGE_LEN {
        return Err(RangeError::TooLong(text.len()));
    }
    let (from, to) = text
        .split_once(BOUND_SEPARATOR)
        .ok_or(RangeError::NoSeparator)?;
    let range = TimeRange {
        from: bound(from, Which::From, now_ms)?,
        to: bound(to, Which::To, now_ms)?,
    };
    if let (Some(f), Some(t)) = (range.from, range.to) {
        if f >= t {
            return Err(RangeError::Empty);
        }
    }
    Ok(range)
}

/// One bound: empty (open), `now`, relative or absolute.
fn bound(text: &str, which: Which, now_ms: i64) -> Result<Option<i64>, RangeError> {
    if text.is_empty() {
        return Ok(None);
    }
    if text == "now" {
        return Ok(Some(now_ms));
    }
    // `-123` alone is Unix ms (before 1970); a relative time ends with its unit.
    if let Some(rel) = text
        .strip_prefix('-')
        .filter(|r| r.ends_with(|c: char| c.is_ascii_alphabetic()))
    {
        let back = relative_ms(rel).map_err(|what| RangeError::Relative { which, what })?;
        return Ok(Some(now_ms.saturating_sub(back)));
    }
    time::parse(text)
        .map(Some)
        .map_err(|source| RangeError::Time { which, source })
}

/// Milliseconds of `1h30m`-style text.
fn relative_ms(text: &str) -> Result<i64, &'static str> {
    let mut total: i64 = 0;
    let mut number: Option<i64> = None;
    for c in text.chars() {
        if let Some(d) = c.to_digit(10) {
            let n = number
                .unwrap_or(0)
                .checked_mul(10)
                .and_then(|n| n.checked_add(i64::from(d)))
                .filter(|&n| n <= MAX_RELATIVE_MS)
                .ok_or("too far back")?;
            number = Some(n);
            continue;
        }
        let unit: i64 = match c {
            's' => 1000,
            'm' => 60_000,
            'h' => 3_600_000,
            'd' => 86_400_000,
            _ => return Err("unknown unit"),
        };
        let n = number.take().ok_or("a unit without a number")?;
        total = n
            .checked_mul(unit)
            .and_then(|ms| total.checked_add(ms))
            .filter(|&t| t <= MAX_RELATIVE_MS)
            .ok_or("too far back")?;
    }
    if number.is_some() {
        return Err("a number without a unit");
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_795_773_600_000; // 2026-11-27T10:00:00Z

    #[test]
    fn absolute_ranges() {
        let r = parse("2026-11-27T10:00:00Z..2026-11-27T10:15:00Z", 0).unwrap();
        assert_eq!(r.from, Some(NOW));
        assert_eq!(r.to, Some(NOW + 15 * 60_000));
        assert!(!r.open_ended());
        let r = parse("2026-11-27T11:00:00.5+01:00..1795774500000", 0).unwrap();
        assert_eq!(r.bounds(), (NOW + 500, NOW + 900_000));
    }

    #[test]
    fn relative_and_open_ranges() {
        let r = parse("-15m..", NOW).unwrap();
        assert_eq!((r.from, r.to), (Some(NOW - 900_000), None));
        assert!(r.open_ended());
        let r = parse("-1h30m..-30m", NOW).unwrap();
        assert_eq!(r.bounds(), (NOW - 5_400_000, NOW - 1_800_000));
        let r = parse("..now", NOW).unwrap();
        assert_eq!(r.bounds(), (i64::MIN, NOW));
        assert_eq!(parse("..", NOW).unwrap().bounds(), (i64::MIN, i64::MAX));
        assert_eq!(
            parse("-2d..-1s", NOW).unwrap().from,
            Some(NOW - 172_800_000)
        );
        // Negative Unix ms are absolute.
        assert_eq!(parse("-5..0", NOW).unwrap().bounds(), (-5, 0));
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert_eq!(
            parse("2026-11-27T10:00:00Z", 0),
            Err(RangeError::NoSeparator)
        );
        assert_eq!(parse("-5m..-10m", NOW), Err(RangeError::Empty));
        assert_eq!(parse("now..now", NOW), Err(RangeError::Empty));
        assert!(matches!(
            parse("yesterday..", NOW),
            Err(RangeError::Time {
                which: Which::From,
                ..
            })
        ));
        assert!(matches!(
            parse("..2026-13-01T00:00:00Z", NOW),
            Err(RangeError::Time {
                which: Which::To,
                ..
            })
        ));
        for bad in [
            "-m..",
            "-15x..",
            "-99999999999999999999d..",
            "-1h5..",
            "-h..",
        ] {
            assert!(
                matches!(
                    parse(bad, NOW),
                    Err(RangeError::Relative { .. }) | Err(RangeError::Time { .. })
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            parse(&"1".repeat(200), NOW),
            Err(RangeError::TooLong(200))
        ));
        let msg = parse("-15x..", NOW).unwrap_err().to_string();
        assert!(msg.starts_with("from: relative times"), "{msg}");
    }

    #[test]
    fn keys_split_at_the_last_segments_at() {
        assert_eq!(split_key("live/cam@-15m.."), Some(("live/cam", "-15m..")));
        assert_eq!(split_key("a/b/cam@x@y"), Some(("a/b/cam", "x@y")));
        assert_eq!(split_key("li@ve/cam"), None);
        assert_eq!(split_key("live/cam"), None);
        assert_eq!(split_key("live/@.."), Some(("live/", "..")));
    }
}
