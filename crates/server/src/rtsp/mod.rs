//! RTSP connections: the driver between a socket and `sluice_rtsp::ServerSession`.
//!
//! A connection DESCRIBEs, SETUPs and PLAYs a live stream or a file (`vod/<path>`,
//! see `vod`), and then becomes a [`Player`] of the worker's fan-out in
//! [`Format::Rtp`]: it gets the frames' shared RTP bytes (made once per stream by its
//! publisher, see `packet::RtpSource`), on the fixed channels of [`rtp_channel`],
//! whatever channels it proposed. Or it ANNOUNCEs and RECORDs one: RTP is depacketized
//! per track into an [`Ingest`].
//!
//! Transport: RTP interleaved on the TCP connection, or UDP through the worker's
//! shared port pair (see `udp`): a UDP player's socket is a [`UdpOut`] that sends
//! the same interleaved bytes as datagrams; a UDP publisher's packets are routed here
//! by source address and reordered per track. Without UDP ports a SETUP asking for
//! UDP is answered 461 Unsupported Transport, and clients such as ffmpeg then retry
//! over TCP. Protocol rules live in the session; this file only moves bytes and events.

mod per_packet;
pub mod udp;

use crate::core::fanout::{CloseReason, Player};
use crate::core::hub::Stream;
use crate::core::ingest::Publisher;
use crate::core::packet::{rtp_channel, Format, Payload};
use crate::core::play::{PlayEnd, Playing};
use crate::ctx::{Accept, Ctx};
use crate::io::sock::{write_all, Sock};
use crate::vod::{VodFile, VodPlay};
use bytes::{Bytes, BytesMut};
use sluice_media::rtp::{JitterBuffer, JITTER_CAPACITY, JITTER_MAX_WAIT};
use sluice_media::rtp::{RtpCodec, RtpDepacketizer};
use sluice_media::sdp::{parse_sdp, write_sdp, SdpRange, SdpTrack, SessionDescription};
use sluice_media::{MediaKind, Timestamp, Track};
use sluice_rtsp::Transport;
use sluice_rtsp::{
    ChannelPair, LowerTransport, NptRange, NptTime, RtspError, ServerEvent, ServerOutput,
    ServerSession, SetupAnswer, TrackStart,
};
use std::cell::Cell;
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tracing::Instrument;
use udp::{Inbound, RouteGuard, UdpOut};

/// Bytes read from the socket per wake-up (a publisher's interleaved RTP).
const READ_CHUNK: usize = 16 << 10;

/// Longest a PLAY waits for a first packet of every track set up.
const RTP_INFO_WAIT: Duration = Duration::from_secs(1);

/// Longest a UDP packet waits in a jitter buffer for the ones before it.
const JITTER_DELAY: Duration = Duration::from_millis(50);

/// UDP packets queued for one publisher before more are dropped (at most
/// 512 × 9 KiB; normally drained as they come).
const UDP_QUEUE: usize = 512;

/// How often a DESCRIBE of a stream without a start keyframe yet looks again.
const DESCRIBE_POLL: Duration = Duration::from_millis(50);

/// Why a connection ended badly.
#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error(transparent)]
    Rtsp(#[from] RtspError),
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    #[error("session timed out")]
    Timeout,
    #[error("player closed: {0:?}")]
    Closed(CloseReason),
}

/// One worker's RTSP: the worker's [`Ctx`], and its RTP/RTCP sockets for RTSP over
/// UDP when it has a port pair.
#[derive(Debug)]
pub struct Worker {
    ctx: Rc<Ctx>,
    udp: Option<Rc<udp::RtpUdp>>,
}

impl std::ops::Deref for Worker {
    type Target = Ctx;
    fn deref(&self) -> &Ctx {
        &self.ctx
    }
}

/// What this worker runs for each RTSP connection; `udp` is its RTP/RTCP port pair.
pub fn accept(ctx: &Rc<Ctx>, udp: Option<(std::net::UdpSocket, std::net::UdpSocket)>) -> Accept {
    let udp = udp.and_then(|(rtp, rtcp)| match udp::RtpUdp::new(rtp, rtcp) {
        Ok(u) => Some(u),
        Err(e) => {
            tracing::warn!(worker = ctx.worker, "RTP over UDP off: {e}");
            None
        }
    });
    let worker = Rc::new(Worker {
        ctx: ctx.clone(),
        udp,
    });
    Rc::new(move |sock, peer| {
        tokio::task::spawn_local(serve(worker.clone(), sock, peer));
    })
}

