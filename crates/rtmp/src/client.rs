//! The client side of one RTMP connection: publish or play, sans-IO.
//!
//! Why: Sluice's tests and its load generator (`sluice-bench`) need a client that
//! behaves like ffmpeg/OBS on the wire (header compression, `releaseStream`/`FCPublish`,
//! `@setDataFrame`) and copes with servers that send one large chunk size and type-0
//! headers on every message, as Sluice itself does.
//!
//! # Call contract
//! As [`crate::ServerSession`]: feed socket bytes to [`ClientSession::handle_input`],
//! drain [`ClientSession::poll_output`] to `None` after every call. `publish`/`play`
//! may be called at once: they are carried out when the handshake and `connect` are done.
//! Media sent before [`ClientEvent::PublishStarted`] is held (in the caller's memory,
//! unbounded by design: the caller decides what to send) and written, in order, as
//! soon as the server accepts the publish; a server would refuse it earlier.
//!
//! # Time
//! Given the time ([`ClientSession::with_timeouts`]), the session bounds its own wait:
//! the handshake, `connect` and the play or publish must be done within
//! [`ClientTimeouts::start`], and a player must hear from the server at least every
//! [`ClientTimeouts::silence`]. Its driver learns when through
//! `sluice_session::Session::poll_timeout`; a time that runs out is reported as
//! [`ClientEvent::TimedOut`] and closes the session. Without it (the default) the
//! session keeps no time, as the bench's clients want.
//!
//! # Invariants
//! - One media stream at a time; its id is the one `createStream` returned.
//! - Everything the server can make us hold is bounded by the chunk reader's limits.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use sluice_media::amf0::{self, Amf0Value};

use crate::chunk::{
    msg_type, ChunkReader, RawMessage, DEFAULT_CHUNK_SIZE, DEFAULT_MAX_MESSAGE_LEN, MAX_CHUNK_SIZE,
};
use crate::command::{self, Command, Request};
use crate::error::RtmpError;
use crate::handshake::{ClientHandshake, DigestScheme, RANDOM_LEN};
use crate::message::{split_aggregate, Message, UserControl};
use crate::session::{
    split_query, Outgoing, TimestampUnwrap, CSID_COMMAND, CSID_CONTROL, CSID_STREAM,
};
use sluice_session::{Input, Output, Session, Transmit};

/// Chunk stream of the client's audio.
const CLIENT_CSID_AUDIO: u32 = 4;
/// Chunk stream of the client's video.
const CLIENT_CSID_VIDEO: u32 = 6;

/// What a [`ClientSession`] is configured with.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The application to connect to (may carry `?query`).
    pub app: String,
    /// The `tcUrl` sent in `connect`, e.g. `rtmp://127.0.0.1/live`.
    pub tc_url: String,
    /// Our outgoing chunk size, announced with Set Chunk Size after the handshake.
    pub chunk_size: u32,
    /// Use the digest ("complex") handshake, as Flash Player does.
    pub digest_handshake: bool,
}

/// How long a session given the time waits (see the module's "Time").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientTimeouts {
    /// From the session's start to the server's `NetStream.Play.Start` or
    /// `NetStream.Publish.Start`.
    pub start: Duration,
    /// The longest a player goes without input from the server.
    pub silence: Duration,
}

/// What a session was waiting for when its time ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// The handshake, `connect`, and the server's answer to the play or publish.
    Start,
    /// Anything from the server while playing (media, a ping).
    Input,
}

/// What the client asks of its driver.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientOutput {
    /// Bytes to write to the socket, in order.
    Write(Bytes),
    /// Something that happened.
    Event(ClientEvent),
}

/// Something that happened on a client connection.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientEvent {
    /// `connect` succeeded.
    Connected,
    /// The server answered `NetStream.Publish.Start`: media may be sent.
    PublishStarted,
    /// The server answered `NetStream.Play.Start`: media follows.
    PlayStarted,
    /// Any `onStatus` (including the ones that caused the events above).
    Status {
        /// `status`, `warning` or `error`.
        level: String,
        /// E.g. `NetStream.Play.UnpublishNotify`.
        code: String,
        /// Free text.
        description: String,
    },
    /// Audio received while playing.
    Audio {
        /// Milliseconds, unwrapped past 2^32.
        timestamp_ms: i64,
        /// The FLV audio tag body.
        payload: Bytes,
    },
    /// Video received while playing.
    Video {
        /// Milliseconds, unwrapped past 2^32.
        timestamp_ms: i64,
        /// The FLV video tag body.
        payload: Bytes,
    },
    /// `onMetaData` received: AMF0 `"onMetaData"` plus its object.
    Metadata {
        /// The AMF0 body.
        payload: Bytes,
    },
    /// The server refused `connect`, `createStream`, `publish` or `play`.
    Rejected {
        /// The status code, e.g. `NetStream.Publish.BadName`.
        code: String,
        /// Free text.
        description: String,
    },
    /// A time of [`ClientTimeouts`] ran out: the session is closed.
    TimedOut(Waited),
}

