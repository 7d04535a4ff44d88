//! The server side of one RTSP connection: the only file that knows request order.
//!
//! Why: `message` and `transport` are stateless about the conversation. This file
//! decides that SETUP follows DESCRIBE or ANNOUNCE, that PLAY needs a set-up track,
//! which session id a request must carry, when credentials are asked for, and which
//! status code each mistake earns (RFC 2326 Appendix A, server state machine). It
//! performs no I/O, reads no clock and draws no random numbers of its own.
//!
//! # Call contract
//! - Feed every byte read from the socket to [`ServerSession::handle_input`] with the
//!   current time (any split is fine), then drain [`ServerSession::poll_output`] to
//!   `None`. Do the same after each answer method (`answer_*`, `accept_*`, `reject`,
//!   `not_found`) and after [`ServerSession::handle_timeout`].
//! - Some requests need the application: they raise an event ([`ServerEvent::Describe`],
//!   `Announce`, `Setup`, `Play`, `Record`) and the session reads no further input
//!   until the matching answer is called (answers may come later, from another task's
//!   reply; input meanwhile is buffered, up to a bound).
//! - `Write`s are whole responses; they must reach the socket in order and must not be
//!   spliced into the middle of an interleaved media frame.
//! - An `Err` from `handle_input` is final: drain `poll_output` (an error response may be
//!   queued), write it, and drop the connection. [`ServerEvent::Timeout`] is final too.
//! - Arm a timer for [`ServerSession::poll_timeout`]; call
//!   [`ServerSession::note_activity`] when RTP/RTCP for this session arrives over UDP, so
//!   a UDP publisher or player is not timed out while its TCP connection is quiet.
//!
//! # Authentication
//! With [`ServerConfig::auth`] set, [`ServerConfig::auth_policy`] decides per request
//! (path and method) whether credentials are needed; OPTIONS never needs them. A
//! request without valid credentials gets 401 with a Digest (and, when allowed, Basic)
//! challenge before any other check. The user name that passed is reported on
//! `Describe`/`Announce` and by [`ServerSession::user`], for the app's own access rules.
//!
//! # Invariants
//! - States are the RFC's (Init, Ready, Playing, Recording) plus `Described` (a
//!   DESCRIBE or ANNOUNCE was answered, no track set up yet) and `Closed`. A request
//!   wrong for the state is answered 455, never silently dropped.
//! - One RTSP session per connection; its id exists from the first SETUP to TEARDOWN.
//! - Memory per session is bounded: the reader's limits, [`MAX_TRACKS`] tracks, the
//!   input buffered while an answer is pending, and what the caller leaves undrained.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use md5::{Digest as _, Md5};

use crate::auth::{AuthConfig, AuthOutcome, Authenticator};
use crate::error::RtspError;
use crate::message::{
    Incoming, MessageReader, Method, Request, Response, DEFAULT_MAX_BODY_LEN, MAX_HEAD_LEN,
};
use crate::transport::{
    choose_transport, ChannelPair, LowerTransport, Mode, NptRange, PlayRange, PortPair, RtpInfo,
    Scale, SessionHeader, Transport,
};

/// Default session timeout, announced in `Session: id;timeout=60` (RFC 2326's default).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(60);

/// Most media sections of an SDP that can be set up. Real streams have two or three;
/// the bound keeps a hostile ANNOUNCE from making us track thousands.
pub const MAX_TRACKS: usize = 32;

/// Largest input buffered while the application has not answered a pending request:
/// one more request with its body plus one interleaved frame. A client that sends more
/// without waiting for our answer is not a client we know.
fn max_pending_input(max_body: usize) -> usize {
    MAX_HEAD_LEN + max_body + 4 + usize::from(u16::MAX)
}

/// Which requests need credentials, when [`ServerConfig::auth`] is set.
#[derive(Debug, Clone, Copy, Default)]
pub enum AuthPolicy {
    /// Every request except OPTIONS.
    #[default]
    All,
    /// Publishing only: ANNOUNCE, RECORD, and any request on a session that was
    /// ANNOUNCEd. Players are not asked.
    Publish,
    /// The application decides from the request's path (no query) and method.
    Custom(fn(path: &str, method: &Method) -> bool),
}

/// What a [`ServerSession`] is configured with.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The `Server:` header value (default `Sluice`).
    pub server_name: String,
    /// Idle time after which the session times out (default
    /// [`DEFAULT_SESSION_TIMEOUT`]); announced to clients in the `Session` header.
    pub session_timeout: Duration,
    /// Largest request body (default [`DEFAULT_MAX_BODY_LEN`]).
    pub max_body: usize,
    /// Users and realm; `None` (the default) disables authentication.
    pub auth: Option<AuthConfig>,
    /// Which requests need credentials when `auth` is set.
    pub auth_policy: AuthPolicy,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            server_name: "Sluice".to_string(),
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            max_body: DEFAULT_MAX_BODY_LEN,
            auth: None,
            auth_policy: AuthPolicy::All,
        }
    }
}

/// What the session asks of its driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerOutput {
    /// A whole response to write to the socket, in order.
    Write(Bytes),
    /// Something the application must act on.
    Event(ServerEvent),
}

