//! One WebRTC peer of the server, around str0m's `Rtc` in RTP mode.
//! Datagrams and time in, datagrams, a timeout and events out: no socket, no clock.
//!
//! ICE: str0m runs as a full (controlled) ICE agent that is never told the offer's
//! candidates, so the only address it ever checks is the one an authenticated binding
//! request came from (a peer-reflexive candidate): nothing goes to an address an offer
//! merely names. That check of ours, sent at once, is what makes a controlling agent
//! nominate without waiting for its next check tick (pion's 200 ms): an ICE-lite
//! server, which sends no checks, cost pion's viewers 200 ms before their first packet.
//!
//! A publisher (WHIP): H.264 and Opus are accepted, and its RTP comes out of str0m as
//! plain packets for the server's depacketizers.
//!
//! A viewer (WHEP): the offer is answered with only the codecs the stream has. str0m
//! runs ICE and DTLS; from then on the media path is ours (`outbound`, `srtp`, `rtcp`):
//! the stream's shared RTP packets go out with this viewer's header and SRTP, with no
//! per-viewer queue or packet cache, NACKs name stream packets the server finds in the
//! stream's history, and keyframe requests go to the stream. Once the viewer's first
//! authenticated RTCP shows that its DTLS is done too, or [`SETTLE`] after our first
//! SRTP packet for a viewer that sends no RTCP, str0m is dropped altogether: consent
//! checks are answered here (`stun::answer_check`), and what is left of the viewer is
//! a few hundred bytes of keys and counters.

use crate::keys;
use crate::outbound::{self, Datagrams, Resend, StreamPacket, Track};
use crate::restart::IceCredentials;
use crate::rtcp::{self, Feedback};
use crate::srtp;
use crate::stun::{self, DatagramKind};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime};
use str0m::change::SdpOffer;
use str0m::format::Codec;
use str0m::media::{Direction, MediaKind, Mid, Pt};
use str0m::net::{Protocol, Receive, TcpType};
use str0m::rtp::Ssrc;
use str0m::{Candidate, Event, IceConnectionState, IceCreds, Input, Output, Rtc, RtcConfig};
use thiserror::Error;

/// Largest SDP offer taken (a browser's is 4-8 KB).
pub const MAX_OFFER: usize = 16 << 10;

/// How often a viewer gets a sender report per track (what browsers sync audio and
/// video by).
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// A viewer whose consent checks stop for this long is gone (RFC 7675 §5.1).
const CONSENT: Duration = Duration::from_secs(30);

/// How long str0m is kept after our first SRTP packet when the viewer sends no RTCP
/// that would show its DTLS done. Only the viewer's retransmission of its last flight
/// needs str0m then (our final flight lost: RFC 6347 §4.2.4). Its timer starts at 1 s
/// and doubles (§4.2.4.1; browsers start lower): 31 s covers five retransmissions,
/// 1 + 2 + 4 + 8 + 16 s, and a path that loses our flight five times running carries
/// no media either. RFC 6347 asks the last sender to answer for twice the MSL (4 min);
/// a viewer that sends no RTCP would keep str0m's tens of KiB that long for a loss
/// that the next 31 s of media already rule out in practice.
pub const SETTLE: Duration = Duration::from_secs(31);

/// Retransmissions waiting for the server at most: a NACK storm is cut, not queued.
const MAX_RESENDS: usize = 512;

/// Why an offer cannot be answered, or a session cannot go on.
#[derive(Debug, Error)]
pub enum PeerError {
    #[error("the offer is larger than {MAX_OFFER} bytes")]
    TooLarge,
    #[error("bad offer: {0}")]
    Offer(String),
    #[error("the offer has no media the stream can send ({0})")]
    NoMedia(String),
    #[error("no local candidate")]
    NoCandidate,
    #[error("webrtc: {0}")]
    Rtc(#[from] str0m::RtcError),
    #[error("srtp: {0}")]
    Srtp(#[from] srtp::SrtpError),
    #[error("DTLS finished without SRTP keys")]
    NoKeys,
}

/// The stream's codecs, as far as WebRTC can carry them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VideoCodec {
    H264,
    H265,
    Vp8,
    Vp9,
    Av1,
}

/// What the stream has to offer a peer.
#[derive(Debug, Clone, Copy, Default)]
pub struct Offered {
    pub video: Option<VideoCodec>,
    /// Opus audio (other audio needs transcoding first).
    pub opus: bool,
}

/// What the peer does.
#[derive(Debug, Clone, Copy)]
pub enum Role {
    /// Plays a stream that has these codecs (WHEP).
    Play(Offered),
    /// Publishes H.264 and Opus (WHIP).
    Publish,
}

/// The codec of media a publisher sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Incoming {
    H264,
    Opus,
}

