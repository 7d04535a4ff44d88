//! The server side of one HTTP/1.1 connection, sans-IO, in the shape every Sluice
//! session shares (`sluice_session::Session`): request heads in (any split, pipelined),
//! answers out, a deadline for slow heads, and WebSocket client frames after an
//! upgrade.
//!
//! Why here: the streaming routes keep the socket after the response head (the
//! fan-out writes HTTP-FLV and WebSocket-FLV players) and file bodies go out with
//! `sendfile`, so the server cannot hand HTTP/1.1 to a library that owns the socket.
//! The rules a connection follows (one answer per request, in order; keep-alive or
//! close; what a WebSocket client may send) live here, and the server only routes.
//!
//! # Call contract
//! Feed input with [`ServerSession::handle_input`], drain [`ServerSession::poll_output`]
//! to `None`, and answer each [`HttpEvent::Request`] with exactly one of
//! [`respond`](ServerSession::respond), [`respond_head`](ServerSession::respond_head)
//! (then [`body_sent`](ServerSession::body_sent) once its body, if any, went out),
//! [`stream`](ServerSession::stream) or
//! [`accept_websocket`](ServerSession::accept_websocket); drain again after it.
//!
//! # Invariants
//! - At most one request is handed out at a time; pipelined ones wait, bounded by
//!   [`MAX_BUFFERED`].
//! - A head must be complete within `head_timeout` of its first byte (slowloris);
//!   an idle keep-alive connection waits for it as long.
//! - After the end of a response that closes the connection, the session is closed.

use crate::request::{parse_request, HttpError, Method, Request, MAX_HEAD_LEN};
use crate::ws::{self, Opcode, WsError};
use bytes::{BufMut, Bytes, BytesMut};
use sluice_session::{Event, Input, Output, Session, Transmit};
use std::borrow::Cow;
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use thiserror::Error;

/// Input buffered while a request waits for its answer (pipelined requests): more is
/// a peer making us buffer.
pub const MAX_BUFFERED: usize = 2 * MAX_HEAD_LEN;

/// Why a connection cannot go on. Every variant but `Closed` is the peer's fault.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SessionError {
    /// A bad request head.
    #[error(transparent)]
    Request(#[from] HttpError),
    /// A bad WebSocket frame.
    #[error("websocket: {0}")]
    WebSocket(#[from] WsError),
    /// Pipelined input beyond [`MAX_BUFFERED`].
    #[error("more than {0} bytes sent ahead of their answers")]
    TooMuchAhead(usize),
    /// Input after the session closed.
    #[error("the connection is closed")]
    Closed,
}

/// What the application acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpEvent {
    /// A complete request head; answer it (see the module's call contract).
    Request(Request),
    /// A data message from a WebSocket client (players send none; logged and dropped).
    Message {
        /// Text or binary.
        opcode: Opcode,
        /// The payload.
        payload: Bytes,
    },
}

/// What the session reports: requests and messages as [`Event::Other`]; a closing
/// handshake, a head that timed out, or the end of a closing response as
/// [`Event::Close`].
pub type ServerEvent = Event<(), HttpEvent>;

/// What the session asks of its driver.
pub type ServerOutput = Output<ServerEvent>;

/// What a [`ServerSession`] is configured with.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// How long a request head may take from its first byte, and how long a kept-alive
    /// connection may stay silent between requests.
    pub head_timeout: Duration,
    /// The `Server` header's value.
    pub server: Cow<'static, str>,
    /// Header lines every answer carries (CORS, say), each ending in `\r\n`.
    pub extra_headers: Cow<'static, str>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            head_timeout: Duration::from_secs(30),
            server: Cow::Borrowed("sluice"),
            extra_headers: Cow::Borrowed(""),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for a request head.
    ExpectHead,
    /// A request was handed out; waiting for its answer.
    Answering {
        method: Method,
        keep_alive: bool,
    },
    /// The head of a response went out; the application sends its body.
    SendingBody {
        keep_alive: bool,
    },
    /// A response that lasts until the connection closes; the peer has nothing more to
    /// say and what it sends is dropped.
    Streaming,
    /// Client frames after a 101.
    WebSocket,
    Closed,
}

