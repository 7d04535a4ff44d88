//! Request heads: parsed once, bounded, with the few headers Sluice routes on.

use thiserror::Error;

/// Largest request head accepted. Players send a few hundred bytes; 16 KiB leaves room
/// for long cookies and tokens while a peer cannot make us buffer more.
pub const MAX_HEAD_LEN: usize = 16 << 10;

/// Largest request body accepted (API commands, WebDAV PROPFIND bodies): a server of
/// media takes no uploads.
pub const MAX_BODY: usize = 16 << 10;

/// Most header lines accepted in one request.
pub const MAX_HEADERS: usize = 64;

/// Why a request head was refused. Every variant is the peer's fault.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum HttpError {
    /// The head is not HTTP/1.x.
    #[error("malformed request head: {0}")]
    Malformed(&'static str),
    /// The head is longer than [`MAX_HEAD_LEN`] or has more than [`MAX_HEADERS`] lines.
    #[error("request head exceeds {limit} {what}")]
    TooLarge {
        /// Bytes or header lines.
        what: &'static str,
        /// The limit that was passed.
        limit: usize,
    },
}

/// Request methods Sluice distinguishes; the rest are answered 405.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// GET.
    Get,
    /// HEAD.
    Head,
    /// OPTIONS (CORS preflight).
    Options,
    /// POST.
    Post,
    /// DELETE.
    Delete,
    /// PATCH (a WHEP or WHIP session's ICE restart).
    Patch,
    /// PROPFIND (WebDAV listings).
    Propfind,
    /// Anything else.
    Other,
}

/// A parsed request head. Header names are kept as sent; lookups ignore case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The method.
    pub method: Method,
    /// The path, percent-encoding untouched, without the query.
    pub path: String,
    /// The query string without `?`, empty if none.
    pub query: String,
    /// `true` for HTTP/1.1 (keep-alive by default), `false` for HTTP/1.0.
    pub http11: bool,
    /// Header lines in order.
    pub headers: Vec<(String, String)>,
    /// Length of the head in bytes, including the blank line.
    pub head_len: usize,
    /// The body (`Content-Length` bytes after the head; at most [`MAX_BODY`]).
    pub body: bytes::Bytes,
}

impl Request {
    /// The first header of this name, ignoring case.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether a comma-separated header (`Connection`, `Upgrade`) lists `token`.
    pub fn header_has_token(&self, name: &str, token: &str) -> bool {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .flat_map(|(_, v)| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }

    /// Whether the connection stays open after the response.
    pub fn keep_alive(&self) -> bool {
        if self.header_has_token("connection", "close") {
            return false;
        }
        self.http11 || self.header_has_token("connection", "keep-alive")
    }

    /// Whether this is a WebSocket upgrade request.
    pub fn is_websocket_upgrade(&self) -> bool {
        self.method == Method::Get
            && self.header_has_token("connection", "upgrade")
            && self.header_has_token("upgrade", "websocket")
    }
}

/// Parses a request head from the start of `buf`.
///
/// Returns `Ok(None)` when more bytes are needed, and an error once the head would
/// exceed [`MAX_HEAD_LEN`]. A request body, if any, starts at `head_len`.
pub fn parse_request(buf: &[u8]) -> Result<Option<Request>, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() >= MAX_HEAD_LEN {
                return Err(HttpError::TooLarge {
                    what: "bytes",
                    limit: MAX_HEAD_LEN,
                });
            }
            return Ok(None);
        }
        Err(httparse::Error::TooManyHeaders) => {
            return Err(HttpError::TooLarge {
                what: "header lines",
                limit: MAX_HEADERS,
            })
        }
        Err(_) => return Err(HttpError::Malformed("not an HTTP/1.x request")),
    };
    if head_len > MAX_HEAD_LEN {
        return Err(HttpError::TooLarge {
            what: "bytes",
            limit: MAX_HEAD_LEN,
        });
    }
    let method = match req.method {
        Some("GET") => Method::Get,
        Some("HEAD") => Method::Head,
        Some("OPTIONS") => Method::Options,
        Some("POST") => Method::Post,
        Some("DELETE") => Method::Delete,
        Some("PATCH") => Method::Patch,
        Some("PROPFIND") => Method::Propfind,
        Some(_) => Method::Other,
        None => return Err(HttpError::Malformed("no method")),
    };
    let target = req.path.ok_or(HttpError::Malformed("no request target"))?;
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, q),
        None => (target, ""),
    };
    if !path.starts_with('/') {
        return Err(HttpError::Malformed(
            "request target is not an absolute path",
        ));
    }
    let headers = req
        .headers
        .iter()
        .map(|h| {
            let value = std::str::from_utf8(h.value)
                .map_err(|_| HttpError::Malformed("header value is not UTF-8"))?;
            Ok((h.name.to_string(), value.trim().to_string()))
        })
        .collect::<Result<Vec<_>, HttpError>>()?;
    let body_len = body_len(&headers)?;
    let Some(body) = buf.get(head_len..head_len + body_len) else {
        return Ok(None);
    };
    Ok(Some(Request {
        method,
        path: path.to_string(),
        query: query.to_string(),
        http11: req.version == Some(1),
        headers,
        head_len,
        body: bytes::Bytes::copy_from_slice(body),
    }))
}