/// A peer's settings.
#[derive(Debug, Clone, Default)]
pub struct PeerConfig {
    /// The server's host candidates: where the WebRTC UDP port is reached.
    pub candidates: Vec<SocketAddr>,
    /// Its passive ICE-TCP candidates (RFC 6544): where its TCP port is reached, for
    /// networks that block UDP.
    pub tcp_candidates: Vec<SocketAddr>,
}

/// How a datagram came: over UDP, or framed on a TCP connection (RFC 4571).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Udp,
    Tcp,
}

/// What the peer asks of its driver.
#[derive(Debug)]
pub enum PeerOutput {
    /// A datagram to send from the WebRTC port.
    Transmit {
        destination: SocketAddr,
        contents: Vec<u8>,
    },
    /// Call [`Peer::handle_timeout`] then.
    Timeout(Instant),
    Event(PeerEvent),
}

/// What happened to the peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerEvent {
    /// ICE and DTLS are done: media may flow.
    Connected,
    /// The peer is gone (ICE timed out, DTLS closed): end the session.
    Disconnected,
    /// The viewer lost a picture and asks for a keyframe.
    KeyframeRequest,
    /// A publisher's RTP packet, decrypted: a 12-byte header (its sequence number,
    /// timestamp, marker and SSRC) and the payload.
    Media { codec: Incoming, rtp: Vec<u8> },
    /// A publisher's sender report for one of its tracks: the RTP time that went with
    /// its wall clock `ntp` (how its tracks line up).
    SenderReport {
        codec: Incoming,
        ntp: SystemTime,
        rtp_time: u32,
    },
}

/// An outgoing stream of one kind, as the answer negotiated it.
#[derive(Debug)]
struct Sender {
    mid: Mid,
    pt: Pt,
}

/// A viewer's media path once DTLS is done. See the module doc.
#[derive(Debug)]
struct Media {
    srtp: srtp::Session,
    video: Option<Track>,
    audio: Option<Track>,
    next_report: Instant,
    /// NACKed packets for the server to find and send again.
    resends: VecDeque<Resend>,
    /// Whether authenticated RTCP came from the viewer: its DTLS is done.
    heard: bool,
    /// When our first SRTP packet went out: str0m goes [`SETTLE`] later at the latest.
    flowing: Option<Instant>,
    /// The last consent check answered here (after str0m is dropped).
    consent: Instant,
    /// Decrypted RTCP.
    scratch: Vec<u8>,
}

/// One WebRTC peer. See the module doc.
pub struct Peer {
    /// str0m, until a viewer's handshake has settled.
    rtc: Option<Rtc>,
    /// Where a viewer's DTLS keying material lands.
    keys: Option<keys::Slot>,
    /// Our ICE credentials, for the consent checks answered without str0m.
    ice: (String, String),
    /// Our credentials before an ICE restart, still answered from the address media
    /// goes to until the first check with the new ones.
    old_ice: Option<(String, String)>,
    /// The addresses datagrams are taken as sent to: the first candidate of each
    /// transport.
    local: SocketAddr,
    local_tcp: Option<SocketAddr>,
    /// Where the peer's datagrams come from, and ours go.
    remote: Option<SocketAddr>,
    offered: Offered,
    video: Option<Sender>,
    audio: Option<Sender>,
    /// The answer's MID header extension id, if the viewer takes it.
    mid_extension: Option<u8>,
    media: Option<Media>,
    /// What the peer has to send besides media, and the events for the driver.
    transmits: VecDeque<(SocketAddr, Vec<u8>)>,
    events: VecDeque<PeerEvent>,
    /// A publisher's payload types and what they carry.
    incoming: Vec<(Pt, Incoming)>,
    /// A publisher's video SSRC, once seen (where keyframe requests go), and its
    /// audio SSRC (whose sender reports are the audio's).
    video_in: Option<Ssrc>,
    audio_in: Option<Ssrc>,
    connected: bool,
    closed: bool,
    /// The latest time given, and wall-clock time at a known instant (sender reports).
    now: Instant,
    epoch: (Instant, SystemTime),
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("local", &self.local)
            .field("connected", &self.connected)
            .finish()
    }
}