/// One server-side HTTP/1.1 connection. See the module's call contract.
#[derive(Debug)]
pub struct ServerSession {
    config: ServerConfig,
    state: State,
    input: BytesMut,
    queue: VecDeque<ServerOutput>,
    /// When the head being waited for must be complete.
    deadline: Option<Instant>,
    /// The next answer closes the connection whatever the request asked.
    close_after: bool,
    now: Instant,
}

impl ServerSession {
    /// A connection that just opened at `now`.
    pub fn new(config: ServerConfig, now: Instant) -> Self {
        let deadline = Some(now + config.head_timeout);
        ServerSession {
            config,
            state: State::ExpectHead,
            input: BytesMut::new(),
            queue: VecDeque::new(),
            deadline,
            close_after: false,
            now,
        }
    }

    /// Whether the session is over; what it queued still goes out.
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// Feeds bytes read from the socket at `now`. Any split is fine.
    pub fn handle_input(&mut self, now: Instant, bytes: &[u8]) -> Result<(), SessionError> {
        self.now = now;
        match self.state {
            State::Closed => return Err(SessionError::Closed),
            // Nothing the peer says matters any more; keep no buffer for it.
            State::Streaming => return Ok(()),
            _ => {}
        }
        if self.input.len() + bytes.len() > MAX_BUFFERED {
            self.close();
            return Err(SessionError::TooMuchAhead(MAX_BUFFERED));
        }
        self.input.extend_from_slice(bytes);
        let result = self.process();
        if result.is_err() {
            self.close();
        }
        result
    }

