//! RTSP 1.0 messages on the wire: requests, responses and interleaved binary frames.
//!
//! Why: one TCP stream carries both text requests and, once a client has set up
//! `RTP/AVP/TCP` tracks, binary `$` frames (RFC 2326 §10.12): a `$` byte, a channel
//! byte, a 16-bit big-endian length and the RTP/RTCP packet. [`MessageReader`] takes
//! whichever comes next from the front of a [`BytesMut`]; it knows nothing of sessions.
//!
//! # Invariants
//! - Everything the peer controls is bounded: a head is at most [`MAX_HEAD_LEN`] bytes
//!   and [`MAX_HEADERS`] header lines, a body at most the reader's `max_body`
//!   (default [`DEFAULT_MAX_BODY_LEN`]), an interleaved frame at most 65,535 bytes by
//!   construction.
//! - `Ok(None)` means "need more bytes" and consumes nothing (except CR/LF padding
//!   between messages). A complete message is split off the buffer, so the body and
//!   frame payloads are `Bytes` views of the received bytes, not copies.
//! - Header names are matched ignoring ASCII case and kept as sent, in order.
//! - Parsing never panics: no indexing or arithmetic on peer data without a check.

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::RtspError;

/// Largest request or response head accepted. ffmpeg and VLC send a few hundred bytes;
/// 16 KiB leaves room for long URLs with tokens and Digest headers, and no more is
/// buffered before we give up on a peer that never ends its head.
pub const MAX_HEAD_LEN: usize = 16 << 10;

/// Most header lines in one message. Real clients send under 15.
pub const MAX_HEADERS: usize = 64;

/// Default largest body (`Content-Length`). Bodies are SDP (ANNOUNCE, DESCRIBE answers)
/// or GET/SET_PARAMETER text: a few KiB; 64 KiB is ample even with large
/// `sprop-parameter-sets`.
pub const DEFAULT_MAX_BODY_LEN: usize = 64 << 10;

/// The first byte of an interleaved binary frame.
pub const INTERLEAVED_MAGIC: u8 = b'$';

/// An RTSP method. Methods are case-sensitive (RFC 2326 §6.1); anything else is kept as
/// [`Method::Other`] so that the session can answer 501 Not Implemented.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Method {
    /// OPTIONS.
    Options,
    /// DESCRIBE.
    Describe,
    /// ANNOUNCE.
    Announce,
    /// SETUP.
    Setup,
    /// PLAY.
    Play,
    /// RECORD.
    Record,
    /// PAUSE.
    Pause,
    /// TEARDOWN.
    Teardown,
    /// GET_PARAMETER.
    GetParameter,
    /// SET_PARAMETER.
    SetParameter,
    /// Any other token (REDIRECT, extension methods).
    Other(String),
}

impl Method {
    /// Every method the server implements, in the order of a `Public:` header.
    pub const SUPPORTED: [Method; 10] = [
        Method::Options,
        Method::Describe,
        Method::Announce,
        Method::Setup,
        Method::Play,
        Method::Record,
        Method::Pause,
        Method::Teardown,
        Method::GetParameter,
        Method::SetParameter,
    ];

    /// The method named by `token` (case-sensitive).
    pub fn from_token(token: &str) -> Method {
        match token {
            "OPTIONS" => Method::Options,
            "DESCRIBE" => Method::Describe,
            "ANNOUNCE" => Method::Announce,
            "SETUP" => Method::Setup,
            "PLAY" => Method::Play,
            "RECORD" => Method::Record,
            "PAUSE" => Method::Pause,
            "TEARDOWN" => Method::Teardown,
            "GET_PARAMETER" => Method::GetParameter,
            "SET_PARAMETER" => Method::SetParameter,
            other => Method::Other(other.to_string()),
        }
    }