/// An answered offer.
#[derive(Debug)]
pub struct Answer {
    pub peer: Peer,
    /// The SDP answer.
    pub sdp: String,
    /// Our ICE username fragment: the first binding request names the peer by it.
    pub ufrag: String,
}

fn config(role: Role) -> RtcConfig {
    let mut config = RtcConfig::new().set_crypto_provider(keys::provider());
    if let Some(cert) = keys::certificate() {
        config = config.set_dtls_cert(cert);
    }
    // A full agent, for the check of ours a controlling peer nominates on (module doc).
    let config = config.set_ice_lite(false).set_rtp_mode(true).clear_codecs();
    let offered = match role {
        Role::Play(offered) => offered,
        Role::Publish => return config.enable_h264(true).enable_opus(true, false),
    };
    // Only the MID: nothing here estimates a viewer's bandwidth (transport-wide
    // sequence numbers, send times), and packets are sent as the stream made them.
    use str0m::rtp::Extension;
    let mut config = config
        .clear_extension_map()
        .set_extension(4, Extension::RtpMid);
    config = match offered.video {
        Some(VideoCodec::H264) => config.enable_h264(true),
        Some(VideoCodec::H265) => config.enable_h265(true),
        Some(VideoCodec::Vp8) => config.enable_vp8(true),
        Some(VideoCodec::Vp9) => config.enable_vp9(true),
        Some(VideoCodec::Av1) => config.enable_av1(true),
        None => config,
    };
    if offered.opus {
        config = config.enable_opus(true, false);
    }
    config
}

/// `offer` without its candidates (`a=candidate`), so that str0m checks only where
/// authenticated binding requests come from: the server sends nothing to an address an
/// offer names, which anyone may write. An ICE-lite offer is refused, as its peer sends
/// no checks and would need its candidates checked.
fn without_candidates(offer: &str) -> Result<String, PeerError> {
    let mut kept = String::with_capacity(offer.len());
    for line in offer.split_inclusive('\n') {
        let attribute = line.trim();
        if attribute == "a=ice-lite" {
            return Err(PeerError::Offer(
                "an ICE-lite offer (the server checks no offered candidate)".into(),
            ));
        }
        if !attribute.starts_with("a=candidate:") {
            kept.push_str(line);
        }
    }
    Ok(kept)
}

impl Peer {
    /// Answers `offer` for `role` at `now`: a viewer's (WHEP) with what the stream
    /// has, a publisher's (WHIP) with H.264 and Opus.
    pub fn answer(
        offer: &str,
        role: Role,
        settings: &PeerConfig,
        now: Instant,
    ) -> Result<Answer, PeerError> {
        if offer.len() > MAX_OFFER {
            return Err(PeerError::TooLarge);
        }
        let offer = SdpOffer::from_sdp_string(&without_candidates(offer)?)
            .map_err(|e| PeerError::Offer(e.to_string()))?;
        let local_tcp = settings.tcp_candidates.first().copied();
        let local = settings
            .candidates
            .first()
            .copied()
            .or(local_tcp)
            .ok_or(PeerError::NoCandidate)?;
        let (mut rtc, slot) = match role {
            Role::Play(_) => {
                let (rtc, slot) = keys::build_capturing(config(role), now);
                (rtc, Some(slot))
            }
            Role::Publish => (config(role).build(now), None),
        };
        for addr in &settings.candidates {
            if let Ok(c) = Candidate::host(*addr, "udp") {
                rtc.add_local_candidate(c);
            }
        }
        for addr in &settings.tcp_candidates {
            let c = Candidate::builder()
                .tcp()
                .host(*addr)
                .tcptype(TcpType::Passive)
                .build();
            if let Ok(c) = c {
                rtc.add_local_candidate(c);
            }
        }
        let answer = rtc.sdp_api().accept_offer(offer)?;
        let sdp = answer.to_sdp_string();
        let attribute = |name: &str| {
            sdp.lines()
                .find_map(|l| l.trim().strip_prefix(name))
                .map(str::to_owned)
                .ok_or_else(|| PeerError::Offer(format!("the answer has no {name}")))
        };
        let ufrag = attribute("a=ice-ufrag:")?;
        let pwd = attribute("a=ice-pwd:")?;
        let offered = match role {
            Role::Play(o) => o,
            Role::Publish => Offered::default(),
        };
        let mid_extension = sdp.lines().find_map(|l| {
            let rest = l.trim().strip_prefix("a=extmap:")?;
            let (id, uri) = rest.split_once(' ')?;
            let id = id.split('/').next()?.parse().ok()?;
            (uri.trim() == "urn:ietf:params:rtp-hdrext:sdes:mid").then_some(id)
        });
        let mut peer = Peer {
            rtc: Some(rtc),
            keys: slot,
            ice: (ufrag.clone(), pwd),
            old_ice: None,
            local,
            local_tcp,
            remote: None,
            offered,
            video: None,
            audio: None,
            mid_extension,
            media: None,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            incoming: Vec::new(),
            video_in: None,
            audio_in: None,
            connected: false,
            closed: false,
            now,
            epoch: (now, SystemTime::now()),
        };
        match role {
            Role::Play(_) => {
                peer.find_senders(&sdp);
                if peer.video.is_none() && peer.audio.is_none() {
                    let what = format!("video {:?}, opus {}", offered.video, offered.opus);
                    return Err(PeerError::NoMedia(what));
                }
            }
            Role::Publish => {
                peer.find_receivers(&sdp);
                if peer.incoming.is_empty() {
                    return Err(PeerError::NoMedia("H.264 or Opus to publish".into()));
                }
            }
        }
        Ok(Answer { peer, sdp, ufrag })
    }