async fn serve(ctx: Rc<Worker>, sock: TcpStream, peer: SocketAddr) {
    let id = ctx.hub.next_id();
    let span = tracing::info_span!("rtsp", id, %peer);
    async move {
        tracing::debug!("connected");
        let session = ServerSession::new(ctx.config.rtsp_session(), rand::random(), Instant::now());
        let sock = Rc::new(if ctx.config.rtsp.batch {
            Sock::tcp_stream(sock)
        } else {
            Sock::new(per_packet::PerPacket(sock))
        });
        let mut conn = Conn {
            ctx,
            id,
            peer,
            sock,
            session,
            out: VecDeque::new(),
            described: None,
            vod: None,
            replay: None,
            publishing: None,
        };
        let result = conn.run().await;
        conn.unpublish();
        match result {
            Ok(()) => tracing::info!("closed"),
            Err(SessionError::Io(e)) => tracing::info!("closed: {e}"),
            Err(e) => tracing::warn!("closed: {e}"),
        }
    }
    .instrument(span)
    .await
}

struct Conn {
    ctx: Rc<Worker>,
    id: u64,
    peer: SocketAddr,
    sock: Rc<Sock>,
    session: ServerSession,
    /// Session output waiting to be written while not playing.
    out: VecDeque<Bytes>,
    /// What a DESCRIBE chose, and the kind of each of its SDP's tracks.
    described: Option<(Source, Vec<MediaKind>)>,
    /// The file being played now, when `described` is one.
    vod: Option<VodPlay>,
    /// A PLAY that came while playing a file (a seek): answered by playing again.
    replay: Option<Option<NptRange>>,
    publishing: Option<Publish>,
}

/// What a player DESCRIBEd.
enum Source {
    Live(Arc<Stream>),
    /// A file, and where a PLAY without a range continues (after a PAUSE).
    Vod {
        file: Arc<VodFile>,
        resume: Timestamp,
    },
}

/// An RTSP publisher: its stream, and a depacketizer per ANNOUNCEd track.
struct Publish {
    ingest: Publisher,
    /// By SDP track index; `None` for media we cannot take or a second track of a kind.
    tracks: Vec<Option<InTrack>>,
    /// The tracks described by the SDP, made known to the stream at RECORD.
    initial: Vec<Track>,
    /// RTP over UDP: packets routed here from the worker's socket, by source address.
    udp: Option<mpsc::Receiver<Inbound>>,
    udp_tx: Option<mpsc::Sender<Inbound>>,
    routes: Vec<RouteGuard>,
}

struct InTrack {
    depacketizer: RtpDepacketizer,
    /// Puts UDP packets back in order (TCP needs none).
    jitter: JitterBuffer,
    /// Since when the jitter buffer holds packets it does not release.
    waiting_since: Option<Instant>,
    /// Each track's RTP clock starts at a random value: the first frame's time is
    /// subtracted, so every track starts at 0 on the publisher's timeline.
    base: Option<Timestamp>,
}

/// What an event asks the connection to do next.
enum Next {
    Continue,
    /// Play from this ring position (the keyframe the `RTP-Info` describes).
    Play(Arc<Stream>, Format, Option<u64>),
    Close,
}