    /// The next output; drain to `None` after every call into the session.
    pub fn poll_output(&mut self) -> Option<ServerOutput> {
        self.queue.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    /// Advances time: a head not complete by its deadline closes the connection.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        if self.deadline.is_some_and(|d| now >= d) {
            self.queue.push_back(Output::Event(Event::Close));
            self.close();
        }
    }

    /// Makes the next answer close the connection (an error the peer cannot recover
    /// from, say), whatever its request asked.
    pub fn close_after_answer(&mut self) {
        self.close_after = true;
    }

    /// Answers the pending request with `status`, `headers` and a body of shared
    /// buffers (left out for HEAD, its length still given). Then the next request, or
    /// the end of the connection.
    pub fn respond(&mut self, status: u16, headers: &[(&str, &str)], body: Vec<Bytes>) {
        let State::Answering { method, keep_alive } = self.state else {
            return;
        };
        let len = body.iter().map(|b| b.len() as u64).sum();
        let keep_alive = keep_alive && !self.close_after;
        self.write_head(status, headers, Some(len), keep_alive);
        if method != Method::Head {
            for b in body.into_iter().filter(|b| !b.is_empty()) {
                self.transmit(b);
            }
        }
        self.answered(keep_alive);
    }

    /// Answers the pending request with a head only: `Content-Length: len` when given
    /// (else the headers carry it, or there is none, as for HEAD of a live stream). The
    /// application then sends the body itself, if any (a file with `sendfile`), and
    /// calls [`body_sent`](Self::body_sent) in every case.
    pub fn respond_head(&mut self, status: u16, headers: &[(&str, &str)], len: Option<u64>) {
        let State::Answering { keep_alive, .. } = self.state else {
            return;
        };
        let keep_alive = keep_alive && !self.close_after;
        self.write_head(status, headers, len, keep_alive);
        self.state = State::SendingBody { keep_alive };
    }

    /// The body announced by [`respond_head`](Self::respond_head) went out.
    pub fn body_sent(&mut self) {
        if let State::SendingBody { keep_alive } = self.state {
            self.answered(keep_alive);
        }
    }

    /// Answers the pending request with a response that lasts until the connection
    /// closes (HTTP-FLV): no length, `Connection: close`.
    pub fn stream(&mut self, status: u16, headers: &[(&str, &str)]) {
        if !matches!(self.state, State::Answering { .. }) {
            return;
        }
        self.write_head(status, headers, None, false);
        self.state = State::Streaming;
        self.deadline = None;
        self.input = BytesMut::new();
    }

    /// Accepts the pending WebSocket upgrade: `101 Switching Protocols`; client
    /// frames follow (pings are answered, a close is answered and ends the session).
    /// A request without `Sec-WebSocket-Key` is answered 400 instead.
    pub fn accept_websocket(&mut self, request: &Request, headers: &[(&str, &str)]) {
        if !matches!(self.state, State::Answering { .. }) {
            return;
        }
        let Some(key) = request.header("sec-websocket-key") else {
            self.close_after = true;
            self.respond(
                400,
                &[("Content-Type", "text/plain")],
                vec![Bytes::from_static(b"no Sec-WebSocket-Key\n")],
            );
            return;
        };
        let accept = ws::accept_key(key);
        let mut all: Vec<(&str, &str)> = vec![
            ("Upgrade", "websocket"),
            ("Connection", "Upgrade"),
            ("Sec-WebSocket-Accept", &accept),
        ];
        all.extend_from_slice(headers);
        let mut head = BytesMut::with_capacity(self.head_len(101, &all));
        self.status_line(&mut head, 101, &all);
        head.put_slice(b"\r\n");
        self.transmit(head.freeze());
        self.state = State::WebSocket;
        self.deadline = None;
        // Frames the client sent right behind its upgrade request.
        if self.process().is_err() {
            self.queue.push_back(Output::Event(Event::Close));
            self.close();
        }
    }

    fn answered(&mut self, keep_alive: bool) {
        self.close_after = false;
        if !keep_alive {
            self.queue.push_back(Output::Event(Event::Close));
            self.close();
            return;
        }
        self.state = State::ExpectHead;
        self.deadline = Some(self.now + self.config.head_timeout);
        // The next request may be buffered already (pipelining); an error in it is
        // the peer's, and final.
        if self.process().is_err() {
            self.queue.push_back(Output::Event(Event::Close));
            self.close();
        }
    }

    fn close(&mut self) {
        self.state = State::Closed;
        self.deadline = None;
        self.input = BytesMut::new();
    }

    fn transmit(&mut self, data: Bytes) {
        self.queue
            .push_back(Output::Transmit(Transmit::stream(data)));
    }

    /// The bytes of a head's status line, `Server`, the extra headers and `headers`,
    /// and of the lines `write_head` adds: what the head is allocated for, once.
    fn head_len(&self, status: u16, headers: &[(&str, &str)]) -> usize {
        let fixed = "HTTP/1.1 000 \r\nServer: \r\n".len()
            + reason(status).len()
            + self.config.server.len()
            + self.config.extra_headers.len();
        let lines: usize = headers.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
        let tail = "Content-Length: 18446744073709551615\r\nConnection: keep-alive\r\n\r\n".len();
        fixed + lines + tail
    }

    /// Written piece by piece: a response's head is built for every answer (an LL-HLS
    /// viewer gets about ten a second), and `format!` cost more than the copies.
    fn status_line(&self, out: &mut BytesMut, status: u16, headers: &[(&str, &str)]) {
        out.put_slice(b"HTTP/1.1 ");
        put_decimal(out, u64::from(status));
        out.put_u8(b' ');
        out.put_slice(reason(status).as_bytes());
        out.put_slice(b"\r\nServer: ");
        out.put_slice(self.config.server.as_bytes());
        out.put_slice(b"\r\n");
        out.put_slice(self.config.extra_headers.as_bytes());
        for (name, value) in headers {
            out.put_slice(name.as_bytes());
            out.put_slice(b": ");
            out.put_slice(value.as_bytes());
            out.put_slice(b"\r\n");
        }
    }

    fn write_head(
        &mut self,
        status: u16,
        headers: &[(&str, &str)],
        len: Option<u64>,
        keep_alive: bool,
    ) {
        let mut head = BytesMut::with_capacity(self.head_len(status, headers));
        self.status_line(&mut head, status, headers);
        if let Some(len) = len {
            head.put_slice(b"Content-Length: ");
            put_decimal(&mut head, len);
            head.put_slice(b"\r\n");
        }
        head.put_slice(if keep_alive {
            b"Connection: keep-alive\r\n\r\n"
        } else {
            b"Connection: close\r\n\r\n"
        });
        self.transmit(head.freeze());
    }

    fn process(&mut self) -> Result<(), SessionError> {
        match self.state {
            State::ExpectHead => {
                if self.input.is_empty() {
                    return Ok(());
                }
                let Some(req) = parse_request(&self.input)? else {
                    return Ok(());
                };
                let _ = self
                    .input
                    .split_to((req.head_len + req.body.len()).min(self.input.len()));
                if self.input.is_empty() {
                    // An idle connection holds no buffer.
                    self.input = BytesMut::new();
                }
                self.state = State::Answering {
                    method: req.method,
                    keep_alive: req.keep_alive(),
                };
                self.deadline = None;
                self.queue
                    .push_back(Output::Event(Event::Other(HttpEvent::Request(req))));
                Ok(())
            }
            State::WebSocket => {
                while let Some(frame) = ws::read_client_frame(&mut self.input)? {
                    match frame.opcode {
                        Opcode::Close => {
                            let mut out = BytesMut::with_capacity(2);
                            ws::write_frame_header(&mut out, Opcode::Close, 0);
                            self.transmit(out.freeze());
                            self.queue.push_back(Output::Event(Event::Close));
                            self.close();
                            return Ok(());
                        }
                        Opcode::Ping => {
                            let mut out = BytesMut::with_capacity(frame.payload.len() + 2);
                            ws::write_frame_header(&mut out, Opcode::Pong, frame.payload.len());
                            out.put_slice(&frame.payload);
                            self.transmit(out.freeze());
                        }
                        Opcode::Pong => {}
                        opcode => {
                            self.queue
                                .push_back(Output::Event(Event::Other(HttpEvent::Message {
                                    opcode,
                                    payload: frame.payload,
                                })))
                        }
                    }
                }
                if self.input.is_empty() {
                    self.input = BytesMut::new();
                }
                Ok(())
            }
            State::Answering { .. } | State::SendingBody { .. } | State::Streaming => Ok(()),
            State::Closed => Err(SessionError::Closed),
        }
    }
}