/// Something the application must act on. Events marked "answer" leave a request
/// pending until the named method is called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerEvent {
    /// A player asks for a stream's SDP. Answer: [`ServerSession::answer_describe`],
    /// [`ServerSession::not_found`] or [`ServerSession::reject`].
    Describe {
        /// The request path without query or trailing `/` (`/live/cam1`).
        path: String,
        /// The query without `?`, empty if none.
        query: String,
        /// The authenticated user, if authentication ran.
        user: Option<String>,
        /// The request's `Authorization` header when the session did not verify it
        /// itself (no `AuthConfig`, or not needed by its policy): the application's
        /// own check may use it, and [`ServerSession::reject_unauthorized`] ask for it.
        authorization: Option<String>,
    },
    /// A publisher announces a stream. Answer: [`ServerSession::accept_announce`] or
    /// [`ServerSession::reject`] (e.g. 403, or 455 when the path is already published).
    Announce {
        /// The request path.
        path: String,
        /// The query.
        query: String,
        /// The SDP body.
        sdp: Bytes,
        /// The authenticated user, if authentication ran.
        user: Option<String>,
        /// As in `Describe`.
        authorization: Option<String>,
    },
    /// A client sets up one track. Answer: [`ServerSession::answer_setup`] or
    /// [`ServerSession::reject`] (e.g. 453 when no UDP ports are free, 461).
    Setup {
        /// The stream path from the DESCRIBE or ANNOUNCE.
        path: String,
        /// The track's index among the SDP's media sections.
        track: usize,
        /// The track's `a=control:` value (empty when the SDP had none).
        track_control: String,
        /// The transport the client asked for (the first one we support).
        transport: Transport,
    },
    /// A player starts or resumes. Answer: [`ServerSession::answer_play`] or `reject`.
    Play {
        /// The requested range, if any: `npt` or `clock`.
        range: Option<PlayRange>,
        /// The requested `Scale`, if any (the server answers the one it plays at).
        scale: Option<Scale>,
    },
    /// A publisher starts sending. Answer: [`ServerSession::accept_record`] or `reject`.
    Record {
        /// The requested range, if any.
        range: Option<NptRange>,
    },
    /// Playing or recording paused; already answered. The session is Ready.
    Pause,
    /// The client ended the session; already answered. The connection may stay open.
    Teardown,
    /// An interleaved frame on a set-up track (publisher RTP/RTCP, or player RTCP).
    Interleaved {
        /// The channel it came on.
        channel: u8,
        /// The track that channel belongs to.
        track: usize,
        /// RTCP rather than RTP. Decided when the frame was read: a TEARDOWN later in
        /// the same input clears the set-ups before the application sees this event.
        rtcp: bool,
        /// The RTP or RTCP packet.
        payload: Bytes,
    },
    /// A keep-alive (GET_PARAMETER, SET_PARAMETER or OPTIONS within the session);
    /// already answered. The timeout was reset.
    KeepAlive,
    /// Nothing arrived for the session timeout. Final: drop the connection.
    Timeout,
}

/// The application's choice of server transport for a pending SETUP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetupAnswer {
    /// Interleave on the RTSP connection (the client asked for `RTP/AVP/TCP`).
    Interleaved {
        /// The channels (usually the ones the client proposed).
        channels: ChannelPair,
        /// Our SSRC for the track, if we send.
        ssrc: Option<u32>,
    },
    /// UDP (the client asked for `RTP/AVP` with `client_port`).
    Udp {
        /// Our ports.
        server_port: PortPair,
        /// Our SSRC for the track, if we send.
        ssrc: Option<u32>,
    },
}

/// Where one track's RTP starts after PLAY, for the `RTP-Info` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrackStart {
    /// The track index (as in [`ServerEvent::Setup`]).
    pub track: usize,
    /// Sequence number of the first packet this player gets.
    pub seq: u16,
    /// RTP timestamp of that packet.
    pub rtptime: u32,
}

/// A track that was set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackSetup {
    /// The track index.
    pub track: usize,
    /// The URL the client used in SETUP (echoed in `RTP-Info`).
    pub url: String,
    /// The transport as answered (client and server sides).
    pub transport: Transport,
}

/// A state of the RTSP session (RFC 2326 Appendix A, plus `Described` and `Closed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Expects OPTIONS, DESCRIBE or ANNOUNCE.
    Init,
    /// A DESCRIBE or ANNOUNCE was answered; expects SETUP.
    Described,
    /// Tracks set up; expects PLAY or RECORD (by direction), more SETUPs, TEARDOWN.
    Ready,
    /// Sending media; expects PAUSE, PLAY, TEARDOWN, keep-alives.
    Playing,
    /// Receiving media; expects PAUSE, RECORD, TEARDOWN, keep-alives, frames.
    Recording,
    /// Ended by an error or a timeout.
    Closed,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Init => "Init",
            State::Described => "Described",
            State::Ready => "Ready",
            State::Playing => "Playing",
            State::Recording => "Recording",
            State::Closed => "Closed",
        }
    }
}

/// The stream a DESCRIBE or ANNOUNCE chose.
#[derive(Debug, Clone)]
struct Stream {
    path: String,
    query: String,
    direction: Mode,
    /// `a=control:` of each media section, in order.
    tracks: Vec<String>,
}

/// A request the application has to answer.
#[derive(Debug)]
struct Pending {
    cseq: u32,
    kind: PendingKind,
}

#[derive(Debug)]
enum PendingKind {
    Describe {
        path: String,
        query: String,
        content_base: String,
    },
    Announce {
        path: String,
        query: String,
        sdp: Bytes,
    },
    Setup {
        track: usize,
        url: String,
        transport: Transport,
    },
    Play,
    Record,
}

