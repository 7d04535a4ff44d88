//! File downloads, sans I/O: which file a URL names, and what to answer for it.
//!
//! Why here: everything a peer controls on a `/files/<path>` request (the path, `Range`,
//! `If-*`) is decided by pure functions that can be unit-tested, property-tested and
//! fuzzed without a socket or a file. The server opens the file, calls [`respond`]
//! with what `fstat` said, writes the head and sends `FileResponse::range` of the file
//! (with `sendfile`, or from a shared mapping under TLS).
//!
//! # Invariants
//! - [`relative_path`] never returns a path with a `..` segment, a NUL, a backslash,
//!   an empty or `.` segment, or a leading `/`, whatever the encoding of the request.
//! - [`FileResponse::range`] is always within `0..len` of the file it was decided for;
//!   it is empty unless the status is 200 or 206.
//! - Nothing here panics on any input, and no arithmetic on peer numbers overflows.
//!
//! # Multiple ranges
//! A `Range` with more than one range is answered 200 with the whole file (RFC 9110
//! §14.2 allows ignoring `Range`): download tools ask for one range, and a
//! `multipart/byteranges` body would need a second body path for little use.

use crate::request::{Method, Request};
use std::ops::Range;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use thiserror::Error;

/// Longest decoded relative path accepted: Linux's `PATH_MAX`, beyond which the
/// open would fail anyway.
pub const MAX_PATH_LEN: usize = 4096;

/// `Cache-Control` of file responses. Files in the media root change rarely and are
/// replaced whole (renamed over), so a cache may keep one for five minutes; after
/// that a revalidation costs a 304, thanks to the ETag.
pub const CACHE_CONTROL: &str = "public, max-age=300";

/// Latest time an HTTP-date can carry (9999-12-31T23:59:59Z), in Unix seconds.
const MAX_HTTP_DATE: u64 = 253_402_300_799;

/// Why a request path names no file. Every variant is the peer's fault.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// Bad percent-encoding, a NUL byte, or not UTF-8 once decoded.
    #[error("malformed path")]
    Malformed,
    /// A `..` segment, a backslash or an absolute path: an attempt to leave the root.
    #[error("path leads out of the root")]
    Outside,
    /// Longer than [`MAX_PATH_LEN`] once decoded.
    #[error("path longer than {MAX_PATH_LEN} bytes")]
    TooLong,
}

impl PathError {
    /// The HTTP status that answers this error.
    pub fn status(self) -> u16 {
        match self {
            PathError::Malformed => 400,
            PathError::Outside => 403,
            PathError::TooLong => 414,
        }
    }
}

/// The path of a file below the root, from the request path below the route's prefix
/// (`a/b%20c.mp4` for `/files/a/b%20c.mp4`).
///
/// Percent-decodes first, then checks the segments, so `%2e%2e` and `%2f` cannot hide
/// a `..`. Empty and `.` segments are dropped; a decoded path starting with `/` (an
/// absolute path) is refused. The result may be empty (the root itself).
pub fn relative_path(encoded: &str) -> Result<String, PathError> {
    let decoded = percent_decode(encoded.as_bytes())?;
    if decoded.len() > MAX_PATH_LEN {
        return Err(PathError::TooLong);
    }
    let decoded = String::from_utf8(decoded).map_err(|_| PathError::Malformed)?;
    if decoded.contains('\0') {
        return Err(PathError::Malformed);
    }
    if decoded.starts_with('/') || decoded.contains('\\') {
        return Err(PathError::Outside);
    }
    let mut out = String::with_capacity(decoded.len());
    for segment in decoded.split('/') {
        match segment {
            "" | "." => {}
            ".." => return Err(PathError::Outside),
            _ => {
                if !out.is_empty() {
                    out.push('/');
                }
                out.push_str(segment);
            }
        }
    }
    Ok(out)
}

/// `%XX` escapes decoded, for text that must come out UTF-8 (a URL's query values, an
/// SRT stream id); `None` for a broken escape or bytes that are not UTF-8.
pub fn percent_decode_utf8(text: &str) -> Option<String> {
    String::from_utf8(percent_decode(text.as_bytes()).ok()?).ok()
}

