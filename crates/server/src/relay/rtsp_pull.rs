//! Reading a stream from an RTSP server or camera: `sluice_rtsp`'s client session
//! (CSeq, Basic and Digest, keep-alives) on a TCP connection, OPTIONS, DESCRIBE, a
//! SETUP for the first video and the first audio track Sluice depacketizes, PLAY;
//! RTP interleaved on the connection or over UDP to a port pair per track, through
//! `sluice_media`'s RTP receiver (reordering, depacketizing) into tracks and frames,
//! as an RTSP publisher's are.
//!
//! Why this policy and not the bench's (which sets up every track): a stream here has
//! one video and one audio track, as every other ingest gives it.

use super::client::Media;
use super::error::{Peer, RelayError};
use super::origin::Origin;
use bytes::{Bytes, BytesMut};
use sluice_media::rtp::{Received, RtpReceiver};
use sluice_media::sdp::{parse_sdp, SdpMedia};
use sluice_media::MediaKind;
use sluice_rtsp::{
    ClientConfig, ClientEvent, ClientOutput, ClientSession, ClientTransport, PortPair,
};
use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::Instant;

/// How long RTP over UDP is held to put reordered packets back in order.
const JITTER_DELAY: Duration = Duration::from_millis(50);
/// A server silent this long (no RTP, no answer) is taken for dead.
const SILENCE: Duration = Duration::from_secs(10);

/// One track set up: where its RTP comes from and what makes frames of it.
struct PullTrack {
    receiver: RtpReceiver,
    /// RTP and RTCP sockets (UDP); RTCP is held only so that the port stays ours.
    udp: Option<(UdpSocket, UdpSocket)>,
}

pub struct RtspReader {
    tcp: TcpStream,
    session: ClientSession,
    /// By SETUP order (the session's track index).
    tracks: Vec<PullTrack>,
    queue: VecDeque<Media>,
    input: BytesMut,
    out: BytesMut,
    bytes: u64,
    last_data: Instant,
    buf: Box<[u8]>,
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

impl RtspReader {
    /// Plays the source's URL; returns once PLAY is answered.
    pub async fn open(origin: &Origin, udp: bool) -> Result<RtspReader, RelayError> {
        let mut config = ClientConfig::new(&origin.raw)?;
        config.user_agent = concat!("sluice/", env!("CARGO_PKG_VERSION")).to_string();
        let tcp = TcpStream::connect((origin.host.as_str(), origin.port))
            .await
            .map_err(|source| RelayError::Connect {
                addr: origin.authority(),
                source,
            })?;
        let _ = tcp.set_nodelay(true);
        let local_ip = tcp.local_addr()?.ip();
        let mut session = ClientSession::new(config, rand::random(), std::time::Instant::now());
        session.options()?;
        let mut r = RtspReader {
            tcp,
            session,
            tracks: Vec::new(),
            queue: VecDeque::new(),
            input: BytesMut::with_capacity(64 << 10),
            out: BytesMut::new(),
            bytes: 0,
            last_data: Instant::now(),
            buf: vec![0u8; 2048].into_boxed_slice(),
        };
        let mut media: Vec<SdpMedia> = Vec::new();
        let mut pairs: Vec<Option<(UdpSocket, UdpSocket)>> = Vec::new();
        loop {
            let mut events = Vec::new();
            r.drain(&mut events);
            // Requests made while handling events are drained on the next turn.
            if events.is_empty() {
                r.write().await?;
                r.read().await?;
                continue;
            }
            for e in events {
                match e {
                    ClientEvent::Options { .. } => r.session.describe()?,
                    ClientEvent::Described { sdp, .. } => {
                        media = choose(&sdp)?;
                        for _ in &media {
                            pairs.push(if udp {
                                Some(bind_pair(local_ip)?)
                            } else {
                                None
                            });
                        }
                        r.setup(&media, &pairs, 0)?;
                    }
                    ClientEvent::SetUp { track, .. } => {
                        if track + 1 < media.len() {
                            r.setup(&media, &pairs, track + 1)?;
                        } else {
                            r.session.play(None)?;
                        }
                    }
                    ClientEvent::Playing { .. } => {
                        for (m, pair) in media.iter().zip(pairs.drain(..)) {
                            let d = m.depacketizer()?;
                            r.tracks.push(PullTrack {
                                receiver: RtpReceiver::new(d, JITTER_DELAY),
                                udp: pair,
                            });
                            // The SDP's parameter sets, when it has them.
                            if let Some(track) = m.track.clone() {
                                r.queue.push_back(Media::Track(0, track));
                            }
                        }
                        r.write().await?;
                        return Ok(r);
                    }
                    other => r.common(other)?,
                }
            }
        }
    }

    fn setup(
        &mut self,
        media: &[SdpMedia],
        pairs: &[Option<(UdpSocket, UdpSocket)>],
        i: usize,
    ) -> Result<(), RelayError> {
        let Some(m) = media.get(i) else {
            return Ok(());
        };
        let transport = match pairs.get(i).and_then(Option::as_ref) {
            Some((rtp, rtcp)) => ClientTransport::Udp {
                client_port: PortPair {
                    rtp: rtp.local_addr()?.port(),
                    rtcp: rtcp.local_addr()?.port(),
                },
            },
            None => ClientTransport::Interleaved,
        };
        self.session.setup(&m.control, transport)?;
        Ok(())
    }

