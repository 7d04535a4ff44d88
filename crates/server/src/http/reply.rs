//! A complete answer to an HTTP request, the same for HTTP/1.1 and HTTP/2: what every
//! route but the streaming ones (HTTP-FLV, file bodies) returns to the router, which
//! hands it to the connection's serializer (`mod.rs` for HTTP/1.1, `h2.rs`).

use crate::io::memfile::MemFile;
use bytes::Bytes;
use std::sync::Arc;

/// A complete answer: status, headers and a body of shared buffers.
#[derive(Debug)]
pub(crate) struct Reply {
    pub status: u16,
    /// Header lines without the ones every response gets (Server, CORS, length).
    pub headers: Vec<(&'static str, String)>,
    /// The body, as shared buffers.
    pub body: Vec<Bytes>,
    /// The same body as an in-memory file, for `sendfile` on plain HTTP.
    pub file: Option<Arc<MemFile>>,
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