    /// The method's token.
    pub fn as_str(&self) -> &str {
        match self {
            Method::Options => "OPTIONS",
            Method::Describe => "DESCRIBE",
            Method::Announce => "ANNOUNCE",
            Method::Setup => "SETUP",
            Method::Play => "PLAY",
            Method::Record => "RECORD",
            Method::Pause => "PAUSE",
            Method::Teardown => "TEARDOWN",
            Method::GetParameter => "GET_PARAMETER",
            Method::SetParameter => "SET_PARAMETER",
            Method::Other(s) => s,
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A protocol version, `RTSP/major.minor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    /// Major version.
    pub major: u8,
    /// Minor version.
    pub minor: u8,
}

impl Version {
    /// RTSP/1.0, the only version this crate speaks.
    pub const RTSP_1_0: Version = Version { major: 1, minor: 0 };

    fn parse(s: &str) -> Result<Version, RtspError> {
        let bad = RtspError::Malformed {
            what: "protocol version",
        };
        let rest = s.strip_prefix("RTSP/").ok_or(bad.clone())?;
        let (major, minor) = rest.split_once('.').ok_or(bad.clone())?;
        let digit = |p: &str| -> Result<u8, RtspError> {
            if p.len() == 1 && p.as_bytes().iter().all(u8::is_ascii_digit) {
                p.parse().map_err(|_| bad.clone())
            } else {
                Err(bad.clone())
            }
        };
        Ok(Version {
            major: digit(major)?,
            minor: digit(minor)?,
        })
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RTSP/{}.{}", self.major, self.minor)
    }
}

/// Header lines in order, names as sent; lookups ignore ASCII case.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers(Vec<(String, String)>);

impl Headers {
    /// No headers.
    pub fn new() -> Self {
        Headers(Vec::new())
    }

    /// The first value of `name`, ignoring case.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `name`, in order.
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Appends a header line (a name may repeat).
    pub fn append(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.0.push((name.into(), value.into()));
    }

    /// Replaces every `name` line with one line at the end.
    pub fn set(&mut self, name: &str, value: impl Into<String>) {
        self.0.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.0.push((name.to_string(), value.into()));
    }

    /// Whether a `name` line exists.
    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Lines in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// Number of lines.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no lines.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The `CSeq` value: `None` if absent, `Some(Err)` if not a number.
    pub fn cseq(&self) -> Option<Result<u32, RtspError>> {
        self.get("CSeq").map(|v| {
            parse_decimal(v).ok_or(RtspError::Malformed {
                what: "CSeq header",
            })
        })
    }

    fn encode(&self, out: &mut BytesMut) {
        for (name, value) in &self.0 {
            out.put_slice(name.as_bytes());
            out.put_slice(b": ");
            put_sanitized(out, value);
            out.put_slice(b"\r\n");
        }
    }
}

/// Writes a header value with CR and LF turned into spaces, so that no value (some
/// echo what a peer sent) can inject a header line.
fn put_sanitized(out: &mut BytesMut, value: &str) {
    if value.bytes().any(|b| b == b'\r' || b == b'\n') {
        for b in value.bytes() {
            out.put_u8(if b == b'\r' || b == b'\n' { b' ' } else { b });
        }
    } else {
        out.put_slice(value.as_bytes());
    }
}

/// A parsed RTSP request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The method.
    pub method: Method,
    /// The Request-URI as sent (`rtsp://host:8554/live/cam1`, or `*`).
    pub uri: String,
    /// The version from the request line.
    pub version: Version,
    /// Header lines (including `Content-Length`, if sent).
    pub headers: Headers,
    /// The body, empty without `Content-Length`.
    pub body: Bytes,
}

impl Request {
    /// A request with no headers or body.
    pub fn new(method: Method, uri: impl Into<String>) -> Self {
        Request {
            method,
            uri: uri.into(),
            version: Version::RTSP_1_0,
            headers: Headers::new(),
            body: Bytes::new(),
        }
    }

    /// Adds a header line (builder style).
    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.append(name, value);
        self
    }

    /// Sets the body (builder style); [`encode`](Self::encode) adds `Content-Length`.
    pub fn with_body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// The first header `name`, ignoring case.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)
    }