/// `n` in decimal ASCII, written into `buf` without allocating: the head writers'
/// numbers (status, lengths, max-age).
pub fn decimal(n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut n = n;
    let mut at = buf.len();
    for slot in buf.iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        n /= 10;
        at -= 1;
        if n == 0 {
            break;
        }
    }
    buf.get(at..).unwrap_or_default()
}

/// Writes `n` in decimal.
fn put_decimal(out: &mut BytesMut, n: u64) {
    out.put_slice(decimal(n, &mut [0; 20]));
}

/// The reason phrase of the statuses Sluice answers with.
pub fn reason(status: u16) -> &'static str {
    match status {
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        206 => "Partial Content",
        207 => "Multi-Status",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        507 => "Insufficient Storage",
        _ => "Unknown",
    }
}

/// The shared session shape.
impl Session for ServerSession {
    type Event = ServerEvent;
    type Error = SessionError;

    fn handle_input(&mut self, now: Instant, input: Input<'_>) -> Result<(), SessionError> {
        match input {
            Input::Stream(bytes) => ServerSession::handle_input(self, now, bytes),
            Input::Datagram { .. } => Err(HttpError::Malformed("a datagram").into()),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        ServerSession::handle_timeout(self, now);
    }

    fn poll_output(&mut self) -> Option<ServerOutput> {
        ServerSession::poll_output(self)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        ServerSession::poll_timeout(self)
    }

    fn is_closed(&self) -> bool {
        ServerSession::is_closed(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn session() -> (ServerSession, Instant) {
        let now = Instant::now();
        let config = ServerConfig {
            head_timeout: Duration::from_secs(5),
            extra_headers: "X-Test: 1\r\n".into(),
            ..ServerConfig::default()
        };
        (ServerSession::new(config, now), now)
    }

    #[test]
    fn every_status_the_server_answers_has_its_phrase() {
        // WHIP/WHEP (201, 409, 415, 422), WebDAV (207, 409, 413, 507), the API (201).
        for status in [
            200, 201, 204, 206, 207, 304, 400, 401, 403, 404, 405, 409, 412, 413, 414, 415, 416,
            422, 429, 500, 501, 502, 503, 507,
        ] {
            assert_ne!(reason(status), "Unknown", "{status}");
        }
        assert_eq!(reason(422), "Unprocessable Content");
    }

    /// Drains the session: written bytes, and events.
    fn drain(s: &mut ServerSession) -> (Vec<u8>, Vec<ServerEvent>) {
        let (mut written, mut events) = (Vec::new(), Vec::new());
        while let Some(o) = s.poll_output() {
            match o {
                Output::Transmit(t) => written.extend_from_slice(&t.data),
                Output::Event(e) => events.push(e),
            }
        }
        (written, events)
    }

    fn request(e: &ServerEvent) -> &Request {
        match e {
            Event::Other(HttpEvent::Request(r)) => r,
            other => panic!("not a request: {other:?}"),
        }
    }

    #[test]
    fn heads_are_written_as_format_would_and_within_their_allocation() {
        for (status, len, keep_alive) in [
            (200, Some(0), true),
            (206, Some(51_234), true),
            (404, Some(10), false),
            (101, None, false),
            (599, Some(u64::MAX), true),
        ] {
            let (mut s, _) = session();
            let headers = [("Content-Type", "video/mp4"), ("ETag", "\"1a-2.3\"")];
            s.write_head(status, &headers, len, keep_alive);
            let Some(Output::Transmit(t)) = s.poll_output() else {
                panic!("a head");
            };
            let mut want = format!(
                "HTTP/1.1 {status} {}\r\nServer: sluice\r\nX-Test: 1\r\n",
                reason(status)
            );
            want.push_str("Content-Type: video/mp4\r\nETag: \"1a-2.3\"\r\n");
            if let Some(len) = len {
                want.push_str(&format!("Content-Length: {len}\r\n"));
            }
            let connection = if keep_alive { "keep-alive" } else { "close" };
            want.push_str(&format!("Connection: {connection}\r\n\r\n"));
            assert_eq!(std::str::from_utf8(&t.data).unwrap(), want);
            assert!(t.data.len() <= s.head_len(status, &headers));
        }
    }

    #[test]
    fn pipelined_requests_are_handed_out_one_at_a_time_in_order() {
        let (mut s, now) = session();
        let input = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nHEAD /b HTTP/1.1\r\nHost: x\r\n\r\n";
        s.handle_input(now, input).unwrap();
        let (_, events) = drain(&mut s);
        assert_eq!(events.len(), 1);
        assert_eq!(request(&events[0]).path, "/a");
        s.respond(
            200,
            &[("Content-Type", "text/plain")],
            vec![Bytes::from_static(b"hi")],
        );
        let (written, events) = drain(&mut s);
        let text = String::from_utf8(written).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 200 OK\r\nServer: sluice\r\nX-Test: 1\r\n"),
            "{text}"
        );
        assert!(
            text.contains("Content-Length: 2\r\nConnection: keep-alive\r\n\r\nhi"),
            "{text}"
        );
        assert_eq!(request(&events[0]).path, "/b");
        s.respond(404, &[], vec![Bytes::from_static(b"gone")]);
        let (written, events) = drain(&mut s);
        let text = String::from_utf8(written).unwrap();
        assert!(
            text.ends_with("Content-Length: 4\r\nConnection: keep-alive\r\n\r\n"),
            "HEAD has no body: {text}"
        );
        assert!(events.is_empty());
        assert!(!s.is_closed());
    }

    #[test]
    fn connection_close_ends_the_session_after_the_answer() {
        let (mut s, now) = session();
        s.handle_input(now, b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
            .unwrap();
        drain(&mut s);
        s.respond(200, &[], Vec::new());
        let (written, events) = drain(&mut s);
        assert!(String::from_utf8(written)
            .unwrap()
            .contains("Connection: close\r\n"));
        assert_eq!(events, [Event::Close]);
        assert!(s.is_closed());
        assert_eq!(s.handle_input(now, b"GET"), Err(SessionError::Closed));
    }

    #[test]
    fn a_forced_close_overrides_keep_alive() {
        let (mut s, now) = session();
        s.handle_input(now, b"DELETE / HTTP/1.1\r\n\r\n").unwrap();
        drain(&mut s);
        s.close_after_answer();
        s.respond(405, &[], Vec::new());
        let (written, _) = drain(&mut s);
        assert!(String::from_utf8(written)
            .unwrap()
            .contains("405 Method Not Allowed"));
        assert!(s.is_closed());
    }

    #[test]
    fn a_slow_head_times_out_and_a_kept_alive_connection_waits_as_long() {
        let (mut s, now) = session();
        s.handle_input(now, b"GET / HTTP/1.1\r\nX-Slow: ").unwrap();
        assert_eq!(s.poll_timeout(), Some(now + Duration::from_secs(5)));
        s.handle_timeout(now + Duration::from_secs(4));
        assert!(!s.is_closed());
        s.handle_timeout(now + Duration::from_secs(5));
        assert_eq!(drain(&mut s).1, [Event::Close]);
        assert!(s.is_closed());

        let (mut s, now) = session();
        s.handle_input(now, b"GET / HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(
            s.poll_timeout(),
            None,
            "no deadline while the application answers"
        );
        let later = now + Duration::from_secs(60);
        s.handle_timeout(later);
        s.handle_input(later, b"").unwrap();
        drain(&mut s);
        s.respond(204, &[], Vec::new());
        assert_eq!(s.poll_timeout(), Some(later + Duration::from_secs(5)));
    }

    #[test]
    fn a_body_sent_by_the_application_comes_between_two_answers() {
        let (mut s, now) = session();
        s.handle_input(now, b"GET /f HTTP/1.1\r\n\r\nGET /g HTTP/1.1\r\n\r\n")
            .unwrap();
        drain(&mut s);
        s.respond_head(200, &[("Content-Type", "video/mp4")], Some(1000));
        let (written, events) = drain(&mut s);
        assert!(String::from_utf8(written)
            .unwrap()
            .contains("Content-Length: 1000\r\n"));
        assert!(events.is_empty(), "the next request waits for the body");
        s.body_sent();
        assert_eq!(request(&drain(&mut s).1[0]).path, "/g");
    }

    #[test]
    fn a_stream_closes_with_the_connection_and_ignores_the_peer() {
        let (mut s, now) = session();
        s.handle_input(now, b"GET /live/a.flv HTTP/1.1\r\n\r\n")
            .unwrap();
        drain(&mut s);
        s.stream(200, &[("Content-Type", "video/x-flv")]);
        let (written, _) = drain(&mut s);
        let text = String::from_utf8(written).unwrap();
        assert!(
            !text.contains("Content-Length") && text.contains("Connection: close"),
            "{text}"
        );
        s.handle_input(now, &[0u8; 100_000]).unwrap();
        assert_eq!(s.poll_timeout(), None);
    }

    fn masked(opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mask = [1u8, 2, 3, 4];
        let mut out = vec![0x80 | opcode, 0x80 | payload.len() as u8];
        out.extend_from_slice(&mask);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i & 3]));
        out
    }

