//! [`ClientSession`]: the requests, the answers and the timers of one client
//! connection. The reading of bytes is in `input`; the call contract is in the module
//! docs of `client`.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use super::credentials::Answerer;
use super::{
    proposed_channels, resolve_control, ClientConfig, ClientEvent, ClientOutput, ClientTrack,
    ClientTransport, Refusal,
};
use crate::error::RtspError;
use crate::message::{encode_interleaved, MessageReader, Method, Request, Response};
use crate::session::{after_authority, Entropy, DEFAULT_SESSION_TIMEOUT, MAX_TRACKS};
use crate::transport::{parse_transports, Mode, NptRange, RtpInfo, SessionHeader, Transport};

/// Most requests in flight at once: the caller's, a keep-alive, a TEARDOWN and a retry
/// fit with room to spare; more means the server stopped answering.
pub const MAX_IN_FLIGHT: usize = 8;

/// Most methods kept from a `Public:` header.
const MAX_PUBLIC: usize = 32;

/// Where the session is (RFC 2326 Appendix A, client side, plus `Described` and
/// `Closed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No stream described or announced.
    Init,
    /// DESCRIBE or ANNOUNCE answered; SETUPs may go.
    Described,
    /// At least one track set up.
    Ready,
    /// PLAY answered.
    Playing,
    /// RECORD answered.
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

/// What a request in flight was for.
#[derive(Debug, Clone)]
enum Kind {
    Options,
    KeepAlive,
    Describe,
    Announce,
    Setup {
        control: String,
        requested: Transport,
    },
    Play,
    Record,
    Pause,
    Teardown,
}

/// A request sent and not answered yet, kept whole to be sent again after a 401.
#[derive(Debug, Clone)]
struct InFlight {
    cseq: u32,
    kind: Kind,
    method: Method,
    uri: String,
    headers: Vec<(&'static str, String)>,
    body: Bytes,
    /// Sent again after a 401 already.
    retried: bool,
    sent_credentials: bool,
    sent_at: Instant,
    /// The TEARDOWN count when it was sent: answers from before the last TEARDOWN
    /// change nothing.
    generation: u32,
    /// The session id it carried.
    session: Option<String>,
}

/// One client-side RTSP connection, sans-IO. See the `client` module docs for the call
/// contract.
#[derive(Debug)]
pub struct ClientSession {
    config: ClientConfig,
    state: State,
    /// Play after DESCRIBE, record after ANNOUNCE.
    direction: Option<Mode>,
    pub(super) input: BytesMut,
    pub(super) reader: MessageReader,
    queue: VecDeque<ClientOutput>,
    /// Events queued so far (the in-place reader stops after each).
    pub(super) events: u64,
    in_flight: VecDeque<InFlight>,
    cseq: u32,
    generation: u32,
    session_id: Option<String>,
    session_timeout: Duration,
    keepalive: Method,
    /// What controls resolve against.
    base: String,
    /// Where PLAY, RECORD, PAUSE, TEARDOWN and keep-alives go.
    aggregate: String,
    tracks: Vec<ClientTrack>,
    auth: Option<Answerer>,
    entropy: Entropy,
    pub(super) now: Instant,
    last_request: Instant,
}

impl ClientSession {
    /// A session for a connection opened at `now`. `seed` must come from a CSPRNG:
    /// Digest client nonces are derived from it.
    pub fn new(config: ClientConfig, seed: [u8; 32], now: Instant) -> Self {
        ClientSession {
            reader: MessageReader::new(config.max_body),
            base: config.url.clone(),
            aggregate: config.url.clone(),
            config,
            state: State::Init,
            direction: None,
            input: BytesMut::new(),
            queue: VecDeque::new(),
            events: 0,
            in_flight: VecDeque::new(),
            cseq: 0,
            generation: 0,
            session_id: None,
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            keepalive: Method::Options,
            tracks: Vec::new(),
            auth: None,
            entropy: Entropy::new(seed),
            now,
            last_request: now,
        }
    }

    /// The state's name, for logs.
    pub fn state_name(&self) -> &'static str {
        self.state.name()
    }