/// The length of a request's body: its `Content-Length` (every copy the same), at most
/// [`MAX_BODY`]; a chunked (or otherwise transfer-coded) request body is refused.
fn body_len(headers: &[(String, String)]) -> Result<usize, HttpError> {
    if headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("transfer-encoding"))
    {
        return Err(HttpError::Malformed(
            "a request body with Transfer-Encoding",
        ));
    }
    let mut len = None;
    for (_, v) in headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("content-length"))
    {
        if v.is_empty() || v.len() > 19 || !v.bytes().all(|b| b.is_ascii_digit()) {
            return Err(HttpError::Malformed("bad Content-Length"));
        }
        let n: u64 = v
            .parse()
            .map_err(|_| HttpError::Malformed("bad Content-Length"))?;
        if len.is_some_and(|l| l != n) {
            return Err(HttpError::Malformed("conflicting Content-Length"));
        }
        len = Some(n);
    }
    match len {
        Some(n) if n > MAX_BODY as u64 => Err(HttpError::TooLarge {
            what: "body bytes",
            limit: MAX_BODY,
        }),
        Some(n) => Ok(n as usize),
        None => Ok(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_body_is_taken_whole_and_bounded() {
        let raw = b"POST /api/v1/reload HTTP/1.1\r\nContent-Length: 5\r\n\r\nhel";
        assert_eq!(parse_request(raw), Ok(None), "waits for the whole body");
        let raw = b"POST /x HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET";
        let req = parse_request(raw).unwrap().unwrap();
        assert_eq!(&req.body[..], b"hello");
        let big = format!(
            "POST /x HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
            MAX_BODY + 1
        );
        assert!(matches!(
            parse_request(big.as_bytes()),
            Err(HttpError::TooLarge { .. })
        ));
        for bad in [
            "POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            "POST /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        ] {
            assert!(
                matches!(parse_request(bad.as_bytes()), Err(HttpError::Malformed(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn parses_a_player_request() {
        let raw = b"GET /live/cam1.flv?token=abc HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, keep-alive\r\nUpgrade: websocket\r\n\r\nrest";
        let req = parse_request(raw).expect("valid").expect("complete");
        assert_eq!(req.method, Method::Get);
        assert_eq!(req.path, "/live/cam1.flv");
        assert_eq!(req.query, "token=abc");
        assert_eq!(req.header("HOST"), Some("x"));
        assert!(req.is_websocket_upgrade());
        assert!(req.keep_alive());
        assert_eq!(&raw[req.head_len..], b"rest");
    }

    #[test]
    fn partial_head_needs_more() {
        assert_eq!(parse_request(b"GET / HTTP/1.1\r\nHost:"), Ok(None));
    }

    #[test]
    fn endless_head_is_refused() {
        let mut raw = b"GET / HTTP/1.1\r\nX: ".to_vec();
        raw.resize(MAX_HEAD_LEN + 10, b'a');
        assert!(matches!(
            parse_request(&raw),
            Err(HttpError::TooLarge { .. })
        ));
    }

    #[test]
    fn too_many_headers_is_refused() {
        let mut raw = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..(MAX_HEADERS + 1) {
            raw.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
        }
        raw.extend_from_slice(b"\r\n");
        assert!(matches!(
            parse_request(&raw),
            Err(HttpError::TooLarge { .. })
        ));
    }

    #[test]
    fn http10_closes_by_default() {
        let req = parse_request(b"GET /a HTTP/1.0\r\n\r\n").unwrap().unwrap();
        assert!(!req.keep_alive());
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = parse_request(&bytes);
        }
    }
}