fn percent_decode(bytes: &[u8]) -> Result<Vec<u8>, PathError> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let (Some(hi), Some(lo)) = (
                tail.first().and_then(|&h| hex(h)),
                tail.get(1).and_then(|&l| hex(l)),
            ) else {
                return Err(PathError::Malformed);
            };
            out.push((hi << 4) | lo);
            rest = tail.get(2..).unwrap_or_default();
        } else {
            out.push(b);
            rest = tail;
        }
    }
    Ok(out)
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// One range of a `Range: bytes=` header, as sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeSpec {
    /// `first-last`, both included; `first <= last`.
    Bounded {
        /// First byte.
        first: u64,
        /// Last byte, included (may be past the end: the range is then cut there).
        last: u64,
    },
    /// `first-`: from `first` to the end.
    From(u64),
    /// `-n`: the last `n` bytes (the whole file if it is shorter).
    Suffix(u64),
}

impl RangeSpec {
    /// The bytes this range selects in a file of `len` bytes; `None` if it is not
    /// satisfiable (starts at or past the end, or is an empty suffix).
    pub fn resolve(self, len: u64) -> Option<Range<u64>> {
        match self {
            RangeSpec::Bounded { first, last } if first < len && first <= last => {
                Some(first..last.saturating_add(1).min(len))
            }
            RangeSpec::From(first) if first < len => Some(first..len),
            RangeSpec::Suffix(n) if n > 0 && len > 0 => Some(len.saturating_sub(n)..len),
            _ => None,
        }
    }
}

/// What a valid `Range` header asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeHeader {
    /// Exactly one range.
    Single(RangeSpec),
    /// Several ranges (answered with the whole file, see the module docs).
    Multiple,
}

/// Parses a `Range` header value. `None` for another unit or a malformed value, which
/// RFC 9110 §14.2 says to ignore (the answer is then the whole file).
///
/// Numbers too large for `u64` saturate: such a `first` is past any end, such a
/// `last` is cut to the end.
pub fn parse_range(value: &str) -> Option<RangeHeader> {
    let (unit, set) = value.trim().split_once('=')?;
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return None;
    }
    let mut found = None;
    let mut count = 0usize;
    for spec in set.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (first, last) = spec.split_once('-')?;
        let (first, last) = (first.trim(), last.trim());
        let spec = match (first.is_empty(), last.is_empty()) {
            (true, true) => return None,
            (true, false) => RangeSpec::Suffix(number(last)?),
            (false, true) => RangeSpec::From(number(first)?),
            (false, false) => {
                let (first, last) = (number(first)?, number(last)?);
                if first > last {
                    return None;
                }
                RangeSpec::Bounded { first, last }
            }
        };
        count += 1;
        found.get_or_insert(spec);
    }
    match (count, found) {
        (1, Some(spec)) => Some(RangeHeader::Single(spec)),
        (0, _) | (_, None) => None,
        _ => Some(RangeHeader::Multiple),
    }
}

/// Decimal digits only, saturating at `u64::MAX`.
fn number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.bytes().fold(0u64, |n, d| {
        n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}

/// An HTTP-date (IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`) for Unix seconds,
/// clamped to what the format can say (1970 to 9999).
pub fn format_http_date(unix_secs: u64) -> String {
    let secs = unix_secs.min(MAX_HTTP_DATE);
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs))
}

/// Unix seconds of an HTTP-date in any of the three formats RFC 9110 §5.6.7 says to
/// accept; `None` if it is not one.
pub fn parse_http_date(value: &str) -> Option<u64> {
    let time = httpdate::parse_http_date(value.trim()).ok()?;
    Some(time.duration_since(UNIX_EPOCH).ok()?.as_secs())
}

