//! The client's side of one HTTP/1.1 response, for pulls (an edge reading HTTP-FLV
//! from an origin): the head, then the body's framing (`Content-Length`, chunked, or
//! until the connection closes), sans-IO.
//!
//! Why not hyper's client: the body is a stream that lasts as long as the live
//! stream, read into the caller's buffer and handed on as it comes; this is a head
//! parser and a chunk decoder, both bounded, and nothing else.

use bytes::{Buf, BytesMut};

/// Largest response head accepted.
pub const MAX_RESPONSE_HEAD: usize = 16 << 10;
/// Largest chunk-size line (hex digits and extensions) accepted.
const MAX_CHUNK_LINE: usize = 1024;

/// Why a response could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResponseError {
    /// Not an HTTP/1.x response, or a body framing that cannot be read.
    #[error("malformed response: {0}")]
    Malformed(&'static str),
    /// The head is longer than [`MAX_RESPONSE_HEAD`].
    #[error("response head over {MAX_RESPONSE_HEAD} bytes")]
    TooLarge,
}

/// How the body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the server closes the connection.
    Close,
}

/// A response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// The status code.
    pub status: u16,
    /// How the body that follows is delimited.
    pub framing: BodyFraming,
    /// The `Content-Type`, if any.
    pub content_type: Option<String>,
}

/// Reads a response head from the front of `buf`, consuming it; `Ok(None)` (and
/// nothing consumed) when more bytes are needed.
pub fn read_response_head(buf: &mut BytesMut) -> Result<Option<ResponseHead>, ResponseError> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut headers);
    let len = match response.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_RESPONSE_HEAD => {
            return Err(ResponseError::TooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(ResponseError::TooLarge),
        Err(_) => return Err(ResponseError::Malformed("not an HTTP/1.x response head")),
    };
    if len > MAX_RESPONSE_HEAD {
        return Err(ResponseError::TooLarge);
    }
    let status = response.code.ok_or(ResponseError::Malformed("no status"))?;
    let (mut length, mut chunked, mut content_type) = (None, false, None);
    for h in response.headers.iter() {
        let value = std::str::from_utf8(h.value)
            .map_err(|_| ResponseError::Malformed("a header is not UTF-8"))?
            .trim();
        if h.name.eq_ignore_ascii_case("content-length") {
            let n: u64 = Some(value)
                .filter(|v| v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse().ok())
                .ok_or(ResponseError::Malformed("bad Content-Length"))?;
            if length.is_some_and(|l| l != n) {
                return Err(ResponseError::Malformed("two Content-Lengths"));
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            // Only chunked is read: a body also compressed would be read as garbage.
            if !value.eq_ignore_ascii_case("chunked") {
                return Err(ResponseError::Malformed(
                    "a transfer coding other than chunked",
                ));
            }
            chunked = true;
        } else if h.name.eq_ignore_ascii_case("content-type") {
            content_type = Some(value.to_string());
        }
    }
    let framing = match (chunked, length) {
        (true, _) => BodyFraming::Chunked,
        (false, Some(n)) => BodyFraming::Length(n),
        (false, None) => BodyFraming::Close,
    };
    buf.advance(len);
    Ok(Some(ResponseHead {
        status,
        framing,
        content_type,
    }))
}

/// Where a chunked body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Expecting a chunk-size line.
    Size,
    /// Inside a chunk, with this many bytes left.
    Data(u64),
    /// Expecting the CRLF after a chunk's data.
    DataEnd,
    /// After the last chunk: trailer lines until an empty one.
    Trailer,
    Done,
}

/// Decodes a chunked body as it arrives.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: Chunk,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedDecoder {
    /// A decoder at the start of a body.
    pub fn new() -> Self {
        ChunkedDecoder { state: Chunk::Size }
    }

    /// Whether the last chunk and the trailer have been read.
    pub fn done(&self) -> bool {
        self.state == Chunk::Done
    }

    /// Moves the body's data from the front of `input` to the end of `out`, consuming
    /// framing as it goes; what is left in `input` is an incomplete line (at most
    /// `MAX_CHUNK_LINE` bytes) or nothing.
    pub fn decode(
        &mut self,
        input: &mut BytesMut,
        out: &mut BytesMut,
    ) -> Result<(), ResponseError> {
        loop {
            match self.state {
                Chunk::Size => {
                    let Some(line) = take_line(input)? else {
                        return Ok(());
                    };
                    let digits = line[..].split(|&b| b == b';').next().unwrap_or_default();
                    let digits = std::str::from_utf8(digits)
                        .map_err(|_| ResponseError::Malformed("bad chunk size"))?
                        .trim();
                    let size = Some(digits)
                        .filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()))
                        .and_then(|d| u64::from_str_radix(d, 16).ok())
                        .ok_or(ResponseError::Malformed("bad chunk size"))?;
                    self.state = if size == 0 {
                        Chunk::Trailer
                    } else {
                        Chunk::Data(size)
                    };
                }
                Chunk::Data(left) => {
                    if input.is_empty() {
                        return Ok(());
                    }
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(input.len());
                    out.extend_from_slice(&input.split_to(n));
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        Chunk::DataEnd
                    } else {
                        Chunk::Data(left)
                    };
                }
                Chunk::DataEnd => {
                    let Some(line) = take_line(input)? else {
                        return Ok(());
                    };
                    if !line.is_empty() {
                        return Err(ResponseError::Malformed("chunk data longer than its size"));
                    }
                    self.state = Chunk::Size;
                }
                Chunk::Trailer => {
                    let Some(line) = take_line(input)? else {
                        return Ok(());
                    };
                    if line.is_empty() {
                        self.state = Chunk::Done;
                    }
                }
                Chunk::Done => return Ok(()),
            }
        }
    }
}