    /// Whether the session ended (an error or a timeout); drop the connection.
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// The RTSP session id, from the first SETUP answer until TEARDOWN.
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// The session timeout the server announced (60 s when it did not).
    pub fn session_timeout(&self) -> Duration {
        self.session_timeout
    }

    /// How long after the last request a keep-alive goes: half the session timeout,
    /// at least a second.
    pub fn keepalive_interval(&self) -> Duration {
        (self.session_timeout / 2).max(Duration::from_secs(1))
    }

    /// The method keep-alives use: GET_PARAMETER when the OPTIONS answer listed it.
    pub fn keepalive_method(&self) -> &Method {
        &self.keepalive
    }

    /// Where PLAY, RECORD, PAUSE, TEARDOWN and keep-alives go: after DESCRIBE the SDP's
    /// session-level control resolved against the base URL, else the configured URL.
    pub fn aggregate_url(&self) -> &str {
        &self.aggregate
    }

    /// The tracks set up, in SETUP order.
    pub fn tracks(&self) -> &[ClientTrack] {
        &self.tracks
    }

    /// The track whose interleaved RTP or RTCP channel is `channel`.
    pub fn track_of_channel(&self, channel: u8) -> Option<usize> {
        self.tracks.iter().position(|t| {
            t.transport
                .interleaved
                .is_some_and(|c| c.rtp == channel || c.rtcp == channel)
        })
    }

    /// Whether a request is waiting for its answer.
    pub fn is_waiting(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// Frames `payload` as interleaved RTP (or RTCP when `rtcp`) of track `track` into
    /// `out`, on the channel the SETUP answer gave. For publishers over TCP: write `out`
    /// between the session's `Write`s, never inside one.
    pub fn encode_interleaved(
        &self,
        track: usize,
        rtcp: bool,
        payload: &[u8],
        out: &mut BytesMut,
    ) -> Result<(), RtspError> {
        let channels = self
            .tracks
            .get(track)
            .and_then(|t| t.transport.interleaved)
            .ok_or(RtspError::NotNow {
                request: "interleaved frame",
                why: "the track is not set up over TCP",
            })?;
        let channel = if rtcp { channels.rtcp } else { channels.rtp };
        encode_interleaved(channel, payload, out)
    }

    /// The next output; drain to `None` after every call into the session.
    pub fn poll_output(&mut self) -> Option<ClientOutput> {
        self.queue.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called: the next
    /// keep-alive (a session exists and nothing is in flight) or the limit on the
    /// oldest request's answer. `None` when neither applies, or once closed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.state == State::Closed {
            return None;
        }
        let answer = self
            .config
            .response_timeout
            .and_then(|t| self.in_flight.front().map(|r| r.sent_at + t));
        match (answer, self.keepalive_due()) {
            (Some(a), Some(k)) => Some(a.min(k)),
            (a, k) => a.or(k),
        }
    }

