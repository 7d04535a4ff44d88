//! A client byte stream against a [`ServerSession`], no sockets: what a test writes is
//! what ffmpeg would write; what comes back is parsed as the client would.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use bytes::BytesMut;
use sluice_rtsp::{
    MessageReader, Response, RtspError, ServerConfig, ServerEvent, ServerOutput, ServerSession,
};

pub const SEED: [u8; 32] = [7; 32];

pub struct Pair {
    pub server: ServerSession,
    pub now: Instant,
    from_server: BytesMut,
    reader: MessageReader,
    pub responses: Vec<Response>,
    pub events: Vec<ServerEvent>,
}

impl Pair {
    pub fn new(config: ServerConfig) -> Self {
        let now = Instant::now();
        Pair {
            server: ServerSession::new(config, SEED, now),
            now,
            from_server: BytesMut::new(),
            reader: MessageReader::default(),
            responses: vec![],
            events: vec![],
        }
    }

    /// Feeds client bytes and drains the server.
    pub fn send(&mut self, bytes: &[u8]) -> Result<(), RtspError> {
        let r = self.server.handle_input(self.now, bytes);
        self.drain();
        r
    }

    /// Feeds a request written with `\n` line ends, sent as `\r\n` like ffmpeg does.
    pub fn send_text(&mut self, text: &str) -> Result<(), RtspError> {
        let wire = text.replace('\n', "\r\n");
        self.send(wire.as_bytes())
    }

    /// Collects what the server wrote and raised.
    pub fn drain(&mut self) {
        while let Some(out) = self.server.poll_output() {
            match out {
                ServerOutput::Write(b) => self.from_server.extend_from_slice(&b),
                ServerOutput::Event(e) => self.events.push(e),
            }
        }
        while let Some(r) = self
            .reader
            .read_response(&mut self.from_server)
            .expect("server writes valid responses")
        {
            self.responses.push(r);
        }
        assert!(
            self.from_server.is_empty(),
            "a partial response was written"
        );
    }

    pub fn advance(&mut self, d: Duration) {
        self.now += d;
        self.server.handle_timeout(self.now);
        self.drain();
    }

    /// The one response since the last call.
    pub fn response(&mut self) -> Response {
        assert_eq!(self.responses.len(), 1, "responses: {:?}", self.responses);
        self.responses.remove(0)
    }

    /// The one event since the last call.
    pub fn event(&mut self) -> ServerEvent {
        assert_eq!(self.events.len(), 1, "events: {:?}", self.events);
        self.events.remove(0)
    }

    pub fn no_response(&self) {
        assert!(self.responses.is_empty(), "responses: {:?}", self.responses);
    }
}