/// A CRLF-terminated line from the front of `input`, without its CRLF; `None` until
/// one is complete.
fn take_line(input: &mut BytesMut) -> Result<Option<BytesMut>, ResponseError> {
    match input.windows(2).position(|w| w == b"\r\n") {
        Some(at) if at > MAX_CHUNK_LINE => Err(ResponseError::Malformed("chunk line too long")),
        Some(at) => {
            let line = input.split_to(at);
            input.advance(2);
            Ok(Some(line))
        }
        None if input.len() > MAX_CHUNK_LINE => {
            Err(ResponseError::Malformed("chunk line too long"))
        }
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_and_their_framing() {
        let mut b = BytesMut::from(
            &b"HTTP/1.1 200 OK\r\nContent-Type: video/x-flv\r\nTransfer-Encoding: chunked\r\n\r\nrest"[..],
        );
        let h = read_response_head(&mut b).unwrap().unwrap();
        assert_eq!(h.status, 200);
        assert_eq!(h.framing, BodyFraming::Chunked);
        assert_eq!(h.content_type.as_deref(), Some("video/x-flv"));
        assert_eq!(&b[..], b"rest");
        let mut b = BytesMut::from(&b"HTTP/1.0 404 Not Found\r\nContent-Length: 3\r\n\r\n"[..]);
        let h = read_response_head(&mut b).unwrap().unwrap();
        assert_eq!((h.status, h.framing), (404, BodyFraming::Length(3)));
        let mut b = BytesMut::from(&b"HTTP/1.1 200 OK\r\n\r\n"[..]);
        assert_eq!(
            read_response_head(&mut b).unwrap().unwrap().framing,
            BodyFraming::Close
        );
        let mut partial = BytesMut::from(&b"HTTP/1.1 200 OK\r\nX: y"[..]);
        assert_eq!(read_response_head(&mut partial), Ok(None));
        assert_eq!(partial.len(), b"HTTP/1.1 200 OK\r\nX: y".len());
        for bad in [
            &b"GET / HTTP/1.1\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n",
        ] {
            assert!(read_response_head(&mut BytesMut::from(bad)).is_err());
        }
        let mut huge = BytesMut::from(&b"HTTP/1.1 200 OK\r\n"[..]);
        huge.extend_from_slice(&vec![b'a'; MAX_RESPONSE_HEAD + 1]);
        assert_eq!(read_response_head(&mut huge), Err(ResponseError::TooLarge));
    }

    #[test]
    fn chunks_decode_in_any_split() {
        let body = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: x\r\n\r\n";
        for split in 1..body.len() {
            let mut d = ChunkedDecoder::new();
            let (mut input, mut out) = (BytesMut::new(), BytesMut::new());
            for piece in body.chunks(split) {
                input.extend_from_slice(piece);
                d.decode(&mut input, &mut out).unwrap();
            }
            assert_eq!(&out[..], b"hello world", "split {split}");
            assert!(d.done());
            assert!(input.is_empty());
        }
    }

    #[test]
    fn bad_chunks_are_errors() {
        for bad in [
            &b"zz\r\n"[..],
            b"2\r\nabc\r\n",
            b"ffffffffffffffffff\r\n",
            b"+5\r\n",
        ] {
            let mut d = ChunkedDecoder::new();
            let mut out = BytesMut::new();
            assert!(
                d.decode(&mut BytesMut::from(bad), &mut out).is_err(),
                "{bad:?}"
            );
        }
        let mut d = ChunkedDecoder::new();
        let mut long = BytesMut::from(&vec![b'1'; MAX_CHUNK_LINE + 2][..]);
        assert!(d.decode(&mut long, &mut BytesMut::new()).is_err());
    }
}
