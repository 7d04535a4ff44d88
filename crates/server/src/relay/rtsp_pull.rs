//! Reading a stream from an RTSP server or camera: `sluice_rtsp`'s client session
//! (CSeq, Basic and Digest, keep-alives) on a TCP connection the driver runs, OPTIONS, DESCRIBE, a
//! SETUP for the first video and the first audio track Sluice depacketizes, PLAY;
//! RTP interleaved on the connection or over UDP to a port pair per track, through
//! `sluice_media`'s RTP receiver (reordering, depacketizing) into tracks and frames,
//! as an RTSP publisher's are.
//!
//! Why this policy and not the bench's (which sets up every track): a stream here has
//! one video and one audio track, as every other ingest gives it.

use super::client::Media;
use super::error::RelayError;
use super::origin::Origin;
use bytes::Bytes;
use sluice_media::rtp::{Received, RtpReceiver};
use sluice_media::sdp::{parse_sdp, SdpMedia};
use sluice_media::MediaKind;
use sluice_rtsp::{ClientConfig, ClientEvent, ClientSession, ClientTransport, PortPair};
use std::net::IpAddr;
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio::time::Instant;

/// How long RTP over UDP is held to put reordered packets back in order.
const JITTER_DELAY: Duration = Duration::from_millis(50);

/// One track set up: where its RTP comes from and what makes frames of it.
struct PullTrack {
    receiver: RtpReceiver,
    /// RTP and RTCP sockets (UDP); RTCP is held only so that the port stays ours.
    udp: Option<(UdpSocket, UdpSocket)>,
}

/// An RTP socket on an even port of `ip` and an RTCP socket on the next, as RTSP's
/// server side binds them (`io::udp_pair`, ports of the kernel's choice).
fn bind_pair(ip: IpAddr) -> Result<(UdpSocket, UdpSocket), RelayError> {
    let tokio = |s: std::net::UdpSocket| {
        s.set_nonblocking(true)?;
        UdpSocket::from_std(s)
    };
    let (rtp, rtcp) = crate::io::udp_pair::bind_pair(ip, (0, 0))?;
    Ok((tokio(rtp)?, tokio(rtcp)?))
}

/// The media of a DESCRIBE answer to set up: the first video and the first audio
/// section that depacketize.
fn choose(sdp: &[u8]) -> Result<Vec<SdpMedia>, RelayError> {
    let sdp = parse_sdp(sdp)?;
    let mut kinds = Vec::new();
    let mut chosen = Vec::new();
    for media in sdp.media {
        let kind = if media.codec.is_video() {
            MediaKind::Video
        } else {
            MediaKind::Audio
        };
        if kinds.contains(&kind) || media.depacketizer().is_err() {
            continue;
        }
        kinds.push(kind);
        chosen.push(media);
    }
    if chosen.is_empty() {
        return Err(RelayError::NoMedia);
    }
    Ok(chosen)
}

/// The session that plays `origin`'s URL, its OPTIONS queued, its time from `now`.
pub fn session(origin: &Origin, now: std::time::Instant) -> Result<ClientSession, RelayError> {
    let mut config = ClientConfig::new(&origin.raw)?;
    config.user_agent = concat!("sluice/", env!("CARGO_PKG_VERSION")).to_string();
    let mut session = ClientSession::new(config, rand::random(), now);
    session.options()?;
    Ok(session)
}

/// What a pull from an RTSP server does with its session's events: OPTIONS,
/// DESCRIBE, a SETUP per chosen track (interleaved, or to a UDP port pair of the
/// connection's local address), PLAY; then RTP into tracks and frames. The connection
/// driver runs the session; this keeps the tracks and their UDP sockets.
pub struct RtspPlay {
    /// RTP over UDP, to port pairs of this address.
    udp: Option<IpAddr>,
    /// The DESCRIBE answer's chosen media, and their port pairs, until PLAY.
    media: Vec<SdpMedia>,
    pairs: Vec<Option<(UdpSocket, UdpSocket)>>,
    /// By SETUP order (the session's track index), once playing.
    tracks: Vec<PullTrack>,
    /// Media bytes received since the last take.
    bytes: u64,
    /// When the server last sent RTP over UDP.
    last_udp: Instant,
    buf: Box<[u8]>,
}

/// What woke a pull from an RTSP server beside its connection.
pub enum Wake {
    /// An RTP datagram of track `.0`, `.1` bytes long, in the buffer.
    Udp(std::io::Result<(usize, usize)>),
    /// A receiver's jitter delay ended.
    Jitter,
}

impl RtspPlay {
    /// RTP over UDP to port pairs of `local_ip` when `udp`, else interleaved.
    pub fn new(udp: bool, local_ip: IpAddr) -> RtspPlay {
        RtspPlay {
            udp: udp.then_some(local_ip),
            media: Vec::new(),
            pairs: Vec::new(),
            tracks: Vec::new(),
            bytes: 0,
            last_udp: Instant::now(),
            buf: vec![0u8; 2048].into_boxed_slice(),
        }
    }

    /// Whether PLAY was answered.
    pub fn playing(&self) -> bool {
        !self.tracks.is_empty()
    }

    /// When RTP last came over UDP.
    pub fn last_udp(&self) -> Instant {
        self.last_udp
    }

    /// Media bytes received since the last call.
    pub fn take_bytes(&mut self) -> u64 {
        std::mem::take(&mut self.bytes)
    }