    /// Serializes the request. A `Content-Length` line is added when there is a body
    /// and the headers carry none.
    pub fn encode(&self, out: &mut BytesMut) {
        out.put_slice(self.method.as_str().as_bytes());
        out.put_u8(b' ');
        out.put_slice(self.uri.as_bytes());
        out.put_u8(b' ');
        out.put_slice(self.version.to_string().as_bytes());
        out.put_slice(b"\r\n");
        encode_tail(&self.headers, &self.body, out);
    }
}

fn encode_tail(headers: &Headers, body: &Bytes, out: &mut BytesMut) {
    headers.encode(out);
    if !body.is_empty() && !headers.contains("Content-Length") {
        out.put_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    out.put_slice(b"\r\n");
    out.put_slice(body);
}

/// An RTSP response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The version from the status line.
    pub version: Version,
    /// The status code.
    pub status: u16,
    /// The reason phrase.
    pub reason: String,
    /// Header lines.
    pub headers: Headers,
    /// The body.
    pub body: Bytes,
}

impl Response {
    /// A response with the standard reason phrase for `status`.
    pub fn new(status: u16) -> Self {
        Response {
            version: Version::RTSP_1_0,
            status,
            reason: reason_phrase(status).to_string(),
            headers: Headers::new(),
            body: Bytes::new(),
        }
    }

    /// Adds a header line (builder style).
    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.append(name, value);
        self
    }

    /// The first header `name`, ignoring case.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)
    }

    /// Serializes the response; `Content-Length` is added as for requests.
    pub fn encode(&self, out: &mut BytesMut) {
        out.put_slice(
            format!("{} {:03} {}\r\n", self.version, self.status, self.reason).as_bytes(),
        );
        encode_tail(&self.headers, &self.body, out);
    }
}

/// The reason phrase of an RTSP 1.0 status code (RFC 2326 §7.1.1).
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        301 => "Moved Permanently",
        302 => "Moved Temporarily",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        413 => "Request Entity Too Large",
        414 => "Request-URI Too Large",
        415 => "Unsupported Media Type",
        451 => "Parameter Not Understood",
        453 => "Not Enough Bandwidth",
        454 => "Session Not Found",
        455 => "Method Not Valid in This State",
        456 => "Header Field Not Valid for Resource",
        457 => "Invalid Range",
        459 => "Aggregate Operation Not Allowed",
        460 => "Only Aggregate Operation Allowed",
        461 => "Unsupported Transport",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "RTSP Version Not Supported",
        551 => "Option not supported",
        _ => "Unknown",
    }
}

/// What comes next on a server's TCP stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    /// A complete request, body included.
    Request(Request),
    /// An interleaved binary frame (RTP or RTCP over TCP).
    Interleaved {
        /// The channel byte.
        channel: u8,
        /// The packet.
        payload: Bytes,
    },
}

/// What comes next on a client's TCP stream: the server's answers, the requests a
/// server may send its client (keep-alives, `REDIRECT`), and interleaved frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromServer {
    /// A complete response, body included.
    Response(Response),
    /// A complete request from the server, body included.
    Request(Request),
    /// An interleaved binary frame (RTP or RTCP over TCP).
    Interleaved {
        /// The channel byte.
        channel: u8,
        /// The packet.
        payload: Bytes,
    },
}

/// The 4-byte header of an interleaved frame carrying `len` bytes on `channel`: kept as
/// its own small buffer so that a shared RTP packet is written without a copy.
pub fn interleaved_header(channel: u8, len: u16) -> [u8; 4] {
    let [hi, lo] = len.to_be_bytes();
    [INTERLEAVED_MAGIC, channel, hi, lo]
}