/// Unix seconds of a `SystemTime`, 0 before 1970.
pub fn unix_secs(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The `Content-Type` for a file name, by its extension (any case); files without a
/// known one are `application/octet-stream`.
pub fn content_type(path: &str) -> &'static str {
    let name = path.rsplit('/').next().unwrap_or(path);
    let Some((_, ext)) = name.rsplit_once('.') else {
        return "application/octet-stream";
    };
    const TYPES: &[(&str, &str)] = &[
        ("mp4", "video/mp4"),
        ("m4v", "video/mp4"),
        ("m4s", "video/iso.segment"),
        ("m4a", "audio/mp4"),
        ("mov", "video/quicktime"),
        ("ts", "video/mp2t"),
        ("m3u8", "application/vnd.apple.mpegurl"),
        ("mpd", "application/dash+xml"),
        ("flv", "video/x-flv"),
        ("mkv", "video/x-matroska"),
        ("webm", "video/webm"),
        ("mp3", "audio/mpeg"),
        ("aac", "audio/aac"),
        ("ogg", "audio/ogg"),
        ("opus", "audio/ogg"),
        ("wav", "audio/wav"),
        ("flac", "audio/flac"),
        ("jpg", "image/jpeg"),
        ("jpeg", "image/jpeg"),
        ("png", "image/png"),
        ("gif", "image/gif"),
        ("webp", "image/webp"),
        ("svg", "image/svg+xml"),
        ("ico", "image/vnd.microsoft.icon"),
        ("json", "application/json"),
        ("txt", "text/plain; charset=utf-8"),
        ("log", "text/plain; charset=utf-8"),
        ("html", "text/html; charset=utf-8"),
        ("htm", "text/html; charset=utf-8"),
        ("css", "text/css"),
        ("js", "text/javascript"),
        ("mjs", "text/javascript"),
        ("xml", "application/xml"),
        ("vtt", "text/vtt"),
        ("srt", "application/x-subrip"),
        ("pdf", "application/pdf"),
        ("zip", "application/zip"),
        ("wasm", "application/wasm"),
    ];
    TYPES
        .iter()
        .find(|(e, _)| e.eq_ignore_ascii_case(ext))
        .map_or("application/octet-stream", |(_, t)| t)
}

/// A strong entity tag for one version of a file: its inode, size and modification
/// time in nanoseconds, in hex (`"<ino>-<len>-<mtime_ns>"`). A file rewritten in place
/// or replaced by another gets a new tag.
pub fn etag(ino: u64, len: u64, mtime_secs: i64, mtime_nsec: i64) -> String {
    let ns = i128::from(mtime_secs)
        .saturating_mul(1_000_000_000)
        .saturating_add(i128::from(mtime_nsec));
    // Two's complement for the (odd) file modified before 1970: still one tag per time.
    format!("\"{ino:x}-{len:x}-{:x}\"", ns as u128)
}

/// What the answer depends on: the file as `fstat` saw it when it was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntity {
    /// Size in bytes.
    pub len: u64,
    /// Last modification, Unix seconds (`Last-Modified`).
    pub modified: u64,
    /// The strong entity tag (see [`etag`]).
    pub etag: String,
    /// See [`content_type`].
    pub content_type: &'static str,
}

impl FileEntity {
    /// The entity of the file at `path` with this `stat` data.
    pub fn new(path: &str, len: u64, ino: u64, mtime_secs: i64, mtime_nsec: i64) -> FileEntity {
        FileEntity {
            len,
            modified: u64::try_from(mtime_secs).unwrap_or(0),
            etag: etag(ino, len, mtime_secs, mtime_nsec),
            content_type: content_type(path),
        }
    }
}

/// The status of a file response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileStatus {
    /// 200: the whole file.
    Ok,
    /// 206: one range of it.
    PartialContent,
    /// 304: the client's copy is current.
    NotModified,
    /// 412: `If-Match` or `If-Unmodified-Since` failed.
    PreconditionFailed,
    /// 416: the one range asked for is outside the file.
    RangeNotSatisfiable,
}

impl FileStatus {
    /// The status code.
    pub fn code(self) -> u16 {
        match self {
            FileStatus::Ok => 200,
            FileStatus::PartialContent => 206,
            FileStatus::NotModified => 304,
            FileStatus::PreconditionFailed => 412,
            FileStatus::RangeNotSatisfiable => 416,
        }
    }

    /// The status line's code and reason (`206 Partial Content`).
    pub fn line(self) -> &'static str {
        match self {
            FileStatus::Ok => "200 OK",
            FileStatus::PartialContent => "206 Partial Content",
            FileStatus::NotModified => "304 Not Modified",
            FileStatus::PreconditionFailed => "412 Precondition Failed",
            FileStatus::RangeNotSatisfiable => "416 Range Not Satisfiable",
        }
    }
}

/// The answer to a file request, minus what every response gets (`Server`, CORS,
/// `Connection`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileResponse {
    /// The status.
    pub status: FileStatus,
    /// Header lines, `Content-Length` included (except on 304).
    pub headers: Vec<(&'static str, String)>,
    /// The bytes of the file the body is (or, for HEAD, would be); within the file,
    /// empty unless the status is 200 or 206.
    pub range: Range<u64>,
    /// Whether a body follows the head: GET with 200 or 206.
    pub body: bool,
}