    #[test]
    fn websocket_pings_are_answered_and_a_close_ends_the_session() {
        let (mut s, now) = session();
        let mut input = b"GET /live/a.flv HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n".to_vec();
        input.extend(masked(0x9, b"hey"));
        s.handle_input(now, &input).unwrap();
        let (_, events) = drain(&mut s);
        let req = request(&events[0]).clone();
        assert!(req.is_websocket_upgrade());
        s.accept_websocket(&req, &[]);
        let (written, events) = drain(&mut s);
        let text = String::from_utf8_lossy(&written);
        assert!(
            text.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
            "{text}"
        );
        assert!(
            text.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"),
            "{text}"
        );
        assert!(written.ends_with(&[0x8a, 3, b'h', b'e', b'y']), "the pong");
        assert!(events.is_empty());
        s.handle_input(now, &masked(0x1, b"hello")).unwrap();
        assert!(matches!(
            &drain(&mut s).1[..],
            [Event::Other(HttpEvent::Message {
                opcode: Opcode::Text,
                ..
            })]
        ));
        s.handle_input(now, &masked(0x8, b"")).unwrap();
        let (written, events) = drain(&mut s);
        assert_eq!(written, [0x88, 0]);
        assert_eq!(events, [Event::Close]);
        assert!(s.is_closed());
    }