/// Writes a whole interleaved frame. Payloads over 65,535 bytes cannot be framed.
pub fn encode_interleaved(
    channel: u8,
    payload: &[u8],
    out: &mut BytesMut,
) -> Result<(), RtspError> {
    let len = u16::try_from(payload.len()).map_err(|_| RtspError::TooLarge {
        what: "interleaved payload",
        len: payload.len(),
        limit: usize::from(u16::MAX),
    })?;
    out.put_slice(&interleaved_header(channel, len));
    out.put_slice(payload);
    Ok(())
}

/// Incremental reader of requests and interleaved frames (server side) or responses
/// (client side, for tests and relays). Holds only a scan position and its limit.
#[derive(Debug, Clone)]
pub struct MessageReader {
    max_body: usize,
    /// Bytes at the front of the buffer already searched for the end of the head.
    scanned: usize,
}

impl Default for MessageReader {
    fn default() -> Self {
        MessageReader::new(DEFAULT_MAX_BODY_LEN)
    }
}

/// A head found at the start of a buffer: its text and length with the blank line.
struct Head<'a> {
    lines: Vec<&'a str>,
    len: usize,
}

impl MessageReader {
    /// A reader that accepts bodies of up to `max_body` bytes.
    pub fn new(max_body: usize) -> Self {
        MessageReader {
            max_body,
            scanned: 0,
        }
    }

    /// The largest body accepted.
    pub fn max_body(&self) -> usize {
        self.max_body
    }

    /// Takes the next request or interleaved frame from the front of `buf`.
    ///
    /// `Ok(None)`: more bytes are needed. An error is final for the stream: framing is
    /// lost (not RTSP, a head over [`MAX_HEAD_LEN`], a body over the limit).
    pub fn read(&mut self, buf: &mut BytesMut) -> Result<Option<Incoming>, RtspError> {
        skip_line_padding(buf, &mut self.scanned);
        let Some(&first) = buf.first() else {
            return Ok(None);
        };
        if first == INTERLEAVED_MAGIC {
            return Ok(self
                .take_interleaved(buf)
                .map(|(channel, payload)| Incoming::Interleaved { channel, payload }));
        }
        let Some(head) = self.find_head(buf)? else {
            return Ok(None);
        };
        let (request_line, header_lines) =
            head.lines.split_first().ok_or(RtspError::Malformed {
                what: "request line",
            })?;
        let (method, uri, version) = parse_request_line(request_line)?;
        let headers = parse_headers(header_lines)?;
        let head_len = head.len;
        let Some(body) = self.take_body(buf, head_len, &headers)? else {
            return Ok(None);
        };
        Ok(Some(Incoming::Request(Request {
            method,
            uri,
            version,
            headers,
            body,
        })))
    }

    /// Takes the next response, server request or interleaved frame from the front of
    /// `buf`: what a client reads. A message whose first line starts with `RTSP/` is a
    /// response, anything else must be a request.
    ///
    /// `Ok(None)`: more bytes are needed. An error is final for the stream.
    pub fn read_from_server(
        &mut self,
        buf: &mut BytesMut,
    ) -> Result<Option<FromServer>, RtspError> {
        skip_line_padding(buf, &mut self.scanned);
        let Some(&first) = buf.first() else {
            return Ok(None);
        };
        if first == INTERLEAVED_MAGIC {
            return Ok(self
                .take_interleaved(buf)
                .map(|(channel, payload)| FromServer::Interleaved { channel, payload }));
        }
        let Some(head) = self.find_head(buf)? else {
            return Ok(None);
        };
        let (first_line, header_lines) = head
            .lines
            .split_first()
            .ok_or(RtspError::Malformed { what: "start line" })?;
        let start = if first_line.starts_with("RTSP/") {
            StartLine::Status(parse_status_line(first_line)?)
        } else {
            StartLine::Request(parse_request_line(first_line)?)
        };
        let headers = parse_headers(header_lines)?;
        let head_len = head.len;
        let Some(body) = self.take_body(buf, head_len, &headers)? else {
            return Ok(None);
        };
        Ok(Some(match start {
            StartLine::Status((version, status, reason)) => FromServer::Response(Response {
                version,
                status,
                reason,
                headers,
                body,
            }),
            StartLine::Request((method, uri, version)) => FromServer::Request(Request {
                method,
                uri,
                version,
                headers,
                body,
            }),
        }))
    }