    /// Advances time: sends a keep-alive when one is due, or ends the session with
    /// [`ClientEvent::Timeout`] when an answer is overdue.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        if self.state == State::Closed {
            return;
        }
        if let (Some(limit), Some(oldest)) = (self.config.response_timeout, self.in_flight.front())
        {
            if self.now >= oldest.sent_at + limit {
                let method = oldest.method.clone();
                self.event(ClientEvent::Timeout { method });
                self.close();
                return;
            }
        }
        if self.keepalive_due().is_some_and(|due| self.now >= due) {
            let (method, uri) = (self.keepalive.clone(), self.aggregate.clone());
            self.send(
                Kind::KeepAlive,
                method,
                uri,
                Vec::new(),
                Bytes::new(),
                false,
            );
        }
    }

    fn keepalive_due(&self) -> Option<Instant> {
        (self.session_id.is_some() && self.in_flight.is_empty())
            .then(|| self.last_request + self.keepalive_interval())
    }

    /// Sends OPTIONS to the configured URL; answered by [`ClientEvent::Options`].
    pub fn options(&mut self) -> Result<(), RtspError> {
        self.may_send("OPTIONS")?;
        let uri = self.config.url.clone();
        self.send(
            Kind::Options,
            Method::Options,
            uri,
            Vec::new(),
            Bytes::new(),
            false,
        );
        Ok(())
    }

    /// Sends DESCRIBE for the configured URL; answered by [`ClientEvent::Described`].
    pub fn describe(&mut self) -> Result<(), RtspError> {
        self.may_send("DESCRIBE")?;
        self.no_session("DESCRIBE")?;
        let uri = self.config.url.clone();
        let accept = vec![("Accept", "application/sdp".to_string())];
        self.send(
            Kind::Describe,
            Method::Describe,
            uri,
            accept,
            Bytes::new(),
            false,
        );
        Ok(())
    }

    /// Sends ANNOUNCE of `sdp` to the configured URL; answered by
    /// [`ClientEvent::Announced`]. SETUPs then name the controls of `sdp`.
    pub fn announce(&mut self, sdp: Bytes) -> Result<(), RtspError> {
        self.may_send("ANNOUNCE")?;
        self.no_session("ANNOUNCE")?;
        let uri = self.config.url.clone();
        let ct = vec![("Content-Type", "application/sdp".to_string())];
        self.send(Kind::Announce, Method::Announce, uri, ct, sdp, false);
        Ok(())
    }

    /// Sends SETUP for the media section whose `a=control:` is `control` (resolved
    /// against the base URL), with `mode=record` after ANNOUNCE. Returns the index the
    /// track will have; answered by [`ClientEvent::SetUp`].
    pub fn setup(&mut self, control: &str, transport: ClientTransport) -> Result<usize, RtspError> {
        self.may_send("SETUP")?;
        let Some(direction) = self.direction else {
            return Err(RtspError::NotNow {
                request: "SETUP",
                why: "nothing was described or announced",
            });
        };
        if !matches!(self.state, State::Described | State::Ready) {
            return Err(RtspError::NotNow {
                request: "SETUP",
                why: "media is flowing (PAUSE first)",
            });
        }
        let track = self.tracks.len();
        if track >= MAX_TRACKS {
            return Err(RtspError::NotNow {
                request: "SETUP",
                why: "as many tracks as a session may have are set up",
            });
        }
        let mut requested = match transport {
            ClientTransport::Interleaved => Transport::tcp(proposed_channels(track)),
            ClientTransport::Udp { client_port } => Transport::udp(client_port),
        };
        requested.mode = direction;
        let uri = resolve_control(&self.base, control);
        let header = vec![("Transport", requested.to_string())];
        let kind = Kind::Setup {
            control: control.to_string(),
            requested,
        };
        self.send(kind, Method::Setup, uri, header, Bytes::new(), false);
        Ok(track)
    }

    /// Sends PLAY (with `range`, e.g. [`NptRange::FROM_ZERO`]) for the tracks set up;
    /// answered by [`ClientEvent::Playing`].
    pub fn play(&mut self, range: Option<NptRange>) -> Result<(), RtspError> {
        self.start_media("PLAY", Mode::Play, range)
    }

    /// Sends RECORD (with `range`) for the tracks set up; answered by
    /// [`ClientEvent::Recording`].
    pub fn record(&mut self, range: Option<NptRange>) -> Result<(), RtspError> {
        self.start_media("RECORD", Mode::Record, range)
    }

    /// Sends PAUSE; answered by [`ClientEvent::Paused`].
    pub fn pause(&mut self) -> Result<(), RtspError> {
        self.may_send("PAUSE")?;
        if !matches!(self.state, State::Playing | State::Recording) {
            return Err(RtspError::NotNow {
                request: "PAUSE",
                why: "not playing or recording",
            });
        }
        let uri = self.aggregate.clone();
        self.send(
            Kind::Pause,
            Method::Pause,
            uri,
            Vec::new(),
            Bytes::new(),
            false,
        );
        Ok(())
    }

    /// Ends the RTSP session: sends TEARDOWN (whatever else is in flight) and forgets
    /// the session and its tracks at once; the answer raises [`ClientEvent::TornDown`]
    /// and need not be waited for. `false` when there was no session to end.
    pub fn teardown(&mut self) -> bool {
        if self.state == State::Closed
            || self.session_id.is_none()
            || self.in_flight.len() >= MAX_IN_FLIGHT
        {
            return false;
        }
        let uri = self.aggregate.clone();
        self.send(
            Kind::Teardown,
            Method::Teardown,
            uri,
            Vec::new(),
            Bytes::new(),
            false,
        );
        self.generation = self.generation.wrapping_add(1);
        self.session_id = None;
        self.tracks.clear();
        self.direction = None;
        self.state = State::Init;
        self.base = self.config.url.clone();
        self.aggregate = self.config.url.clone();
        true
    }

    fn start_media(
        &mut self,
        request: &'static str,
        mode: Mode,
        range: Option<NptRange>,
    ) -> Result<(), RtspError> {
        self.may_send(request)?;
        let wanted = match mode {
            Mode::Play => State::Playing,
            Mode::Record => State::Recording,
        };
        if self.direction != Some(mode) {
            return Err(RtspError::NotNow {
                request,
                why: match mode {
                    Mode::Play => "PLAY needs a DESCRIBE, RECORD an ANNOUNCE",
                    Mode::Record => "RECORD needs an ANNOUNCE, PLAY a DESCRIBE",
                },
            });
        }
        if !(self.state == State::Ready || self.state == wanted) {
            return Err(RtspError::NotNow {
                request,
                why: "no track is set up",
            });
        }
        let headers = range
            .map(|r| vec![("Range", r.to_string())])
            .unwrap_or_default();
        let uri = self.aggregate.clone();
        let (kind, method) = match mode {
            Mode::Play => (Kind::Play, Method::Play),
            Mode::Record => (Kind::Record, Method::Record),
        };
        self.send(kind, method, uri, headers, Bytes::new(), false);
        Ok(())
    }

    /// Whether a request of the caller may go now: not closed, none of its requests in
    /// flight (a keep-alive or a TEARDOWN may be), room in the queue.
    fn may_send(&self, request: &'static str) -> Result<(), RtspError> {
        if self.state == State::Closed {
            return Err(RtspError::Closed);
        }
        let busy = self.in_flight.len() >= MAX_IN_FLIGHT
            || self
                .in_flight
                .iter()
                .any(|r| !matches!(r.kind, Kind::KeepAlive | Kind::Teardown));
        if busy {
            return Err(RtspError::NotNow {
                request,
                why: "another request is waiting for its answer",
            });
        }
        Ok(())
    }

    fn no_session(&self, request: &'static str) -> Result<(), RtspError> {
        if self.session_id.is_some() {
            return Err(RtspError::NotNow {
                request,
                why: "a session is set up (TEARDOWN first)",
            });
        }
        Ok(())
    }

    /// Writes a request in the current session and puts it in flight.
    fn send(
        &mut self,
        kind: Kind,
        method: Method,
        uri: String,
        headers: Vec<(&'static str, String)>,
        body: Bytes,
        retried: bool,
    ) {
        let session = self.session_id.clone();
        self.send_with(kind, method, uri, headers, body, retried, session);
    }

    /// Writes a request in `session` and puts it in flight.
    #[allow(clippy::too_many_arguments)]
    fn send_with(
        &mut self,
        kind: Kind,
        method: Method,
        uri: String,
        headers: Vec<(&'static str, String)>,
        body: Bytes,
        retried: bool,
        session: Option<String>,
    ) {
        self.cseq = self.cseq.wrapping_add(1);
        let mut req =
            Request::new(method.clone(), uri.clone()).with_header("CSeq", self.cseq.to_string());
        if !self.config.user_agent.is_empty() {
            req = req.with_header("User-Agent", self.config.user_agent.clone());
        }
        if let Some(id) = &session {
            req = req.with_header("Session", id.clone());
        }
        let mut sent_credentials = false;
        if let (Some(answerer), Some(creds)) = (&mut self.auth, &self.config.credentials) {
            let value = answerer.authorization(creds, method.as_str(), &uri);
            req = req.with_header("Authorization", value);
            sent_credentials = true;
        }
        for (name, value) in &headers {
            req = req.with_header(name, value.clone());
        }
        req.body = body.clone();
        let mut out = BytesMut::new();
        req.encode(&mut out);
        self.queue.push_back(ClientOutput::Write(out.freeze()));
        self.in_flight.push_back(InFlight {
            cseq: self.cseq,
            kind,
            method,
            uri,
            headers,
            body,
            retried,
            sent_credentials,
            sent_at: self.now,
            generation: self.generation,
            session,
        });
        self.last_request = self.now;
    }

    pub(super) fn event(&mut self, e: ClientEvent) {
        self.events = self.events.wrapping_add(1);
        self.queue.push_back(ClientOutput::Event(e));
    }

    pub(super) fn write(&mut self, bytes: Bytes) {
        self.queue.push_back(ClientOutput::Write(bytes));
    }

    pub(super) fn close(&mut self) {
        self.state = State::Closed;
        self.in_flight.clear();
        self.input = BytesMut::new();
    }

    pub(super) fn check_open(&self) -> Result<(), RtspError> {
        if self.state == State::Closed {
            return Err(RtspError::Closed);
        }
        Ok(())
    }

    /// Takes the answer to the oldest request in flight.
    pub(super) fn on_response(&mut self, resp: Response) -> Result<(), RtspError> {
        let Some(req) = self.in_flight.pop_front() else {
            return Err(RtspError::Unexpected {
                got: "a response while no request is in flight",
                state: self.state.name(),
            });
        };
        let method = method_name(&req.method);
        match resp.headers.cseq() {
            Some(Ok(c)) if c == req.cseq => {}
            _ => {
                return Err(RtspError::BadResponse {
                    method,
                    what: format!(
                        "CSeq {:?} where {} was expected",
                        resp.header("CSeq").unwrap_or("(none)"),
                        req.cseq
                    ),
                })
            }
        }
        let challenges: Vec<&str> = resp.headers.get_all("WWW-Authenticate").collect();
        if resp.status == 401 && !req.retried && self.config.credentials.is_some() {
            if let Some(a) = Answerer::pick(challenges.iter().copied(), self.entropy.next()) {
                self.auth = Some(a);
                // A request from before a TEARDOWN is not sent again (it would act on
                // the session that ended), except that TEARDOWN itself.
                if req.generation == self.generation || matches!(req.kind, Kind::Teardown) {
                    let InFlight {
                        kind,
                        method,
                        uri,
                        headers,
                        body,
                        session,
                        ..
                    } = req;
                    self.send_with(kind, method, uri, headers, body, true, session);
                }
                return Ok(());
            }
        }
        let current = req.generation == self.generation;
        if !(200..300).contains(&resp.status) {
            if current || matches!(req.kind, Kind::Teardown) {
                let refusal = Refusal {
                    method: req.method,
                    status: resp.status,
                    reason: resp.reason,
                    challenges: if resp.status == 401 {
                        challenges.iter().map(|c| c.to_string()).collect()
                    } else {
                        Vec::new()
                    },
                    sent_credentials: req.sent_credentials,
                };
                self.event(ClientEvent::Refused(refusal));
            }
            return Ok(());
        }
        match req.kind {
            Kind::Teardown => self.event(ClientEvent::TornDown),
            _ if !current => {}
            Kind::Options => {
                let public: Vec<Method> = resp
                    .header("Public")
                    .unwrap_or("")
                    .split(',')
                    .map(str::trim)
                    .filter(|m| !m.is_empty())
                    .take(MAX_PUBLIC)
                    .map(Method::from_token)
                    .collect();
                if public.contains(&Method::GetParameter) {
                    self.keepalive = Method::GetParameter;
                }
                self.event(ClientEvent::Options { public });
            }
            Kind::KeepAlive => {}
            Kind::Describe => {
                if resp.body.is_empty() {
                    return Err(RtspError::BadResponse {
                        method,
                        what: "no SDP body".into(),
                    });
                }
                let base = resp
                    .header("Content-Base")
                    .or_else(|| resp.header("Content-Location"))
                    .map_or_else(|| req.uri.clone(), |b| b.trim().to_string());
                let control = sdp_session_control(&resp.body).unwrap_or_default();
                self.aggregate = resolve_control(&base, &control);
                self.base = base.clone();
                self.tracks.clear();
                self.direction = Some(Mode::Play);
                self.state = State::Described;
                self.event(ClientEvent::Described {
                    sdp: resp.body,
                    content_base: base,
                });
            }
            Kind::Announce => {
                self.base = self.config.url.clone();
                self.aggregate = self.config.url.clone();
                self.tracks.clear();
                self.direction = Some(Mode::Record);
                self.state = State::Described;
                self.event(ClientEvent::Announced);
            }
            Kind::Setup { control, requested } => {
                self.on_setup(&resp, control, req.uri, requested)?;
            }
            Kind::Play => {
                if let Some(Ok(infos)) = resp.header("RTP-Info").map(RtpInfo::parse_list) {
                    for info in infos {
                        let hit = self
                            .tracks
                            .iter_mut()
                            .find(|t| same_resource(&t.url, &info.url));
                        if let Some(t) = hit {
                            t.start_seq = info.seq;
                            t.start_rtptime = info.rtptime;
                        }
                    }
                }
                let range = resp.header("Range").and_then(|r| NptRange::parse(r).ok());
                self.state = State::Playing;
                self.event(ClientEvent::Playing { range });
            }
            Kind::Record => {
                self.state = State::Recording;
                self.event(ClientEvent::Recording);
            }
            Kind::Pause => {
                self.state = State::Ready;
                self.event(ClientEvent::Paused);
            }
        }
        Ok(())
    }

    fn on_setup(
        &mut self,
        resp: &Response,
        control: String,
        url: String,
        requested: Transport,
    ) -> Result<(), RtspError> {
        let bad = |what: String| RtspError::BadResponse {
            method: "SETUP",
            what,
        };
        let header = resp
            .header("Session")
            .ok_or_else(|| bad("no Session header".into()))?;
        let session = SessionHeader::parse(header).map_err(|e| bad(e.to_string()))?;
        match &self.session_id {
            Some(id) if *id != session.id => {
                return Err(bad(format!("session {} after {id}", session.id)));
            }
            Some(_) => {}
            None => {
                self.session_id = Some(session.id);
                let secs = session.timeout.unwrap_or(0);
                self.session_timeout = if secs == 0 {
                    DEFAULT_SESSION_TIMEOUT
                } else {
                    Duration::from_secs(u64::from(secs))
                };
            }
        }
        let mut transport = match resp.header("Transport").map(parse_transports) {
            None => requested.clone(),
            Some(specs) => match specs.into_iter().next() {
                None => requested.clone(),
                Some(Ok(t)) => t,
                Some(Err(e)) => return Err(bad(format!("Transport: {e}"))),
            },
        };
        if transport.lower != requested.lower {
            return Err(bad(format!("asked for {} and got {transport}", requested)));
        }
        transport.interleaved = transport.interleaved.or(requested.interleaved);
        transport.client_port = transport.client_port.or(requested.client_port);
        transport.mode = requested.mode;
        if requested.mode == Mode::Record
            && requested.client_port.is_some()
            && transport.server_port.is_none()
        {
            return Err(bad("UDP answered without a server_port to send to".into()));
        }
        let track = self.tracks.len();
        self.tracks.push(ClientTrack {
            control,
            url,
            transport: transport.clone(),
            start_seq: None,
            start_rtptime: None,
        });
        self.state = State::Ready;
        self.event(ClientEvent::SetUp { track, transport });
        Ok(())
    }

    /// Answers a request of the server: 200 to keep-alives, 501 (and an event) to
    /// anything else.
    pub(super) fn on_server_request(&mut self, req: Request) {
        let cseq = req.headers.cseq().and_then(Result::ok);
        let status = match (&req.method, cseq) {
            (_, None) => 400,
            (Method::Options | Method::GetParameter, _) => 200,
            (Method::SetParameter, _) if req.body.is_empty() => 200,
            (Method::SetParameter, _) => 451,
            _ => 501,
        };
        let mut resp = Response::new(status);
        if let Some(c) = cseq {
            resp.headers.append("CSeq", c.to_string());
        }
        if req.method == Method::Options && status == 200 {
            resp.headers
                .append("Public", "OPTIONS, GET_PARAMETER, SET_PARAMETER");
        }
        let mut out = BytesMut::new();
        resp.encode(&mut out);
        self.write(out.freeze());
        if status == 501 {
            self.event(ClientEvent::ServerRequest {
                method: req.method,
                uri: req.uri,
            });
        }
    }
}

/// A `&'static` name for errors (`Other` methods are never sent).
fn method_name(m: &Method) -> &'static str {
    match m {
        Method::Options => "OPTIONS",
        Method::Describe => "DESCRIBE",
        Method::Announce => "ANNOUNCE",
        Method::Setup => "SETUP",
        Method::Play => "PLAY",
        Method::Record => "RECORD",
        Method::Pause => "PAUSE",
        Method::Teardown => "TEARDOWN",
        Method::GetParameter => "GET_PARAMETER",
        Method::SetParameter => "SET_PARAMETER",
        Method::Other(_) => "a request",
    }
}