    /// The media sections of `answer` that go in `direction` (ours: sending or
    /// receiving), with their kind and the peer's payload types.
    fn sections(&self, answer: &str, sending: bool) -> Vec<(Mid, MediaKind, Vec<Pt>)> {
        let Some(rtc) = &self.rtc else {
            return Vec::new();
        };
        answer
            .lines()
            .filter_map(|l| l.trim().strip_prefix("a=mid:"))
            .map(Mid::from)
            .filter_map(|mid| {
                let media = rtc.media(mid)?;
                let ours = match media.direction() {
                    Direction::SendRecv => true,
                    Direction::SendOnly => sending,
                    Direction::RecvOnly => !sending,
                    _ => false,
                };
                ours.then(|| (mid, media.kind(), media.remote_pts().to_vec()))
            })
            .collect()
    }

    /// The media sections the answer sends on, with the payload type of the codec.
    fn find_senders(&mut self, answer: &str) {
        for (mid, kind, remote) in self.sections(answer, true) {
            let wanted = |c: Codec| match kind {
                MediaKind::Audio => c == Codec::Opus,
                MediaKind::Video => matches!(
                    (self.offered.video, c),
                    (Some(VideoCodec::H264), Codec::H264)
                        | (Some(VideoCodec::H265), Codec::H265)
                        | (Some(VideoCodec::Vp8), Codec::Vp8)
                        | (Some(VideoCodec::Vp9), Codec::Vp9)
                        | (Some(VideoCodec::Av1), Codec::Av1)
                ),
            };
            // The first of the peer's payload types for our codec, packetization mode 1
            // for H.264 (non-interleaved: FU-A and STAP-A, what we packetize).
            let Some(rtc) = &self.rtc else {
                return;
            };
            let pt = rtc.codec_config().params().iter().find_map(|p| {
                let spec = p.spec();
                let h264_ok =
                    spec.codec != Codec::H264 || spec.format.packetization_mode == Some(1);
                (wanted(spec.codec) && h264_ok && remote.contains(&p.pt())).then(|| p.pt())
            });
            let Some(pt) = pt else {
                continue;
            };
            let sender = Sender { mid, pt };
            match kind {
                MediaKind::Video if self.video.is_none() => self.video = Some(sender),
                MediaKind::Audio if self.audio.is_none() => self.audio = Some(sender),
                _ => {}
            }
        }
    }

    /// The payload types a publisher may send in, and their codecs.
    fn find_receivers(&mut self, answer: &str) {
        let sections = self.sections(answer, false);
        let Some(rtc) = &self.rtc else {
            return;
        };
        for (_, _, remote) in sections {
            for p in rtc.codec_config().params() {
                let spec = p.spec();
                let codec = match spec.codec {
                    Codec::H264 if spec.format.packetization_mode == Some(1) => Incoming::H264,
                    Codec::Opus => Incoming::Opus,
                    _ => continue,
                };
                if remote.contains(&p.pt()) && !self.incoming.iter().any(|(pt, _)| *pt == p.pt()) {
                    self.incoming.push((p.pt(), codec));
                }
            }
        }
    }

