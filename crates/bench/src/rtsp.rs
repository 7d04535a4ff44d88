//! The RTSP players' protocol, sans-IO: the requests a player sends (OPTIONS, DESCRIBE,
//! SETUP per track, PLAY, then keep-alives), what it makes of the answers, the TCP
//! stream's mix of interleaved `$` frames and responses, and the RTP counts.
//!
//! Why here and not in `sluice_rtsp`: that crate is the server's side. A player needs
//! its message types and header parsers, and two things of its own: a scanner that
//! hands RTP packets out of the read buffer where they lie (a packet is copied only
//! when a read splits it), and counters of what a figure needs (sequence gaps, frames,
//! keyframes, the publisher's wall-clock stamps) from `sluice_media`'s depacketizer.
//!
//! - [`Session`]: OPTIONS → DESCRIBE → (UDP: the driver's ports) → SETUP each track →
//!   PLAY → keep-alives (GET_PARAMETER when the server lists it in `Public`, else OPTIONS).
//! - [`InterleavedScanner`]: bytes of the TCP connection → [`Item`]s.
//! - [`Rtp`]: packets of each track → [`Seen`] frames and [`RtpCounts`].
//!
//! # Invariants
//! - Peer bytes never panic, and what is kept of them is bounded: a `$` frame split
//!   across reads (at most 65,539 bytes), a response being read (its head at most
//!   `sluice_rtsp::MAX_HEAD_LEN`, its body at most `DEFAULT_MAX_BODY_LEN`), a frame being
//!   reassembled (`sluice_media::rtp::MAX_FRAME_LEN`).
//! - Each response answers the one request in flight (same `CSeq`); anything else, or
//!   a request refused, ends the player with an error that says which.

use crate::figures::RtpCounts;
use bytes::BytesMut;
use sluice_media::rtp::{RtpCodec, RtpDepacketizer, RTP_HEADER_LEN};
use sluice_media::sdp::{parse_sdp, SdpMedia};
use sluice_rtsp::{
    ChannelPair, LowerTransport, MessageReader, Method, PortPair, Request, Response, RtpInfo,
    SessionHeader, Transport,
};
use std::time::Duration;

/// The session timeout when the server gives none (RFC 2326's default).
pub(crate) const DEFAULT_TIMEOUT_S: u32 = 60;
/// Keep-alives go out at this fraction of the session timeout, well within it.
const KEEPALIVE_DIVISOR: u32 = 2;

/// Why a player (or an RTSP publisher, `crate::rtsp_record`) gave up on the server.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PlayError {
    /// A request was answered with an error status.
    #[error("{method} answered {status} {reason}")]
    Refused {
        method: String,
        status: u16,
        reason: String,
    },
    /// The server said something out of turn or left out what it must say.
    #[error("{0}")]
    Unexpected(String),
    /// The server's bytes break RTSP or SDP.
    #[error("{0}")]
    Malformed(String),
    /// A socket of ours (UDP ports) could not be had.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

impl From<sluice_rtsp::RtspError> for PlayError {
    fn from(e: sluice_rtsp::RtspError) -> Self {
        PlayError::Malformed(format!("rtsp: {e}"))
    }
}

/// How RTP reaches the player.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lower {
    /// Interleaved on the RTSP connection.
    Tcp,
    /// Datagrams to a port pair per track.
    Udp,
}

/// One media section of the DESCRIBE answer that the player sets up.
#[derive(Debug, Clone)]
pub(crate) struct SetupTrack {
    /// The track URL used in SETUP.
    pub url: String,
    pub media: SdpMedia,
    /// The server's `Transport` answer.
    pub transport: Option<Transport>,
    /// The sequence number of the first packet, from `RTP-Info`.
    pub start_seq: Option<u16>,
}

impl SetupTrack {
    /// The interleaved channels of this track (as answered, else as proposed).
    pub(crate) fn channels(&self, index: usize) -> ChannelPair {
        self.transport
            .as_ref()
            .and_then(|t| t.interleaved)
            .unwrap_or_else(|| proposed_channels(index))
    }
}

/// The channels proposed for track `index`: 0-1, 2-3, ...
pub(crate) fn proposed_channels(index: usize) -> ChannelPair {
    let rtp = u8::try_from(index.saturating_mul(2)).unwrap_or(254);
    ChannelPair {
        rtp,
        rtcp: rtp.saturating_add(1),
    }
}

/// Where the session is; each state names the answer it waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    ExpectOptions,
    ExpectDescribe,
    /// RTP over UDP: the driver binds a port pair per track ([`Session::set_ports`]).
    ExpectPorts,
    ExpectSetup {
        track: usize,
    },
    ExpectPlay,
    Playing,
}

