//! The server side of one RTMP connection: the only file that knows message order.
//!
//! Why: the wire layers (`handshake`, `chunk`, `message`, `command`) are stateless
//! about the conversation. This file decides that `publish` comes after `connect`,
//! that media is accepted only while publishing, and which replies real clients
//! (ffmpeg, OBS/librtmp, Flash) wait for. It performs no I/O and reads no clock.
//!
//! # Call contract
//! Feed every byte read from the socket to [`ServerSession::handle_input`] (any split
//! is fine), then drain [`ServerSession::poll_output`] to `None`; do the same after each
//! `accept_*`/`reject_*`/`send_status` call. `Write`s must reach the socket in order.
//! An error is final: the session is `Closed` and the driver drops the connection.
//!
//! # Invariants
//! - States are named for what they expect; a command that is wrong for the state is
//!   [`RtmpError::Unexpected`], never silently dropped.
//! - The session's own messages use chunk streams [`CSID_CONTROL`], [`CSID_COMMAND`] and
//!   [`CSID_STREAM`]; shared media uses [`CSID_AUDIO`]/[`CSID_VIDEO`]/[`CSID_DATA`] with
//!   type-0 headers only, so the two never disturb each other's header compression.
//! - Memory per session is bounded by the chunk reader's limits plus what the caller
//!   leaves undrained in the output queue.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use sluice_media::amf0::{self, Amf0Value};
use sluice_session::{Event, Input, Output, Session, StreamRequest, Transmit};

use crate::chunk::{
    msg_type, ChunkReader, ChunkWriter, RawMessage, DEFAULT_MAX_MESSAGE_LEN, MAX_CHUNK_SIZE,
};
use crate::command::{self, Command, Request};
use crate::cue_point::{read_cue_point, CuePoint};
use crate::error::RtmpError;
use crate::handshake::{ServerHandshake, RANDOM_LEN};
use crate::message::{split_aggregate, Message, UserControl};

/// Chunk stream of protocol control messages (fixed by the spec).
pub const CSID_CONTROL: u32 = 2;
/// Chunk stream of the session's connection-level commands (`_result`, `_error`).
pub const CSID_COMMAND: u32 = 3;
/// Chunk stream of the session's stream-level messages (`onStatus`, `|RtmpSampleAccess`).
pub const CSID_STREAM: u32 = 5;
/// Chunk stream of shared audio messages.
pub const CSID_AUDIO: u32 = 6;
/// Chunk stream of shared video messages.
pub const CSID_VIDEO: u32 = 7;
/// Chunk stream of shared script data (`onMetaData`).
pub const CSID_DATA: u32 = 8;
/// The one message stream id a session hands out (`createStream` always answers 1).
pub const MEDIA_STREAM_ID: u32 = 1;

/// What a [`ServerSession`] is configured with.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Our outgoing chunk size, announced with Set Chunk Size right after `connect`;
    /// the server chunks shared media with the same size. Default 4096: large enough
    /// that most audio frames are one chunk, small enough to interleave. Values outside
    /// 1..=16 MiB are clamped into that range when announced.
    pub out_chunk_size: u32,
    /// Largest message we reassemble (default [`DEFAULT_MAX_MESSAGE_LEN`], 8 MiB).
    pub max_message_len: usize,
    /// Window Acknowledgement Size we ask the peer to use (default 2,500,000, as FMS).
    pub window_ack_size: u32,
    /// Set Peer Bandwidth we send (default 2,500,000, dynamic).
    pub peer_bandwidth: u32,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            out_chunk_size: 4096,
            max_message_len: DEFAULT_MAX_MESSAGE_LEN,
            window_ack_size: 2_500_000,
            peer_bandwidth: 2_500_000,
        }
    }
}

/// What the session asks of its driver: bytes to write (in order), or an event.
pub type ServerOutput = Output<ServerEvent>;

/// Something that happened on the connection that the server must act on, in the
/// vocabulary every session shares:
/// - [`Event::Publish`]: answer with `accept_publish` or `reject_publish`;
/// - [`Event::Play`]: answer with `accept_play` or `reject_play`;
/// - [`Event::Media`]: audio, video or metadata of a publisher;
/// - [`Event::Stop`]: the publisher stopped (`FCUnpublish`, `deleteStream`,
///   `closeStream`) or the player did (`deleteStream`, `closeStream`);
/// - [`Event::Other`]: see [`ServerNotice`].
///
/// The query of a request joins the stream name's and the app's with `&`.
pub type ServerEvent = Event<Media, ServerNotice>;