    /// Acts on one event of `session`; the media it yields goes to `out`.
    pub fn on_event(
        &mut self,
        session: &mut ClientSession,
        event: ClientEvent,
        out: &mut Vec<Media>,
    ) -> Result<(), RelayError> {
        match event {
            ClientEvent::Options { .. } => session.describe()?,
            ClientEvent::Described { sdp, .. } => {
                self.media = choose(&sdp)?;
                for _ in &self.media {
                    let pair = self.udp.map(bind_pair).transpose()?;
                    self.pairs.push(pair);
                }
                self.setup(session, 0)?;
            }
            ClientEvent::SetUp { track, .. } => {
                if track + 1 < self.media.len() {
                    self.setup(session, track + 1)?;
                } else {
                    session.play(None)?;
                }
            }
            ClientEvent::Playing { .. } if !self.playing() => {
                for (m, pair) in self.media.iter().zip(self.pairs.drain(..)) {
                    let d = m.depacketizer()?;
                    self.tracks.push(PullTrack {
                        receiver: RtpReceiver::new(d, JITTER_DELAY),
                        udp: pair,
                    });
                    // The SDP's parameter sets, when it has them.
                    if let Some(track) = m.track.clone() {
                        out.push(Media::Track(0, track));
                    }
                }
                self.last_udp = Instant::now();
            }
            ClientEvent::Refused(r) => {
                return Err(RelayError::RtspRefused {
                    method: r.method,
                    status: r.status,
                    reason: r.reason,
                })
            }
            ClientEvent::Timeout { method } => return Err(RelayError::NoAnswer(method)),
            ClientEvent::TornDown => return Err(RelayError::TornDown),
            ClientEvent::Interleaved { channel, payload } => {
                self.interleaved(session, channel, payload, out)
            }
            _ => {}
        }
        Ok(())
    }

    fn setup(&mut self, session: &mut ClientSession, i: usize) -> Result<(), RelayError> {
        let Some(m) = self.media.get(i) else {
            return Ok(());
        };
        let transport = match self.pairs.get(i).and_then(Option::as_ref) {
            Some((rtp, rtcp)) => ClientTransport::Udp {
                client_port: PortPair {
                    rtp: rtp.local_addr()?.port(),
                    rtcp: rtcp.local_addr()?.port(),
                },
            },
            None => ClientTransport::Interleaved,
        };
        session.setup(&m.control, transport)?;
        Ok(())
    }

    /// An interleaved RTP packet: to its track's receiver, in the order it came.
    fn interleaved(
        &mut self,
        session: &ClientSession,
        channel: u8,
        payload: Bytes,
        out: &mut Vec<Media>,
    ) {
        let Some(i) = session
            .tracks()
            .iter()
            .position(|t| t.transport.interleaved.is_some_and(|c| c.rtp == channel))
        else {
            return; // RTCP, or a track not set up
        };
        self.bytes += payload.len() as u64;
        if let Some(t) = self.tracks.get_mut(i) {
            // A bad packet loses its frame; the track goes on.
            let _ = t.receiver.push_in_order(&payload);
        }
        self.take(i, out);
    }

    /// Moves what track `i` received to `out`.
    fn take(&mut self, i: usize, out: &mut Vec<Media>) {
        let Some(t) = self.tracks.get_mut(i) else {
            return;
        };
        while let Some(received) = t.receiver.poll() {
            out.push(match received {
                Received::Track(at, track) => Media::Track(at, track),
                Received::Frame(frame) => Media::Frame(frame),
            });
        }
    }

    /// Until an RTP datagram comes over UDP, or a receiver's jitter delay ends.
    pub async fn wait(&mut self) -> Wake {
        let jitter = self
            .tracks
            .iter()
            .filter_map(|t| t.receiver.poll_timeout())
            .min();
        let jitter = async {
            match jitter {
                Some(at) => tokio::time::sleep_until(Instant::from_std(at)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = recv_any(&self.tracks, &mut self.buf) => Wake::Udp(r),
            () = jitter => Wake::Jitter,
        }
    }

    /// Acts on what woke the pull at `now`; the media it yields goes to `out`.
    pub fn on_wake(
        &mut self,
        wake: Wake,
        now: std::time::Instant,
        out: &mut Vec<Media>,
    ) -> Result<(), RelayError> {
        match wake {
            Wake::Udp(Ok((i, n))) => {
                self.bytes += n as u64;
                self.last_udp = Instant::now();
                let packet = Bytes::copy_from_slice(self.buf.get(..n).unwrap_or_default());
                if let Some(t) = self.tracks.get_mut(i) {
                    let _ = t.receiver.push_datagram(packet, now);
                }
                self.take(i, out);
            }
            Wake::Udp(Err(e)) => return Err(RelayError::Receive(e)),
            Wake::Jitter => {
                for i in 0..self.tracks.len() {
                    if let Some(t) = self.tracks.get_mut(i) {
                        t.receiver.handle_timeout(now);
                    }
                    self.take(i, out);
                }
            }
        }
        Ok(())
    }
}

/// The next RTP datagram on any track's socket (at most two: video and audio):
/// (track, length). Pending forever over TCP.
async fn recv_any(tracks: &[PullTrack], buf: &mut [u8]) -> std::io::Result<(usize, usize)> {
    let mut socks = tracks
        .iter()
        .enumerate()
        .filter_map(|(i, t)| t.udp.as_ref().map(|(rtp, _)| (i, rtp)));
    let (first, second) = (socks.next(), socks.next());
    loop {
        let (i, sock) = match (first, second) {
            (None, _) => return std::future::pending().await,
            (Some(a), None) => {
                a.1.readable().await?;
                a
            }
            (Some(a), Some(b)) => tokio::select! {
                r = a.1.readable() => { r?; a }
                r = b.1.readable() => { r?; b }
            },
        };
        match sock.try_recv(buf) {
            Ok(n) => return Ok((i, n)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}