/// What the driver does after an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    Continue,
    /// Bind this many RTP/RTCP port pairs and call [`Session::set_ports`].
    NeedPorts(usize),
    /// PLAY was answered: media follows.
    Playing,
}

/// One player's RTSP session. Call contract: [`Session::start`], then each response
/// to [`Session::on_response`]; requests are appended to the caller's buffer.
#[derive(Debug)]
pub(crate) struct Session {
    url: String,
    lower: Lower,
    state: State,
    dialog: Dialog,
    /// The URL of PLAY (the SDP's session-level control).
    aggregate: String,
    tracks: Vec<SetupTrack>,
    ports: Vec<PortPair>,
}

impl Session {
    /// A session for `url` (`rtsp://host:port/path`).
    pub(crate) fn new(url: String, lower: Lower) -> Self {
        Session {
            aggregate: url.clone(),
            url,
            lower,
            state: State::ExpectOptions,
            dialog: Dialog::new(),
            tracks: Vec::new(),
            ports: Vec::new(),
        }
    }

    /// The first request: OPTIONS.
    pub(crate) fn start(&mut self, out: &mut BytesMut) {
        let url = self.url.clone();
        self.send(Method::Options, &url, &[], out);
    }

    /// The tracks set up, in SDP order.
    pub(crate) fn tracks(&self) -> &[SetupTrack] {
        &self.tracks
    }

    /// How often to send keep-alives once playing.
    pub(crate) fn keepalive_interval(&self) -> Duration {
        self.dialog.keepalive_interval()
    }

    /// Sends a keep-alive, unless the last one is still unanswered.
    pub(crate) fn keep_alive(&mut self, out: &mut BytesMut) {
        if self.state == State::Playing {
            self.dialog.keep_alive(&self.aggregate, out);
        }
    }

    /// The client ports of each track (RTP over UDP), after [`Next::NeedPorts`]; sends
    /// the first SETUP.
    pub(crate) fn set_ports(&mut self, ports: Vec<PortPair>, out: &mut BytesMut) {
        if self.state == State::ExpectPorts && ports.len() == self.tracks.len() {
            self.ports = ports;
            self.setup(0, out);
        }
    }

    fn send(&mut self, method: Method, url: &str, headers: &[(&str, String)], out: &mut BytesMut) {
        self.dialog.send(method, url, headers, None, out);
    }

    fn setup(&mut self, track: usize, out: &mut BytesMut) {
        let transport = match self.lower {
            Lower::Tcp => Transport::tcp(proposed_channels(track)),
            Lower::Udp => match self.ports.get(track) {
                Some(&p) => Transport::udp(p),
                None => return,
            },
        };
        let Some(url) = self.tracks.get(track).map(|t| t.url.clone()) else {
            return;
        };
        self.send(
            Method::Setup,
            &url,
            &[("Transport", transport.to_string())],
            out,
        );
        self.state = State::ExpectSetup { track };
    }

    /// Takes the answer to the request in flight and sends the next request, if any.
    pub(crate) fn on_response(
        &mut self,
        resp: Response,
        out: &mut BytesMut,
    ) -> Result<Next, PlayError> {
        let method = self.dialog.answered(&resp)?;
        refused_unless_ok(&method, &resp)?;
        match self.state {
            State::ExpectOptions => {
                self.dialog.pick_keepalive(&resp);
                let url = self.url.clone();
                let accept = [("Accept", "application/sdp".to_string())];
                self.send(Method::Describe, &url, &accept, out);
                self.state = State::ExpectDescribe;
                Ok(Next::Continue)
            }
            State::ExpectDescribe => self.on_describe(&resp, out),
            State::ExpectSetup { track } => {
                self.on_setup(track, &resp)?;
                if track + 1 < self.tracks.len() {
                    self.setup(track + 1, out);
                } else {
                    let url = self.aggregate.clone();
                    let range = [("Range", "npt=0.000-".to_string())];
                    self.send(Method::Play, &url, &range, out);
                    self.state = State::ExpectPlay;
                }
                Ok(Next::Continue)
            }
            State::ExpectPlay => {
                // RTP-Info is optional; one we cannot read only costs the start check.
                if let Some(Ok(infos)) = resp.header("RTP-Info").map(RtpInfo::parse_list) {
                    for info in infos {
                        let control =
                            |t: &SetupTrack| t.url == info.url || t.url.ends_with(&info.url);
                        if let Some(t) = self.tracks.iter_mut().find(|t| control(t)) {
                            t.start_seq = info.seq;
                        }
                    }
                }
                self.state = State::Playing;
                Ok(Next::Playing)
            }
            State::Playing => Ok(Next::Continue),
            State::ExpectPorts => Err(PlayError::Unexpected(
                "a response while no request was in flight".into(),
            )),
        }
    }