    /// Splits a whole interleaved frame (starting with `$`) off `buf`; `None` until
    /// all of it is there.
    fn take_interleaved(&mut self, buf: &mut BytesMut) -> Option<(u8, Bytes)> {
        let &[_, channel, hi, lo] = buf.get(..4)? else {
            return None;
        };
        let len = usize::from(u16::from_be_bytes([hi, lo]));
        if buf.len() < 4 + len {
            return None;
        }
        let mut frame = buf.split_to(4 + len);
        self.scanned = 0;
        Some((channel, frame.split_off(4).freeze()))
    }

    /// Takes the next response from the front of `buf` (the client side). Interleaved
    /// frames are not expected here and are refused as malformed.
    pub fn read_response(&mut self, buf: &mut BytesMut) -> Result<Option<Response>, RtspError> {
        skip_line_padding(buf, &mut self.scanned);
        if buf.is_empty() {
            return Ok(None);
        }
        let Some(head) = self.find_head(buf)? else {
            return Ok(None);
        };
        let (status_line, header_lines) = head.lines.split_first().ok_or(RtspError::Malformed {
            what: "status line",
        })?;
        let (version, status, reason) = parse_status_line(status_line)?;
        let headers = parse_headers(header_lines)?;
        let head_len = head.len;
        let Some(body) = self.take_body(buf, head_len, &headers)? else {
            return Ok(None);
        };
        Ok(Some(Response {
            version,
            status,
            reason,
            headers,
            body,
        }))
    }

    /// Finds the blank line ending the head at the front of `buf`, resuming the search
    /// where the last call stopped.
    fn find_head<'a>(&mut self, buf: &'a BytesMut) -> Result<Option<Head<'a>>, RtspError> {
        let limit = buf.len().min(MAX_HEAD_LEN);
        let start = self.scanned.saturating_sub(2).min(limit);
        let mut end = None;
        for i in start..limit {
            if buf.get(i) != Some(&b'\n') {
                continue;
            }
            match (buf.get(i + 1), buf.get(i + 2)) {
                (Some(b'\n'), _) => end = Some(i + 2),
                (Some(b'\r'), Some(b'\n')) => end = Some(i + 3),
                _ => {}
            }
            if end.is_some() {
                break;
            }
        }
        let Some(len) = end.filter(|&len| len <= MAX_HEAD_LEN) else {
            if buf.len() >= MAX_HEAD_LEN {
                return Err(RtspError::TooLarge {
                    what: "message head",
                    len: buf.len(),
                    limit: MAX_HEAD_LEN,
                });
            }
            self.scanned = limit;
            return Ok(None);
        };
        let raw = buf.get(..len).ok_or(RtspError::Malformed {
            what: "message head",
        })?;
        let text = std::str::from_utf8(raw).map_err(|_| RtspError::Malformed {
            what: "message head (not UTF-8)",
        })?;
        let mut lines: Vec<&str> = text
            .split('\n')
            .map(|l| l.strip_suffix('\r').unwrap_or(l))
            .collect();
        // The head ends with an empty line; `split` leaves two empty pieces behind.
        while lines.last().is_some_and(|l| l.is_empty()) {
            lines.pop();
        }
        if lines.len() > MAX_HEADERS + 1 {
            return Err(RtspError::TooLarge {
                what: "header lines",
                len: lines.len() - 1,
                limit: MAX_HEADERS,
            });
        }
        Ok(Some(Head { lines, len }))
    }

    /// Splits head and body off `buf` once the whole body is there.
    fn take_body(
        &mut self,
        buf: &mut BytesMut,
        head_len: usize,
        headers: &Headers,
    ) -> Result<Option<Bytes>, RtspError> {
        let mut body_len = None;
        for v in headers.get_all("Content-Length") {
            let n = parse_decimal(v).ok_or(RtspError::Malformed {
                what: "Content-Length header",
            })?;
            // Two different lengths would let two parsers frame the stream differently.
            if body_len.is_some_and(|m| m != n) {
                return Err(RtspError::Malformed {
                    what: "conflicting Content-Length headers",
                });
            }
            body_len = Some(n);
        }
        let body_len = body_len.unwrap_or(0);
        // A u32 always fits usize on the targets we build for.
        let body_len = usize::try_from(body_len).unwrap_or(usize::MAX);
        if body_len > self.max_body {
            return Err(RtspError::TooLarge {
                what: "body",
                len: body_len,
                limit: self.max_body,
            });
        }
        let total = head_len.checked_add(body_len).ok_or(RtspError::TooLarge {
            what: "body",
            len: body_len,
            limit: self.max_body,
        })?;
        if buf.len() < total {
            // Keep `scanned` so the head is found again without a rescan of its bytes.
            return Ok(None);
        }
        let mut message = buf.split_to(total);
        self.scanned = 0;
        Ok(Some(message.split_off(head_len).freeze()))
    }
}