/// Media of a publisher, exactly as received.
#[derive(Debug, Clone, PartialEq)]
pub enum Media {
    /// An audio message: an FLV audio tag body.
    Audio {
        /// Milliseconds, unwrapped past 2^32 so it never jumps back at the wrap.
        timestamp_ms: i64,
        /// The tag body.
        payload: Bytes,
    },
    /// A video message: an FLV video tag body.
    Video {
        /// Milliseconds, unwrapped past 2^32.
        timestamp_ms: i64,
        /// The tag body.
        payload: Bytes,
    },
    /// Stream metadata: AMF0 `"onMetaData"` plus its object (`@setDataFrame` stripped),
    /// ready to send to players as a script data message.
    Metadata {
        /// The AMF0 body.
        payload: Bytes,
    },
    /// An ad cue point (`onCuePoint`, see [`crate::cue_point`]).
    CuePoint {
        /// The message's time, ms, unwrapped as the media's.
        timestamp_ms: i64,
        /// What it says.
        cue: CuePoint,
    },
}

/// What else an RTMP session reports.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerNotice {
    /// `connect` succeeded; the session already answered it.
    Connected {
        /// The application, without any `?query`.
        app: String,
        /// The `tcUrl` the client sent.
        tc_url: Option<String>,
    },
    /// The player paused or resumed.
    Pause {
        /// True when paused.
        paused: bool,
    },
    /// Something we do not support; answered with `_error` if it asked for an answer.
    /// The server only logs it.
    Ignored {
        /// What it was.
        what: String,
    },
}

/// Unwraps 32-bit RTMP timestamps into a monotonic 64-bit timeline.
///
/// Each new timestamp is taken as the nearest value to the previous one (a signed
/// 32-bit step), so both the 2^32 wrap and small backward steps between audio and
/// video are handled.
#[derive(Debug, Default)]
pub(crate) struct TimestampUnwrap {
    last: Option<(u32, i64)>,
}

impl TimestampUnwrap {
    pub(crate) fn unwrap(&mut self, ts: u32) -> i64 {
        let ext = match self.last {
            None => i64::from(ts),
            Some((raw, ext)) => ext.saturating_add(i64::from(ts.wrapping_sub(raw) as i32)),
        };
        self.last = Some((ts, ext));
        ext
    }

    /// Where `ts` falls, as [`unwrap`](Self::unwrap) would put it, without moving the
    /// clock: for messages that are not media (a cue point's time).
    pub(crate) fn place(&self, ts: u32) -> i64 {
        match self.last {
            None => i64::from(ts),
            Some((raw, ext)) => ext.saturating_add(i64::from(ts.wrapping_sub(raw) as i32)),
        }
    }
}

/// The session's outgoing side: chunk writer, pending bytes and acknowledgements.
#[derive(Debug)]
pub(crate) struct Outgoing {
    writer: ChunkWriter,
    pub(crate) bytes: BytesMut,
    /// Acknowledge every this many received bytes (0 = never).
    pub(crate) ack_window: u32,
    last_ack: u64,
}

impl Outgoing {
    pub(crate) fn new(ack_window: u32) -> Self {
        Outgoing {
            writer: ChunkWriter::new(),
            bytes: BytesMut::new(),
            ack_window,
            last_ack: 0,
        }
    }

    pub(crate) fn message(&mut self, csid: u32, stream_id: u32, msg: &Message) {
        let mut body = BytesMut::new();
        msg.encode(&mut body);
        self.writer
            .write(&mut self.bytes, csid, 0, msg.msg_type(), stream_id, &body);
    }

    pub(crate) fn raw(
        &mut self,
        csid: u32,
        timestamp: u32,
        msg_type: u8,
        stream_id: u32,
        body: &[u8],
    ) {
        self.writer
            .write(&mut self.bytes, csid, timestamp, msg_type, stream_id, body);
    }