    fn on_describe(&mut self, resp: &Response, out: &mut BytesMut) -> Result<Next, PlayError> {
        let base = resp
            .header("Content-Base")
            .or_else(|| resp.header("Content-Location"))
            .map_or_else(|| self.url.clone(), |b| b.trim().to_string());
        let sdp = parse_sdp(&resp.body)
            .map_err(|e| PlayError::Malformed(format!("DESCRIBE answer's SDP: {e}")))?;
        if sdp.media.is_empty() {
            let skipped: Vec<String> = sdp
                .skipped
                .iter()
                .map(|s| format!("{} {} ({})", s.media, s.encoding, s.reason))
                .collect();
            return Err(PlayError::Unexpected(format!(
                "no media to play in the SDP (skipped: {})",
                skipped.join(", ")
            )));
        }
        self.aggregate = resolve(&base, sdp.control.as_deref().unwrap_or(""));
        self.tracks = sdp
            .media
            .into_iter()
            .map(|media| SetupTrack {
                url: resolve(&base, &media.control),
                media,
                transport: None,
                start_seq: None,
            })
            .collect();
        match self.lower {
            Lower::Tcp => {
                self.setup(0, out);
                Ok(Next::Continue)
            }
            Lower::Udp => {
                self.state = State::ExpectPorts;
                Ok(Next::NeedPorts(self.tracks.len()))
            }
        }
    }

    fn on_setup(&mut self, track: usize, resp: &Response) -> Result<(), PlayError> {
        let transport = self.dialog.setup_answer(self.lower, resp)?;
        if let Some(t) = self.tracks.get_mut(track) {
            t.transport = transport;
        }
        Ok(())
    }
}

/// The request/answer side that both RTSP client sessions share (the player here,
/// the publisher in `crate::rtsp_record`): CSeq, the request in flight, the session
/// id and timeout, and the method that keeps the session alive.
#[derive(Debug)]
pub(crate) struct Dialog {
    cseq: u32,
    /// The request in flight: its CSeq and method.
    pending: Option<(u32, Method)>,
    id: Option<String>,
    timeout_s: u32,
    keepalive: Method,
}

impl Dialog {
    pub(crate) fn new() -> Self {
        Dialog {
            cseq: 0,
            pending: None,
            id: None,
            timeout_s: DEFAULT_TIMEOUT_S,
            keepalive: Method::Options,
        }
    }

    /// Whether a SETUP gave a session.
    pub(crate) fn has_session(&self) -> bool {
        self.id.is_some()
    }

    /// How often to send keep-alives: well within the session timeout.
    pub(crate) fn keepalive_interval(&self) -> Duration {
        Duration::from_secs(u64::from((self.timeout_s / KEEPALIVE_DIVISOR).max(1)))
    }

    /// Sends a keep-alive for `url`, unless a request (the last keep-alive) is still
    /// unanswered.
    pub(crate) fn keep_alive(&mut self, url: &str, out: &mut BytesMut) {
        if self.pending.is_none() {
            let method = self.keepalive.clone();
            self.send(method, url, &[], None, out);
        }
    }

    /// Encodes one request: the next CSeq, the session once there is one, and a body
    /// if any. It becomes the request in flight.
    pub(crate) fn send(
        &mut self,
        method: Method,
        url: &str,
        headers: &[(&str, String)],
        body: Option<bytes::Bytes>,
        out: &mut BytesMut,
    ) {
        self.cseq = self.cseq.wrapping_add(1);
        let mut req = Request::new(method.clone(), url)
            .with_header("CSeq", self.cseq.to_string())
            .with_header("User-Agent", "sluice-bench");
        if let Some(id) = &self.id {
            req = req.with_header("Session", id.clone());
        }
        for (name, value) in headers {
            req = req.with_header(name, value.clone());
        }
        match body {
            Some(body) => req.with_body(body).encode(out),
            None => req.encode(out),
        }
        self.pending = Some((self.cseq, method));
    }

    /// Takes the request in flight that `resp` answers (it must carry the same CSeq);
    /// returns its method.
    pub(crate) fn answered(&mut self, resp: &Response) -> Result<Method, PlayError> {
        let Some((cseq, method)) = self.pending.take() else {
            return Err(PlayError::Unexpected(format!(
                "a response ({} {}) with no request in flight",
                resp.status, resp.reason
            )));
        };
        if !matches!(resp.headers.cseq(), Some(Ok(c)) if c == cseq) {
            return Err(PlayError::Unexpected(format!(
                "the answer to {method} (CSeq {cseq}) has CSeq {:?}",
                resp.header("CSeq")
            )));
        }
        Ok(method)
    }