    /// What a publisher may send: H.264, Opus.
    pub fn receives(&self) -> (bool, bool) {
        let has = |c| self.incoming.iter().any(|(_, i)| *i == c);
        (has(Incoming::H264), has(Incoming::Opus))
    }

    /// Asks a publisher for a keyframe (a PLI), once its video has been seen.
    pub fn request_keyframe(&mut self) {
        if let (Some(ssrc), Some(rtc)) = (self.video_in, &mut self.rtc) {
            if let Some(rx) = rtc.direct_api().stream_rx(&ssrc) {
                rx.request_keyframe(str0m::media::KeyframeRequestKind::Pli);
            }
        }
    }

    /// Whether the peer takes video, and audio.
    pub fn sends(&self) -> (bool, bool) {
        (self.video.is_some(), self.audio.is_some())
    }

    pub fn is_connected(&self) -> bool {
        self.connected
    }

    /// A datagram from `source` on the WebRTC port. An error is this peer's own (a
    /// malformed packet): the datagram is dropped, the session goes on.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        via: Via,
        source: SocketAddr,
        datagram: &[u8],
    ) -> Result<(), PeerError> {
        self.now = now;
        // str0m picks its own pair; our media path follows the checks (see
        // `handle_unattended`), so that a restart moves it only on an authenticated one.
        if self.rtc.is_some() || self.remote.is_none() {
            self.remote = Some(source);
        }
        let kind = stun::classify(datagram);
        if self.media.is_some() && kind == DatagramKind::Rtp {
            return self.handle_rtcp(datagram);
        }
        let Some(rtc) = &mut self.rtc else {
            return self.handle_unattended(now, kind, source, datagram);
        };
        let (proto, local) = match via {
            Via::Udp => (Protocol::Udp, self.local),
            Via::Tcp => (Protocol::Tcp, self.local_tcp.unwrap_or(self.local)),
        };
        let receive = Receive::new(proto, source, local, datagram)
            .map_err(|e| PeerError::Offer(e.to_string()))?;
        // str0m advances its time with every datagram: the check of a pair a binding
        // request made (a triggered check, RFC 8445 §7.3.1.4) goes out with its answer.
        rtc.handle_input(Input::Receive(now, receive))?;
        Ok(())
    }

    /// A viewer's SRTCP: retransmissions to find, keyframes to ask for, its leaving.
    fn handle_rtcp(&mut self, datagram: &[u8]) -> Result<(), PeerError> {
        let Some(media) = &mut self.media else {
            return Ok(());
        };
        // RTCP's packet types are 192-223 (RFC 5761 §4); a viewer sends no RTP.
        if !datagram.get(1).is_some_and(|pt| (192..=223).contains(pt)) {
            return Ok(());
        }
        let mut plain = std::mem::take(&mut media.scratch);
        let opened = media.srtp.rx.unprotect_rtcp(datagram, &mut plain);
        let mut bye = false;
        if opened.is_ok() {
            media.heard = true;
            for feedback in rtcp::feedback(&plain) {
                match feedback {
                    Feedback::Nack { ssrc, lost } => {
                        let tracks = [(true, &media.video), (false, &media.audio)];
                        let Some((video, track)) = tracks.into_iter().find_map(|(v, t)| {
                            t.as_ref().filter(|t| t.ssrc() == ssrc).map(|t| (v, t))
                        }) else {
                            continue;
                        };
                        for seq in lost {
                            if media.resends.len() >= MAX_RESENDS {
                                break;
                            }
                            if let Some((index, packet)) = track.nacked(seq) {
                                media.resends.push_back(Resend {
                                    video,
                                    index,
                                    packet,
                                });
                            }
                        }
                    }
                    Feedback::Keyframe { .. } => self.events.push_back(PeerEvent::KeyframeRequest),
                    Feedback::Bye => bye = true,
                }
            }
        }
        media.scratch = plain;
        if bye {
            self.disconnected();
        }
        opened.map_err(PeerError::from)
    }

    /// A datagram once str0m is gone: consent checks are answered; a DTLS alert (the
    /// viewer closing) ends the session; the rest is dropped.
    fn handle_unattended(
        &mut self,
        now: Instant,
        kind: DatagramKind,
        source: SocketAddr,
        datagram: &[u8],
    ) -> Result<(), PeerError> {
        match kind {
            DatagramKind::Stun => {
                let (ufrag, pwd) = &self.ice;
                let mut answered = false;
                if let Some(answer) = stun::answer_check(datagram, ufrag, pwd, source) {
                    // The address of an authenticated check is where media goes
                    // (peer-reflexive): the first one after a restart, then the pair
                    // the viewer nominates.
                    if self.old_ice.take().is_some() || stun::nominates(datagram) {
                        self.remote = Some(source);
                    }
                    self.transmits.push_back((source, answer));
                    answered = true;
                } else if let Some((ufrag, pwd)) = &self.old_ice {
                    // Consent on the old path goes on until the new one is checked.
                    if self.remote == Some(source) {
                        if let Some(answer) = stun::answer_check(datagram, ufrag, pwd, source) {
                            self.transmits.push_back((source, answer));
                            answered = true;
                        }
                    }
                }
                if let (true, Some(media)) = (answered, &mut self.media) {
                    media.consent = now;
                }
            }
            // Content type 21: an alert, which after the handshake means the end.
            DatagramKind::Dtls if datagram.first() == Some(&21) => self.disconnected(),
            _ => {}
        }
        Ok(())
    }

    fn disconnected(&mut self) {
        if !self.closed {
            self.closed = true;
            self.events.push_back(PeerEvent::Disconnected);
        }
    }

    /// Advances time to `now`.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), PeerError> {
        self.now = now;
        if let Some(rtc) = &mut self.rtc {
            rtc.handle_input(Input::Timeout(now))?;
        }
        let Some(media) = &mut self.media else {
            return Ok(());
        };
        // The handshake has settled once the viewer sends authenticated RTCP, or, for
        // a viewer that sends none, once SRTP has flowed for SETTLE.
        let settled = media.heard
            || media
                .flowing
                .is_some_and(|t| now.saturating_duration_since(t) >= SETTLE);
        if settled && self.rtc.is_some() {
            self.rtc = None;
            media.consent = now;
        }
        if self.rtc.is_none() && now.saturating_duration_since(media.consent) >= CONSENT {
            self.disconnected();
            return Ok(());
        }
        if now >= media.next_report {
            media.next_report = now + REPORT_EVERY;
            if let Some(to) = self.remote {
                let wall = self.epoch.1 + now.saturating_duration_since(self.epoch.0);
                let ntp = outbound::ntp(wall);
                let cname = &self.ice.0;
                for track in [&media.video, &media.audio].into_iter().flatten() {
                    if let Some(info) = track.report(now, ntp) {
                        let mut report = Vec::with_capacity(96);
                        rtcp::write_sender_report(&mut report, &info);
                        rtcp::write_sdes(&mut report, info.ssrc, cname);
                        media.srtp.tx.protect_rtcp(&mut report, 0)?;
                        self.transmits.push_back((to, report));
                    }
                }
            }
        }
        Ok(())
    }

    /// Sends one of the stream's RTP packets (video or audio: its identity in the
    /// stream, timestamp, marker and payload) with this viewer's header and SRTP, into
    /// `out`. Nothing goes out before ICE and DTLS are done.
    #[allow(clippy::too_many_arguments)]
    pub fn send_rtp(
        &mut self,
        video: bool,
        packet: StreamPacket,
        timestamp: u32,
        marker: bool,
        payload: &[u8],
        now: Instant,
        out: &mut Datagrams,
    ) {
        let (Some(media), Some(to)) = (&mut self.media, self.remote) else {
            return;
        };
        let track = if video {
            &mut media.video
        } else {
            &mut media.audio
        };
        if let Some(track) = track {
            media.flowing.get_or_insert(now);
            // A packet that cannot be protected is not sent, as a lost one would not be.
            let _ = track.send(
                packet,
                timestamp,
                marker,
                payload,
                now,
                &media.srtp.tx,
                to,
                out,
            );
        }
    }

    /// The next NACKed packet for the server to find in the stream's history and give
    /// to [`Peer::resend`].
    pub fn next_resend(&mut self) -> Option<Resend> {
        self.media.as_mut()?.resends.pop_front()
    }

    /// Sends again the NACKed packet `resend`, found: its timestamp, marker, payload.
    pub fn resend(
        &self,
        resend: Resend,
        timestamp: u32,
        marker: bool,
        payload: &[u8],
        out: &mut Datagrams,
    ) {
        let (Some(media), Some(to)) = (&self.media, self.remote) else {
            return;
        };
        let track = if resend.video {
            &media.video
        } else {
            &media.audio
        };
        if let Some(track) = track {
            let _ = track.resend(
                resend.index,
                timestamp,
                marker,
                payload,
                &media.srtp.tx,
                to,
                out,
            );
        }
    }

    /// What the peer asks of its driver next; `Timeout` last, always.
    pub fn poll_output(&mut self) -> PeerOutput {
        loop {
            if let Some(event) = self.events.pop_front() {
                return PeerOutput::Event(event);
            }
            if let Some((destination, contents)) = self.transmits.pop_front() {
                return PeerOutput::Transmit {
                    destination,
                    contents,
                };
            }
            let idle = self.now + Duration::from_secs(86_400);
            if self.closed {
                return PeerOutput::Timeout(idle);
            }
            let ours = self.media.as_ref().map(|m| {
                let consent = m.consent + CONSENT;
                if self.rtc.is_some() {
                    let settle = m.flowing.map(|t| t + SETTLE);
                    settle.map_or(m.next_report, |s| s.min(m.next_report))
                } else {
                    m.next_report.min(consent)
                }
            });
            let Some(rtc) = &mut self.rtc else {
                return PeerOutput::Timeout(ours.unwrap_or(idle));
            };
            match rtc.poll_output() {
                // str0m's own SRTP once ours runs (its RTCP): never sent, as its SRTCP
                // indexes would repeat ours under the same keys.
                Ok(Output::Transmit(t))
                    if self.media.is_some() && stun::classify(&t.contents) == DatagramKind::Rtp => {
                }
                Ok(Output::Transmit(t)) => {
                    return PeerOutput::Transmit {
                        destination: t.destination,
                        contents: t.contents.into(),
                    }
                }
                Ok(Output::Timeout(at)) => {
                    return PeerOutput::Timeout(ours.map_or(at, |o| o.min(at)))
                }
                Ok(Output::Event(e)) => {
                    if let Some(event) = self.on_event(e) {
                        return PeerOutput::Event(event);
                    }
                }
                Err(_) => {
                    self.closed = true;
                    return PeerOutput::Event(PeerEvent::Disconnected);
                }
            }
        }
    }

    fn on_event(&mut self, event: Event) -> Option<PeerEvent> {
        match event {
            Event::Connected => {
                if self.keys.is_some() {
                    if let Err(e) = self.start_media() {
                        // Nothing can be sent: the session ends at once.
                        let _ = e;
                        self.closed = true;
                        return Some(PeerEvent::Disconnected);
                    }
                }
                self.connected = true;
                Some(PeerEvent::Connected)
            }
            Event::IceConnectionStateChange(IceConnectionState::Disconnected) | Event::Closed => {
                self.closed = true;
                Some(PeerEvent::Disconnected)
            }
            Event::KeyframeRequest(_) => Some(PeerEvent::KeyframeRequest),
            Event::SenderFeedback(f) => {
                let ssrc = Some(f.sender_info.ssrc);
                let codec = if ssrc == self.video_in {
                    Incoming::H264
                } else if ssrc == self.audio_in {
                    Incoming::Opus
                } else {
                    return None;
                };
                Some(PeerEvent::SenderReport {
                    codec,
                    ntp: f.sender_info.ntp_time,
                    // The extended RTP time, cut back to what was sent.
                    rtp_time: f.sender_info.rtp_time.numer() as u32,
                })
            }
            Event::RtpPacket(p) => {
                let h = &p.header;
                let pt = h.payload_type;
                let codec = self.incoming.iter().find(|(t, _)| *t == pt)?.1;
                match codec {
                    Incoming::H264 => self.video_in = Some(h.ssrc),
                    Incoming::Opus => self.audio_in = Some(h.ssrc),
                }
                let mut rtp = Vec::with_capacity(12 + p.payload.len());
                rtp.push(0x80);
                rtp.push(u8::from(h.marker) << 7 | (*pt & 0x7f));
                rtp.extend_from_slice(&h.sequence_number.to_be_bytes());
                rtp.extend_from_slice(&h.timestamp.to_be_bytes());
                rtp.extend_from_slice(&(*h.ssrc).to_be_bytes());
                rtp.extend_from_slice(&p.payload);
                Some(PeerEvent::Media { codec, rtp })
            }
            _ => None,
        }
    }

    /// A viewer's media path, from the keys its handshake exported.
    fn start_media(&mut self) -> Result<(), PeerError> {
        let material = self
            .keys
            .as_ref()
            .and_then(|slot| slot.lock().unwrap_or_else(|e| e.into_inner()).take())
            .ok_or(PeerError::NoKeys)?;
        let srtp = srtp::Session::new(material.profile, &material.bytes, material.client)?;
        let mid_extension = self.mid_extension;
        let rtc = self.rtc.as_mut().ok_or(PeerError::NoKeys)?;
        let mut track = |sender: &Option<Sender>, clock: u32| {
            let sender = sender.as_ref()?;
            let ssrc = *rtc.direct_api().stream_tx_by_mid(sender.mid, None)?.ssrc();
            let mid = mid_extension.map(|id| (id, sender.mid.as_ref()));
            Some(Track::new(
                ssrc,
                *sender.pt,
                clock,
                ssrc as u16 & 0x7fff,
                mid,
            ))
        };
        let video = track(&self.video, 90_000);
        let audio = track(&self.audio, 48_000);
        self.keys = None;
        self.media = Some(Media {
            srtp,
            video,
            audio,
            next_report: self.now + REPORT_EVERY,
            resends: VecDeque::new(),
            heard: false,
            flowing: None,
            consent: self.now,
            scratch: Vec::new(),
        });
        Ok(())
    }

    /// Ends the session (a DELETE): a DTLS close, or once str0m is gone an RTCP BYE,
    /// goes out with the next outputs.
    pub fn close(&mut self) {
        if let (Some(media), Some(to)) = (&mut self.media, self.remote) {
            for track in [&media.video, &media.audio].into_iter().flatten() {
                let mut bye = Vec::with_capacity(32);
                rtcp::write_bye(&mut bye, track.ssrc());
                if media.srtp.tx.protect_rtcp(&mut bye, 0).is_ok() {
                    self.transmits.push_back((to, bye));
                }
            }
        }
        match &mut self.rtc {
            Some(rtc) => rtc.disconnect(),
            None => self.disconnected(),
        }
    }

    /// Whether the session still lives.
    pub fn is_alive(&self) -> bool {
        !self.closed && self.rtc.as_ref().is_none_or(|r| r.is_alive())
    }

    /// The SRTP profile DTLS negotiated, once a viewer's media path runs.
    pub fn srtp_profile(&self) -> Option<srtp::Profile> {
        self.media.as_ref().map(|m| m.srtp.tx.profile())
    }

    /// Restarts ICE (RFC 9725 §4.3.1): checks must bear `ours` from now on, the
    /// peer's being `theirs`, and media follows the first authenticated one, from
    /// whatever address; DTLS and SRTP go on as they were. A viewer whose media path
    /// runs leaves str0m here (only DTLS retransmissions were keeping it, and a
    /// restart says the old path is gone); a publisher's str0m, or a viewer's still
    /// in its handshake, takes the new credentials.
    pub fn restart_ice(&mut self, ours: IceCredentials, theirs: IceCredentials) {
        if let Some(media) = &mut self.media {
            if self.rtc.take().is_some() {
                media.consent = self.now;
            }
        }
        if let Some(rtc) = &mut self.rtc {
            let mut api = rtc.direct_api();
            api.set_local_ice_credentials(IceCreds {
                ufrag: ours.ufrag.clone(),
                pass: ours.pwd.clone(),
            });
            api.set_remote_ice_credentials(IceCreds {
                ufrag: theirs.ufrag,
                pass: theirs.pwd,
            });
        }
        let old = std::mem::replace(&mut self.ice, (ours.ufrag, ours.pwd));
        self.old_ice = Some(old);
    }

    /// Our ICE username fragment now (a restart changes it).
    pub fn ufrag(&self) -> &str {
        &self.ice.0
    }

    /// Where the peer's media goes: the address of its last authenticated check.
    pub fn remote(&self) -> Option<SocketAddr> {
        self.remote
    }

    /// Whether str0m still runs this peer (a viewer's handshake not yet settled).
    pub fn in_handshake(&self) -> bool {
        self.rtc.is_some()
    }
}