    #[test]
    fn an_upgrade_without_a_key_is_a_bad_request() {
        let (mut s, now) = session();
        s.handle_input(
            now,
            b"GET /a.flv HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        )
        .unwrap();
        let req = request(&drain(&mut s).1[0]).clone();
        s.accept_websocket(&req, &[]);
        assert!(String::from_utf8(drain(&mut s).0)
            .unwrap()
            .starts_with("HTTP/1.1 400 Bad Request"));
        assert!(s.is_closed());
    }

    #[test]
    fn bad_and_oversized_input_is_a_final_error() {
        let (mut s, now) = session();
        assert!(s
            .handle_input(now, b"\x16\x03\x01 not http\r\n\r\n")
            .is_err());
        assert!(s.is_closed());
        let (mut s, now) = session();
        s.handle_input(now, b"GET / HTTP/1.1\r\n\r\n").unwrap();
        let flood = vec![b'a'; MAX_BUFFERED + 1];
        assert_eq!(
            s.handle_input(now, &flood),
            Err(SessionError::TooMuchAhead(MAX_BUFFERED))
        );
    }

    proptest! {
        #[test]
        fn any_split_of_pipelined_requests_gives_the_same_answers(cuts in proptest::collection::vec(0usize..120, 0..6)) {
            let input = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b?q=1 HTTP/1.1\r\n\r\nGET /c HTTP/1.0\r\n\r\n";
            let (mut s, now) = session();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % input.len()).collect();
            cuts.sort_unstable();
            let mut paths = Vec::new();
            let mut at = 0;
            for cut in cuts.into_iter().chain([input.len()]) {
                s.handle_input(now, &input[at..cut.max(at)]).unwrap();
                at = cut.max(at);
                loop {
                    let (_, events) = drain(&mut s);
                    let Some(Event::Other(HttpEvent::Request(r))) = events.first() else { break };
                    paths.push(r.path.clone());
                    s.respond(200, &[], Vec::new());
                }
            }
            prop_assert_eq!(paths, ["/a", "/b", "/c"]);
            prop_assert!(s.is_closed(), "HTTP/1.0 without keep-alive closes");
        }

        #[test]
        fn arbitrary_bytes_never_panic(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8)) {
            let (mut s, now) = session();
            for c in &chunks {
                if s.handle_input(now, c).is_err() {
                    break;
                }
                while let Some(o) = s.poll_output() {
                    if let Output::Event(Event::Other(HttpEvent::Request(r))) = o {
                        if r.is_websocket_upgrade() {
                            s.accept_websocket(&r, &[]);
                        } else {
                            s.respond(200, &[], vec![Bytes::from_static(b"x")]);
                        }
                    }
                }
            }
        }
    }
}