    /// Keep-alives use GET_PARAMETER when the OPTIONS answer `resp` lists it.
    pub(crate) fn pick_keepalive(&mut self, resp: &Response) {
        let public = resp.header("Public").unwrap_or("");
        if public
            .split(',')
            .any(|m| m.trim() == Method::GetParameter.as_str())
        {
            self.keepalive = Method::GetParameter;
        }
    }

    /// Checks a SETUP answer: a Session header (the same one as before, if any; its
    /// timeout kept from the first) and a Transport of the lower transport asked for.
    /// Returns that transport, if the answer had one.
    pub(crate) fn setup_answer(
        &mut self,
        lower: Lower,
        resp: &Response,
    ) -> Result<Option<Transport>, PlayError> {
        let session = resp
            .header("Session")
            .ok_or_else(|| PlayError::Unexpected("SETUP answered without a Session".into()))?;
        let session = SessionHeader::parse(session)?;
        match &self.id {
            Some(id) if *id != session.id => {
                return Err(PlayError::Unexpected(format!(
                    "SETUP answered session {} after {id}",
                    session.id
                )))
            }
            Some(_) => {}
            None => {
                self.id = Some(session.id);
                self.timeout_s = session.timeout.unwrap_or(DEFAULT_TIMEOUT_S).max(1);
            }
        }
        let transport = match resp.header("Transport") {
            Some(t) => Some(Transport::parse(t)?),
            None => None,
        };
        let want = match lower {
            Lower::Tcp => LowerTransport::Tcp,
            Lower::Udp => LowerTransport::Udp,
        };
        if let Some(t) = &transport {
            if t.lower != want {
                return Err(PlayError::Unexpected(format!(
                    "SETUP asked for {want:?} and got {t}"
                )));
            }
        }
        Ok(transport)
    }
}

/// An error status of the answer to `method` as an error.
pub(crate) fn refused_unless_ok(method: &Method, resp: &Response) -> Result<(), PlayError> {
    if (200..300).contains(&resp.status) {
        return Ok(());
    }
    Err(PlayError::Refused {
        method: method.as_str().to_string(),
        status: resp.status,
        reason: resp.reason.clone(),
    })
}

/// A control URL against the base (`Content-Base`): absolute as is, empty or `*` the
/// base itself, relative appended after one `/` (as ffmpeg and live555 do).
pub(crate) fn resolve(base: &str, control: &str) -> String {
    let base = base.trim_end_matches('/');
    let control = control.trim();
    if control.is_empty() || control == "*" {
        base.to_string()
    } else if control.contains("://") {
        control.to_string()
    } else {
        format!("{base}/{}", control.trim_start_matches('/'))
    }
}

/// What comes out of the TCP connection.
#[derive(Debug)]
pub(crate) enum Item<'a> {
    /// An interleaved frame: its channel and packet.
    Frame { channel: u8, packet: &'a [u8] },
    /// A response.
    Response(Response),
}

/// Finds interleaved frames and responses in the bytes of an RTSP connection.
#[derive(Debug, Default)]
pub(crate) struct InterleavedScanner {
    /// A `$` frame split across reads: its bytes so far, header included.
    frame: Vec<u8>,
    /// A response being read.
    text: BytesMut,
    reader: MessageReader,
}