/// Derives session ids and nonces from the caller's seed: MD5(seed ‖ counter).
/// Unpredictable as long as the seed is secret and came from a CSPRNG.
#[derive(Debug, Clone)]
pub(crate) struct Entropy {
    seed: [u8; 32],
    counter: u64,
}

impl Entropy {
    /// Draws from `seed`, which must be secret and come from a CSPRNG.
    pub(crate) fn new(seed: [u8; 32]) -> Self {
        Entropy { seed, counter: 0 }
    }

    /// The next 16 bytes.
    pub(crate) fn next(&mut self) -> [u8; 16] {
        self.counter = self.counter.wrapping_add(1);
        let mut h = Md5::new();
        h.update(self.seed);
        h.update(self.counter.to_be_bytes());
        h.finalize().into()
    }
}

/// The `Public:` header value.
fn public_methods() -> String {
    Method::SUPPORTED
        .iter()
        .map(Method::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// One server-side RTSP connection, sans-IO. See the module docs for the call contract.
#[derive(Debug)]
pub struct ServerSession {
    config: ServerConfig,
    state: State,
    input: BytesMut,
    reader: MessageReader,
    queue: VecDeque<ServerOutput>,
    pending: Option<Pending>,
    stream: Option<Stream>,
    session_id: Option<String>,
    setups: Vec<TrackSetup>,
    auth: Option<Authenticator>,
    user: Option<String>,
    entropy: Entropy,
    last_activity: Instant,
    now: Instant,
}

impl ServerSession {
    /// A session for a connection accepted at `now`. `seed` must come from a CSPRNG:
    /// session ids and Digest nonces are derived from it.
    pub fn new(config: ServerConfig, seed: [u8; 32], now: Instant) -> Self {
        ServerSession {
            reader: MessageReader::new(config.max_body),
            auth: config.auth.clone().map(Authenticator::new),
            config,
            state: State::Init,
            input: BytesMut::new(),
            queue: VecDeque::new(),
            pending: None,
            stream: None,
            session_id: None,
            setups: Vec::new(),
            user: None,
            entropy: Entropy::new(seed),
            last_activity: now,
            now,
        }
    }

    /// The state's name, for logs.
    pub fn state_name(&self) -> &'static str {
        self.state.name()
    }

    /// Whether the session ended (error or timeout); the driver drops the connection.
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// The RTSP session id, from the first SETUP until TEARDOWN.
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// The user that last authenticated on this connection.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The stream path chosen by DESCRIBE or ANNOUNCE.
    pub fn stream_path(&self) -> Option<&str> {
        self.stream.as_ref().map(|s| s.path.as_str())
    }

    /// The query of the DESCRIBE or ANNOUNCE URI (tokens live here).
    pub fn stream_query(&self) -> Option<&str> {
        self.stream.as_ref().map(|s| s.query.as_str())
    }

    /// The tracks set up so far, in SETUP order.
    pub fn setups(&self) -> &[TrackSetup] {
        &self.setups
    }

    /// Feeds bytes read from the socket at `now`. Any split of the stream is fine.
    pub fn handle_input(&mut self, now: Instant, bytes: &[u8]) -> Result<(), RtspError> {
        if self.state == State::Closed {
            return Err(RtspError::Closed);
        }
        self.input.extend_from_slice(bytes);
        self.take_input(now)
    }

    /// While recording (a publisher, whose RTP comes interleaved on this
    /// connection), the buffer the connection may read into directly; then call
    /// [`Self::handle_buffered`].
    pub fn input_buffer(&mut self) -> Option<&mut BytesMut> {
        (self.state == State::Recording).then_some(&mut self.input)
    }

    /// Processes what was read into [`Self::input_buffer`].
    pub fn handle_buffered(&mut self, now: Instant) -> Result<(), RtspError> {
        if self.state == State::Closed {
            return Err(RtspError::Closed);
        }
        self.take_input(now)
    }

    fn take_input(&mut self, now: Instant) -> Result<(), RtspError> {
        self.now = now;
        self.last_activity = now;
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

    /// When [`handle_timeout`](Self::handle_timeout) must be called; `None` once closed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        (self.state != State::Closed).then(|| self.last_activity + self.config.session_timeout)
    }

    /// Advances time: past the deadline the session emits [`ServerEvent::Timeout`] and
    /// closes.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        if self.state != State::Closed && now >= self.last_activity + self.config.session_timeout {
            self.event(ServerEvent::Timeout);
            self.close();
        }
    }

    /// Resets the timeout: RTP or RTCP for this session arrived over UDP at `now`.
    pub fn note_activity(&mut self, now: Instant) {
        if now > self.last_activity {
            self.last_activity = now;
        }
    }

    /// Answers a pending DESCRIBE with `sdp` (200, `Content-Base`, `application/sdp`).
    /// The session reads track controls from the SDP's `a=control:` lines.
    pub fn answer_describe(&mut self, sdp: Bytes) -> Result<(), RtspError> {
        let (cseq, kind) = self.take_pending("answer_describe", |k| {
            matches!(k, PendingKind::Describe { .. })
        })?;
        let PendingKind::Describe {
            path,
            query,
            content_base,
        } = kind
        else {
            return Err(RtspError::NotPending {
                answer: "answer_describe",
            });
        };
        self.stream = Some(Stream {
            path,
            query,
            direction: Mode::Play,
            tracks: sdp_track_controls(&sdp),
        });
        self.state = State::Described;
        let mut resp = Response::new(200)
            .with_header("Content-Base", content_base)
            .with_header("Content-Type", "application/sdp");
        resp.body = sdp;
        self.respond(Some(cseq), resp);
        self.resume()
    }

    /// Accepts a pending ANNOUNCE (200); SETUPs with `mode=record` may follow.
    pub fn accept_announce(&mut self) -> Result<(), RtspError> {
        let (cseq, kind) = self.take_pending("accept_announce", |k| {
            matches!(k, PendingKind::Announce { .. })
        })?;
        let PendingKind::Announce { path, query, sdp } = kind else {
            return Err(RtspError::NotPending {
                answer: "accept_announce",
            });
        };
        self.stream = Some(Stream {
            path,
            query,
            direction: Mode::Record,
            tracks: sdp_track_controls(&sdp),
        });
        self.state = State::Described;
        self.respond(Some(cseq), Response::new(200));
        self.resume()
    }

    /// Answers a pending SETUP with our side of the transport. The answer must match the
    /// client's lower transport, and interleaved channels must not be in use by another
    /// track; otherwise [`RtspError::BadAnswer`] and the SETUP stays pending.
    pub fn answer_setup(&mut self, answer: SetupAnswer) -> Result<(), RtspError> {
        let Some(Pending {
            kind: PendingKind::Setup { transport, .. },
            ..
        }) = &self.pending
        else {
            return Err(RtspError::NotPending {
                answer: "answer_setup",
            });
        };
        let mut reply = transport.clone();
        match answer {
            SetupAnswer::Interleaved { channels, ssrc } => {
                if reply.lower != LowerTransport::Tcp {
                    return Err(RtspError::BadAnswer {
                        what: "interleaved channels for a UDP transport",
                    });
                }
                let in_use = self.setups.iter().filter_map(|s| s.transport.interleaved);
                for used in in_use {
                    let taken = [used.rtp, used.rtcp];
                    if taken.contains(&channels.rtp) || taken.contains(&channels.rtcp) {
                        return Err(RtspError::BadAnswer {
                            what: "interleaved channel already in use",
                        });
                    }
                }
                reply.interleaved = Some(channels);
                reply.ssrc = ssrc;
            }
            SetupAnswer::Udp { server_port, ssrc } => {
                if reply.lower != LowerTransport::Udp {
                    return Err(RtspError::BadAnswer {
                        what: "UDP ports for a TCP transport",
                    });
                }
                reply.server_port = Some(server_port);
                reply.ssrc = ssrc;
            }
        }
        let (cseq, kind) =
            self.take_pending("answer_setup", |k| matches!(k, PendingKind::Setup { .. }))?;
        let PendingKind::Setup { track, url, .. } = kind else {
            return Err(RtspError::NotPending {
                answer: "answer_setup",
            });
        };
        let direction = self.stream.as_ref().map_or(Mode::Play, |s| s.direction);
        reply.mode = direction;
        if self.session_id.is_none() {
            let mut id = String::with_capacity(16);
            for b in self.entropy.next().iter().take(8) {
                let _ = write!(id, "{b:02X}");
            }
            self.session_id = Some(id);
        }
        let header = reply.to_string();
        self.setups.push(TrackSetup {
            track,
            url,
            transport: reply,
        });
        self.state = State::Ready;
        self.respond(
            Some(cseq),
            Response::new(200).with_header("Transport", header),
        );
        self.resume()
    }

    /// Answers a pending PLAY (200, `Range`, `RTP-Info` for the given tracks); media may
    /// follow at once, after this response.
    pub fn answer_play(
        &mut self,
        starts: &[TrackStart],
        range: Option<NptRange>,
    ) -> Result<(), RtspError> {
        self.answer_play_at(starts, range.map(PlayRange::Npt), None)
    }

    /// [`ServerSession::answer_play`] with any kind of range (the one served, e.g. a
    /// `clock=` range for a `clock=` request) and the `Scale` played at, if one was
    /// asked for.
    pub fn answer_play_at(
        &mut self,
        starts: &[TrackStart],
        range: Option<PlayRange>,
        scale: Option<Scale>,
    ) -> Result<(), RtspError> {
        if !matches!(
            self.pending,
            Some(Pending {
                kind: PendingKind::Play,
                ..
            })
        ) {
            return Err(RtspError::NotPending {
                answer: "answer_play",
            });
        }
        let mut infos = Vec::with_capacity(starts.len());
        for s in starts {
            let setup =
                self.setups
                    .iter()
                    .find(|t| t.track == s.track)
                    .ok_or(RtspError::BadAnswer {
                        what: "RTP-Info for a track that was not set up",
                    })?;
            infos.push(RtpInfo {
                url: setup.url.clone(),
                seq: Some(s.seq),
                rtptime: Some(s.rtptime),
            });
        }
        let (cseq, _) = self.take_pending("answer_play", |k| matches!(k, PendingKind::Play))?;
        let mut resp = Response::new(200);
        if let Some(r) = range {
            resp.headers.append("Range", r.to_string());
        }
        if let Some(scale) = scale {
            resp.headers.append("Scale", scale.to_string());
        }
        if !infos.is_empty() {
            resp.headers
                .append("RTP-Info", RtpInfo::format_list(&infos));
        }
        self.state = State::Playing;
        self.respond(Some(cseq), resp);
        self.resume()
    }

    /// Accepts a pending RECORD (200); the publisher's media follows.
    pub fn accept_record(&mut self) -> Result<(), RtspError> {
        let (cseq, _) = self.take_pending("accept_record", |k| matches!(k, PendingKind::Record))?;
        self.state = State::Recording;
        self.respond(Some(cseq), Response::new(200));
        self.resume()
    }

    /// Refuses the pending request with `status` (a 3xx-5xx code); the state is
    /// unchanged.
    pub fn reject(&mut self, status: u16) -> Result<(), RtspError> {
        if !(300..=599).contains(&status) {
            return Err(RtspError::BadAnswer {
                what: "a rejection needs a 3xx-5xx status",
            });
        }
        let (cseq, _) = self.take_pending("reject", |_| true)?;
        self.respond(Some(cseq), Response::new(status));
        self.resume()
    }

    /// Answers the pending request `302 Found` with `location` (an `rtsp://` URL):
    /// the client asks there instead (a cluster node sending a player to another).
    /// A location with control characters is refused, the request left pending.
    pub fn redirect(&mut self, location: &str) -> Result<(), RtspError> {
        if location.is_empty() || location.chars().any(char::is_control) {
            return Err(RtspError::BadAnswer {
                what: "a redirect needs a location without control characters",
            });
        }
        let (cseq, _) = self.take_pending("redirect", |_| true)?;
        let mut resp = Response::new(302);
        resp.headers.append("Location", location.to_string());
        self.respond(Some(cseq), resp);
        self.resume()
    }

    /// Refuses the pending request with 401 and a Basic challenge for `realm`, so that a
    /// client with credentials in its URL sends them (the application checks them in
    /// the retry's `authorization`). Basic sends the password as it is: over a network
    /// that is not trusted, use RTSPS or signed URLs.
    pub fn reject_unauthorized(&mut self, realm: &str) -> Result<(), RtspError> {
        let (cseq, _) = self.take_pending("reject", |_| true)?;
        let mut resp = Response::new(401);
        let realm = realm.replace(['"', '\\'], "");
        resp.headers
            .append("WWW-Authenticate", format!("Basic realm=\"{realm}\""));
        self.respond(Some(cseq), resp);
        self.resume()
    }

    fn unverified_authorization(&self, req: &Request) -> Option<String> {
        if self.user.is_some() {
            return None;
        }
        req.header("Authorization").map(str::to_owned)
    }

    /// Refuses the pending request with 404 Not Found (no such stream).
    pub fn not_found(&mut self) -> Result<(), RtspError> {
        self.reject(404)
    }

    fn take_pending(
        &mut self,
        answer: &'static str,
        fits: impl Fn(&PendingKind) -> bool,
    ) -> Result<(u32, PendingKind), RtspError> {
        match self.pending.take() {
            Some(p) if fits(&p.kind) => Ok((p.cseq, p.kind)),
            other => {
                self.pending = other;
                Err(RtspError::NotPending { answer })
            }
        }
    }

    /// Goes on with buffered input after an answer. A framing error found here closes
    /// the session like one found in `handle_input`.
    fn resume(&mut self) -> Result<(), RtspError> {
        if self.state == State::Closed {
            return Ok(());
        }
        let result = self.process();
        if result.is_err() {
            self.close();
        }
        result
    }

    fn close(&mut self) {
        self.state = State::Closed;
        self.pending = None;
        self.input = BytesMut::new();
    }

    fn event(&mut self, e: ServerEvent) {
        self.queue.push_back(ServerOutput::Event(e));
    }

    /// Reads and handles messages until input runs out or an answer is pending.
    fn process(&mut self) -> Result<(), RtspError> {
        while self.pending.is_none() && self.state != State::Closed {
            match self.reader.read(&mut self.input) {
                Ok(None) => break,
                Ok(Some(Incoming::Interleaved { channel, payload })) => {
                    self.on_interleaved(channel, payload)?;
                }
                Ok(Some(Incoming::Request(req))) => self.on_request(req),
                Err(e) => {
                    let status = match e {
                        RtspError::TooLarge { what: "body", .. } => 413,
                        _ => 400,
                    };
                    self.respond(None, Response::new(status));
                    return Err(e);
                }
            }
        }
        if self.pending.is_some() {
            let limit = max_pending_input(self.config.max_body);
            if self.input.len() > limit {
                return Err(RtspError::TooLarge {
                    what: "input while an answer is pending",
                    len: self.input.len(),
                    limit,
                });
            }
        } else if self.input.is_empty() && self.state != State::Recording {
            // An idle connection holds no buffer; a publisher keeps the one its
            // connection reads into.
            self.input = BytesMut::new();
        }
        Ok(())
    }

    fn on_interleaved(&mut self, channel: u8, payload: Bytes) -> Result<(), RtspError> {
        let track = self.setups.iter().find_map(|s| {
            s.transport
                .interleaved
                .filter(|c| c.rtp == channel || c.rtcp == channel)
                .map(|c| (s.track, c.rtcp == channel))
        });
        match track {
            Some((track, rtcp)) => {
                self.event(ServerEvent::Interleaved {
                    channel,
                    track,
                    rtcp,
                    payload,
                });
                Ok(())
            }
            None => Err(RtspError::Unexpected {
                got: "interleaved frame on a channel that was not set up",
                state: self.state.name(),
            }),
        }
    }

    /// Queues a response with the headers every response carries.
    fn respond(&mut self, cseq: Option<u32>, mut resp: Response) {
        let mut headers = crate::message::Headers::new();
        if let Some(cseq) = cseq {
            headers.append("CSeq", cseq.to_string());
        }
        headers.append("Server", self.config.server_name.clone());
        if let Some(id) = &self.session_id {
            let h = SessionHeader {
                id: id.clone(),
                timeout: u32::try_from(self.config.session_timeout.as_secs()).ok(),
            };
            headers.append("Session", h.to_string());
        }
        for (n, v) in resp.headers.iter() {
            headers.append(n, v);
        }
        resp.headers = headers;
        let mut out = BytesMut::new();
        resp.encode(&mut out);
        self.queue.push_back(ServerOutput::Write(out.freeze()));
    }

    fn on_request(&mut self, req: Request) {
        let cseq = match req.headers.cseq() {
            Some(Ok(c)) => c,
            // RFC 2326 §12.17: CSeq is required; without it we cannot even echo one.
            _ => return self.respond(None, Response::new(400)),
        };
        if req.version.major != 1 {
            return self.respond(Some(cseq), Response::new(505));
        }
        if let Method::Other(_) = req.method {
            let resp = Response::new(501).with_header("Public", public_methods());
            return self.respond(Some(cseq), resp);
        }
        let Some((path, query)) = split_uri(&req.uri) else {
            return self.respond(Some(cseq), Response::new(400));
        };
        if !self.authorized(cseq, &req, &path) {
            return;
        }
        if let Some(value) = req.header("Session") {
            let matches = match (SessionHeader::parse(value), &self.session_id) {
                (Ok(h), Some(ours)) => h.id == *ours,
                _ => false,
            };
            if !matches {
                return self.respond(Some(cseq), Response::new(454));
            }
        }
        match req.method {
            Method::Options => {
                let resp = Response::new(200).with_header("Public", public_methods());
                self.respond(Some(cseq), resp);
                self.keep_alive();
            }
            Method::Describe => self.on_describe(cseq, &req, path, query),
            Method::Announce => self.on_announce(cseq, req, path, query),
            Method::Setup => self.on_setup(cseq, &req),
            Method::Play => self.on_play_or_record(cseq, &req, Mode::Play),
            Method::Record => self.on_play_or_record(cseq, &req, Mode::Record),
            Method::Pause => self.on_pause(cseq),
            Method::Teardown => self.on_teardown(cseq),
            Method::GetParameter => {
                self.respond(Some(cseq), Response::new(200));
                self.keep_alive();
            }
            Method::SetParameter => {
                // We have no parameters to set; an empty body is a keep-alive.
                let status = if req.body.is_empty() { 200 } else { 451 };
                self.respond(Some(cseq), Response::new(status));
                self.keep_alive();
            }
            Method::Other(_) => {}
        }
    }

    fn keep_alive(&mut self) {
        if self.session_id.is_some() {
            self.event(ServerEvent::KeepAlive);
        }
    }

    /// Checks credentials when the config and policy ask for them; answers 401 and
    /// returns `false` when they are missing or wrong.
    fn authorized(&mut self, cseq: u32, req: &Request, path: &str) -> bool {
        let Some(auth) = &mut self.auth else {
            return true;
        };
        if req.method == Method::Options {
            return true;
        }
        let needed = match self.config.auth_policy {
            AuthPolicy::All => true,
            AuthPolicy::Publish => {
                matches!(req.method, Method::Announce | Method::Record)
                    || self
                        .stream
                        .as_ref()
                        .is_some_and(|s| s.direction == Mode::Record)
            }
            AuthPolicy::Custom(f) => f(path, &req.method),
        };
        if !needed {
            return true;
        }
        let outcome = auth.verify(req.method.as_str(), req.header("Authorization"), self.now);
        let stale = match outcome {
            AuthOutcome::Granted { user } => {
                self.user = Some(user);
                return true;
            }
            AuthOutcome::Stale => true,
            AuthOutcome::Missing | AuthOutcome::Denied => false,
        };
        let challenges = auth.challenge(self.now, self.entropy.next(), stale);
        let mut resp = Response::new(401);
        for c in challenges {
            resp.headers.append("WWW-Authenticate", c);
        }
        self.respond(Some(cseq), resp);
        false
    }

    /// 455 Method Not Valid in This State; the session is unchanged.
    fn not_valid_in_state(&mut self, cseq: u32) {
        self.respond(Some(cseq), Response::new(455));
    }

    fn on_describe(&mut self, cseq: u32, req: &Request, path: String, query: String) {
        if !matches!(self.state, State::Init | State::Described) {
            return self.not_valid_in_state(cseq);
        }
        let mut content_base = req.uri.clone();
        if !content_base.ends_with('/') {
            content_base.push('/');
        }
        self.pending = Some(Pending {
            cseq,
            kind: PendingKind::Describe {
                path: path.clone(),
                query: query.clone(),
                content_base,
            },
        });
        let user = self.user.clone();
        let authorization = self.unverified_authorization(req);
        self.event(ServerEvent::Describe {
            path,
            query,
            user,
            authorization,
        });
    }

    fn on_announce(&mut self, cseq: u32, req: Request, path: String, query: String) {
        if !matches!(self.state, State::Init | State::Described) {
            return self.not_valid_in_state(cseq);
        }
        if let Some(ct) = req.header("Content-Type") {
            let mime = ct.split(';').next().unwrap_or("").trim();
            if !mime.eq_ignore_ascii_case("application/sdp") {
                return self.respond(Some(cseq), Response::new(415));
            }
        }
        if req.body.is_empty() {
            return self.respond(Some(cseq), Response::new(400));
        }
        self.pending = Some(Pending {
            cseq,
            kind: PendingKind::Announce {
                path: path.clone(),
                query: query.clone(),
                sdp: req.body.clone(),
            },
        });
        let user = self.user.clone();
        let authorization = self.unverified_authorization(&req);
        self.event(ServerEvent::Announce {
            path,
            query,
            sdp: req.body,
            user,
            authorization,
        });
    }

    fn on_setup(&mut self, cseq: u32, req: &Request) {
        // Changing the transport of a playing or recording session is not supported.
        if !matches!(self.state, State::Described | State::Ready) {
            return self.not_valid_in_state(cseq);
        }
        let Some(stream) = &self.stream else {
            return self.not_valid_in_state(cseq);
        };
        let Some(track) = resolve_track(stream, &req.uri) else {
            return self.respond(Some(cseq), Response::new(404));
        };
        if self.setups.iter().any(|s| s.track == track) {
            return self.not_valid_in_state(cseq);
        }
        let Some(header) = req.header("Transport") else {
            return self.respond(Some(cseq), Response::new(400));
        };
        let Some(transport) = choose_transport(header) else {
            return self.respond(Some(cseq), Response::new(461));
        };
        if stream.direction == Mode::Play && transport.mode == Mode::Record {
            return self.respond(Some(cseq), Response::new(461));
        }
        let path = stream.path.clone();
        let track_control = stream.tracks.get(track).cloned().unwrap_or_default();
        self.pending = Some(Pending {
            cseq,
            kind: PendingKind::Setup {
                track,
                url: req.uri.clone(),
                transport: transport.clone(),
            },
        });
        self.event(ServerEvent::Setup {
            path,
            track,
            track_control,
            transport,
        });
    }

    fn on_play_or_record(&mut self, cseq: u32, req: &Request, wanted: Mode) {
        let direction = self.stream.as_ref().map(|s| s.direction);
        let state_ok = match wanted {
            Mode::Play => matches!(self.state, State::Ready | State::Playing),
            Mode::Record => matches!(self.state, State::Ready | State::Recording),
        };
        if !state_ok || direction != Some(wanted) {
            return self.not_valid_in_state(cseq);
        }
        let range = req.header("Range");
        let (kind, event) = match wanted {
            Mode::Play => {
                let range = match range.map(PlayRange::parse).transpose() {
                    Ok(r) => r,
                    Err(_) => return self.respond(Some(cseq), Response::new(457)),
                };
                let scale = match req.header("Scale").map(Scale::parse).transpose() {
                    Ok(s) => s,
                    Err(_) => return self.respond(Some(cseq), Response::new(400)),
                };
                (PendingKind::Play, ServerEvent::Play { range, scale })
            }
            Mode::Record => {
                let range = match range.map(NptRange::parse).transpose() {
                    Ok(r) => r,
                    Err(_) => return self.respond(Some(cseq), Response::new(457)),
                };
                (PendingKind::Record, ServerEvent::Record { range })
            }
        };
        self.pending = Some(Pending { cseq, kind });
        self.event(event);
    }

    fn on_pause(&mut self, cseq: u32) {
        match self.state {
            State::Playing | State::Recording => {
                self.state = State::Ready;
                self.respond(Some(cseq), Response::new(200));
                self.event(ServerEvent::Pause);
            }
            State::Ready => self.respond(Some(cseq), Response::new(200)),
            _ => self.not_valid_in_state(cseq),
        }
    }

    fn on_teardown(&mut self, cseq: u32) {
        self.respond(Some(cseq), Response::new(200));
        let had_session = self.session_id.is_some();
        self.state = State::Init;
        self.stream = None;
        self.session_id = None;
        self.setups.clear();
        if had_session {
            self.event(ServerEvent::Teardown);
        }
    }
}