/// Decides the answer to a GET or HEAD of a file, per RFC 9110 §13.2.2: `If-Match`
/// then `If-Unmodified-Since` (412), `If-None-Match` then `If-Modified-Since` (304),
/// then `Range` (GET only) guarded by `If-Range` (206, 416, or 200 when `If-Range`
/// does not match).
///
/// Callers route only GET and HEAD here; any other method is answered as HEAD. A
/// range of an empty file is ignored (200). An `If-Range` date matches when it equals
/// `Last-Modified` to the second; the ETag is the precise validator.
pub fn respond(req: &Request, file: &FileEntity) -> FileResponse {
    let validators = || {
        vec![
            ("ETag", file.etag.clone()),
            ("Last-Modified", format_http_date(file.modified)),
            ("Cache-Control", CACHE_CONTROL.to_string()),
        ]
    };
    let failed = |status: FileStatus| {
        let mut headers = validators();
        if status != FileStatus::NotModified {
            headers.push(("Content-Length", "0".to_string()));
        }
        FileResponse {
            status,
            headers,
            range: 0..0,
            body: false,
        }
    };
    if let Some(list) = header_list(req, "if-match") {
        if !(list.trim() == "*" || tag_matches(&list, &file.etag, Compare::Strong)) {
            return failed(FileStatus::PreconditionFailed);
        }
    } else if let Some(date) = req.header("if-unmodified-since").and_then(parse_http_date) {
        if file.modified > date {
            return failed(FileStatus::PreconditionFailed);
        }
    }
    if let Some(list) = header_list(req, "if-none-match") {
        if list.trim() == "*" || tag_matches(&list, &file.etag, Compare::Weak) {
            return failed(FileStatus::NotModified);
        }
    } else if let Some(date) = req.header("if-modified-since").and_then(parse_http_date) {
        if file.modified <= date {
            return failed(FileStatus::NotModified);
        }
    }
    let range = requested_range(req, file.len, &file.etag, Some(file.modified));
    let mut headers = vec![
        ("Content-Type", file.content_type.to_string()),
        ("Accept-Ranges", "bytes".to_string()),
    ];
    headers.extend(validators());
    let (status, range) = match range {
        None => (FileStatus::Ok, 0..file.len),
        Some(Some(r)) => {
            let last = r.end.saturating_sub(1);
            headers.push((
                "Content-Range",
                format!("bytes {}-{last}/{}", r.start, file.len),
            ));
            (FileStatus::PartialContent, r)
        }
        Some(None) => {
            headers.push(("Content-Range", format!("bytes */{}", file.len)));
            headers.push(("Content-Length", "0".to_string()));
            return FileResponse {
                status: FileStatus::RangeNotSatisfiable,
                headers,
                range: 0..0,
                body: false,
            };
        }
    };
    headers.push((
        "Content-Length",
        range.end.saturating_sub(range.start).to_string(),
    ));
    FileResponse {
        status,
        headers,
        range,
        body: req.method == Method::Get,
    }
}

/// Whether a `Range` applies: no `If-Range`, or one naming this version of the file
/// (strong ETag comparison, or its exact `Last-Modified`).
fn if_range_holds(req: &Request, etag: &str, modified: Option<u64>) -> bool {
    let Some(value) = req.header("if-range").map(str::trim) else {
        return true;
    };
    if value.starts_with('"') || value.starts_with("W/") {
        return value == etag;
    }
    modified.is_some_and(|m| parse_http_date(value) == Some(m))
}

/// What a request asks of a representation of `len` bytes whose strong validator is
/// `etag` (and last modification `modified`, Unix seconds, where it has one: a file
/// does, an HLS segment held in memory does not): `None`, the whole of it (not a GET,
/// no `Range`, several ranges, or an `If-Range` that no longer holds);
/// `Some(Some(range))`, that range (206); `Some(None)`, a range past its end (416).
pub fn requested_range(
    req: &Request,
    len: u64,
    etag: &str,
    modified: Option<u64>,
) -> Option<Option<Range<u64>>> {
    if req.method != Method::Get || len == 0 {
        return None;
    }
    let Some(RangeHeader::Single(spec)) = req.header("range").and_then(parse_range) else {
        return None;
    };
    if !if_range_holds(req, etag, modified) {
        return None;
    }
    Some(spec.resolve(len))
}