impl InterleavedScanner {
    /// Scans `data`, calling `on` for each complete item. Any split of the stream gives
    /// the same items; an error is final.
    pub(crate) fn feed(
        &mut self,
        mut data: &[u8],
        on: &mut impl FnMut(Item<'_>) -> Result<(), PlayError>,
    ) -> Result<(), PlayError> {
        loop {
            if !self.frame.is_empty() {
                if self.frame.len() < 4 {
                    let take = (4 - self.frame.len()).min(data.len());
                    self.frame.extend_from_slice(&data[..take]);
                    data = &data[take..];
                    if self.frame.len() < 4 {
                        return Ok(());
                    }
                }
                let want = 4 + usize::from(u16::from_be_bytes([self.frame[2], self.frame[3]]));
                let take = (want - self.frame.len()).min(data.len());
                self.frame.extend_from_slice(&data[..take]);
                data = &data[take..];
                if self.frame.len() < want {
                    return Ok(());
                }
                let r = on(Item::Frame {
                    channel: self.frame[1],
                    packet: &self.frame[4..],
                });
                self.frame.clear();
                r?;
                continue;
            }
            if !self.text.is_empty() {
                // Responses are rare (the handshake, keep-alives): copying is fine.
                self.text.extend_from_slice(data);
                let Some(resp) = self.reader.read_response(&mut self.text)? else {
                    return Ok(());
                };
                // The response ended within `data`: what follows it is `data`'s tail.
                let left = self.text.len();
                data = data
                    .len()
                    .checked_sub(left)
                    .and_then(|at| data.get(at..))
                    .ok_or_else(|| PlayError::Malformed("response framing".into()))?;
                self.text = BytesMut::new();
                on(Item::Response(resp))?;
                continue;
            }
            match data {
                [] => return Ok(()),
                [b'$', _, hi, lo, ..] => {
                    let end = 4 + usize::from(u16::from_be_bytes([*hi, *lo]));
                    match data.get(4..end) {
                        Some(packet) => {
                            on(Item::Frame {
                                channel: data[1],
                                packet,
                            })?;
                            data = &data[end..];
                        }
                        None => {
                            self.frame.extend_from_slice(data);
                            return Ok(());
                        }
                    }
                }
                [b'$', ..] => {
                    self.frame.extend_from_slice(data);
                    return Ok(());
                }
                [b'\r' | b'\n', rest @ ..] => data = rest,
                _ => {
                    // A response starts; the branch above reads it.
                    self.text.extend_from_slice(&data[..1]);
                    data = &data[1..];
                }
            }
        }
    }
}

/// A video or audio frame as a figure needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    Video {
        /// Media time in ms on the track's clock (any origin; wraps).
        ts_ms: u32,
        keyframe: bool,
        /// The bench publisher's wall-clock stamp (`crate::stamp`), if it carried one.
        stamp: Option<u64>,
    },
    Audio,
}

/// One track's RTP state.
#[derive(Debug)]
struct TrackRtp {
    depacketizer: RtpDepacketizer,
    video: bool,
    h264: bool,
    clock_rate: i64,
    expected_seq: Option<u16>,
}

/// The tracks' RTP: sequence checks, depacketizing, what each frame is.
#[derive(Debug)]
pub(crate) struct Rtp {
    tracks: Vec<TrackRtp>,
    counts: RtpCounts,
}

impl Rtp {
    /// Depacketizers for the tracks set up; the first packet of each is checked
    /// against its `RTP-Info` sequence number.
    pub(crate) fn new(tracks: &[SetupTrack]) -> Result<Self, PlayError> {
        let tracks = tracks
            .iter()
            .map(|t| {
                let depacketizer = t.media.depacketizer().map_err(|e| {
                    PlayError::Unexpected(format!("cannot depacketize {}: {e}", t.url))
                })?;
                Ok(TrackRtp {
                    depacketizer,
                    video: t.media.codec.is_video(),
                    h264: t.media.codec == RtpCodec::H264,
                    clock_rate: i64::from(t.media.clock_rate.max(1)),
                    expected_seq: t.start_seq,
                })
            })
            .collect::<Result<Vec<_>, PlayError>>()?;
        Ok(Rtp {
            tracks,
            counts: RtpCounts::default(),
        })
    }

    /// The counts so far.
    pub(crate) fn counts(&self) -> RtpCounts {
        let mut c = self.counts;
        c.frames_dropped = self
            .tracks
            .iter()
            .map(|t| t.depacketizer.stats().frames_dropped)
            .sum();
        c
    }