    /// Events every state may see that end the pull, or are ignored.
    fn common(&mut self, e: ClientEvent) -> Result<(), RelayError> {
        match e {
            ClientEvent::Refused(r) => Err(RelayError::RtspRefused {
                method: r.method,
                status: r.status,
                reason: r.reason,
            }),
            ClientEvent::Timeout { method } => Err(RelayError::NoAnswer(method)),
            ClientEvent::TornDown => Err(RelayError::TornDown),
            ClientEvent::Interleaved { channel, payload } => {
                self.interleaved(channel, payload);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// An interleaved RTP packet: to its track's receiver, in the order it came.
    fn interleaved(&mut self, channel: u8, payload: Bytes) {
        let Some(i) = self
            .session
            .tracks()
            .iter()
            .position(|t| t.transport.interleaved.is_some_and(|c| c.rtp == channel))
        else {
            return; // RTCP, or a track not set up
        };
        if let Some(t) = self.tracks.get_mut(i) {
            // A bad packet loses its frame; the track goes on.
            let _ = t.receiver.push_in_order(&payload);
        }
        self.take(i);
    }

    /// Moves what track `i` received to the queue.
    fn take(&mut self, i: usize) {
        let Some(t) = self.tracks.get_mut(i) else {
            return;
        };
        while let Some(received) = t.receiver.poll() {
            self.queue.push_back(match received {
                Received::Track(at, track) => Media::Track(at, track),
                Received::Frame(frame) => Media::Frame(frame),
            });
        }
    }

    fn drain(&mut self, events: &mut Vec<ClientEvent>) {
        while let Some(o) = self.session.poll_output() {
            match o {
                ClientOutput::Write(b) => self.out.extend_from_slice(&b),
                ClientOutput::Event(e) => events.push(e),
            }
        }
    }

    async fn write(&mut self) -> Result<(), RelayError> {
        if !self.out.is_empty() {
            // A server that stops reading must not hold the pull here.
            tokio::time::timeout(SILENCE, self.tcp.write_all(&self.out))
                .await
                .map_err(|_| RelayError::Stalled {
                    peer: Peer::Server,
                    after: SILENCE,
                })?
                .map_err(RelayError::Write)?;
            self.out.clear();
        }
        Ok(())
    }

    /// One read of the connection into the session.
    async fn read(&mut self) -> Result<(), RelayError> {
        self.input.reserve(64 << 10);
        let n = self
            .tcp
            .read_buf(&mut self.input)
            .await
            .map_err(RelayError::Read)?;
        if n == 0 {
            return Err(RelayError::Closed(Peer::Server));
        }
        self.feed(n)
    }

    fn feed(&mut self, n: usize) -> Result<(), RelayError> {
        self.bytes += n as u64;
        self.last_data = Instant::now();
        let input = self.input.split();
        Ok(self
            .session
            .handle_input(std::time::Instant::now(), &input)?)
    }

    pub fn take_bytes(&mut self) -> u64 {
        std::mem::take(&mut self.bytes)
    }

    pub async fn next(&mut self, wait: Duration) -> Result<Option<Media>, RelayError> {
        let until = Instant::now() + wait;
        loop {
            let mut events = Vec::new();
            self.drain(&mut events);
            for e in events {
                self.common(e)?;
            }
            self.write().await?;
            if let Some(m) = self.queue.pop_front() {
                return Ok(Some(m));
            }
            let now = Instant::now();
            if now.duration_since(self.last_data) >= SILENCE {
                return Err(RelayError::Silent {
                    peer: Peer::Server,
                    after: SILENCE,
                });
            }
            if now >= until {
                return Ok(None);
            }
            let mut wake = until;
            if let Some(t) = self.session.poll_timeout() {
                wake = wake.min(Instant::from_std(t));
            }
            for t in &self.tracks {
                if let Some(t) = t.receiver.poll_timeout() {
                    wake = wake.min(Instant::from_std(t));
                }
            }
            self.input.reserve(64 << 10);
            let got = tokio::select! {
                r = self.tcp.read_buf(&mut self.input) => Got::Tcp(r),
                r = recv_any(&self.tracks, &mut self.buf) => Got::Udp(r),
                () = tokio::time::sleep_until(wake) => Got::Timer,
            };
            let now_std = std::time::Instant::now();
            match got {
                Got::Tcp(Ok(0)) => return Err(RelayError::Closed(Peer::Server)),
                Got::Tcp(Ok(n)) => self.feed(n)?,
                Got::Tcp(Err(e)) => return Err(RelayError::Read(e)),
                Got::Udp(Ok((i, n))) => {
                    self.bytes += n as u64;
                    self.last_data = Instant::now();
                    let packet = Bytes::copy_from_slice(&self.buf[..n]);
                    if let Some(t) = self.tracks.get_mut(i) {
                        let _ = t.receiver.push_datagram(packet, now_std);
                    }
                    self.take(i);
                }
                Got::Udp(Err(e)) => return Err(RelayError::Receive(e)),
                Got::Timer => {}
            }
            self.session.handle_timeout(now_std);
            for i in 0..self.tracks.len() {
                if let Some(t) = self.tracks.get_mut(i) {
                    t.receiver.handle_timeout(now_std);
                }
                self.take(i);
            }
        }
    }
}

enum Got {
    Tcp(std::io::Result<usize>),
    Udp(std::io::Result<(usize, usize)>),
    Timer,
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