    pub(crate) fn command(&mut self, csid: u32, stream_id: u32, cmd: &Command) {
        let mut body = BytesMut::new();
        cmd.encode(&mut body);
        self.writer.write(
            &mut self.bytes,
            csid,
            0,
            msg_type::COMMAND_AMF0,
            stream_id,
            &body,
        );
    }

    pub(crate) fn data(&mut self, csid: u32, stream_id: u32, values: &[Amf0Value]) {
        let mut body = BytesMut::new();
        for v in values {
            v.encode(&mut body);
        }
        self.writer.write(
            &mut self.bytes,
            csid,
            0,
            msg_type::DATA_AMF0,
            stream_id,
            &body,
        );
    }

    /// Sends an Acknowledgement when a window's worth of bytes arrived since the last one.
    pub(crate) fn maybe_ack(&mut self, received: u64) {
        if self.ack_window > 0 && received - self.last_ack >= u64::from(self.ack_window) {
            self.last_ack = received;
            // The sequence number wraps at 2^32 by definition.
            self.message(
                CSID_CONTROL,
                0,
                &Message::Acknowledgement {
                    sequence: received as u32,
                },
            );
        }
    }
}

/// Splits `name?query` into its parts.
pub(crate) fn split_query(s: &str) -> (&str, &str) {
    s.split_once('?').unwrap_or((s, ""))
}

#[derive(Debug)]
enum State {
    ExpectC0C1C2(Box<ServerHandshake>),
    ExpectConnect,
    Connected,
    PublishPending,
    Publishing,
    PlayPending,
    Playing,
    Closed,
}

impl State {
    fn name(&self) -> &'static str {
        match self {
            State::ExpectC0C1C2(_) => "ExpectC0C1C2",
            State::ExpectConnect => "ExpectConnect",
            State::Connected => "Connected",
            State::PublishPending => "PublishPending",
            State::Publishing => "Publishing",
            State::PlayPending => "PlayPending",
            State::Playing => "Playing",
            State::Closed => "Closed",
        }
    }
}

/// One server-side RTMP connection, sans-IO. See the module docs for the call contract.
#[derive(Debug)]
pub struct ServerSession {
    config: ServerConfig,
    state: State,
    input: BytesMut,
    /// Bytes left in `input` after the last call (a chunk not complete yet).
    unprocessed: usize,
    reader: ChunkReader,
    out: Outgoing,
    queue: VecDeque<ServerOutput>,
    bytes_received: u64,
    app: String,
    app_query: String,
    stream_name: String,
    clock: TimestampUnwrap,
}