/// The parsed first line of a message a client reads.
enum StartLine {
    Status((Version, u16, String)),
    Request((Method, String, Version)),
}

/// Drops CR/LF between messages (some clients end a body with an extra CRLF).
fn skip_line_padding(buf: &mut BytesMut, scanned: &mut usize) {
    let n = buf
        .iter()
        .take_while(|&&b| b == b'\r' || b == b'\n')
        .count();
    if n > 0 {
        let _ = buf.split_to(n);
        *scanned = scanned.saturating_sub(n);
    }
}

/// A decimal `u32` with nothing but optional surrounding spaces.
pub(crate) fn parse_decimal(s: &str) -> Option<u32> {
    let s = s.trim();
    if s.is_empty() || s.len() > 10 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Whether `s` is an RFC 2616 token (method names, header names).
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().all(|b| {
            b.is_ascii_graphic()
                && !matches!(
                    b,
                    b'(' | b')'
                        | b'<'
                        | b'>'
                        | b'@'
                        | b','
                        | b';'
                        | b':'
                        | b'\\'
                        | b'"'
                        | b'/'
                        | b'['
                        | b']'
                        | b'?'
                        | b'='
                        | b'{'
                        | b'}'
                )
        })
}

fn parse_request_line(line: &str) -> Result<(Method, String, Version), RtspError> {
    let bad = RtspError::Malformed {
        what: "request line",
    };
    let mut parts = line.split(' ');
    let (Some(method), Some(uri), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad);
    };
    if !is_token(method) || uri.is_empty() || uri.bytes().any(|b| b.is_ascii_control()) {
        return Err(bad);
    }
    Ok((
        Method::from_token(method),
        uri.to_string(),
        Version::parse(version)?,
    ))
}

fn parse_status_line(line: &str) -> Result<(Version, u16, String), RtspError> {
    let bad = RtspError::Malformed {
        what: "status line",
    };
    let mut parts = line.splitn(3, ' ');
    let (Some(version), Some(code)) = (parts.next(), parts.next()) else {
        return Err(bad);
    };
    let reason = parts.next().unwrap_or("");
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad);
    }
    let status = code.parse().map_err(|_| bad.clone())?;
    Ok((Version::parse(version)?, status, reason.to_string()))
}