/// Whether an `RTP-Info` URL names the track at `track_url`: the same URL, the same
/// path on another host (servers rewrite hosts), or a relative control that ends it.
fn same_resource(track_url: &str, info_url: &str) -> bool {
    let a = track_url.trim_end_matches('/');
    let b = info_url.trim().trim_end_matches('/');
    if b.is_empty() {
        return false;
    }
    if a == b {
        return true;
    }
    if b.contains("://") {
        return after_authority(a).is_some_and(|pa| after_authority(b) == Some(pa));
    }
    let b = b.trim_start_matches('/');
    a.strip_suffix(b)
        .is_some_and(|prefix| prefix.ends_with('/'))
}

/// The session-level `a=control:` of an SDP (before the first `m=` line).
fn sdp_session_control(sdp: &[u8]) -> Option<String> {
    for line in sdp.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.starts_with(b"m=") {
            break;
        }
        if let Some(control) = line.strip_prefix(b"a=control:") {
            return Some(String::from_utf8_lossy(control).trim().to_string());
        }
    }
    None
}

/// The shared session shape (see `sluice_session`), so that the server's connection
/// driver runs a relay's RTSP pull as it runs its own connections, with the time; its
/// events stay RTSP's own [`ClientEvent`].
impl sluice_session::Session for ClientSession {
    type Event = ClientEvent;
    type Error = RtspError;