/// Every line of a list header, joined with commas (RFC 9110 §5.3).
fn header_list(req: &Request, name: &str) -> Option<String> {
    let mut values = req
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str());
    let first = values.next()?;
    Some(values.fold(first.to_string(), |mut all, v| {
        all.push(',');
        all.push_str(v);
        all
    }))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compare {
    /// Both tags strong and equal (`If-Match`, `If-Range`).
    Strong,
    /// Equal ignoring `W/` (`If-None-Match`).
    Weak,
}

/// Whether a list of entity tags (`"a", W/"b"`) holds `etag` (a strong tag). A
/// malformed list matches nothing past the point where it breaks.
fn tag_matches(list: &str, etag: &str, compare: Compare) -> bool {
    let mut rest = list;
    loop {
        rest = rest.trim_start_matches([',', ' ', '\t']);
        if rest.is_empty() {
            return false;
        }
        let (weak, tagged) = match rest.strip_prefix("W/") {
            Some(r) => (true, r),
            None => (false, rest),
        };
        let Some(end) = tagged
            .strip_prefix('"')
            .and_then(|t| t.find('"'))
            .map(|i| i + 2)
        else {
            return false;
        };
        let Some(tag) = tagged.get(..end) else {
            return false;
        };
        if tag == etag && (compare == Compare::Weak || !weak) {
            return true;
        }
        rest = tagged.get(end..).unwrap_or_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_request;
    use proptest::prelude::*;

    fn get(headers: &str) -> Request {
        let raw = format!("GET /live/x/1.ts HTTP/1.1\r\nHost: h\r\n{headers}\r\n");
        parse_request(raw.as_bytes()).unwrap().unwrap()
    }

    #[test]
    fn a_range_of_a_representation_in_memory() {
        let etag = "\"a-1\"";
        assert_eq!(requested_range(&get(""), 100, etag, None), None);
        assert_eq!(
            requested_range(&get("Range: bytes=10-19\r\n"), 100, etag, None),
            Some(Some(10..20))
        );
        assert_eq!(
            requested_range(&get("Range: bytes=90-\r\n"), 100, etag, None),
            Some(Some(90..100))
        );
        assert_eq!(
            requested_range(&get("Range: bytes=-5\r\n"), 100, etag, None),
            Some(Some(95..100))
        );
        // Past the end: 416.
        assert_eq!(
            requested_range(&get("Range: bytes=100-\r\n"), 100, etag, None),
            Some(None)
        );
        // Several ranges, another unit, a stale If-Range: the whole.
        assert_eq!(
            requested_range(&get("Range: bytes=0-1,5-6\r\n"), 100, etag, None),
            None
        );
        assert_eq!(
            requested_range(&get("Range: items=0-1\r\n"), 100, etag, None),
            None
        );
        let stale = "Range: bytes=0-1\r\nIf-Range: \"a-0\"\r\n";
        assert_eq!(requested_range(&get(stale), 100, etag, None), None);
        let fresh = "Range: bytes=0-1\r\nIf-Range: \"a-1\"\r\n";
        assert_eq!(
            requested_range(&get(fresh), 100, etag, None),
            Some(Some(0..2))
        );
    }

    fn req(method: &str, headers: &str) -> Request {
        let raw = format!("{method} /files/a.mp4 HTTP/1.1\r\nHost: x\r\n{headers}\r\n");
        parse_request(raw.as_bytes()).unwrap().unwrap()
    }

    fn file(len: u64) -> FileEntity {
        FileEntity::new("a.mp4", len, 0x1234, 1_700_000_000, 5)
    }

    fn header<'a>(r: &'a FileResponse, name: &str) -> Option<&'a str> {
        r.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn paths_are_decoded_then_checked() {
        assert_eq!(relative_path("a/b%20c.mp4").unwrap(), "a/b c.mp4");
        assert_eq!(relative_path("./a//b/./c").unwrap(), "a/b/c");
        assert_eq!(relative_path("").unwrap(), "");
        assert_eq!(relative_path("caf%C3%A9").unwrap(), "café");
        for outside in [
            "..",
            "../x",
            "a/../../x",
            "%2e%2e/x",
            "%2E%2E%2Fx",
            "a/..%2f..%2fx",
            "a/%2e%2e",
            "/etc/passwd",
            "%2fetc/passwd",
            "a\\..\\x",
            "a%5cb",
        ] {
            assert_eq!(relative_path(outside), Err(PathError::Outside), "{outside}");
        }
        for bad in ["a%00b", "%", "%2", "%zz", "%ff%fe"] {
            assert_eq!(relative_path(bad), Err(PathError::Malformed), "{bad}");
        }
        assert_eq!(
            relative_path(&"a".repeat(MAX_PATH_LEN + 1)),
            Err(PathError::TooLong)
        );
        assert_eq!(relative_path("..a/b..").unwrap(), "..a/b..");
    }

    #[test]
    fn ranges_parse_and_resolve() {
        use RangeHeader::*;
        use RangeSpec::*;
        assert_eq!(
            parse_range("bytes=0-99"),
            Some(Single(Bounded { first: 0, last: 99 }))
        );
        assert_eq!(parse_range("bytes=100-"), Some(Single(From(100))));
        assert_eq!(parse_range("bytes=-100"), Some(Single(Suffix(100))));
        assert_eq!(
            parse_range(" Bytes = 1-2 , "),
            Some(Single(Bounded { first: 1, last: 2 }))
        );
        assert_eq!(parse_range("bytes=0-1,5-"), Some(Multiple));
        for ignored in [
            "items=0-1",
            "bytes=",
            "bytes=5-1",
            "bytes=-",
            "bytes=a-b",
            "bytes=1-2,x",
            "0-1",
            "bytes=+1-2",
        ] {
            assert_eq!(parse_range(ignored), None, "{ignored}");
        }
        assert_eq!(Bounded { first: 0, last: 99 }.resolve(50), Some(0..50));
        assert_eq!(
            Bounded {
                first: 50,
                last: 99
            }
            .resolve(50),
            None
        );
        assert_eq!(From(49).resolve(50), Some(49..50));
        assert_eq!(Suffix(10).resolve(50), Some(40..50));
        assert_eq!(Suffix(100).resolve(50), Some(0..50));
        assert_eq!(Suffix(0).resolve(50), None);
        assert_eq!(
            parse_range("bytes=0-99999999999999999999999"),
            Some(Single(Bounded {
                first: 0,
                last: u64::MAX
            }))
        );
        assert_eq!(
            Bounded {
                first: 0,
                last: u64::MAX
            }
            .resolve(7),
            Some(0..7)
        );
    }

    #[test]
    fn whole_file_and_head() {
        let r = respond(&req("GET", ""), &file(1000));
        assert_eq!(r.status, FileStatus::Ok);
        assert_eq!(r.range, 0..1000);
        assert!(r.body);
        assert_eq!(header(&r, "content-length"), Some("1000"));
        assert_eq!(header(&r, "content-type"), Some("video/mp4"));
        assert_eq!(header(&r, "accept-ranges"), Some("bytes"));
        assert_eq!(
            header(&r, "last-modified"),
            Some("Tue, 14 Nov 2023 22:13:20 GMT")
        );
        let h = respond(&req("HEAD", "Range: bytes=0-9\r\n"), &file(1000));
        assert_eq!(h.status, FileStatus::Ok, "Range is for GET only");
        assert!(!h.body);
        assert_eq!(header(&h, "content-length"), Some("1000"));
    }

    #[test]
    fn single_range_and_unsatisfiable() {
        let r = respond(&req("GET", "Range: bytes=10-19\r\n"), &file(1000));
        assert_eq!(r.status, FileStatus::PartialContent);
        assert_eq!(r.range, 10..20);
        assert_eq!(header(&r, "content-range"), Some("bytes 10-19/1000"));
        assert_eq!(header(&r, "content-length"), Some("10"));
        let r = respond(&req("GET", "Range: bytes=-10\r\n"), &file(1000));
        assert_eq!(header(&r, "content-range"), Some("bytes 990-999/1000"));
        let r = respond(&req("GET", "Range: bytes=1000-\r\n"), &file(1000));
        assert_eq!(r.status, FileStatus::RangeNotSatisfiable);
        assert_eq!(header(&r, "content-range"), Some("bytes */1000"));
        assert!(!r.body);
        let r = respond(&req("GET", "Range: bytes=0-1,5-9\r\n"), &file(1000));
        assert_eq!((r.status, r.range), (FileStatus::Ok, 0..1000));
        let r = respond(&req("GET", "Range: bytes=-5\r\n"), &file(0));
        assert_eq!((r.status, r.range), (FileStatus::Ok, 0..0));
    }

    #[test]
    fn beyond_four_gib() {
        let len = (5u64 << 30) + 7;
        let r = respond(&req("GET", "Range: bytes=4294967296-\r\n"), &file(len));
        assert_eq!(r.range, (4u64 << 30)..len);
        assert_eq!(
            header(&r, "content-range"),
            Some(format!("bytes 4294967296-{}/{len}", len - 1).as_str())
        );
    }

    #[test]
    fn conditionals() {
        let f = file(1000);
        let tag = f.etag.clone();
        let date = format_http_date(f.modified);
        let r = respond(&req("GET", &format!("If-None-Match: \"x\", {tag}\r\n")), &f);
        assert_eq!(r.status, FileStatus::NotModified);
        assert_eq!(header(&r, "etag"), Some(tag.as_str()));
        assert_eq!(header(&r, "content-length"), None);
        let weak = respond(&req("GET", &format!("If-None-Match: W/{tag}\r\n")), &f);
        assert_eq!(weak.status, FileStatus::NotModified, "weak comparison");
        let star = respond(&req("HEAD", "If-None-Match: *\r\n"), &f);
        assert_eq!(star.status, FileStatus::NotModified);
        let other = respond(&req("GET", "If-None-Match: \"nope\"\r\n"), &f);
        assert_eq!(other.status, FileStatus::Ok);
        // If-None-Match wins over If-Modified-Since.
        let r = respond(
            &req(
                "GET",
                &format!("If-None-Match: \"nope\"\r\nIf-Modified-Since: {date}\r\n"),
            ),
            &f,
        );
        assert_eq!(r.status, FileStatus::Ok);
        let r = respond(&req("GET", &format!("If-Modified-Since: {date}\r\n")), &f);
        assert_eq!(r.status, FileStatus::NotModified);
        let r = respond(
            &req(
                "GET",
                "If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n",
            ),
            &f,
        );
        assert_eq!(r.status, FileStatus::Ok);
        let r = respond(&req("GET", "If-Modified-Since: yesterday\r\n"), &f);
        assert_eq!(r.status, FileStatus::Ok, "an invalid date is ignored");
        let r = respond(&req("GET", "If-Match: \"nope\"\r\n"), &f);
        assert_eq!(r.status, FileStatus::PreconditionFailed);
        let r = respond(&req("GET", &format!("If-Match: W/{tag}\r\n")), &f);
        assert_eq!(
            r.status,
            FileStatus::PreconditionFailed,
            "strong comparison"
        );
        let r = respond(&req("GET", &format!("If-Match: {tag}\r\n")), &f);
        assert_eq!(r.status, FileStatus::Ok);
        let r = respond(
            &req(
                "GET",
                "If-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n",
            ),
            &f,
        );
        assert_eq!(r.status, FileStatus::PreconditionFailed);
    }

    #[test]
    fn if_range() {
        let f = file(1000);
        let tag = f.etag.clone();
        let date = format_http_date(f.modified);
        let range = "Range: bytes=0-9\r\n";
        let r = respond(&req("GET", &format!("{range}If-Range: {tag}\r\n")), &f);
        assert_eq!(r.status, FileStatus::PartialContent);
        let r = respond(&req("GET", &format!("{range}If-Range: {date}\r\n")), &f);
        assert_eq!(r.status, FileStatus::PartialContent);
        for stale in [
            "\"other\"".to_string(),
            format!("W/{tag}"),
            "Sun, 06 Nov 1994 08:49:37 GMT".to_string(),
            "garbage".to_string(),
        ] {
            let r = respond(&req("GET", &format!("{range}If-Range: {stale}\r\n")), &f);
            assert_eq!(
                (r.status, r.range.clone()),
                (FileStatus::Ok, 0..1000),
                "{stale}"
            );
        }
        let r = respond(
            &req("GET", "Range: bytes=5000-\r\nIf-Range: \"other\"\r\n"),
            &f,
        );
        assert_eq!(r.status, FileStatus::Ok, "a stale If-Range beats a 416");
    }

    #[test]
    fn list_headers_on_several_lines() {
        let f = file(10);
        let raw = format!(
            "GET /files/a HTTP/1.1\r\nIf-None-Match: \"a\"\r\nIf-None-Match: {}\r\n\r\n",
            f.etag
        );
        let r = parse_request(raw.as_bytes()).unwrap().unwrap();
        assert_eq!(respond(&r, &f).status, FileStatus::NotModified);
        assert!(!tag_matches(
            "\"unterminated",
            "\"unterminated\"",
            Compare::Weak
        ));
        assert!(!tag_matches("W/", "\"a\"", Compare::Weak));
    }

    #[test]
    fn dates_and_types() {
        assert_eq!(
            format_http_date(784_111_777),
            "Sun, 06 Nov 1994 08:49:37 GMT"
        );
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(
            parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(
            parse_http_date("Sun Nov  6 08:49:37 1994"),
            Some(784_111_777)
        );
        assert_eq!(parse_http_date("nope"), None);
        assert_eq!(format_http_date(u64::MAX), "Fri, 31 Dec 9999 23:59:59 GMT");
        assert_eq!(FileEntity::new("x", 1, 1, -5, 0).modified, 0);
        assert_eq!(content_type("a/b/C.MP4"), "video/mp4");
        assert_eq!(content_type("x.m3u8"), "application/vnd.apple.mpegurl");
        assert_eq!(content_type("x.tar.gz"), "application/octet-stream");
        assert_eq!(content_type("noext"), "application/octet-stream");
        assert_eq!(content_type("dir.mp4/noext"), "application/octet-stream");
        assert_eq!(etag(0xab, 0x10, 1, 2), "\"ab-10-3b9aca02\"");
    }

    proptest! {
        #[test]
        fn ranges_stay_within_the_file(value in "(bytes|BYTES|items)?=?[0-9 ,-]{0,40}", len in 0u64..u64::MAX) {
            if let Some(RangeHeader::Single(spec)) = parse_range(&value) {
                if let Some(r) = spec.resolve(len) {
                    prop_assert!(r.start < r.end && r.end <= len);
                }
            }
        }

        #[test]
        fn arbitrary_range_values_never_panic(value in ".{0,64}", len in any::<u64>()) {
            if let Some(RangeHeader::Single(spec)) = parse_range(&value) {
                if let Some(r) = spec.resolve(len) {
                    prop_assert!(r.start < r.end && r.end <= len);
                }
            }
        }

        #[test]
        fn responses_stay_within_the_file(
            range in "bytes=[0-9]{0,12}-[0-9]{0,12}",
            if_range in prop_oneof![Just(String::new()), ".{0,30}"],
            len in prop_oneof![0u64..2000, any::<u64>()],
            head in any::<bool>(),
        ) {
            let mut headers = format!("Range: {range}\r\n");
            if !if_range.is_empty() && !if_range.contains(['\r', '\n']) {
                headers.push_str(&format!("If-Range: {if_range}\r\n"));
            }
            let raw = format!("{} /files/a HTTP/1.1\r\n{headers}\r\n", if head { "HEAD" } else { "GET" });
            if let Ok(Some(r)) = parse_request(raw.as_bytes()) {
                let f = FileEntity::new("a", len, 1, 2, 3);
                let out = respond(&r, &f);
                prop_assert!(out.range.start <= out.range.end && out.range.end <= len);
                prop_assert!(!out.body || !head);
                if out.status != FileStatus::Ok && out.status != FileStatus::PartialContent {
                    prop_assert!(out.range.is_empty() && !out.body);
                }
            }
        }

        #[test]
        fn paths_never_escape(path in "([a-z.%/\\\\]|%2[eEfF]|%5[cC]|%00){0,40}") {
            if let Ok(p) = relative_path(&path) {
                prop_assert!(!p.starts_with('/'));
                prop_assert!(!p.contains('\\') && !p.contains('\0'));
                prop_assert!(p.split('/').all(|s| s != ".." && s != "."));
                prop_assert!(p.is_empty() || p.split('/').all(|s| !s.is_empty()));
            }
        }

        #[test]
        fn arbitrary_paths_never_panic(path in ".{0,100}") {
            let _ = relative_path(&path);
        }
    }
}