fn parse_headers(lines: &[&str]) -> Result<Headers, RtspError> {
    let mut headers: Vec<(String, String)> = Vec::with_capacity(lines.len());
    for line in lines {
        if line.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(RtspError::Malformed {
                what: "control character in a header line",
            });
        }
        if line.starts_with([' ', '\t']) {
            // Folded continuation (RFC 2326 §4.2 via RFC 2616 LWS).
            let (_, value) = headers.last_mut().ok_or(RtspError::Malformed {
                what: "header continuation before any header",
            })?;
            let more = line.trim();
            if !value.is_empty() && !more.is_empty() {
                value.push(' ');
            }
            value.push_str(more);
            continue;
        }
        let (name, value) = line.split_once(':').ok_or(RtspError::Malformed {
            what: "header line",
        })?;
        if !is_token(name) {
            return Err(RtspError::Malformed {
                what: "header name",
            });
        }
        headers.push((name.to_string(), value.trim().to_string()));
    }
    Ok(Headers(headers))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(bytes: &[u8]) -> Result<Vec<Incoming>, RtspError> {
        let mut reader = MessageReader::default();
        let mut buf = BytesMut::from(bytes);
        let mut out = vec![];
        while let Some(m) = reader.read(&mut buf)? {
            out.push(m);
        }
        Ok(out)
    }

    #[test]
    fn parses_options() {
        let msgs = read_all(
            b"OPTIONS rtsp://127.0.0.1:8554/live/cam1 RTSP/1.0\r\ncseq: 1\r\nUser-Agent: Lavf61.7.100\r\n\r\n",
        )
        .expect("valid");
        let [Incoming::Request(req)] = msgs.as_slice() else {
            panic!("one request: {msgs:?}")
        };
        assert_eq!(req.method, Method::Options);
        assert_eq!(req.uri, "rtsp://127.0.0.1:8554/live/cam1");
        assert_eq!(req.headers.cseq(), Some(Ok(1)));
        assert_eq!(req.header("USER-AGENT"), Some("Lavf61.7.100"));
    }

    #[test]
    fn partial_input_waits_and_body_is_split_off() {
        let raw = b"ANNOUNCE rtsp://h/a RTSP/1.0\r\nCSeq: 2\r\nContent-Length: 5\r\n\r\nv=0\r\n$\x01\x00\x02ab";
        let mut reader = MessageReader::default();
        let mut buf = BytesMut::new();
        let mut got = vec![];
        for b in raw {
            buf.put_u8(*b);
            while let Some(m) = reader.read(&mut buf).expect("valid") {
                got.push(m);
            }
        }
        assert_eq!(got.len(), 2);
        let Incoming::Request(req) = &got[0] else {
            panic!()
        };
        assert_eq!(&req.body[..], b"v=0\r\n");
        assert_eq!(
            got[1],
            Incoming::Interleaved {
                channel: 1,
                payload: Bytes::from_static(b"ab")
            }
        );
    }

    #[test]
    fn bare_lf_and_folded_headers() {
        let msgs = read_all(b"PLAY * RTSP/1.0\nCSeq: 3\nX-Long: a\n  b\n \t\n\n").expect("valid");
        let [Incoming::Request(req)] = msgs.as_slice() else {
            panic!()
        };
        assert_eq!(req.header("x-long"), Some("a b"));
    }

    #[test]
    fn unknown_method_parses() {
        let msgs = read_all(b"FLY rtsp://h/a RTSP/1.0\r\nCSeq: 1\r\n\r\n").expect("valid");
        let [Incoming::Request(req)] = msgs.as_slice() else {
            panic!()
        };
        assert_eq!(req.method, Method::Other("FLY".into()));
    }

    #[test]
    fn limits() {
        let mut huge = b"OPTIONS * RTSP/1.0\r\nX: ".to_vec();
        huge.resize(MAX_HEAD_LEN + 1, b'a');
        assert!(matches!(read_all(&huge), Err(RtspError::TooLarge { .. })));

        let mut many = b"OPTIONS * RTSP/1.0\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            many.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert!(matches!(read_all(&many), Err(RtspError::TooLarge { .. })));

        let big_body = b"ANNOUNCE * RTSP/1.0\r\nCSeq: 1\r\nContent-Length: 99999999\r\n\r\n";
        assert!(matches!(
            read_all(big_body),
            Err(RtspError::TooLarge { .. })
        ));
        let huge_len = b"ANNOUNCE * RTSP/1.0\r\nContent-Length: 99999999999999999999\r\n\r\n";
        assert!(matches!(
            read_all(huge_len),
            Err(RtspError::Malformed { .. })
        ));
        let neg_len = b"ANNOUNCE * RTSP/1.0\r\nContent-Length: -1\r\n\r\n";
        assert!(matches!(
            read_all(neg_len),
            Err(RtspError::Malformed { .. })
        ));
    }

    #[test]
    fn garbage_is_malformed() {
        for bad in [
            &b"\x00\x01\x02\x03\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\n\r\n",
            b"RTSP/1.0 200 OK\r\nCSeq: 1\r\n\r\n",
            b"PLAY\r\n\r\n",
            b"PLAY  * RTSP/1.0\r\n\r\n",
            b"PLAY * RTSP/1.0\r\nno colon\r\n\r\n",
            b"PLAY * RTSP/1.0\r\n folded first\r\n\r\n",
            b"PLAY * RTSP/1.0\r\nX: \xff\r\n\r\n",
            b"PLAY * RTSP/1.0\r\nX: a\rb\r\n\r\n",
            b"PLAY * RTSP/1.0\r\nX: a\r\n b\rc\r\n\r\n",
            b"PLAY * RTSP/1.0\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        ] {
            assert!(
                matches!(read_all(bad), Err(RtspError::Malformed { .. })),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn response_round_trip() {
        let resp = Response::new(461)
            .with_header("CSeq", "4")
            .with_header("Server", "Sluice");
        let mut buf = BytesMut::new();
        resp.encode(&mut buf);
        assert!(buf.starts_with(b"RTSP/1.0 461 Unsupported Transport\r\n"));
        let back = MessageReader::default()
            .read_response(&mut buf)
            .expect("valid")
            .expect("complete");
        assert_eq!(back, resp);
        assert!(buf.is_empty());
    }

    #[test]
    fn header_values_cannot_inject_lines() {
        let resp = Response::new(200).with_header("Content-Base", "a\r\nX-Evil: 1");
        let mut buf = BytesMut::new();
        resp.encode(&mut buf);
        let back = MessageReader::default()
            .read_response(&mut buf)
            .expect("valid")
            .expect("complete");
        assert_eq!(back.headers.len(), 1);
    }

    #[test]
    fn a_client_reads_responses_requests_and_frames() {
        let raw = b"RTSP/1.0 200 OK\r\nCSeq: 1\r\nContent-Length: 2\r\n\r\nab\r\n$\x02\x00\x01zGET_PARAMETER * RTSP/1.0\r\nCSeq: 5\r\n\r\n";
        let mut reader = MessageReader::default();
        let mut buf = BytesMut::new();
        let mut got = vec![];
        for b in raw {
            buf.put_u8(*b);
            while let Some(m) = reader.read_from_server(&mut buf).expect("valid") {
                got.push(m);
            }
        }
        assert!(buf.is_empty());
        let [FromServer::Response(r), FromServer::Interleaved {
            channel: 2,
            payload,
        }, FromServer::Request(q)] = got.as_slice()
        else {
            panic!("{got:?}")
        };
        assert_eq!((r.status, &r.body[..]), (200, &b"ab"[..]));
        assert_eq!(&payload[..], b"z");
        assert_eq!(
            (q.method.clone(), q.headers.cseq()),
            (Method::GetParameter, Some(Ok(5)))
        );
        for bad in [
            &b"RTSP/1.0 2000 OK\r\n\r\n"[..],
            b"RTSP/2 200 OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n\r\n",
        ] {
            let mut buf = BytesMut::from(bad);
            assert!(
                matches!(
                    reader.read_from_server(&mut buf),
                    Err(RtspError::Malformed { .. })
                ),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn interleaved_encoding() {
        let mut out = BytesMut::new();
        encode_interleaved(3, b"rtcp", &mut out).expect("fits");
        assert_eq!(&out[..], b"$\x03\x00\x04rtcp");
        assert!(encode_interleaved(0, &vec![0; 70_000], &mut out).is_err());
    }
}