#[derive(Debug, Clone)]
enum Goal {
    Publish(String),
    Play(String),
}

#[derive(Debug)]
enum State {
    ExpectS0S1S2(Box<ClientHandshake>),
    ExpectConnectResult,
    Connected,
    ExpectCreateStreamResult,
    ExpectPublishStart,
    Publishing,
    ExpectPlayStart,
    Playing,
}

const TID_CONNECT: f64 = 1.0;

/// One client-side RTMP connection, sans-IO. See the module docs for the call contract.
#[derive(Debug)]
pub struct ClientSession {
    config: ClientConfig,
    state: State,
    input: BytesMut,
    reader: ChunkReader,
    out: Outgoing,
    queue: VecDeque<ClientOutput>,
    bytes_received: u64,
    goal: Option<Goal>,
    next_tid: f64,
    create_stream_tid: f64,
    stream_id: u32,
    clock: TimestampUnwrap,
    /// Media messages waiting for `NetStream.Publish.Start`: (csid, timestamp, type, body).
    held: Vec<(u32, u32, u8, Bytes)>,
    /// The session's times, when it was given the time.
    timeouts: Option<ClientTimeouts>,
    /// When the session started, and when input last came.
    started_at: Option<Instant>,
    last_input: Option<Instant>,
    /// A time ran out: the session is over.
    timed_out: bool,
}