/// Splits a Request-URI into path (no trailing `/`) and query. `*` is its own path.
/// `None` when the URI is neither absolute (`scheme://authority/...`) nor a path.
fn split_uri(uri: &str) -> Option<(String, String)> {
    if uri == "*" {
        return Some(("*".to_string(), String::new()));
    }
    let rest = after_authority(uri)?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let trimmed = path.trim_end_matches('/');
    let path = if trimmed.is_empty() { "/" } else { trimmed };
    Some((path.to_string(), query.to_string()))
}

/// The part of a URI after `scheme://authority` (starting with `/`, or `/` if empty).
pub(crate) fn after_authority(uri: &str) -> Option<&str> {
    if uri.starts_with('/') {
        return Some(uri);
    }
    let (_, rest) = uri.split_once("://")?;
    Some(rest.find('/').and_then(|i| rest.get(i..)).unwrap_or("/"))
}

/// Which track a SETUP URI names: an absolute control compares after the authority
/// (clients rewrite hosts); a relative one must be the URI's last segment(s), after the
/// stream's path (possibly with its query, as ffmpeg builds it); a track without
/// control is the stream URI itself when it is the only track.
fn resolve_track(stream: &Stream, uri: &str) -> Option<usize> {
    let target = after_authority(uri)?;
    let stream_path_of = |prefix: &str| split_uri(prefix).map(|(p, _)| p);
    stream.tracks.iter().enumerate().find_map(|(i, control)| {
        let is_absolute = control.contains("://");
        let hit = if is_absolute {
            after_authority(control)
                .is_some_and(|c| c.trim_end_matches('/') == target.trim_end_matches('/'))
        } else if control.is_empty() || control == "*" {
            stream.tracks.len() == 1 && stream_path_of(target).as_deref() == Some(&stream.path)
        } else {
            target
                .strip_suffix(control.as_str())
                .and_then(|prefix| prefix.strip_suffix('/'))
                .is_some_and(|prefix| stream_path_of(prefix).as_deref() == Some(&stream.path))
        };
        hit.then_some(i)
    })
}

