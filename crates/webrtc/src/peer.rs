//! One WebRTC peer of the server, around str0m's `Rtc` in ICE-lite and RTP mode. A
//! viewer (WHEP): the offer is answered with only the codecs the stream has, and the
//! stream's shared RTP packets go out with this peer's header (payload type, SSRC, a
//! sequence of its own) and SRTP. A publisher (WHIP): H.264 and Opus are accepted, and
//! its RTP comes out as plain packets for the server's depacketizers. Datagrams and
//! time in, datagrams, a timeout and events out: no socket, no clock.
//!
//! Why RTP mode: the stream packetizes each frame once for every viewer; str0m's
//! frame API would packetize it again per viewer.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use str0m::change::SdpOffer;
use str0m::crypto::CryptoProvider;
use str0m::format::Codec;
use str0m::media::{Direction, MediaKind, Mid, Pt};
use str0m::net::{Protocol, Receive, TcpType};
use str0m::rtp::{RtpWrite, Ssrc};
use str0m::{Candidate, Event, IceConnectionState, Input, Output, Rtc, RtcConfig};
use thiserror::Error;

/// Largest SDP offer taken (a browser's is 4-8 KB).
pub const MAX_OFFER: usize = 16 << 10;

/// Video packets kept for retransmission when the viewer NACKs (600 ms of a 2 Mbit/s
/// stream): each costs the cache ~0.4 KB besides its shared payload, so this bounds
/// most of a viewer's memory. Audio is not retransmitted: browsers do not NACK Opus,
/// which conceals a lost packet itself.
const RTX_PACKETS: usize = 128;

/// How long a packet stays retransmittable: a few round trips.
const RTX_AGE: Duration = Duration::from_millis(600);

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
}

/// An outgoing stream of one kind: where its packets go and how they are numbered.
#[derive(Debug)]
struct Sender {
    mid: Mid,
    pt: Pt,
    ssrc: Option<Ssrc>,
    /// The next sequence number: a viewer's own, continuous across skips.
    seq: u64,
}

/// One WebRTC peer. See the module doc.
pub struct Peer {
    rtc: Rtc,
    /// The addresses datagrams are taken as sent to: the first candidate of each
    /// transport.
    local: SocketAddr,
    local_tcp: Option<SocketAddr>,
    offered: Offered,
    video: Option<Sender>,
    audio: Option<Sender>,
    /// A publisher's payload types and what they carry.
    incoming: Vec<(Pt, Incoming)>,
    /// A publisher's video SSRC, once seen (where keyframe requests go).
    video_in: Option<Ssrc>,
    connected: bool,
    closed: bool,
    /// The latest time given.
    now: Instant,
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

fn crypto() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(str0m::crypto::from_feature_flags()))
        .clone()
}