impl ClientSession {
    /// Starts a connection: C0C1 is the first output.
    pub fn new(config: ClientConfig) -> Self {
        let mut random = [0u8; RANDOM_LEN];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut random);
        let mut out = Outgoing::new(0);
        let scheme = config.digest_handshake.then_some(DigestScheme::First);
        let handshake = ClientHandshake::new(&random, scheme, &mut out.bytes);
        ClientSession {
            config,
            state: State::ExpectS0S1S2(Box::new(handshake)),
            input: BytesMut::new(),
            reader: ChunkReader::new(DEFAULT_MAX_MESSAGE_LEN),
            out,
            queue: VecDeque::new(),
            bytes_received: 0,
            goal: None,
            next_tid: 2.0,
            create_stream_tid: 0.0,
            stream_id: 1,
            clock: TimestampUnwrap::default(),
            held: Vec::new(),
            timeouts: None,
            started_at: None,
            last_input: None,
            timed_out: false,
        }
    }

    /// Bounds the session's waits with `timeouts`, counted from `now` (see the
    /// module's "Time").
    pub fn with_timeouts(mut self, now: Instant, timeouts: ClientTimeouts) -> Self {
        self.timeouts = Some(timeouts);
        self.started_at = Some(now);
        self.last_input = Some(now);
        self
    }

    /// When the session's next time runs out, and what it waits for then.
    fn deadline(&self) -> Option<(Instant, Waited)> {
        let timeouts = self.timeouts.filter(|_| !self.timed_out)?;
        match self.state {
            // A target need not say anything while it takes media.
            State::Publishing => None,
            State::Playing => Some((self.last_input? + timeouts.silence, Waited::Input)),
            _ => Some((self.started_at? + timeouts.start, Waited::Start)),
        }
    }

    /// Total bytes fed to [`handle_input`](Self::handle_input).
    pub fn bytes_received(&self) -> u64 {
        self.bytes_received
    }

    /// Publishes `name_with_query` (e.g. `cam1?token=x`), connecting first if needed.
    pub fn publish(&mut self, name_with_query: &str) {
        self.goal = Some(Goal::Publish(name_with_query.to_owned()));
        if let State::Connected = self.state {
            self.start_stream();
        }
    }

    /// Plays `name_with_query`, connecting first if needed.
    pub fn play(&mut self, name_with_query: &str) {
        self.goal = Some(Goal::Play(name_with_query.to_owned()));
        if let State::Connected = self.state {
            self.start_stream();
        }
    }

    /// Sends one video message (an FLV video tag body).
    pub fn send_video(&mut self, timestamp_ms: u32, body: &[u8]) {
        self.send_media(CLIENT_CSID_VIDEO, timestamp_ms, msg_type::VIDEO, body);
    }

    /// Sends one audio message (an FLV audio tag body).
    pub fn send_audio(&mut self, timestamp_ms: u32, body: &[u8]) {
        self.send_media(CLIENT_CSID_AUDIO, timestamp_ms, msg_type::AUDIO, body);
    }

    /// Sends metadata as `@setDataFrame` followed by `amf_body` (AMF0 `"onMetaData"` and its object).
    pub fn send_metadata(&mut self, amf_body: &[u8]) {
        let mut body = BytesMut::with_capacity(16 + amf_body.len());
        Amf0Value::from("@setDataFrame").encode(&mut body);
        body.put_slice(amf_body);
        self.send_media(CSID_STREAM, 0, msg_type::DATA_AMF0, &body);
    }

    /// Sends an AMF0 data message as it is (`amf_body`: its name and values, as an
    /// `onCuePoint`), at `timestamp_ms` on the media's clock.
    pub fn send_data(&mut self, timestamp_ms: u32, amf_body: &[u8]) {
        self.send_media(CSID_STREAM, timestamp_ms, msg_type::DATA_AMF0, amf_body);
    }

    fn send_media(&mut self, csid: u32, timestamp: u32, msg_type: u8, body: &[u8]) {
        if let State::Publishing = self.state {
            self.out
                .raw(csid, timestamp, msg_type, self.stream_id, body);
        } else {
            self.held
                .push((csid, timestamp, msg_type, Bytes::copy_from_slice(body)));
        }
    }

    /// Stops publishing (`FCUnpublish` + `deleteStream`) or playing (`deleteStream`).
    pub fn close_stream(&mut self) {
        match (&self.state, &self.goal) {
            (State::Publishing | State::ExpectPublishStart, Some(Goal::Publish(name))) => {
                let name = split_query(name).0.to_owned();
                let tid = self.tid();
                self.out
                    .command(CSID_COMMAND, 0, &command::named("FCUnpublish", tid, &name));
            }
            (State::Playing | State::ExpectPlayStart, _) => {}
            _ => return,
        }
        self.out.command(
            CSID_COMMAND,
            0,
            &command::delete_stream(0.0, self.stream_id),
        );
        self.goal = None;
        self.held.clear();
        self.state = State::Connected;
    }

    /// Feeds bytes read from the socket.
    pub fn handle_input(&mut self, bytes: &[u8]) -> Result<(), RtmpError> {
        self.bytes_received += bytes.len() as u64;
        self.input.extend_from_slice(bytes);
        self.process()?;
        if !matches!(self.state, State::ExpectS0S1S2(_)) {
            self.out.maybe_ack(self.bytes_received);
        }
        Ok(())
    }

    /// The next output; drain to `None` after every call.
    pub fn poll_output(&mut self) -> Option<ClientOutput> {
        if let Some(o) = self.queue.pop_front() {
            return Some(o);
        }
        if self.out.bytes.is_empty() {
            return None;
        }
        Some(ClientOutput::Write(self.out.bytes.split().freeze()))
    }

    fn tid(&mut self) -> f64 {
        let t = self.next_tid;
        self.next_tid += 1.0;
        t
    }

    fn event(&mut self, e: ClientEvent) {
        if !self.out.bytes.is_empty() {
            self.queue
                .push_back(ClientOutput::Write(self.out.bytes.split().freeze()));
        }
        self.queue.push_back(ClientOutput::Event(e));
    }

    fn process(&mut self) -> Result<(), RtmpError> {
        loop {
            if let State::ExpectS0S1S2(hs) = &mut self.state {
                if !hs.read(&mut self.input, &mut self.out.bytes)? {
                    return Ok(());
                }
                self.after_handshake();
            }
            let Some(raw) = self.reader.read(&mut self.input)? else {
                return Ok(());
            };
            if raw.msg_type == msg_type::AGGREGATE {
                for sub in split_aggregate(&raw)? {
                    self.on_message(sub)?;
                }
            } else {
                self.on_message(raw)?;
            }
        }
    }

    fn after_handshake(&mut self) {
        let size = self.config.chunk_size.clamp(1, MAX_CHUNK_SIZE);
        if size as usize != DEFAULT_CHUNK_SIZE {
            self.out
                .message(CSID_CONTROL, 0, &Message::SetChunkSize(size));
        }
        let (app, tc_url) = (self.config.app.clone(), self.config.tc_url.clone());
        self.out.command(
            CSID_COMMAND,
            0,
            &command::connect(TID_CONNECT, &app, &tc_url),
        );
        self.state = State::ExpectConnectResult;
    }

    fn start_stream(&mut self) {
        if let Some(Goal::Publish(name)) = &self.goal {
            let name = split_query(name).0.to_owned();
            let tid = self.tid();
            self.out.command(
                CSID_COMMAND,
                0,
                &command::named("releaseStream", tid, &name),
            );
            let tid = self.tid();
            self.out
                .command(CSID_COMMAND, 0, &command::named("FCPublish", tid, &name));
        }
        if self.goal.is_some() {
            self.create_stream_tid = self.tid();
            self.out.command(
                CSID_COMMAND,
                0,
                &command::create_stream(self.create_stream_tid),
            );
            self.state = State::ExpectCreateStreamResult;
        }
    }

    fn on_message(&mut self, raw: RawMessage) -> Result<(), RtmpError> {
        match Message::decode(&raw)? {
            Message::WindowAckSize(size) => self.out.ack_window = size,
            Message::UserControl(UserControl::PingRequest(t)) => {
                self.out.message(
                    CSID_CONTROL,
                    0,
                    &Message::UserControl(UserControl::PingResponse(t)),
                );
            }
            Message::Audio(payload) => {
                let timestamp_ms = self.clock.unwrap(raw.timestamp);
                self.event(ClientEvent::Audio {
                    timestamp_ms,
                    payload,
                });
            }
            Message::Video(payload) => {
                let timestamp_ms = self.clock.unwrap(raw.timestamp);
                self.event(ClientEvent::Video {
                    timestamp_ms,
                    payload,
                });
            }
            Message::Data { values, payload } => self.on_data(&values, payload)?,
            Message::Command(values) => self.on_command(Command::from_values(values)?)?,
            _ => {}
        }
        Ok(())
    }

    fn on_data(&mut self, values: &[Amf0Value], payload: Bytes) -> Result<(), RtmpError> {
        match values.first().and_then(Amf0Value::as_str) {
            Some("onMetaData") => self.event(ClientEvent::Metadata { payload }),
            Some("@setDataFrame") => {
                let mut rest = &payload[..];
                amf0::decode(&mut rest).map_err(|source| RtmpError::Amf0 {
                    what: "data message",
                    source,
                })?;
                let payload = payload.slice(payload.len() - rest.len()..);
                self.event(ClientEvent::Metadata { payload });
            }
            Some("onStatus") => {
                let field = |k: &str| {
                    values
                        .get(1)
                        .and_then(|o| o.get(k))
                        .and_then(Amf0Value::as_str)
                        .unwrap_or("")
                        .to_owned()
                };
                let (level, code, description) =
                    (field("level"), field("code"), field("description"));
                self.event(ClientEvent::Status {
                    level,
                    code,
                    description,
                });
            }
            _ => {}
        }
        Ok(())
    }

    fn on_command(&mut self, cmd: Command) -> Result<(), RtmpError> {
        let field = |k: &str| cmd.status_field(k).unwrap_or("").to_owned();
        match cmd.name.as_str() {
            "_result" if cmd.transaction_id == TID_CONNECT => {
                if let State::ExpectConnectResult = self.state {
                    self.state = State::Connected;
                    self.event(ClientEvent::Connected);
                    self.start_stream();
                }
            }
            "_result" if cmd.transaction_id == self.create_stream_tid => {
                if let State::ExpectCreateStreamResult = self.state {
                    let id = cmd.args.first().and_then(Amf0Value::as_f64).unwrap_or(1.0);
                    // A stream id is a small positive integer; anything else is the server's bug.
                    if !(1.0..=f64::from(u32::MAX)).contains(&id) {
                        return Err(RtmpError::Malformed {
                            what: "createStream result",
                        });
                    }
                    self.stream_id = id as u32;
                    self.send_stream_request();
                }
            }
            "_error" => {
                let (code, description) = (field("code"), field("description"));
                if matches!(
                    self.state,
                    State::ExpectConnectResult | State::ExpectCreateStreamResult
                ) {
                    self.event(ClientEvent::Rejected { code, description });
                }
            }
            "onStatus" => {
                let (level, code, description) =
                    (field("level"), field("code"), field("description"));
                self.event(ClientEvent::Status {
                    level: level.clone(),
                    code: code.clone(),
                    description: description.clone(),
                });
                match (&self.state, code.as_str()) {
                    (State::ExpectPublishStart, "NetStream.Publish.Start") => {
                        self.state = State::Publishing;
                        for (csid, timestamp, msg_type, body) in std::mem::take(&mut self.held) {
                            self.out
                                .raw(csid, timestamp, msg_type, self.stream_id, &body);
                        }
                        self.event(ClientEvent::PublishStarted);
                    }
                    (State::ExpectPlayStart, "NetStream.Play.Start") => {
                        self.state = State::Playing;
                        self.event(ClientEvent::PlayStarted);
                    }
                    (State::ExpectPublishStart | State::ExpectPlayStart, _) if level == "error" => {
                        self.state = State::Connected;
                        self.goal = None;
                        self.event(ClientEvent::Rejected { code, description });
                    }
                    _ => {}
                }
            }
            _ => {
                // A request from the server (onBWDone, _checkbw...): answer if it asks.
                if !matches!(cmd.request()?, Request::Response) && cmd.transaction_id != 0.0 {
                    let tid = cmd.transaction_id;
                    self.out
                        .command(CSID_COMMAND, 0, &command::result(tid, Amf0Value::Undefined));
                }
            }
        }
        Ok(())
    }

    fn send_stream_request(&mut self) {
        let sid = self.stream_id;
        match self.goal.clone() {
            Some(Goal::Publish(name)) => {
                let tid = self.tid();
                self.out
                    .command(CSID_STREAM, sid, &command::publish(tid, &name));
                self.state = State::ExpectPublishStart;
            }
            Some(Goal::Play(name)) => {
                self.out
                    .command(CSID_STREAM, sid, &command::play(0.0, &name));
                self.out.message(
                    CSID_CONTROL,
                    0,
                    &Message::UserControl(UserControl::SetBufferLength {
                        stream_id: sid,
                        buffer_ms: 1000,
                    }),
                );
                self.state = State::ExpectPlayStart;
            }
            None => self.state = State::Connected,
        }
    }
}