    /// One RTP packet of track `track`; `on` sees each frame it completes.
    pub(crate) fn packet(&mut self, track: usize, packet: &[u8], on: &mut impl FnMut(Seen)) {
        let Some(t) = self.tracks.get_mut(track) else {
            return;
        };
        let Some(&[b0, _, s0, s1]) = packet.get(..4) else {
            self.counts.bad_packets += 1;
            return;
        };
        if packet.len() < RTP_HEADER_LEN || b0 >> 6 != 2 {
            self.counts.bad_packets += 1;
            return;
        }
        self.counts.packets += 1;
        let seq = u16::from_be_bytes([s0, s1]);
        if let Some(expected) = t.expected_seq {
            let ahead = seq.wrapping_sub(expected);
            if ahead >= 0x8000 {
                // Behind what came already: the depacketizer drops it too.
                self.counts.late += 1;
                return;
            }
            self.counts.lost += u64::from(ahead);
        }
        t.expected_seq = Some(seq.wrapping_add(1));
        if t.depacketizer.push(packet).is_err() {
            self.counts.bad_packets += 1;
        }
        while let Some(f) = t.depacketizer.poll() {
            if t.video {
                let ms = f.extended_timestamp.saturating_mul(1000) / t.clock_rate;
                on(Seen::Video {
                    // The lag clock works on wrapping u32 ms, as FLV timestamps.
                    ts_ms: ms as u32,
                    keyframe: f.keyframe,
                    stamp: if t.h264 {
                        crate::stamp::find_in_nals(&f.payload)
                    } else {
                        None
                    },
                });
            } else {
                on(Seen::Audio);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    const SDP: &str = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=live/x\r\nc=IN IP4 0.0.0.0\r\nt=0 0\r\n\
a=control:*\r\na=range:npt=now-\r\n\
m=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n\
a=fmtp:96 packetization-mode=1;profile-level-id=42C01E;sprop-parameter-sets=Z0LAHtkAoEf+yA==,aM48gA==\r\n\
a=control:trackID=0\r\n\
m=audio 0 RTP/AVP 98\r\na=rtpmap:98 MPEG4-GENERIC/48000/2\r\n\
a=fmtp:98 streamtype=5;profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3;config=1190\r\n\
a=control:trackID=1\r\n";

    fn answer(cseq: u32, extra: &[(&str, &str)], body: &str) -> Response {
        let mut r = Response::new(200).with_header("CSeq", cseq.to_string());
        for (n, v) in extra {
            r = r.with_header(n, *v);
        }
        r.body = Bytes::copy_from_slice(body.as_bytes());
        r
    }

    /// The request lines written since the last call.
    fn sent(out: &mut BytesMut) -> Vec<String> {
        let text = String::from_utf8(out.split().to_vec()).unwrap();
        text.split("\r\n\r\n")
            .filter(|r| !r.is_empty())
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn tcp_session_sets_up_each_track_and_plays() {
        let mut s = Session::new("rtsp://h:8554/live/x".into(), Lower::Tcp);
        let mut out = BytesMut::new();
        s.start(&mut out);
        let r = sent(&mut out);
        assert!(
            r[0].starts_with("OPTIONS rtsp://h:8554/live/x RTSP/1.0\r\nCSeq: 1\r\n"),
            "{r:?}"
        );
        let public = [("Public", "OPTIONS, DESCRIBE, SETUP, PLAY, GET_PARAMETER")];
        assert_eq!(
            s.on_response(answer(1, &public, ""), &mut out).unwrap(),
            Next::Continue
        );
        assert!(sent(&mut out)[0].starts_with("DESCRIBE rtsp://h:8554/live/x RTSP/1.0"));
        let base = [("Content-Base", "rtsp://h:8554/live/x/")];
        s.on_response(answer(2, &base, SDP), &mut out).unwrap();
        let r = sent(&mut out);
        assert!(
            r[0].starts_with("SETUP rtsp://h:8554/live/x/trackID=0 RTSP/1.0"),
            "{r:?}"
        );
        assert!(
            r[0].contains("Transport: RTP/AVP/TCP;unicast;interleaved=0-1"),
            "{r:?}"
        );
        assert!(!r[0].contains("Session:"));
        let setup = [
            ("Session", "abcdef0123456789;timeout=20"),
            ("Transport", "RTP/AVP/TCP;unicast;interleaved=0-1"),
        ];
        s.on_response(answer(3, &setup, ""), &mut out).unwrap();
        let r = sent(&mut out);
        assert!(
            r[0].starts_with("SETUP rtsp://h:8554/live/x/trackID=1 RTSP/1.0"),
            "{r:?}"
        );
        assert!(r[0].contains("interleaved=2-3") && r[0].contains("Session: abcdef0123456789"));
        // The server moves audio to its own channels: the answer wins.
        let setup = [
            ("Session", "abcdef0123456789;timeout=20"),
            ("Transport", "RTP/AVP/TCP;unicast;interleaved=6-7"),
        ];
        s.on_response(answer(4, &setup, ""), &mut out).unwrap();
        let r = sent(&mut out);
        assert!(
            r[0].starts_with("PLAY rtsp://h:8554/live/x RTSP/1.0"),
            "{r:?}"
        );
        assert!(r[0].contains("Range: npt=0.000-"));
        let info = [(
            "RTP-Info",
            "url=rtsp://h:8554/live/x/trackID=0;seq=100;rtptime=9000,url=rtsp://h:8554/live/x/trackID=1;seq=7",
        )];
        assert_eq!(
            s.on_response(answer(5, &info, ""), &mut out).unwrap(),
            Next::Playing
        );
        assert_eq!(s.tracks()[0].start_seq, Some(100));
        assert_eq!(s.tracks()[1].start_seq, Some(7));
        assert_eq!(s.tracks()[0].channels(0), ChannelPair { rtp: 0, rtcp: 1 });
        assert_eq!(s.tracks()[1].channels(1), ChannelPair { rtp: 6, rtcp: 7 });
        assert_eq!(s.keepalive_interval(), Duration::from_secs(10));
        s.keep_alive(&mut out);
        let r = sent(&mut out);
        assert!(
            r[0].starts_with("GET_PARAMETER rtsp://h:8554/live/x RTSP/1.0\r\nCSeq: 6"),
            "{r:?}"
        );
        // Not twice while one is unanswered.
        s.keep_alive(&mut out);
        assert!(out.is_empty());
        s.on_response(answer(6, &[], ""), &mut out).unwrap();
        // A response to nothing is an error.
        assert!(s.on_response(answer(7, &[], ""), &mut out).is_err());
    }

    #[test]
    fn udp_session_asks_for_ports() {
        let mut s = Session::new("rtsp://h/live/x".into(), Lower::Udp);
        let mut out = BytesMut::new();
        s.start(&mut out);
        s.on_response(answer(1, &[], ""), &mut out).unwrap();
        out.clear();
        assert_eq!(
            s.on_response(answer(2, &[], SDP), &mut out).unwrap(),
            Next::NeedPorts(2)
        );
        assert!(out.is_empty());
        let pair = |rtp| PortPair { rtp, rtcp: rtp + 1 };
        s.set_ports(vec![pair(40000), pair(40002)], &mut out);
        let r = sent(&mut out);
        // No Content-Base: controls resolve against the request URL.
        assert!(
            r[0].starts_with("SETUP rtsp://h/live/x/trackID=0 RTSP/1.0"),
            "{r:?}"
        );
        assert!(
            r[0].contains("Transport: RTP/AVP;unicast;client_port=40000-40001"),
            "{r:?}"
        );
        // A server that answers TCP to a UDP SETUP is refused.
        let setup = [
            ("Session", "abcdef0123456789"),
            ("Transport", "RTP/AVP/TCP;unicast;interleaved=0-1"),
        ];
        let e = s.on_response(answer(3, &setup, ""), &mut out).unwrap_err();
        assert!(e.to_string().contains("asked for Udp"), "{e}");
    }

    #[test]
    fn refusals_and_bad_answers_are_errors() {
        let mut s = Session::new("rtsp://h/live/x".into(), Lower::Tcp);
        let mut out = BytesMut::new();
        s.start(&mut out);
        s.on_response(answer(1, &[], ""), &mut out).unwrap();
        let mut nf = Response::new(404).with_header("CSeq", "2");
        nf.reason = "Not Found".into();
        let e = s.on_response(nf, &mut out).unwrap_err();
        assert_eq!(e.to_string(), "DESCRIBE answered 404 Not Found");

        let mut s = Session::new("rtsp://h/live/x".into(), Lower::Tcp);
        s.start(&mut out);
        assert!(
            s.on_response(answer(9, &[], ""), &mut out).is_err(),
            "CSeq mismatch"
        );

        let mut s = Session::new("rtsp://h/live/x".into(), Lower::Tcp);
        s.start(&mut out);
        s.on_response(answer(1, &[], ""), &mut out).unwrap();
        assert!(s.on_response(answer(2, &[], "not sdp"), &mut out).is_err());

        let mut s = Session::new("rtsp://h/live/x".into(), Lower::Tcp);
        s.start(&mut out);
        s.on_response(answer(1, &[], ""), &mut out).unwrap();
        s.on_response(answer(2, &[], SDP), &mut out).unwrap();
        let e = s.on_response(answer(3, &[], ""), &mut out).unwrap_err();
        assert!(e.to_string().contains("without a Session"), "{e}");
    }

    #[test]
    fn controls_resolve() {
        assert_eq!(
            resolve("rtsp://h/a/b/", "trackID=1"),
            "rtsp://h/a/b/trackID=1"
        );
        assert_eq!(
            resolve("rtsp://h/a/b", "/trackID=1"),
            "rtsp://h/a/b/trackID=1"
        );
        assert_eq!(resolve("rtsp://h/a/b/", "*"), "rtsp://h/a/b");
        assert_eq!(resolve("rtsp://h/a/b/", ""), "rtsp://h/a/b");
        assert_eq!(resolve("rtsp://h/a/b/", "rtsp://o/x/1"), "rtsp://o/x/1");
    }

    /// A response, a frame, a keep-alive answer between frames: the stream the
    /// scanner sees while playing.
    fn stream() -> Vec<u8> {
        let mut s = Vec::new();
        let mut out = BytesMut::new();
        answer(5, &[("Session", "abcdef0123456789")], "").encode(&mut out);
        s.extend_from_slice(&out);
        s.extend_from_slice(&[b'$', 0, 0, 3, 1, 2, 3]);
        s.extend_from_slice(&[b'$', 2, 0, 0]);
        out.clear();
        answer(6, &[], "body").encode(&mut out);
        s.extend_from_slice(&out);
        s.extend_from_slice(b"\r\n");
        let big: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        s.extend_from_slice(&[b'$', 1, 0x03, 0xe8]);
        s.extend_from_slice(&big);
        s
    }

    fn scan(chunks: &[&[u8]]) -> Vec<String> {
        let mut scanner = InterleavedScanner::default();
        let mut seen = Vec::new();
        for c in chunks {
            scanner
                .feed(c, &mut |item| {
                    seen.push(match item {
                        Item::Frame { channel, packet } => {
                            format!("frame {channel} {} {:?}", packet.len(), packet.get(..3))
                        }
                        Item::Response(r) => {
                            format!("response {:?} {:?}", r.header("CSeq"), r.body)
                        }
                    });
                    Ok(())
                })
                .unwrap();
        }
        seen
    }

    #[test]
    fn scanner_yields_the_same_items_for_every_split() {
        let s = stream();
        let whole = scan(&[&s]);
        assert_eq!(whole.len(), 5, "{whole:?}");
        assert!(whole[0].starts_with("response Some(\"5\")"));
        assert_eq!(whole[1], "frame 0 3 Some([1, 2, 3])");
        assert_eq!(whole[2], "frame 2 0 None");
        assert!(
            whole[3].contains("\"6\"") && whole[3].contains("body"),
            "{whole:?}"
        );
        assert_eq!(whole[4], "frame 1 1000 Some([0, 1, 2])");
        for at in 0..s.len() {
            assert_eq!(scan(&[&s[..at], &s[at..]]), whole, "split at {at}");
        }
        let bytes: Vec<&[u8]> = s.chunks(1).collect();
        assert_eq!(scan(&bytes), whole);
    }

    #[test]
    fn scanner_refuses_garbage() {
        let mut scanner = InterleavedScanner::default();
        let r = scanner.feed(b"HTTP/1.1 200 OK\r\n\r\n", &mut |_| Ok(()));
        assert!(r.is_err());
        let mut scanner = InterleavedScanner::default();
        let huge = vec![b'x'; sluice_rtsp::MAX_HEAD_LEN + 10];
        assert!(scanner.feed(&huge, &mut |_| Ok(())).is_err());
    }

    fn rtp(seq: u16, ts: u32, marker: bool, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x80, if marker { 0x80 | 96 } else { 96 }];
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(&ts.to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, 1]);
        p.extend_from_slice(payload);
        p
    }

    fn video_track(start_seq: Option<u16>) -> SetupTrack {
        let sdp = parse_sdp(SDP.as_bytes()).unwrap();
        SetupTrack {
            url: "rtsp://h/live/x/trackID=0".into(),
            media: sdp.media[0].clone(),
            transport: None,
            start_seq,
        }
    }

    #[test]
    fn rtp_frames_gaps_and_stamps() {
        let mut rtp_state = Rtp::new(&[video_track(Some(10))]).unwrap();
        let mut seen = Vec::new();
        let mut on = |s| seen.push(s);
        // The first packet is 2 after RTP-Info's: 2 lost.
        let mut sei = Vec::new();
        crate::stamp::push_sei(&mut sei, 42);
        rtp_state.packet(0, &rtp(12, 90_000, false, &sei), &mut on);
        rtp_state.packet(0, &rtp(13, 90_000, true, &[0x65, 0x88]), &mut on);
        // A late duplicate, then a frame split by a loss (dropped).
        rtp_state.packet(0, &rtp(13, 90_000, true, &[0x65, 0x88]), &mut on);
        rtp_state.packet(0, &rtp(14, 93_600, false, &[0x7c, 0x81, 1]), &mut on);
        rtp_state.packet(0, &rtp(16, 93_600, true, &[0x7c, 0x41, 2]), &mut on);
        rtp_state.packet(0, &rtp(17, 97_200, true, &[0x41, 0x9a]), &mut on);
        rtp_state.packet(0, &[0x80, 96], &mut on);
        assert_eq!(
            seen,
            vec![
                Seen::Video {
                    ts_ms: 1000,
                    keyframe: true,
                    stamp: Some(42)
                },
                Seen::Video {
                    ts_ms: 1080,
                    keyframe: false,
                    stamp: None
                },
            ]
        );
        let c = rtp_state.counts();
        assert_eq!(
            (c.packets, c.lost, c.late, c.bad_packets),
            (6, 3, 1, 1),
            "{c:?}"
        );
        assert_eq!(c.frames_dropped, 1, "{c:?}");
    }
}