/// The `a=control:` value of each media section (empty when a section has none), at
/// most [`MAX_TRACKS`].
fn sdp_track_controls(sdp: &[u8]) -> Vec<String> {
    let mut tracks: Vec<String> = Vec::new();
    let mut in_media = false;
    for line in sdp.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.starts_with(b"m=") {
            if tracks.len() == MAX_TRACKS {
                break;
            }
            tracks.push(String::new());
            in_media = true;
        } else if let Some(control) = line.strip_prefix(b"a=control:") {
            if let (true, Some(last)) = (in_media, tracks.last_mut()) {
                *last = String::from_utf8_lossy(control).trim().to_string();
            }
        }
    }
    tracks
}

/// The shared session shape (see `sluice_session`): RTSP takes its connection's bytes
/// (RTP over UDP reaches the application, which notes it with
/// [`ServerSession::note_activity`]); its events stay RTSP's own [`ServerEvent`].
impl sluice_session::Session for ServerSession {
    type Event = ServerEvent;
    type Error = RtspError;

    fn handle_input(
        &mut self,
        now: Instant,
        input: sluice_session::Input<'_>,
    ) -> Result<(), RtspError> {
        match input {
            sluice_session::Input::Stream(bytes) => ServerSession::handle_input(self, now, bytes),
            sluice_session::Input::Datagram { .. } => Err(RtspError::Malformed {
                what: "a datagram on the RTSP connection",
            }),
        }
    }

