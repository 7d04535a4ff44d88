//! Playing an HTTP(S)-FLV stream, sans-IO: one `GET`, the response head, then the
//! body (`Content-Length`, chunked, or up to the close) read as FLV tags.
//!
//! Why: an edge pulls a stream from an HTTP-FLV origin as from an RTMP one, in the
//! server's one connection driver; this is the session the driver runs for it, in the
//! shape every Sluice session shares.
//!
//! # Time
//! Given the time ([`FlvClient::with_timeouts`]), the session bounds its waits: the
//! response head must come within the start timeout, and the body may go silent no
//! longer than the silence timeout. A time that runs out is [`FlvEvent::TimedOut`]
//! and closes the session.
//!
//! # Invariants
//! - What the origin can make us hold is bounded: the head (by
//!   [`read_response_head`]), and the body by the tag reader's limits.

use crate::response::{read_response_head, BodyFraming, ChunkedDecoder, ResponseError};
use bytes::{Bytes, BytesMut};
use sluice_media::flv::{FlvError, Tag, TagReader};
use sluice_session::{Input, Output, Session, Transmit};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// What a [`FlvClient`] reports.
#[derive(Debug, Clone, PartialEq)]
pub enum FlvEvent {
    /// The origin answered 200: tags follow.
    Playing,
    /// One FLV tag of the body.
    Tag(Tag),
    /// A time ran out (`true`: waiting for the response head): the session is closed.
    TimedOut {
        /// The response head had not come yet.
        start: bool,
    },
}

