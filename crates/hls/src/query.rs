//! The query of a playlist request: the Low-Latency HLS delivery directives.
//!
//! Why: `_HLS_msn`, `_HLS_part` and `_HLS_skip` come straight from viewers; this is
//! the one place that reads them, so absurd values become one clean
//! [`HlsError::BadQuery`] (answer 400) and never a panic, an allocation or a wait.
//!
//! Delta updates: `_HLS_skip=YES|v2` is accepted and ignored. We never advertise
//! `CAN-SKIP-UNTIL`, and the spec then requires the server to ignore the directive
//! and answer with the full playlist. With the default window of six segments a
//! delta update would skip nothing anyway (it may only skip segments older than six
//! target durations).
//!
//! # Invariants
//! - Linear in the query's length, no allocation.
//! - Other parameters (a session token, a cache buster) are ignored; a directive
//!   given twice is an error.

use crate::HlsError;

/// Longest `_HLS_msn` value accepted, in digits (`u64::MAX` has 20).
const MAX_MSN_DIGITS: usize = 20;
/// Longest `_HLS_part` value accepted, in digits (`u32::MAX` has 10).
const MAX_PART_DIGITS: usize = 10;

/// A blocking playlist reload: answer once the playlist holds segment `msn`, or part
/// `part` of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockingRequest {
    /// `_HLS_msn`: the media sequence number waited for.
    pub msn: u64,
    /// `_HLS_part`: the part index within `msn` waited for.
    pub part: Option<u32>,
}

/// Parses a playlist request's query string (with or without the leading `?`).
///
/// `Ok(None)`: a plain reload, to be answered at once. `Ok(Some(_))`: a blocking
/// reload, see `Timeline::readiness`. Errors: a directive that is empty,
/// non-numeric, too large for its type or repeated, `_HLS_part` without `_HLS_msn`,
/// or `_HLS_skip` other than `YES`/`v2`.
pub fn parse_blocking_request(query: &str) -> Result<Option<BlockingRequest>, HlsError> {
    let query = query.strip_prefix('?').unwrap_or(query);
    let mut msn = None;
    let mut part = None;
    let mut skip = false;
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "_HLS_msn" => {
                if msn.is_some() {
                    return Err(bad("_HLS_msn repeated"));
                }
                msn = Some(parse_decimal(value, MAX_MSN_DIGITS, "_HLS_msn")?);
            }
            "_HLS_part" => {
                if part.is_some() {
                    return Err(bad("_HLS_part repeated"));
                }
                let value = parse_decimal(value, MAX_PART_DIGITS, "_HLS_part")?;
                part = Some(u32::try_from(value).map_err(|_| bad("_HLS_part too large"))?);
            }
            "_HLS_skip" => {
                if skip {
                    return Err(bad("_HLS_skip repeated"));
                }
                if value != "YES" && value != "v2" {
                    return Err(bad("_HLS_skip is not YES or v2"));
                }
                skip = true;
            }
            _ => {}
        }
    }
    match (msn, part) {
        (Some(msn), part) => Ok(Some(BlockingRequest { msn, part })),
        (None, Some(_)) => Err(bad("_HLS_part without _HLS_msn")),
        (None, None) => Ok(None),
    }
}

/// A non-empty run of ASCII digits, at most `max_digits` long, that fits a `u64`.
fn parse_decimal(value: &str, max_digits: usize, what: &'static str) -> Result<u64, HlsError> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HlsError::BadQuery { what });
    }
    if value.len() > max_digits {
        return Err(HlsError::BadQuery { what });
    }
    value.bytes().try_fold(0u64, |acc, digit| {
        acc.checked_mul(10)
            .and_then(|acc| acc.checked_add(u64::from(digit - b'0')))
            .ok_or(HlsError::BadQuery { what })
    })
}

fn bad(what: &'static str) -> HlsError {
    HlsError::BadQuery { what }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(msn: u64, part: Option<u32>) -> Option<BlockingRequest> {
        Some(BlockingRequest { msn, part })
    }

    #[test]
    fn valid_queries() {
        assert_eq!(parse_blocking_request(""), Ok(None));
        assert_eq!(parse_blocking_request("?"), Ok(None));
        assert_eq!(parse_blocking_request("session=abc&x"), Ok(None));
        assert_eq!(parse_blocking_request("_HLS_msn=12"), Ok(req(12, None)));
        assert_eq!(
            parse_blocking_request("?_HLS_msn=12&_HLS_part=3"),
            Ok(req(12, Some(3)))
        );
        assert_eq!(
            parse_blocking_request("_HLS_part=0&session=z&_HLS_msn=0&_HLS_skip=YES"),
            Ok(req(0, Some(0)))
        );
        assert_eq!(parse_blocking_request("_HLS_skip=v2"), Ok(None));
        assert_eq!(
            parse_blocking_request("_HLS_msn=18446744073709551615&_HLS_part=4294967295"),
            Ok(req(u64::MAX, Some(u32::MAX)))
        );
        assert_eq!(parse_blocking_request("&&_HLS_msn=007&"), Ok(req(7, None)));
    }

    #[test]
    fn absurd_queries_are_errors() {
        for query in [
            "_HLS_msn",
            "_HLS_msn=",
            "_HLS_msn=-1",
            "_HLS_msn=+1",
            "_HLS_msn=1.5",
            "_HLS_msn=0x10",
            "_HLS_msn= 1",
            "_HLS_msn=１",
            "_HLS_msn=18446744073709551616",
            "_HLS_msn=99999999999999999999999999999999999999",
            "_HLS_msn=000000000000000000001",
            "_HLS_msn=1&_HLS_part=4294967296",
            "_HLS_msn=1&_HLS_part=x",
            "_HLS_msn=1&_HLS_msn=2",
            "_HLS_msn=1&_HLS_part=1&_HLS_part=1",
            "_HLS_part=1",
            "_HLS_skip=yes",
            "_HLS_skip=",
            "_HLS_msn=1&_HLS_skip=NO",
            "_HLS_skip=YES&_HLS_skip=YES",
        ] {
            assert!(
                matches!(
                    parse_blocking_request(query),
                    Err(HlsError::BadQuery { .. })
                ),
                "{query}"
            );
        }
    }
}