/// The shared session shape (see `sluice_session`), so that the server's connection
/// driver runs a relay's pull or push as it runs its own connections, with the time.
impl Session for ClientSession {
    type Event = ClientEvent;
    type Error = RtmpError;

    fn handle_input(&mut self, now: Instant, input: Input<'_>) -> Result<(), RtmpError> {
        match input {
            Input::Stream(bytes) => {
                if self.timeouts.is_some() {
                    self.last_input = Some(now);
                }
                ClientSession::handle_input(self, bytes)
            }
            Input::Datagram { .. } => Err(RtmpError::Unexpected {
                got: "datagram",
                state: "a stream transport",
            }),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if let Some((_, waited)) = self.deadline().filter(|(at, _)| now >= *at) {
            self.timed_out = true;
            self.event(ClientEvent::TimedOut(waited));
        }
    }

    fn poll_output(&mut self) -> Option<Output<ClientEvent>> {
        Some(match ClientSession::poll_output(self)? {
            ClientOutput::Write(data) => Output::Transmit(Transmit::stream(data)),
            ClientOutput::Event(e) => Output::Event(e),
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.deadline().map(|(at, _)| at)
    }

    fn is_closed(&self) -> bool {
        self.timed_out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> ClientSession {
        ClientSession::new(ClientConfig {
            app: "live".into(),
            tc_url: "rtmp://127.0.0.1/live".into(),
            chunk_size: 4096,
            digest_handshake: false,
        })
    }

    fn drain(c: &mut ClientSession) -> Vec<ClientEvent> {
        std::iter::from_fn(|| Session::poll_output(c))
            .filter_map(|o| match o {
                Output::Event(e) => Some(e),
                Output::Transmit(_) => None,
            })
            .collect()
    }

    #[test]
    fn a_server_that_never_answers_times_the_start_out() {
        let t0 = Instant::now();
        let timeouts = ClientTimeouts {
            start: Duration::from_secs(5),
            silence: Duration::from_secs(10),
        };
        let mut c = client().with_timeouts(t0, timeouts);
        c.play("cam");
        assert!(drain(&mut c).is_empty());
        assert_eq!(c.poll_timeout(), Some(t0 + timeouts.start));
        // Bytes that do not finish the handshake do not move the start's deadline.
        Session::handle_input(&mut c, t0 + Duration::from_secs(4), Input::Stream(&[3])).unwrap();
        c.handle_timeout(t0 + Duration::from_secs(4));
        assert!(drain(&mut c).is_empty() && !c.is_closed());
        c.handle_timeout(t0 + timeouts.start);
        assert_eq!(drain(&mut c), vec![ClientEvent::TimedOut(Waited::Start)]);
        assert!(c.is_closed());
        assert_eq!(c.poll_timeout(), None);
    }

    #[test]
    fn without_the_time_a_client_keeps_none() {
        let mut c = client();
        c.play("cam");
        c.handle_timeout(Instant::now() + Duration::from_secs(3600));
        assert!(drain(&mut c).is_empty());
        assert_eq!(c.poll_timeout(), None);
        assert!(!c.is_closed());
    }
}