impl Conn {
    async fn run(&mut self) -> Result<(), SessionError> {
        let mut pending_play = None;
        loop {
            let drained = match pending_play.take() {
                Some((stream, format, start)) => Ok(Next::Play(stream, format, start)),
                None => self.drain_events().await,
            };
            let next = match drained {
                Ok(next) => next,
                Err(e) => {
                    // An answer found a framing error in buffered input, say: the
                    // session queued its error response; send what is queued.
                    while let Some(output) = self.session.poll_output() {
                        if let ServerOutput::Write(b) = output {
                            self.out.push_back(b);
                        }
                    }
                    let _ = write_all(&self.sock, &mut self.out).await;
                    return Err(e);
                }
            };
            match next {
                Next::Continue => {}
                Next::Close => {
                    write_all(&self.sock, &mut self.out).await?;
                    return Ok(());
                }
                Next::Play(stream, format, start) => {
                    write_all(&self.sock, &mut self.out).await?;
                    let done = self.play(stream, format, start).await;
                    if let (Some((Source::Vod { resume, .. }, _)), Some(vod)) =
                        (&mut self.described, self.vod.take())
                    {
                        *resume = vod.position();
                    }
                    if done? {
                        return Ok(());
                    }
                    if let Some(range) = self.replay.take() {
                        if let Next::Play(stream, format, start) = self.start_play(range).await? {
                            pending_play = Some((stream, format, start));
                        }
                    }
                    continue;
                }
            }
            write_all(&self.sock, &mut self.out).await?;
            if self.session.is_closed() {
                return Ok(());
            }
            let deadline = self
                .session
                .poll_timeout()
                .map(tokio::time::Instant::from_std);
            let release_due = self.publishing.as_ref().and_then(Publish::release_due);
            tokio::select! {
                r = self.sock.readable() => {
                    r?;
                    let mut buf = [0u8; READ_CHUNK];
                    match self.sock.try_read(&mut buf) {
                        Ok(0) => return Ok(()),
                        Ok(n) => {
                            if let Err(e) = self.session.handle_input(Instant::now(), &buf[..n]) {
                                // Final: the session queued an error response, if any.
                                while let Some(ServerOutput::Write(b)) = self.session.poll_output() {
                                    self.out.push_back(b);
                                }
                                write_all(&self.sock, &mut self.out).await?;
                                return Err(e.into());
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                _ = sleep_until(deadline) => self.session.handle_timeout(Instant::now()),
                Some((track, packet)) = next_udp(&mut self.publishing) => {
                    let now = Instant::now();
                    self.session.note_activity(now);
                    if let Some(p) = &mut self.publishing {
                        p.rtp_udp(track, packet, now);
                    }
                }
                _ = sleep_until(release_due.map(tokio::time::Instant::from_std)) => {
                    if let Some(p) = &mut self.publishing {
                        p.release(Instant::now());
                    }
                }
            }
        }
    }

    /// Handles everything the session has to say; writes are queued in `out`.
    async fn drain_events(&mut self) -> Result<Next, SessionError> {
        while let Some(output) = self.session.poll_output() {
            match output {
                ServerOutput::Write(bytes) => self.out.push_back(bytes),
                ServerOutput::Event(event) => match self.on_event(event).await? {
                    Next::Continue => {}
                    // A PLAY's answer goes to the player's queue, in order with media.
                    play @ Next::Play(..) => return Ok(play),
                    Next::Close => {
                        while let Some(ServerOutput::Write(bytes)) = self.session.poll_output() {
                            self.out.push_back(bytes);
                        }
                        return Ok(Next::Close);
                    }
                },
            }
        }
        Ok(Next::Continue)
    }

    async fn on_event(&mut self, event: ServerEvent) -> Result<Next, SessionError> {
        match event {
            ServerEvent::Describe { path, .. } => self.describe(stream_key(&path)).await?,
            ServerEvent::Announce { path, sdp, .. } => self.announce(stream_key(&path), &sdp)?,
            ServerEvent::Setup {
                track, transport, ..
            } => {
                if transport.lower == LowerTransport::Udp {
                    self.setup_udp(track, &transport)?;
                    return Ok(Next::Continue);
                }
                if self.uses(LowerTransport::Udp) {
                    // One transport per session.
                    self.session.reject(461)?;
                    return Ok(Next::Continue);
                }
                let channels = if self.publishing.is_some() {
                    transport.interleaved.unwrap_or(ChannelPair {
                        rtp: track_channel(track),
                        rtcp: track_channel(track).wrapping_add(1),
                    })
                } else {
                    match self.described.as_ref().and_then(|(_, k)| k.get(track)) {
                        Some(&kind) => ChannelPair {
                            rtp: rtp_channel(kind),
                            rtcp: rtp_channel(kind) + 1,
                        },
                        None => {
                            self.session.not_found()?;
                            return Ok(Next::Continue);
                        }
                    }
                };
                let answer = SetupAnswer::Interleaved {
                    channels,
                    ssrc: None,
                };
                match self.session.answer_setup(answer) {
                    Err(e @ RtspError::BadAnswer { .. }) => {
                        // A publisher proposing channels another track uses.
                        tracing::debug!("setup refused: {e}");
                        self.session.reject(400)?;
                    }
                    other => other?,
                }
            }
            ServerEvent::Play { range } => return self.start_play(range).await,
            ServerEvent::Record { .. } => {
                if let Some(p) = &mut self.publishing {
                    for track in std::mem::take(&mut p.initial) {
                        p.ingest.set_track(0, track);
                    }
                    tracing::info!(stream = %p.ingest.stream.key, "record");
                    self.session.accept_record()?;
                } else {
                    self.session.reject(455)?;
                }
            }
            ServerEvent::Interleaved {
                channel,
                track,
                payload,
            } => {
                let rtp = self
                    .session
                    .setups()
                    .iter()
                    .find(|s| s.track == track)
                    .and_then(|s| s.transport.interleaved)
                    .is_some_and(|c| c.rtp == channel);
                // RTCP (receiver reports, a publisher's sender reports) is not used yet.
                if let (true, Some(p)) = (rtp, &mut self.publishing) {
                    p.rtp(track, &payload);
                }
            }
            ServerEvent::Pause | ServerEvent::KeepAlive => {}
            ServerEvent::Teardown => {
                if self.publishing.is_some() {
                    self.unpublish();
                    return Ok(Next::Close);
                }
                self.described = None;
                self.vod = None;
            }
            ServerEvent::Timeout => return Err(SessionError::Timeout),
        }
        Ok(Next::Continue)
    }

    /// Whether a track is set up over `lower` already.
    fn uses(&self, lower: LowerTransport) -> bool {
        self.session
            .setups()
            .iter()
            .any(|s| s.transport.lower == lower)
    }

    /// Answers a SETUP of RTP over UDP: our ports are the worker's shared pair. A
    /// publisher's packets from its `client_port` are routed to this session; a
    /// player's media goes to its `client_port` on the address it connected from
    /// (never to a `destination` it names: no reflection to third parties).
    fn setup_udp(&mut self, track: usize, transport: &Transport) -> Result<(), SessionError> {
        let (Some(udp), Some(client)) = (self.ctx.udp.clone(), transport.client_port) else {
            // Clients such as ffmpeg then retry over TCP.
            return Ok(self.session.reject(461)?);
        };
        if client.rtp == 0 || client.rtcp == 0 {
            return Ok(self.session.reject(461)?);
        }
        if self.uses(LowerTransport::Tcp) {
            return Ok(self.session.reject(461)?);
        }
        match &mut self.publishing {
            Some(p) => {
                if !matches!(p.tracks.get(track), Some(Some(_))) {
                    return Ok(self.session.not_found()?);
                }
                let tx = match &p.udp {
                    Some(_) => p.udp_tx.clone(),
                    None => {
                        let (tx, rx) = mpsc::channel(UDP_QUEUE);
                        p.udp = Some(rx);
                        p.udp_tx = Some(tx.clone());
                        Some(tx)
                    }
                };
                if let Some(tx) = tx {
                    let from = SocketAddr::new(self.peer.ip(), client.rtp);
                    match udp.route(from, track, tx, self.id) {
                        Some(route) => p.routes.push(route),
                        // Another session gets packets from there already.
                        None => return Ok(self.session.reject(461)?),
                    }
                }
            }
            None => {
                if self
                    .described
                    .as_ref()
                    .and_then(|(_, k)| k.get(track))
                    .is_none()
                {
                    return Ok(self.session.not_found()?);
                }
            }
        }
        let answer = SetupAnswer::Udp {
            server_port: udp.ports,
            ssrc: None,
        };
        Ok(self.session.answer_setup(answer)?)
    }

    /// Answers a DESCRIBE with the SDP of the stream's current tracks, waiting up to
    /// `play_wait_ms` for the stream and for a keyframe to start players at.
    async fn describe(&mut self, key: String) -> Result<(), SessionError> {
        if let Some(path) = key.strip_prefix("vod/") {
            return self.describe_file(path).await;
        }
        let wait = Duration::from_millis(self.ctx.config.players.wait_ms);
        let deadline = tokio::time::Instant::now() + wait;
        let Some(stream) = self.ctx.hub.find_or_wait(&key, wait).await else {
            tracing::info!(stream = %key, "describe: not live");
            return Ok(self.session.not_found()?);
        };
        let tracks = loop {
            let tracks = {
                let state = stream.lock();
                let ready = state.ring.start().is_some();
                let tracks: Vec<Arc<Track>> = [&state.video_config, &state.audio_config]
                    .into_iter()
                    .flatten()
                    .filter_map(|p| match &p.payload {
                        Payload::Config(t) => Some(t.clone()),
                        _ => None,
                    })
                    .filter(|t| RtpCodec::for_track(t).is_ok())
                    .collect();
                ready.then_some(tracks)
            };
            match tracks {
                Some(t) => break t,
                None if tokio::time::Instant::now() >= deadline => break Vec::new(),
                None => tokio::time::sleep(DESCRIBE_POLL).await,
            }
        };
        if tracks.is_empty() {
            tracing::info!(stream = %key, "describe: no track RTP can carry");
            return Ok(self.session.not_found()?);
        }
        let range = SdpRange::Live;
        let (session_id, sdp) = (stream.id, self.sdp(&key, &tracks, range));
        let Some(sdp) = sdp else {
            return Ok(self.session.reject(500)?);
        };
        let kinds = tracks.iter().map(|t| t.kind()).collect();
        self.described = Some((Source::Live(stream), kinds));
        let _ = session_id;
        Ok(self.session.answer_describe(sdp)?)
    }

    /// Answers a DESCRIBE of a file below the media root.
    async fn describe_file(&mut self, path: &str) -> Result<(), SessionError> {
        let root = std::path::Path::new(&self.ctx.config.media_root);
        let file = match self.ctx.vods.open(&self.ctx.files, root, path).await {
            Ok(f) => f,
            Err(e) => {
                tracing::info!(file = %path, "describe: {e}");
                return Ok(self.session.not_found()?);
            }
        };
        let tracks: Vec<Arc<Track>> = file
            .movie
            .tracks
            .iter()
            .filter(|t| RtpCodec::for_track(&t.track).is_ok())
            .map(|t| Arc::new(t.track.clone()))
            .collect();
        if tracks.is_empty() {
            tracing::info!(file = %path, "describe: no track RTP can carry");
            return Ok(self.session.not_found()?);
        }
        let range = SdpRange::Vod {
            duration_secs: crate::vod::secs_from_ticks(file.movie.duration),
        };
        let Some(sdp) = self.sdp(path, &tracks, range) else {
            return Ok(self.session.reject(500)?);
        };
        let kinds = tracks.iter().map(|t| t.kind()).collect();
        self.described = Some((Source::Vod { file, resume: 0 }, kinds));
        Ok(self.session.answer_describe(sdp)?)
    }

    /// The SDP of `tracks`, with control URLs `trackID=<index>`.
    fn sdp(&self, name: &str, tracks: &[Arc<Track>], range: SdpRange) -> Option<Bytes> {
        let controls: Vec<String> = (0..tracks.len()).map(|i| format!("trackID={i}")).collect();
        let sdp_tracks: Vec<SdpTrack<'_>> = tracks
            .iter()
            .zip(&controls)
            .filter_map(|(track, control)| {
                Some(SdpTrack {
                    track,
                    payload_type: RtpCodec::for_track(track).ok()?.default_payload_type(),
                    control,
                })
            })
            .collect();
        let mut sdp = BytesMut::new();
        let desc = SessionDescription {
            session_id: self.id,
            session_version: 1,
            origin_address: "127.0.0.1",
            name,
            range,
            tracks: &sdp_tracks,
        };
        if let Err(e) = write_sdp(&desc, &mut sdp) {
            tracing::warn!(stream = %name, "cannot describe: {e}");
            return None;
        }
        tracing::debug!(stream = %name, "describe");
        Some(sdp.freeze())
    }

    /// Answers a PLAY: `RTP-Info` gives, per track set up, the sequence number and
    /// timestamp of the first packet the player will get, from the start keyframe on.
    async fn start_play(&mut self, range: Option<NptRange>) -> Result<Next, SessionError> {
        let Some((source, kinds)) = &self.described else {
            self.session.reject(455)?;
            return Ok(Next::Continue);
        };
        let (stream, answer_range) = match source {
            Source::Live(stream) => (stream.clone(), range.unwrap_or(NptRange::FROM_ZERO)),
            Source::Vod { file, resume } => {
                let from = match range.and_then(|r| r.start) {
                    Some(NptTime::At(d)) => crate::vod::ticks_from_secs(d.as_secs_f64()),
                    _ => *resume,
                };
                self.vod = None;
                let play = VodPlay::start(file.clone(), &self.ctx.hub.config, self.id, from);
                let range = NptRange {
                    start: Some(NptTime::At(Duration::from_secs_f64(
                        crate::vod::secs_from_ticks(play.start_pts.max(0)),
                    ))),
                    end: Some(NptTime::At(Duration::from_secs_f64(
                        crate::vod::secs_from_ticks(file.movie.duration.max(0)),
                    ))),
                };
                let stream = play.stream.clone();
                self.vod = Some(play);
                (stream, range)
            }
        };
        let setup: Vec<(usize, MediaKind)> = self
            .session
            .setups()
            .iter()
            .filter_map(|s| Some((s.track, *kinds.get(s.track)?)))
            .collect();
        let format = Format::Rtp {
            video: setup.iter().any(|(_, k)| *k == MediaKind::Video),
            audio: setup.iter().any(|(_, k)| *k == MediaKind::Audio),
        };
        // Every track set up gets its RTP-Info (clients such as retina insist): right
        // after a keyframe the other track may have no packet yet, so wait for one,
        // briefly.
        let deadline = tokio::time::Instant::now() + RTP_INFO_WAIT;
        let (starts, start) = loop {
            let (starts, start) = first_packets(&stream, &setup);
            if starts.len() == setup.len() || tokio::time::Instant::now() >= deadline {
                break (starts, start);
            }
            tokio::time::sleep(DESCRIBE_POLL / 2).await;
        };
        self.session.answer_play(&starts, Some(answer_range))?;
        Ok(Next::Play(stream, format, start))
    }

    /// Plays until the player ends. Returns whether the connection is done.
    async fn play(
        &mut self,
        stream: Arc<Stream>,
        format: Format,
        start: Option<u64>,
    ) -> Result<bool, SessionError> {
        let udp = self.udp_out();
        tracing::info!(stream = %stream.key, udp = udp.is_some(), "play");
        // A UDP player is alive while it sends requests or RTCP reports.
        let mut heard = Vec::new();
        let sock = match udp {
            Some(out) => {
                for from in out.rtcp_sources() {
                    heard.push(out.udp().listen(from));
                }
                Rc::new(Sock::new(out))
            }
            None => self.sock.clone(),
        };
        let player = Player::new(self.id, sock, format);
        if let Some(pos) = start {
            player.start_at(pos);
        }
        let session = &mut self.session;
        let vod = self.vod.is_some();
        let mut replay = None;
        let mut stop = drain_playing(session, &player, vod, &mut replay)?;
        let playing = Playing::start(&self.ctx.fanout, &stream, player.clone());
        let last_input = Cell::new(Instant::now());
        let timeout = self.ctx.config.rtsp_session().session_timeout;
        let end = if stop {
            Ok(PlayEnd::Stopped)
        } else {
            let run = playing.run(|input| {
                last_input.set(Instant::now());
                session.handle_input(Instant::now(), input)?;
                stop = drain_playing(session, &player, vod, &mut replay)?;
                Ok::<bool, SessionError>(!stop)
            });
            tokio::select! {
                end = run => end,
                () = silent_for(timeout, &last_input, &heard), if !heard.is_empty() => {
                    tracing::info!(stream = %stream.key, "UDP player silent: session timed out");
                    Err(SessionError::Timeout)
                }
            }
        };
        let done = match end {
            Ok(PlayEnd::Stopped) => {
                // The answer to the TEARDOWN or PAUSE that stopped it.
                playing.drain().await;
                Ok(self.session.is_closed())
            }
            Ok(PlayEnd::PeerClosed) => Ok(true),
            Ok(PlayEnd::Io(e)) => Err(e.into()),
            Ok(PlayEnd::Closed(CloseReason::StreamEnded)) => Ok(true),
            Ok(PlayEnd::Closed(reason)) => Err(SessionError::Closed(reason)),
            Err(e) => {
                playing.drain().await;
                Err(e)
            }
        };
        self.replay = replay;
        done
    }

    /// A player's UDP output, when its tracks are set up over UDP: each kind's fixed
    /// channels mapped to the client's ports.
    fn udp_out(&self) -> Option<UdpOut> {
        let udp = self.ctx.udp.clone()?;
        let kinds = &self.described.as_ref()?.1;
        let mut dest = [None; 4];
        for s in self.session.setups() {
            let (LowerTransport::Udp, Some(client)) = (s.transport.lower, s.transport.client_port)
            else {
                continue;
            };
            let Some(&kind) = kinds.get(s.track) else {
                continue;
            };
            let ch = usize::from(rtp_channel(kind));
            dest[ch] = Some(SocketAddr::new(self.peer.ip(), client.rtp));
            dest[ch + 1] = Some(SocketAddr::new(self.peer.ip(), client.rtcp));
        }
        dest.iter()
            .any(Option::is_some)
            .then(|| UdpOut::new(self.sock.clone(), udp, dest, self.ctx.config.rtsp.batch))
    }

    /// Claims the stream of an ANNOUNCE and reads its SDP.
    fn announce(&mut self, key: String, sdp: &[u8]) -> Result<(), SessionError> {
        if self.publishing.is_some() {
            return Ok(self.session.reject(455)?);
        }
        let sdp = match parse_sdp(sdp) {
            Ok(s) => s,
            Err(e) => {
                tracing::info!(stream = %key, "announce: bad SDP: {e}");
                return Ok(self.session.reject(400)?);
            }
        };
        for s in &sdp.skipped {
            tracing::info!(stream = %key, media = %s.media, encoding = %s.encoding, "announce: skipped media: {}", s.reason);
        }
        let mut tracks = Vec::with_capacity(sdp.media.len());
        let mut initial = Vec::new();
        let mut kinds = Vec::new();
        for media in &sdp.media {
            let kind = if media.codec.is_video() {
                MediaKind::Video
            } else {
                MediaKind::Audio
            };
            let depacketizer = match media.depacketizer() {
                Ok(d) if !kinds.contains(&kind) => d,
                _ => {
                    tracks.push(None);
                    continue;
                }
            };
            kinds.push(kind);
            initial.extend(media.track.clone());
            tracks.push(Some(InTrack {
                depacketizer,
                jitter: JitterBuffer::new(JITTER_CAPACITY, JITTER_MAX_WAIT),
                waiting_since: None,
                base: None,
            }));
        }
        if kinds.is_empty() {
            tracing::info!(stream = %key, "announce: no media we can take");
            return Ok(self.session.reject(415)?);
        }
        let publisher = match Publisher::new(&self.ctx.hub, &key, self.id) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(stream = %key, "publish refused: {e}");
                return Ok(self.session.reject(455)?);
            }
        };
        tracing::info!(stream = %key, tracks = kinds.len(), "publish");
        self.publishing = Some(Publish {
            ingest: publisher,
            tracks,
            initial,
            udp: None,
            udp_tx: None,
            routes: Vec::new(),
        });
        Ok(self.session.accept_announce()?)
    }

    /// Ends publishing, leaving the stream to its players for the grace window.
    fn unpublish(&mut self) {
        self.publishing = None;
    }
}

impl Publish {
    /// One RTP packet over UDP: reordered, then depacketized like interleaved ones.
    fn rtp_udp(&mut self, track: usize, packet: Bytes, now: Instant) {
        if let Some(Some(t)) = self.tracks.get_mut(track) {
            if let Err(e) = t.jitter.push(packet) {
                tracing::debug!(track, "bad RTP packet: {e}");
            }
        }
        self.release(now);
    }

    /// Depacketizes what the jitter buffers release, and what they held longer than
    /// [`JITTER_DELAY`] (a lost packet is given up on; a sender that puts few packets
    /// out, such as AAC aggregated a few frames per packet, is not held back).
    fn release(&mut self, now: Instant) {
        for track in 0..self.tracks.len() {
            let Some(Some(t)) = self.tracks.get_mut(track) else {
                continue;
            };
            if t.waiting_since
                .is_some_and(|w| now.duration_since(w) >= JITTER_DELAY)
            {
                t.jitter.skip_missing();
                t.waiting_since = None;
            }
            let mut ready = Vec::new();
            while let Some(p) = t.jitter.pop() {
                ready.push(p);
            }
            if t.jitter.is_empty() {
                t.waiting_since = None;
            } else {
                t.waiting_since.get_or_insert(now);
            }
            for p in ready {
                self.rtp(track, &p);
            }
        }
    }

    /// When the oldest held packet is due for release, if any is held.
    fn release_due(&self) -> Option<Instant> {
        self.tracks
            .iter()
            .flatten()
            .filter_map(|t| t.waiting_since)
            .min()
            .map(|w| w + JITTER_DELAY)
    }

    /// One RTP packet of SDP track `track`: whole frames go to the stream.
    fn rtp(&mut self, track: usize, packet: &[u8]) {
        let Some(Some(t)) = self.tracks.get_mut(track) else {
            return;
        };
        self.ingest.bytes += packet.len() as u64;
        if let Err(e) = t.depacketizer.push(packet) {
            // That packet's frame is dropped; the track goes on.
            tracing::debug!(track, "bad RTP packet: {e}");
        }
        while let Some(f) = t.depacketizer.poll() {
            let codec = t.depacketizer.codec();
            let base = *t.base.get_or_insert(f.pts);
            if let Some(config) = f
                .parameter_sets
                .as_ref()
                .and_then(|s| s.to_config(codec).ok())
            {
                self.ingest.set_track(f.pts - base, Track::new(config));
            }
            let mut frame = f.into_frame();
            frame.dts -= base;
            frame.pts -= base;
            self.ingest.frame(frame);
        }
    }
}

/// After input or an answer while playing: responses go to the player's queue, in
/// order with media. Returns whether playing stops (TEARDOWN, PAUSE, timeout, or a
/// PLAY of a file while playing it, left in `replay` to be answered by playing again).
fn drain_playing(
    session: &mut ServerSession,
    player: &Player,
    vod: bool,
    replay: &mut Option<Option<NptRange>>,
) -> Result<bool, SessionError> {
    let mut stop = false;
    while let Some(output) = session.poll_output() {
        match output {
            ServerOutput::Write(bytes) => player.queue(bytes),
            ServerOutput::Event(ServerEvent::Play { range }) if vod => {
                *replay = Some(range);
                // The answer comes from playing again: nothing after it now.
                return Ok(true);
            }
            // PLAY again while playing (a seek, say): live goes on where it is.
            ServerOutput::Event(ServerEvent::Play { .. }) => session.answer_play(&[], None)?,
            ServerOutput::Event(ServerEvent::Teardown | ServerEvent::Pause) => stop = true,
            ServerOutput::Event(ServerEvent::Timeout) => stop = true,
            ServerOutput::Event(ServerEvent::Describe { .. } | ServerEvent::Announce { .. }) => {
                session.reject(455)?
            }
            ServerOutput::Event(ServerEvent::Setup { .. } | ServerEvent::Record { .. }) => {
                session.reject(455)?
            }
            ServerOutput::Event(ServerEvent::Interleaved { .. } | ServerEvent::KeepAlive) => {}
        }
    }
    Ok(stop)
}

/// `/live/cam1/` → `live/cam1`.
fn stream_key(path: &str) -> String {
    path.trim_matches('/').to_string()
}

/// The channel a publisher's track gets when it proposed none.
fn track_channel(track: usize) -> u8 {
    u8::try_from(track.saturating_mul(2)).unwrap_or(254)
}

/// The start keyframe's ring position, and per track set up the sequence number and
/// timestamp of the first packet of its kind from there.
fn first_packets(stream: &Stream, setup: &[(usize, MediaKind)]) -> (Vec<TrackStart>, Option<u64>) {
    let state = stream.lock();
    let ring = &state.ring;
    let start = ring.start();
    let mut starts = Vec::with_capacity(setup.len());
    for &(track, kind) in setup {
        let first = (start.unwrap_or(ring.next())..ring.next())
            .filter_map(|pos| ring.get(pos))
            .find_map(|p| p.rtp.as_ref().filter(|_| p.kind() == Some(kind)));
        if let Some(rtp) = first {
            starts.push(TrackStart {
                track,
                seq: rtp.first_seq,
                rtptime: rtp.timestamp,
            });
        }
    }
    (starts, start)
}

/// Returns once neither requests (`last_input`) nor RTCP reports (`heard`) have come
/// for `timeout`.
async fn silent_for(timeout: Duration, last_input: &Cell<Instant>, heard: &[udp::HeardGuard]) {
    loop {
        let last = heard
            .iter()
            .map(udp::HeardGuard::last)
            .fold(last_input.get(), Instant::max);
        let due = last + timeout;
        if Instant::now() >= due {
            return;
        }
        tokio::time::sleep_until(tokio::time::Instant::from_std(due)).await;
    }
}

/// The next UDP packet for a publisher over UDP; never, for anyone else.
async fn next_udp(publishing: &mut Option<Publish>) -> Option<Inbound> {
    match publishing.as_mut().and_then(|p| p.udp.as_mut()) {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