impl ServerSession {
    /// A session in the handshake state, with handshake randomness from the OS.
    pub fn new(config: ServerConfig) -> Self {
        let mut random = [0u8; RANDOM_LEN];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut random);
        Self::with_random(config, &random)
    }

    /// A session whose handshake uses the given random block (for reproducible tests).
    pub fn with_random(config: ServerConfig, random: &[u8; RANDOM_LEN]) -> Self {
        ServerSession {
            reader: ChunkReader::new(config.max_message_len),
            out: Outgoing::new(config.window_ack_size),
            config,
            state: State::ExpectC0C1C2(Box::new(ServerHandshake::new(random))),
            input: BytesMut::new(),
            unprocessed: 0,
            queue: VecDeque::new(),
            bytes_received: 0,
            app: String::new(),
            app_query: String::new(),
            stream_name: String::new(),
            clock: TimestampUnwrap::default(),
        }
    }

    /// Total bytes fed to [`handle_input`](Self::handle_input).
    pub fn bytes_received(&self) -> u64 {
        self.bytes_received
    }

    /// Feeds bytes read from the socket. Any split of the stream is fine.
    pub fn handle_input(&mut self, bytes: &[u8]) -> Result<(), RtmpError> {
        if let State::Closed = self.state {
            return Err(RtmpError::Closed);
        }
        self.input.extend_from_slice(bytes);
        self.take_input(bytes.len())
    }

    /// Processes `n` new bytes at the end of the input buffer.
    fn take_input(&mut self, n: usize) -> Result<(), RtmpError> {
        self.bytes_received += n as u64;
        let result = self.process();
        if result.is_err() {
            self.state = State::Closed;
            self.input = BytesMut::new();
        } else if !matches!(self.state, State::ExpectC0C1C2(_)) {
            self.out.maybe_ack(self.bytes_received);
        }
        if self.input.is_empty() && !matches!(self.state, State::Publishing) {
            // An idle session (a player) holds no buffer: the handshake's would stay.
            // A publisher keeps its own, which the socket reads into.
            self.input = BytesMut::new();
        }
        self.unprocessed = self.input.len();
        result
    }

    /// While publishing, the buffer the connection may read into directly (see
    /// [`sluice_session::Session::input_buffer`]); then call [`Self::handle_buffered`].
    pub fn input_buffer(&mut self) -> Option<&mut BytesMut> {
        matches!(self.state, State::Publishing).then_some(&mut self.input)
    }

    /// Processes what was read into [`Self::input_buffer`] since the last call.
    pub fn handle_buffered(&mut self) -> Result<(), RtmpError> {
        if let State::Closed = self.state {
            return Err(RtmpError::Closed);
        }
        let n = self.input.len().saturating_sub(self.unprocessed);
        self.take_input(n)
    }

    /// The next output; drain to `None` after every call into the session.
    pub fn poll_output(&mut self) -> Option<ServerOutput> {
        if let Some(o) = self.queue.pop_front() {
            return Some(o);
        }
        if self.out.bytes.is_empty() {
            return None;
        }
        // Take the whole buffer: a split would keep its spare capacity alive.
        Some(Output::Transmit(Transmit::stream(
            std::mem::take(&mut self.out.bytes).freeze(),
        )))
    }

    /// Accepts a pending publish: `onStatus NetStream.Publish.Start`. Does nothing
    /// unless a `Publish` event is pending.
    pub fn accept_publish(&mut self) {
        if let State::PublishPending = self.state {
            let desc = format!("{} is now published.", self.stream_name);
            self.out.message(
                CSID_CONTROL,
                0,
                &Message::UserControl(UserControl::StreamBegin(MEDIA_STREAM_ID)),
            );
            self.status("status", "NetStream.Publish.Start", &desc);
            self.state = State::Publishing;
        }
    }

    /// Refuses a publish (e.g. `NetStream.Publish.BadName`); the session is closed after.
    pub fn reject_publish(&mut self, code: &str, description: &str) {
        self.status("error", code, description);
        self.state = State::Closed;
    }

    /// Accepts a pending play: StreamBegin, `NetStream.Play.Reset`, `NetStream.Play.Start`
    /// and `|RtmpSampleAccess`, as nginx-rtmp does. Media may follow at once. Does
    /// nothing unless a `Play` event is pending.
    pub fn accept_play(&mut self) {
        if let State::PlayPending = self.state {
            let name = self.stream_name.clone();
            self.out.message(
                CSID_CONTROL,
                0,
                &Message::UserControl(UserControl::StreamBegin(MEDIA_STREAM_ID)),
            );
            self.status(
                "status",
                "NetStream.Play.Reset",
                &format!("Playing and resetting {name}."),
            );
            self.status(
                "status",
                "NetStream.Play.Start",
                &format!("Started playing {name}."),
            );
            // Flash needs sample access to read pixels or samples of the stream;
            // ffmpeg's FLV demuxer takes this one message as metadata. No
            // `onStatus(NetStream.Data.Start)` data message (FMS and SRS send one):
            // that demuxer makes any other data message a stream of unknown codec
            // ("Data: none") and waits on it while probing; nginx-rtmp never sent it.
            self.out.data(
                CSID_STREAM,
                MEDIA_STREAM_ID,
                &["|RtmpSampleAccess".into(), true.into(), true.into()],
            );
            self.state = State::Playing;
        }
    }

    /// Refuses a play (e.g. `NetStream.Play.StreamNotFound`). The connection stays
    /// usable: the player may try another name, or the driver may close it.
    pub fn reject_play(&mut self, code: &str, description: &str) {
        self.status("error", code, description);
        if let State::PlayPending = self.state {
            self.state = State::Connected;
        }
    }

    /// Sends `onStatus` on the media stream (e.g. `NetStream.Play.UnpublishNotify`).
    pub fn send_status(&mut self, level: &str, code: &str, description: &str) {
        self.status(level, code, description);
    }

    fn status(&mut self, level: &str, code: &str, description: &str) {
        self.out.command(
            CSID_STREAM,
            MEDIA_STREAM_ID,
            &command::on_status(level, code, description),
        );
    }

    fn event(&mut self, e: ServerEvent) {
        if !self.out.bytes.is_empty() {
            self.queue.push_back(Output::Transmit(Transmit::stream(
                std::mem::take(&mut self.out.bytes).freeze(),
            )));
        }
        self.queue.push_back(Output::Event(e));
    }

    fn unexpected(&self, got: &'static str) -> RtmpError {
        RtmpError::Unexpected {
            got,
            state: self.state.name(),
        }
    }

    fn process(&mut self) -> Result<(), RtmpError> {
        loop {
            if let State::ExpectC0C1C2(hs) = &mut self.state {
                if !hs.read(&mut self.input, &mut self.out.bytes)? {
                    return Ok(());
                }
                self.state = State::ExpectConnect;
            }
            if let State::Closed = self.state {
                return Ok(());
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

    fn on_message(&mut self, raw: RawMessage) -> Result<(), RtmpError> {
        match Message::decode(&raw)? {
            // Applied by the chunk reader already.
            Message::SetChunkSize(_) | Message::Abort { .. } => {}
            Message::Acknowledgement { .. } | Message::SetPeerBandwidth { .. } => {}
            Message::WindowAckSize(size) => self.out.ack_window = size,
            Message::UserControl(UserControl::PingRequest(t)) => {
                self.out.message(
                    CSID_CONTROL,
                    0,
                    &Message::UserControl(UserControl::PingResponse(t)),
                );
            }
            Message::UserControl(_) => {}
            Message::Audio(payload) => self.on_media(raw.timestamp, payload, false)?,
            Message::Video(payload) => self.on_media(raw.timestamp, payload, true)?,
            Message::Data { values, payload } => self.on_data(raw.timestamp, &values, payload)?,
            Message::Command(values) => self.on_command(Command::from_values(values)?)?,
            Message::Unknown { msg_type } => {
                self.event(Event::Other(ServerNotice::Ignored {
                    what: format!("message type {msg_type}"),
                }));
            }
        }
        Ok(())
    }

    fn on_media(&mut self, timestamp: u32, payload: Bytes, video: bool) -> Result<(), RtmpError> {
        let what = if video { "video" } else { "audio" };
        match self.state {
            State::Publishing => {
                let timestamp_ms = self.clock.unwrap(timestamp);
                self.event(if video {
                    Event::Media(Media::Video {
                        timestamp_ms,
                        payload,
                    })
                } else {
                    Event::Media(Media::Audio {
                        timestamp_ms,
                        payload,
                    })
                });
                Ok(())
            }
            State::PublishPending => {
                self.event(Event::Other(ServerNotice::Ignored {
                    what: format!("{what} before publish was accepted"),
                }));
                Ok(())
            }
            _ => Err(self.unexpected(what)),
        }
    }

    fn on_data(
        &mut self,
        timestamp: u32,
        values: &[Amf0Value],
        payload: Bytes,
    ) -> Result<(), RtmpError> {
        let first = values.first().and_then(Amf0Value::as_str).unwrap_or("");
        let second = values.get(1).and_then(Amf0Value::as_str);
        // `onCuePoint`, bare or behind `@setDataFrame`.
        let cue_values = match (first, second) {
            ("onCuePoint", _) => Some(values),
            ("@setDataFrame", Some("onCuePoint")) => values.get(1..),
            _ => None,
        };
        if let Some(cue_values) = cue_values {
            let event = match (read_cue_point(cue_values), &self.state) {
                (Ok(cue), State::Publishing) => Event::Media(Media::CuePoint {
                    timestamp_ms: self.clock.place(timestamp),
                    cue,
                }),
                (Ok(_), _) => Event::Other(ServerNotice::Ignored {
                    what: format!("onCuePoint in state {}", self.state.name()),
                }),
                (Err(e), _) => Event::Other(ServerNotice::Ignored {
                    what: e.to_string(),
                }),
            };
            self.event(event);
            return Ok(());
        }
        let metadata = match (first, second) {
            ("@setDataFrame", Some("onMetaData")) => {
                let mut rest = &payload[..];
                amf0::decode(&mut rest).map_err(|source| RtmpError::Amf0 {
                    what: "data message",
                    source,
                })?;
                Some(payload.slice(payload.len() - rest.len()..))
            }
            ("onMetaData", _) => Some(payload),
            _ => None,
        };
        let event = match (metadata, &self.state) {
            (Some(payload), State::Publishing) => Event::Media(Media::Metadata { payload }),
            (Some(_), _) => Event::Other(ServerNotice::Ignored {
                what: format!("metadata in state {}", self.state.name()),
            }),
            (None, _) => Event::Other(ServerNotice::Ignored {
                what: format!("data message {first:?}"),
            }),
        };
        self.event(event);
        Ok(())
    }

    fn reply(&mut self, tid: f64, cmd: Command) {
        // Transaction id 0 means "no answer expected".
        if tid != 0.0 {
            self.out.command(CSID_COMMAND, 0, &cmd);
        }
    }

    fn on_command(&mut self, cmd: Command) -> Result<(), RtmpError> {
        let req = cmd.request()?;
        let tid = cmd.transaction_id;
        if matches!(self.state, State::ExpectConnect)
            && !matches!(req, Request::Connect { .. } | Request::Response)
        {
            return Err(self.unexpected(request_label(&req)));
        }
        match req {
            Request::Connect {
                app,
                tc_url,
                object_encoding,
            } => {
                if !matches!(self.state, State::ExpectConnect) {
                    return Err(self.unexpected("connect"));
                }
                let (app_name, query) = split_query(&app);
                self.app = app_name.trim_end_matches('/').to_owned();
                self.app_query = query.to_owned();
                let chunk_size = self.config.out_chunk_size.clamp(1, MAX_CHUNK_SIZE);
                self.out.message(
                    CSID_CONTROL,
                    0,
                    &Message::WindowAckSize(self.config.window_ack_size),
                );
                self.out.message(
                    CSID_CONTROL,
                    0,
                    &Message::SetPeerBandwidth {
                        size: self.config.peer_bandwidth,
                        limit_type: 2,
                    },
                );
                self.out
                    .message(CSID_CONTROL, 0, &Message::SetChunkSize(chunk_size));
                self.out.command(
                    CSID_COMMAND,
                    0,
                    &command::connect_result(tid, object_encoding),
                );
                self.state = State::Connected;
                self.event(Event::Other(ServerNotice::Connected {
                    app: self.app.clone(),
                    tc_url,
                }));
            }
            Request::ReleaseStream { .. } | Request::FcPublish { .. } | Request::CheckBandwidth => {
                self.reply(tid, command::result(tid, Amf0Value::Undefined));
            }
            Request::GetStreamLength => {
                self.reply(tid, command::result(tid, Amf0Value::Number(0.0)))
            }
            Request::CreateStream => {
                if !matches!(self.state, State::Connected) {
                    return Err(self.unexpected("createStream"));
                }
                self.reply(
                    tid,
                    command::result(tid, Amf0Value::Number(f64::from(MEDIA_STREAM_ID))),
                );
            }
            Request::Publish { name, .. } => {
                if !matches!(self.state, State::Connected) {
                    return Err(self.unexpected("publish"));
                }
                let (name, query) = self.stream_target(&name);
                self.state = State::PublishPending;
                self.event(Event::Publish(StreamRequest {
                    app: self.app.clone(),
                    name,
                    query,
                    user: None,
                }));
            }
            Request::Play { name } => {
                if !matches!(self.state, State::Connected) {
                    return Err(self.unexpected("play"));
                }
                let (name, query) = self.stream_target(&name);
                self.state = State::PlayPending;
                self.event(Event::Play(StreamRequest {
                    app: self.app.clone(),
                    name,
                    query,
                    user: None,
                }));
            }
            Request::FcUnpublish { .. } => {
                self.reply(tid, command::result(tid, Amf0Value::Undefined));
                self.stop_stream(false);
            }
            Request::DeleteStream { .. } | Request::CloseStream => self.stop_stream(true),
            Request::Pause { paused } => {
                if !matches!(self.state, State::Playing) {
                    return Err(self.unexpected("pause"));
                }
                let (code, desc) = if paused {
                    ("NetStream.Pause.Notify", "Paused.")
                } else {
                    ("NetStream.Unpause.Notify", "Unpaused.")
                };
                self.status("status", code, desc);
                self.event(Event::Other(ServerNotice::Pause { paused }));
            }
            Request::ReceiveAudio(on) | Request::ReceiveVideo(on) => {
                self.event(Event::Other(ServerNotice::Ignored {
                    what: format!("{} {on}", cmd.name),
                }));
            }
            Request::Response => {}
            Request::Play2 | Request::Other => {
                self.reply(
                    tid,
                    command::error(tid, "NetConnection.Call.Failed", "Method not supported."),
                );
                self.event(Event::Other(ServerNotice::Ignored {
                    what: format!("command {:?}", cmd.name),
                }));
            }
        }
        Ok(())
    }

    /// The stream name and the combined query of the name and the app.
    fn stream_target(&mut self, name_with_query: &str) -> (String, String) {
        let (name, query) = split_query(name_with_query);
        self.stream_name = name.to_owned();
        let query = match (self.app_query.is_empty(), query.is_empty()) {
            (true, _) => query.to_owned(),
            (false, true) => self.app_query.clone(),
            (false, false) => format!("{}&{query}", self.app_query),
        };
        (name.to_owned(), query)
    }

    /// Ends publishing or playing. `FCUnpublish` stops only a publish (`include_play` false).
    fn stop_stream(&mut self, include_play: bool) {
        match self.state {
            State::Publishing | State::PublishPending => {
                self.state = State::Connected;
                self.event(Event::Stop);
            }
            State::Playing | State::PlayPending if include_play => {
                self.state = State::Connected;
                self.event(Event::Stop);
            }
            _ => {}
        }
    }
}

fn request_label(req: &Request) -> &'static str {
    match req {
        Request::Connect { .. } => "connect",
        Request::ReleaseStream { .. } => "releaseStream",
        Request::FcPublish { .. } => "FCPublish",
        Request::FcUnpublish { .. } => "FCUnpublish",
        Request::CreateStream => "createStream",
        Request::Publish { .. } => "publish",
        Request::Play { .. } => "play",
        Request::Play2 => "play2",
        Request::DeleteStream { .. } => "deleteStream",
        Request::CloseStream => "closeStream",
        Request::GetStreamLength => "getStreamLength",
        Request::Pause { .. } => "pause",
        Request::ReceiveAudio(_) => "receiveAudio",
        Request::ReceiveVideo(_) => "receiveVideo",
        Request::CheckBandwidth => "checkBandwidth",
        Request::Response => "response",
        Request::Other => "unknown command",
    }
}

/// The shared session shape (see `sluice_session`): RTMP takes stream input only and
/// keeps no timers of its own.
impl Session for ServerSession {
    type Event = ServerEvent;
    type Error = RtmpError;

    fn input_buffer(&mut self) -> Option<&mut BytesMut> {
        ServerSession::input_buffer(self)
    }

    fn handle_buffered(&mut self, _now: std::time::Instant) -> Result<(), RtmpError> {
        ServerSession::handle_buffered(self)
    }

    fn handle_input(
        &mut self,
        _now: std::time::Instant,
        input: Input<'_>,
    ) -> Result<(), RtmpError> {
        match input {
            Input::Stream(bytes) => ServerSession::handle_input(self, bytes),
            Input::Datagram { .. } => Err(RtmpError::Unexpected {
                got: "datagram",
                state: "a stream transport",
            }),
        }
    }

    fn poll_output(&mut self) -> Option<ServerOutput> {
        ServerSession::poll_output(self)
    }

    fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_unwrap_across_the_wrap() {
        let mut u = TimestampUnwrap::default();
        assert_eq!(u.unwrap(u32::MAX - 10), i64::from(u32::MAX - 10));
        assert_eq!(u.unwrap(5), (1i64 << 32) + 5);
        assert_eq!(u.unwrap(3), (1i64 << 32) + 3);
        assert_eq!(u.unwrap(u32::MAX), i64::from(u32::MAX));
    }

    #[test]
    fn query_splits() {
        assert_eq!(split_query("cam1?token=x"), ("cam1", "token=x"));
        assert_eq!(split_query("cam1"), ("cam1", ""));
    }
}