/// Why an HTTP-FLV stream cannot be read on.
#[derive(Debug, thiserror::Error)]
pub enum FlvClientError {
    /// The response head is not HTTP, or its body cannot be delimited.
    #[error(transparent)]
    Response(#[from] ResponseError),
    /// An answer other than 200.
    #[error("answered {0}")]
    Status(u16),
    /// The body is not FLV.
    #[error(transparent)]
    Flv(#[from] FlvError),
    /// The body ended: the origin ended the stream.
    #[error("the body ended")]
    Ended,
    /// A datagram, on a stream transport.
    #[error("a datagram on an HTTP connection")]
    Datagram,
}

/// How the body is delimited.
#[derive(Debug)]
enum Body {
    /// Up to the close.
    Close,
    /// This many bytes still to come.
    Left(u64),
    Chunked(ChunkedDecoder),
}

/// One HTTP-FLV play, sans-IO (see the module's docs).
#[derive(Debug)]
pub struct FlvClient {
    /// Bytes received and not yet taken.
    input: BytesMut,
    /// `None` until the response head.
    body: Option<Body>,
    /// Body bytes not yet read into tags.
    flv: BytesMut,
    tags: TagReader,
    out: VecDeque<Output<FlvEvent>>,
    bytes_received: u64,
    timeouts: Option<(Duration, Duration)>,
    started_at: Option<Instant>,
    last_input: Option<Instant>,
    closed: bool,
}

impl FlvClient {
    /// A `GET` of `path` at `authority` (the `Host`), as `user_agent`: the first output.
    pub fn new(path: &str, authority: &str, user_agent: &str) -> FlvClient {
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: {user_agent}\r\n\
             Accept: */*\r\nConnection: close\r\n\r\n"
        );
        FlvClient {
            input: BytesMut::new(),
            body: None,
            flv: BytesMut::new(),
            tags: TagReader::new(),
            out: VecDeque::from([Output::Transmit(Transmit::stream(Bytes::from(request)))]),
            bytes_received: 0,
            timeouts: None,
            started_at: None,
            last_input: None,
            closed: false,
        }
    }

    /// Bounds the wait for the response head by `start` and the body's silences by
    /// `silence`, counted from `now`.
    pub fn with_timeouts(mut self, now: Instant, start: Duration, silence: Duration) -> Self {
        self.timeouts = Some((start, silence));
        self.started_at = Some(now);
        self.last_input = Some(now);
        self
    }

    /// Total bytes received.
    pub fn bytes_received(&self) -> u64 {
        self.bytes_received
    }

    fn deadline(&self) -> Option<(Instant, bool)> {
        let (start, silence) = self.timeouts.filter(|_| !self.closed)?;
        match self.body {
            None => Some((self.started_at? + start, true)),
            Some(_) => Some((self.last_input? + silence, false)),
        }
    }

    /// Reads the head, then what the body holds of whole tags.
    fn process(&mut self) -> Result<(), FlvClientError> {
        if self.body.is_none() {
            let Some(head) = read_response_head(&mut self.input)? else {
                return Ok(());
            };
            if head.status != 200 {
                return Err(FlvClientError::Status(head.status));
            }
            self.body = Some(match head.framing {
                BodyFraming::Chunked => Body::Chunked(ChunkedDecoder::new()),
                BodyFraming::Length(n) => Body::Left(n),
                BodyFraming::Close => Body::Close,
            });
            self.out.push_back(Output::Event(FlvEvent::Playing));
        }
        let mut ended = false;
        match &mut self.body {
            Some(Body::Chunked(d)) => {
                d.decode(&mut self.input, &mut self.flv)?;
                ended = d.done();
            }
            Some(Body::Left(left)) => {
                let n = usize::try_from(*left)
                    .unwrap_or(usize::MAX)
                    .min(self.input.len());
                self.flv.extend_from_slice(&self.input.split_to(n));
                *left -= n as u64;
                ended = *left == 0;
            }
            Some(Body::Close) => self.flv.extend_from_slice(&self.input.split()),
            None => {}
        }
        while let Some(tag) = self.tags.read(&mut self.flv)? {
            self.out.push_back(Output::Event(FlvEvent::Tag(tag)));
        }
        if ended {
            return Err(FlvClientError::Ended);
        }
        Ok(())
    }
}

impl Session for FlvClient {
    type Event = FlvEvent;
    type Error = FlvClientError;

    fn handle_input(&mut self, now: Instant, input: Input<'_>) -> Result<(), FlvClientError> {
        let Input::Stream(bytes) = input else {
            return Err(FlvClientError::Datagram);
        };
        self.bytes_received += bytes.len() as u64;
        if self.timeouts.is_some() {
            self.last_input = Some(now);
        }
        self.input.extend_from_slice(bytes);
        self.process()
    }

    fn handle_timeout(&mut self, now: Instant) {
        if let Some((_, start)) = self.deadline().filter(|(at, _)| now >= *at) {
            self.closed = true;
            self.out
                .push_back(Output::Event(FlvEvent::TimedOut { start }));
        }
    }

    fn poll_output(&mut self) -> Option<Output<FlvEvent>> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.deadline().map(|(at, _)| at)
    }

    fn is_closed(&self) -> bool {
        self.closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(c: &mut FlvClient) -> Vec<FlvEvent> {
        std::iter::from_fn(|| c.poll_output())
            .filter_map(|o| match o {
                Output::Event(e) => Some(e),
                Output::Transmit(_) => None,
            })
            .collect()
    }

    /// An FLV header and one video tag at `ts` with `body`.
    fn flv(ts: u32, body: &[u8]) -> Vec<u8> {
        let mut v = b"FLV\x01\x05\x00\x00\x00\x09\x00\x00\x00\x00".to_vec();
        let len = body.len() as u32;
        v.push(9);
        v.extend_from_slice(&len.to_be_bytes()[1..]);
        v.extend_from_slice(&ts.to_be_bytes()[1..]);
        v.push((ts >> 24) as u8);
        v.extend_from_slice(&[0, 0, 0]);
        v.extend_from_slice(body);
        v.extend_from_slice(&(len + 11).to_be_bytes());
        v
    }

    #[test]
    fn a_get_then_tags_of_a_chunked_body_cut_anywhere() {
        let t0 = Instant::now();
        let mut c = FlvClient::new("/live/cam.flv", "o:8080", "t");
        let Some(Output::Transmit(t)) = c.poll_output() else {
            panic!("the request first")
        };
        assert!(t
            .data
            .starts_with(b"GET /live/cam.flv HTTP/1.1\r\nHost: o:8080\r\n"));
        let body = flv(40, &[0x17, 1, 2]);
        let mut wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        wire.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
        wire.extend_from_slice(&body);
        wire.extend_from_slice(b"\r\n");
        let mut got = Vec::new();
        for byte in &wire {
            c.handle_input(t0, Input::Stream(std::slice::from_ref(byte)))
                .unwrap();
            got.extend(events(&mut c));
        }
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0], FlvEvent::Playing);
        let FlvEvent::Tag(tag) = &got[1] else {
            panic!("{got:?}")
        };
        assert_eq!((tag.tag_type, tag.timestamp_ms), (9, 40));
        assert_eq!(&tag.body[..], &[0x17, 1, 2]);
        assert!(matches!(
            c.handle_input(t0, Input::Stream(b"0\r\n\r\n")),
            Err(FlvClientError::Ended)
        ));
    }

    #[test]
    fn a_refusal_and_a_silent_origin_end_it() {
        let t0 = Instant::now();
        let mut c = FlvClient::new("/a.flv", "o", "t");
        let refused = c.handle_input(t0, Input::Stream(b"HTTP/1.1 404 Not Found\r\n\r\n"));
        assert!(matches!(refused, Err(FlvClientError::Status(404))));
        let second = Duration::from_secs(1);
        let mut c = FlvClient::new("/a.flv", "o", "t").with_timeouts(t0, 5 * second, 10 * second);
        assert_eq!(c.poll_timeout(), Some(t0 + 5 * second));
        let head = b"HTTP/1.1 200 OK\r\n\r\n";
        c.handle_input(t0 + second, Input::Stream(head)).unwrap();
        assert_eq!(c.poll_timeout(), Some(t0 + 11 * second));
        c.handle_timeout(t0 + 11 * second);
        assert!(c.is_closed());
        assert_eq!(
            events(&mut c),
            vec![FlvEvent::Playing, FlvEvent::TimedOut { start: false }]
        );
    }
}
