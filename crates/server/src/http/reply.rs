//! A complete answer to an HTTP request, the same for HTTP/1.1 and HTTP/2: what every
//! route but the streaming ones (HTTP-FLV, file bodies) returns to the router, which
//! hands it to the connection's serializer (`mod.rs` for HTTP/1.1, `h2.rs`).

use crate::io::memfile::MemFile;
use bytes::Bytes;
use std::ops::Range;
use std::sync::Arc;

/// A complete answer: status, headers and a body of shared buffers.
#[derive(Debug)]
pub(crate) struct Reply {
    pub status: u16,
    /// Header lines without the ones every response gets (Server, CORS, length).
    pub headers: Vec<(&'static str, String)>,
    /// The body, as shared buffers.
    pub body: Vec<Bytes>,
    /// The same body as a range of an in-memory file, for `sendfile` on plain HTTP.
    pub file: Option<(Arc<MemFile>, Range<u64>)>,
}

impl Reply {
    /// An answer of `status` with `headers` and `body`.
    pub(crate) fn new(
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: Vec<Bytes>,
    ) -> Reply {
        Reply {
            status,
            headers,
            body,
            file: None,
        }
    }

    /// A plain-text answer.
    pub(crate) fn text(status: u16, body: &'static str) -> Reply {
        Reply::new(
            status,
            vec![("Content-Type", "text/plain".into())],
            vec![Bytes::from_static(body.as_bytes())],
        )
    }

    /// An answer without a body.
    pub(crate) fn empty(status: u16) -> Reply {
        Reply::new(status, Vec::new(), Vec::new())
    }
}

/// A reply's header lines as the HTTP/1.1 session takes them.
pub(crate) fn header_refs<'a>(
    headers: &'a [(&'static str, String)],
) -> Vec<(&'static str, &'a str)> {
    headers.iter().map(|(n, v)| (*n, v.as_str())).collect()
}

/// The bytes `range` of `body` (shared buffers, sliced, not copied).
pub(crate) fn slice(body: &[Bytes], range: Range<u64>) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut at = 0u64;
    for piece in body {
        let end = at + piece.len() as u64;
        let (from, to) = (range.start.max(at), range.end.min(end));
        if from < to {
            out.push(piece.slice((from - at) as usize..(to - at) as usize));
        }
        at = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_across_pieces() {
        let body = [
            Bytes::from_static(b"abc"),
            Bytes::from_static(b""),
            Bytes::from_static(b"defg"),
        ];
        let joined = |v: Vec<Bytes>| v.concat();
        assert_eq!(joined(slice(&body, 0..7)), b"abcdefg");
        assert_eq!(joined(slice(&body, 2..5)), b"cde");
        assert_eq!(joined(slice(&body, 3..4)), b"d");
        assert_eq!(joined(slice(&body, 6..7)), b"g");
        assert!(slice(&body, 7..7).is_empty());
    }
}