    fn handle_input(
        &mut self,
        now: Instant,
        input: sluice_session::Input<'_>,
    ) -> Result<(), RtspError> {
        match input {
            sluice_session::Input::Stream(bytes) => ClientSession::handle_input(self, now, bytes),
            sluice_session::Input::Datagram { .. } => Err(RtspError::Malformed {
                what: "a datagram on the RTSP connection",
            }),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        ClientSession::handle_timeout(self, now);
    }

    fn poll_output(&mut self) -> Option<sluice_session::Output<ClientEvent>> {
        ClientSession::poll_output(self).map(|o| match o {
            ClientOutput::Write(data) => {
                sluice_session::Output::Transmit(sluice_session::Transmit::stream(data))
            }
            ClientOutput::Event(e) => sluice_session::Output::Event(e),
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        ClientSession::poll_timeout(self)
    }

    fn is_closed(&self) -> bool {
        ClientSession::is_closed(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rtp_info_urls_match_tracks() {
        let t = "rtsp://h:8554/live/s/trackID=1";
        assert!(same_resource(t, "rtsp://h:8554/live/s/trackID=1"));
        assert!(same_resource(t, "rtsp://10.0.0.1/live/s/trackID=1/"));
        assert!(same_resource(t, "trackID=1"));
        assert!(same_resource(t, "/live/s/trackID=1"));
        assert!(!same_resource(t, "ckID=1"));
        assert!(!same_resource(t, "rtsp://h:8554/live/s/trackID=11"));
        assert!(!same_resource("rtsp://h/live/s/trackID=11", "trackID=1"));
        assert!(!same_resource(t, ""));
    }

    #[test]
    fn session_control_is_read_before_media() {
        let sdp = b"v=0\r\na=control:rtsp://h/agg\r\nm=video 0 RTP/AVP 96\r\na=control:t0\r\n";
        assert_eq!(sdp_session_control(sdp).as_deref(), Some("rtsp://h/agg"));
        let media_only = b"v=0\nm=video 0 RTP/AVP 96\na=control:t0\n";
        assert_eq!(sdp_session_control(media_only), None);
    }
}