    fn input_buffer(&mut self) -> Option<&mut BytesMut> {
        ServerSession::input_buffer(self)
    }

    fn handle_buffered(&mut self, now: Instant) -> Result<(), RtspError> {
        ServerSession::handle_buffered(self, now)
    }

    fn handle_timeout(&mut self, now: Instant) {
        ServerSession::handle_timeout(self, now);
    }

    fn poll_output(&mut self) -> Option<sluice_session::Output<ServerEvent>> {
        ServerSession::poll_output(self).map(|o| match o {
            ServerOutput::Write(data) => {
                sluice_session::Output::Transmit(sluice_session::Transmit::stream(data))
            }
            ServerOutput::Event(e) => sluice_session::Output::Event(e),
        })
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

    fn stream(tracks: &[&str]) -> Stream {
        Stream {
            path: "/live/s".into(),
            query: String::new(),
            direction: Mode::Play,
            tracks: tracks.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn uris_split() {
        assert_eq!(
            split_uri("rtsp://h:8554/live/s/?a=1"),
            Some(("/live/s".into(), "a=1".into()))
        );
        assert_eq!(
            split_uri("rtsp://h:8554"),
            Some(("/".into(), String::new()))
        );
        assert_eq!(split_uri("/x"), Some(("/x".into(), String::new())));
        assert_eq!(split_uri("nonsense"), None);
    }

    #[test]
    fn tracks_resolve() {
        let s = stream(&["trackID=0", "trackID=1"]);
        assert_eq!(resolve_track(&s, "rtsp://h/live/s/trackID=1"), Some(1));
        assert_eq!(
            resolve_track(&s, "rtsp://other:1/live/s/trackID=0"),
            Some(0)
        );
        assert_eq!(
            resolve_track(&s, "rtsp://h/live/s?tok=1/trackID=0"),
            Some(0)
        );
        assert_eq!(resolve_track(&s, "rtsp://h/live/x/trackID=0"), None);
        assert_eq!(resolve_track(&s, "rtsp://h/live/s/trackID=2"), None);
        assert_eq!(resolve_track(&s, "rtsp://h/live/strackID=0"), None);
        let abs = stream(&["rtsp://cam/live/s/video"]);
        assert_eq!(resolve_track(&abs, "rtsp://10.0.0.1/live/s/video"), Some(0));
        let single = stream(&[""]);
        assert_eq!(resolve_track(&single, "rtsp://h/live/s/"), Some(0));
    }

    #[test]
    fn sdp_controls() {
        let sdp = b"v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=x\r\na=control:*\r\nm=video 0 RTP/AVP 96\r\na=control:streamid=0\r\nm=audio 0 RTP/AVP 97\r\nm=application 0 RTP/AVP 98\r\na=control:streamid=2\r\n";
        assert_eq!(
            sdp_track_controls(sdp),
            vec!["streamid=0", "", "streamid=2"]
        );
        let many = "m=video 0 RTP/AVP 96\r\n".repeat(1000);
        assert_eq!(sdp_track_controls(many.as_bytes()).len(), MAX_TRACKS);
    }
}