fn config(role: Role) -> RtcConfig {
    let config = RtcConfig::new()
        .set_crypto_provider(crypto())
        .set_ice_lite(true)
        .set_rtp_mode(true)
        .clear_codecs();
    let offered = match role {
        Role::Play(offered) => offered,
        Role::Publish => return config.enable_h264(true).enable_opus(true, false),
    };
    // No transport-wide sequence numbers for viewers: nothing here estimates their
    // bandwidth, and registering every packet sent cost ~90 KB per viewer.
    use str0m::rtp::Extension;
    let mut config = config
        .clear_extension_map()
        .set_extension(1, Extension::AudioLevel)
        .set_extension(2, Extension::AbsoluteSendTime)
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
        let offer =
            SdpOffer::from_sdp_string(offer).map_err(|e| PeerError::Offer(e.to_string()))?;
        let local_tcp = settings.tcp_candidates.first().copied();
        let local = settings
            .candidates
            .first()
            .copied()
            .or(local_tcp)
            .ok_or(PeerError::NoCandidate)?;
        let mut rtc = config(role).build(now);
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
        let ufrag = sdp
            .lines()
            .find_map(|l| l.trim().strip_prefix("a=ice-ufrag:"))
            .map(str::to_owned)
            .ok_or_else(|| PeerError::Offer("the answer has no ICE ufrag".into()))?;
        let offered = match role {
            Role::Play(o) => o,
            Role::Publish => Offered::default(),
        };
        let mut peer = Peer {
            rtc,
            local,
            local_tcp,
            offered,
            video: None,
            audio: None,
            incoming: Vec::new(),
            video_in: None,
            connected: false,
            closed: false,
            now,
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
        answer
            .lines()
            .filter_map(|l| l.trim().strip_prefix("a=mid:"))
            .map(Mid::from)
            .filter_map(|mid| {
                let media = self.rtc.media(mid)?;
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
            let pt = self.rtc.codec_config().params().iter().find_map(|p| {
                let spec = p.spec();
                let h264_ok =
                    spec.codec != Codec::H264 || spec.format.packetization_mode == Some(1);
                (wanted(spec.codec) && h264_ok && remote.contains(&p.pt())).then(|| p.pt())
            });
            let Some(pt) = pt else {
                continue;
            };
            let sender = Sender {
                mid,
                pt,
                ssrc: None,
                seq: 1,
            };
            match kind {
                MediaKind::Video if self.video.is_none() => self.video = Some(sender),
                MediaKind::Audio if self.audio.is_none() => self.audio = Some(sender),
                _ => {}
            }
        }
    }

    /// The payload types a publisher may send in, and their codecs.
    fn find_receivers(&mut self, answer: &str) {
        for (_, _, remote) in self.sections(answer, false) {
            for p in self.rtc.codec_config().params() {
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
        if let Some(ssrc) = self.video_in {
            if let Some(rx) = self.rtc.direct_api().stream_rx(&ssrc) {
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
        let (proto, local) = match via {
            Via::Udp => (Protocol::Udp, self.local),
            Via::Tcp => (Protocol::Tcp, self.local_tcp.unwrap_or(self.local)),
        };
        let receive = Receive::new(proto, source, local, datagram)
            .map_err(|e| PeerError::Offer(e.to_string()))?;
        self.rtc.handle_input(Input::Receive(now, receive))?;
        Ok(())
    }

    /// Advances time to `now`.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), PeerError> {
        self.now = now;
        self.rtc.handle_input(Input::Timeout(now))?;
        Ok(())
    }

    /// Queues one of the stream's RTP packets (video or audio: its timestamp, marker
    /// and payload) with this peer's header. Nothing goes out before ICE and DTLS are
    /// done. The payload is shared: the retransmission cache keeps a reference, not a
    /// copy, when every peer is given the same one.
    pub fn write_rtp(
        &mut self,
        video: bool,
        timestamp: u32,
        marker: bool,
        payload: Arc<[u8]>,
        now: Instant,
    ) {
        if !self.connected {
            return;
        }
        let sender = if video {
            &mut self.video
        } else {
            &mut self.audio
        };
        let Some(sender) = sender else {
            return;
        };
        let mut direct = self.rtc.direct_api();
        let ssrc = match sender.ssrc {
            Some(s) => s,
            None => {
                let Some(tx) = direct.stream_tx_by_mid(sender.mid, None) else {
                    return;
                };
                let (kept, age) = if video {
                    (RTX_PACKETS, RTX_AGE)
                } else {
                    (0, Duration::ZERO)
                };
                tx.set_rtx_cache(kept, age, None);
                let s = tx.ssrc();
                sender.ssrc = Some(s);
                s
            }
        };
        let Some(tx) = direct.stream_tx(&ssrc) else {
            return;
        };
        let seq = sender.seq;
        sender.seq += 1;
        tx.write_rtp(
            RtpWrite::new(sender.pt, seq.into(), timestamp, now, payload)
                .marker(marker)
                .nackable(video),
        );
    }

    /// What the peer asks of its driver next; `Timeout` last, always.
    pub fn poll_output(&mut self) -> PeerOutput {
        loop {
            if self.closed {
                return PeerOutput::Timeout(self.now + Duration::from_secs(86_400));
            }
            match self.rtc.poll_output() {
                Ok(Output::Transmit(t)) => {
                    return PeerOutput::Transmit {
                        destination: t.destination,
                        contents: t.contents.into(),
                    }
                }
                Ok(Output::Timeout(at)) => return PeerOutput::Timeout(at),
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
                self.connected = true;
                Some(PeerEvent::Connected)
            }
            Event::IceConnectionStateChange(IceConnectionState::Disconnected) | Event::Closed => {
                self.closed = true;
                Some(PeerEvent::Disconnected)
            }
            Event::KeyframeRequest(_) => Some(PeerEvent::KeyframeRequest),
            Event::RtpPacket(p) => {
                let h = &p.header;
                let pt = h.payload_type;
                let codec = self.incoming.iter().find(|(t, _)| *t == pt)?.1;
                if codec == Incoming::H264 {
                    self.video_in = Some(h.ssrc);
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

    /// Ends the session (a DELETE): a DTLS close goes out with the next outputs.
    pub fn close(&mut self) {
        self.rtc.disconnect();
    }

    /// Whether the session still lives.
    pub fn is_alive(&self) -> bool {
        !self.closed && self.rtc.is_alive()
    }
}
