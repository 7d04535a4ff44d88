//! RTSP connections: `sluice_rtsp::ServerSession` run by the common driver, and what
//! its events mean for the hub.
//!
//! A connection DESCRIBEs, SETUPs and PLAYs a live stream or a file (`vod/<path>`,
//! see `vod`), and then becomes a player of the worker's fan-out in
//! [`FormatId::RTP`]: it gets the frames' shared RTP bytes (made once per stream by its
//! publisher, see `packet::RtpSource`), on the fixed channels of [`rtp_channel`],
//! whatever channels it proposed. Or it ANNOUNCEs and RECORDs one: RTP is depacketized
//! per track into a [`Publisher`].
//!
//! Transport: RTP interleaved on the TCP connection, or UDP through the worker's
//! shared port pair (see `udp`): a UDP player's socket is a [`UdpOut`] that sends
//! the same interleaved bytes as datagrams; a UDP publisher's packets are routed here
//! by source address and reordered per track (the adapter's own wake-ups, beside the
//! connection's). Without UDP ports a SETUP asking for UDP is answered 461 Unsupported
//! Transport, and clients such as ffmpeg then retry over TCP. Protocol rules live in
//! the session, the I/O in the driver; this file is only the adapter.

mod per_packet;
pub mod udp;

use crate::auth::Action;
use crate::core::fanout::{CloseReason, Player};
use crate::core::format::{Format, FormatId};
use crate::core::hub::{FormUse, Stream};
use crate::core::ingest::Publisher;
use crate::core::limits::Admission;
use crate::core::packet::rtp_channel;
use crate::core::protocol::Protocol;
use crate::ctx::admit::{Ask, Refusal, Source as Found};
use crate::ctx::{Accept, Ctx};
use crate::driver::{self, Adapter, Conn, DriveError, Next};
use crate::io::sock::Sock;
use crate::vod::recorded::RecordedError;
use crate::vod::recorded::Timeline;
use crate::vod::{Speed, VodPlay};
use bytes::{Bytes, BytesMut};
use sluice_archive::range::TimeRange;
use sluice_media::rtp::{Received, RtpCodec, RtpReceiver};
use sluice_media::sdp::{parse_sdp, write_sdp, SdpRange, SdpTrack, SessionDescription};
use sluice_media::{MediaKind, Timestamp, Track};
use sluice_rtsp::Transport;
use sluice_rtsp::{
    ChannelPair, ClockRange, LowerTransport, NptRange, NptTime, PlayRange, RtspError, Scale,
    ServerEvent, ServerSession, SetupAnswer, TrackStart,
};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tracing::Instrument;
use udp::{HeardGuard, Inbound, RouteGuard, UdpOut};

type Error = DriveError<RtspError>;

impl From<RtspError> for Error {
    fn from(e: RtspError) -> Self {
        DriveError::Session(e)
    }
}

/// Longest a PLAY waits for a first packet of every track set up.
const RTP_INFO_WAIT: Duration = Duration::from_secs(1);

/// Longest a UDP packet waits in a jitter buffer for the ones before it.
const JITTER_DELAY: Duration = Duration::from_millis(50);

/// UDP packets queued for one publisher before more are dropped (at most
/// 512 × 9 KiB; normally drained as they come).
const UDP_QUEUE: usize = 512;

/// How often a DESCRIBE of a stream without a start keyframe yet looks again.
const DESCRIBE_POLL: Duration = Duration::from_millis(50);

/// One worker's RTSP: the worker's [`Ctx`], and its RTP/RTCP sockets for RTSP over
/// UDP when it has a port pair.
#[derive(Debug)]
pub struct Worker {
    ctx: Rc<Ctx>,
    udp: Option<Rc<udp::RtpUdp>>,
}

/// What this worker runs for each RTSP connection; `udp` is its RTP/RTCP port pair.
pub fn accept(ctx: &Rc<Ctx>, udp: Option<(std::net::UdpSocket, std::net::UdpSocket)>) -> Accept {
    let udp =
        udp.and_then(
            |(rtp, rtcp)| match udp::RtpUdp::new(rtp, rtcp, ctx.ops().udp.rtsp.clone()) {
                Ok(u) => Some(u),
                Err(e) => {
                    tracing::warn!(worker = ctx.worker(), "RTP over UDP off: {e}");
                    None
                }
            },
        );
    let worker = Rc::new(Worker {
        ctx: ctx.clone(),
        udp,
    });
    Rc::new(move |sock, peer, admission| {
        let sock = if worker.ctx.config().rtsp.batch {
            Sock::tcp_stream(sock)
        } else {
            Sock::new(per_packet::PerPacket(sock))
        };
        start(&worker, sock, peer, admission);
    })
}

impl Worker {
    /// A worker's RTSP without RTP over UDP (the harness's, `testing`).
    #[cfg(test)]
    pub fn tcp_only(ctx: &Rc<Ctx>) -> Rc<Worker> {
        Rc::new(Worker {
            ctx: ctx.clone(),
            udp: None,
        })
    }
}

/// Runs one RTSP connection over `sock` on this worker's event loop, holding its
/// place within the limits until it ends: what the listener does with each
/// connection, and the harness with an in-memory one. Returns its id.
pub fn start(worker: &Rc<Worker>, sock: Sock, peer: SocketAddr, admission: Admission) -> u64 {
    let id = worker.ctx.hub().next_id();
    tokio::task::spawn_local(task(worker, sock, peer, id, admission));
    id
}

/// Connection `id`'s task, in its span. Spawned as it is: awaited inside another
/// future, it would be held there twice (the captured future and the one being
/// polled), doubling the task.
pub(crate) fn task(
    worker: &Rc<Worker>,
    sock: Sock,
    peer: SocketAddr,
    id: u64,
    admission: Admission,
) -> impl std::future::Future<Output = ()> {
    let span = tracing::info_span!("rtsp", id, %peer);
    serve(worker.clone(), sock, peer, id, admission).instrument(span)
}

/// One connection's future, holding its place within the limits (`admission`) until
/// it ends. The connection and its adapter are made before it and moved in, so that
/// the future holds them once: an `async fn` would also keep the locals they were made
/// from (the session, its config) for the connection's whole life, and a player's
/// task is most of the memory it costs.
fn serve(
    worker: Rc<Worker>,
    sock: Sock,
    peer: SocketAddr,
    id: u64,
    admission: Admission,
) -> impl std::future::Future<Output = ()> {
    let now = crate::driver::now();
    let session = ServerSession::new(worker.ctx.config().rtsp_session(), rand::random(), now);
    // The session times out a silent peer itself.
    let client = worker.ctx.clients().add(id, "rtsp", peer);
    let mut conn =
        Conn::new(worker.ctx.clone(), client, Rc::new(sock), session).without_idle_timeout();
    let mut rtsp = Rtsp {
        worker,
        peer,
        described: None,
        vod: None,
        publishing: None,
        heard: Vec::new(),
        last_input: now,
        rtp_use: None,
        udp_slot: None,
    };
    async move {
        tracing::debug!("connected");
        let result = driver::run(&mut conn, &mut rtsp).await;
        drop(rtsp.publishing.take());
        driver::log_end(&result);
        drop(admission);
    }
}

/// The RTSP adapter: what a connection described, plays or publishes.
struct Rtsp {
    worker: Rc<Worker>,
    peer: SocketAddr,
    /// What a DESCRIBE chose, and the kind of each of its SDP's tracks.
    described: Option<(Source, Vec<MediaKind>)>,
    /// The file being played now, when `described` is one.
    vod: Option<VodPlay>,
    publishing: Option<Publish>,
    /// While playing over UDP: when each of the player's RTCP ports was last heard.
    heard: Vec<HeardGuard>,
    /// When the connection last brought a request.
    last_input: Instant,
    /// While playing: the stream makes its RTP form for us.
    rtp_use: Option<FormUse>,
    /// Held from the first SETUP over UDP on (`limits.max_udp_sessions`).
    udp_slot: Option<crate::core::limits::UdpSlot>,
}

/// What a player DESCRIBEd.
enum Source {
    Live(Arc<Stream>),
    /// A file or a recorded range, and where a PLAY without a range continues (after a
    /// PAUSE).
    Vod {
        timeline: Arc<Timeline>,
        /// What the stream is named in logs.
        name: String,
        /// For a recorded range: the stream's key and the range asked for, within
        /// which a PLAY's `Range: clock=` plans again.
        recorded: Option<(String, TimeRange)>,
        resume: Timestamp,
    },
}

/// An RTSP publisher: its stream, and a depacketizer per ANNOUNCEd track.
struct Publish {
    ingest: Publisher,
    /// By SDP track index; `None` for media we cannot take or a second track of a kind.
    tracks: Vec<Option<RtpReceiver>>,
    /// The tracks described by the SDP, made known to the stream at RECORD.
    initial: Vec<Track>,
    /// RTP over UDP: packets routed here from the worker's socket, by source address.
    udp: Option<mpsc::Receiver<Inbound>>,
    udp_tx: Option<mpsc::Sender<Inbound>>,
    routes: Vec<RouteGuard>,
}

/// What the RTSP adapter waits for beside the connection.
enum Wake {
    /// A publisher's RTP packet over UDP.
    Udp(Inbound),
    /// A jitter buffer's oldest packet waited long enough.
    Release,
    /// A UDP player sent neither requests nor RTCP for the session timeout.
    Silent,
}

impl Adapter<ServerSession> for Rtsp {
    type Wake = Wake;

    async fn on_event(
        &mut self,
        conn: &mut Conn<ServerSession>,
        event: ServerEvent,
    ) -> Result<Next, Error> {
        if event != ServerEvent::Timeout {
            self.last_input = crate::driver::now();
        }
        if conn.playing().is_some() {
            return Box::pin(self.while_playing(conn, event)).await;
        }
        // A publisher's media, the one event that comes many times a second, is taken
        // here; requests are boxed (see `request`).
        if let ServerEvent::Interleaved {
            track,
            rtcp,
            payload,
            ..
        } = event
        {
            // RTCP (receiver reports, a publisher's sender reports) is not used yet.
            if let (false, Some(p)) = (rtcp, &mut self.publishing) {
                p.rtp(track, &payload);
            }
            return Ok(Next::Continue);
        }
        Box::pin(self.request(conn, event)).await
    }

    async fn on_play_end(
        &mut self,
        conn: &mut Conn<ServerSession>,
        reason: CloseReason,
    ) -> Result<Next, Error> {
        let _ = conn;
        self.stopped_playing();
        match reason {
            CloseReason::StreamEnded => Ok(Next::Close),
            other => Err(DriveError::Closed(other)),
        }
    }

    async fn wait(&mut self) -> Wake {
        // Only UDP sessions and publishers wait on something here; their select (its
        // timers) is boxed so that it does not size every TCP player's task.
        if self.publishing.is_none() && self.heard.is_empty() {
            return std::future::pending().await;
        }
        Box::pin(self.wait_udp()).await
    }

    fn on_wake(&mut self, conn: &mut Conn<ServerSession>, wake: Wake) -> Result<Next, Error> {
        match wake {
            Wake::Udp((track, packet)) => {
                let now = crate::driver::now();
                conn.session.note_activity(now);
                if let Some(p) = &mut self.publishing {
                    p.rtp_udp(track, packet, now);
                }
            }
            Wake::Release => {
                if let Some(p) = &mut self.publishing {
                    p.release(crate::driver::now());
                }
            }
            Wake::Silent => {
                tracing::info!("UDP player silent: session timed out");
                return Err(DriveError::Timeout);
            }
        }
        Ok(Next::Continue)
    }
}

impl Rtsp {
    /// A request before playing, or a publisher's event other than its media. Boxed by
    /// `on_event`: DESCRIBE, ANNOUNCE and PLAY await authorization, the stream and its
    /// first packets, and unboxed they would size every connection's task for its whole
    /// life.
    async fn request(
        &mut self,
        conn: &mut Conn<ServerSession>,
        event: ServerEvent,
    ) -> Result<Next, Error> {
        match event {
            ServerEvent::Describe {
                path,
                query,
                user,
                authorization,
            } => {
                // A cluster node that drains or is over its load sends the player on.
                if let Some(to) = elsewhere(&conn.ctx, &path, &query).await {
                    conn.session.redirect(&to)?;
                    return Ok(Next::Continue);
                }
                let key = stream_key(&path);
                let ask = ask(conn, &key, &query, user.is_some(), authorization.as_deref());
                self.describe(conn, &ask).await?;
            }
            ServerEvent::Announce {
                path,
                query,
                user,
                sdp,
                authorization,
            } => {
                let key = stream_key(&path);
                let ask = ask(conn, &key, &query, user.is_some(), authorization.as_deref());
                let ctx = conn.ctx.clone();
                // Authorized before its SDP is even read.
                match ctx.check(&ask, Action::Publish).await {
                    Ok(()) => self.announce(conn, ask.checked(), &sdp).await?,
                    Err(refused) => refuse(conn, &refused)?,
                }
            }
            ServerEvent::Setup {
                track, transport, ..
            } => self.setup(conn, track, &transport)?,
            ServerEvent::Play { range, scale } => self.start_play(conn, range, scale).await?,
            ServerEvent::Record { .. } => {
                if let Some(p) = &mut self.publishing {
                    for track in std::mem::take(&mut p.initial) {
                        p.ingest.set_track(0, track);
                    }
                    tracing::info!(stream = %p.ingest.stream.key, "record");
                    conn.session.accept_record()?;
                } else {
                    conn.session.reject(455)?;
                }
            }
            // Taken by `on_event`.
            ServerEvent::Interleaved { .. } | ServerEvent::Pause | ServerEvent::KeepAlive => {}
            ServerEvent::Teardown => {
                if let Some(mut p) = self.publishing.take() {
                    if p.udp.is_some() {
                        // Lets the worker's UDP task route what reached its socket
                        // before the TEARDOWN did.
                        tokio::task::yield_now().await;
                    }
                    p.finish();
                    // Leaves the stream to its players for the grace window.
                    return Ok(Next::Close);
                }
                self.described = None;
                self.vod = None;
            }
            ServerEvent::Timeout => return Err(DriveError::Timeout),
        }
        Ok(Next::Continue)
    }

    /// What a UDP session or a publisher waits for beside its connection.
    async fn wait_udp(&mut self) -> Wake {
        let release_due = self
            .publishing
            .as_ref()
            .and_then(Publish::release_due)
            .map(tokio::time::Instant::from_std);
        // Not `rtsp_session()`: that builds the users' map, and this runs every turn.
        let timeout = self.worker.ctx.config().rtsp.session_timeout();
        tokio::select! {
            Some((track, packet)) = next_udp(&mut self.publishing) => Wake::Udp((track, packet)),
            () = sleep_until(release_due) => Wake::Release,
            () = silent_for(timeout, self.last_input, &self.heard), if !self.heard.is_empty() => {
                Wake::Silent
            }
        }
    }

    /// Requests while playing: their answers go to the player's queue, in order with
    /// media. TEARDOWN and PAUSE stop playing; a PLAY of a file (a seek) plays again
    /// from where it asks; a PLAY of a live stream goes on where it is.
    async fn while_playing(
        &mut self,
        conn: &mut Conn<ServerSession>,
        event: ServerEvent,
    ) -> Result<Next, Error> {
        match event {
            ServerEvent::Play { range, scale } if self.vod.is_some() => {
                self.stop_playing(conn).await;
                self.start_play(conn, range, scale).await?;
            }
            // A live stream plays on at normal speed.
            ServerEvent::Play { scale, .. } => {
                let scale = scale.map(|_| Scale::NORMAL);
                conn.session.answer_play_at(&[], None, scale)?
            }
            ServerEvent::Teardown => {
                self.stop_playing(conn).await;
                self.described = None;
                self.vod = None;
            }
            ServerEvent::Pause => self.stop_playing(conn).await,
            ServerEvent::Timeout => return Err(DriveError::Timeout),
            ServerEvent::Describe { .. }
            | ServerEvent::Announce { .. }
            | ServerEvent::Setup { .. }
            | ServerEvent::Record { .. } => conn.session.reject(455)?,
            ServerEvent::Interleaved { .. } | ServerEvent::KeepAlive => {}
        }
        Ok(Next::Continue)
    }

    /// Stops playing (what is owed is written first); a file resumes from here.
    async fn stop_playing(&mut self, conn: &mut Conn<ServerSession>) {
        conn.stop_playing().await;
        self.stopped_playing();
    }

    fn stopped_playing(&mut self) {
        self.heard.clear();
        if let (Some((Source::Vod { resume, .. }, _)), Some(vod)) =
            (&mut self.described, self.vod.take())
        {
            *resume = vod.position();
        }
    }

    /// Becomes a player of `stream` from ring position `start`, over UDP when the
    /// tracks were set up so.
    fn play(
        &mut self,
        conn: &mut Conn<ServerSession>,
        stream: &Arc<Stream>,
        format: Format,
        start: Option<u64>,
    ) {
        let udp = self.udp_out(conn);
        tracing::info!(stream = %stream.key, udp = udp.is_some(), "play");
        let sock = match udp {
            Some(out) => {
                // A UDP player is alive while it sends requests or RTCP reports.
                for from in out.rtcp_sources() {
                    self.heard.push(out.udp().listen(from));
                }
                Rc::new(Sock::new(out))
            }
            None => conn.sock.clone(),
        };
        let player = Player::new(conn.id, sock, format);
        if let Some(pos) = start {
            player.start_at(pos);
        }
        conn.play(stream, player, Protocol::Rtsp);
    }

    /// Answers a SETUP: over UDP, or interleaved on the fixed channel of the track's
    /// kind (a player) or the channels it proposed (a publisher).
    fn setup(
        &mut self,
        conn: &mut Conn<ServerSession>,
        track: usize,
        transport: &Transport,
    ) -> Result<(), Error> {
        if transport.lower == LowerTransport::Udp {
            return self.setup_udp(conn, track, transport);
        }
        if Self::uses(conn, LowerTransport::Udp) {
            // One transport per session.
            return Ok(conn.session.reject(461)?);
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
                None => return Ok(conn.session.not_found()?),
            }
        };
        let answer = SetupAnswer::Interleaved {
            channels,
            ssrc: None,
        };
        match conn.session.answer_setup(answer) {
            Err(e @ RtspError::BadAnswer { .. }) => {
                // A publisher proposing channels another track uses.
                tracing::debug!("setup refused: {e}");
                conn.session.reject(400)?;
            }
            other => other?,
        }
        Ok(())
    }

    /// Whether a track is set up over `lower` already.
    fn uses(conn: &Conn<ServerSession>, lower: LowerTransport) -> bool {
        conn.session
            .setups()
            .iter()
            .any(|s| s.transport.lower == lower)
    }

    /// Answers a SETUP of RTP over UDP: our ports are the worker's shared pair. A
    /// publisher's packets from its `client_port` are routed to this session; a
    /// player's media goes to its `client_port` on the address it connected from
    /// (never to a `destination` it names: no reflection to third parties).
    fn setup_udp(
        &mut self,
        conn: &mut Conn<ServerSession>,
        track: usize,
        transport: &Transport,
    ) -> Result<(), Error> {
        let (Some(udp), Some(client)) = (self.worker.udp.clone(), transport.client_port) else {
            // Clients such as ffmpeg then retry over TCP.
            return Ok(conn.session.reject(461)?);
        };
        if client.rtp == 0 || client.rtcp == 0 {
            return Ok(conn.session.reject(461)?);
        }
        if Self::uses(conn, LowerTransport::Tcp) {
            return Ok(conn.session.reject(461)?);
        }
        if self.udp_slot.is_none() {
            match self.worker.ctx.hub().limits.udp_session(self.peer.ip()) {
                Ok(slot) => self.udp_slot = Some(slot),
                // 453 Not Enough Bandwidth: the client may retry over TCP.
                Err(_) => return Ok(conn.session.reject(453)?),
            }
        }
        match &mut self.publishing {
            Some(p) => {
                if !matches!(p.tracks.get(track), Some(Some(_))) {
                    return Ok(conn.session.not_found()?);
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
                    match udp.route(from, track, tx, conn.id) {
                        Some(route) => p.routes.push(route),
                        // Another session gets packets from there already.
                        None => return Ok(conn.session.reject(461)?),
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
                    return Ok(conn.session.not_found()?);
                }
            }
        }
        let answer = SetupAnswer::Udp {
            server_port: udp.ports,
            ssrc: None,
        };
        Ok(conn.session.answer_setup(answer)?)
    }

    /// Answers a DESCRIBE with the SDP of the stream's current tracks, waiting up to
    /// `play_wait_ms` for the stream and for a keyframe to start players at.
    async fn describe(
        &mut self,
        conn: &mut Conn<ServerSession>,
        ask: &Ask<'_>,
    ) -> Result<(), Error> {
        let key = ask.key;
        let ctx = conn.ctx.clone();
        let file = key.strip_prefix("vod/");
        let stream = match ctx.admit_play(ask, file).await {
            Ok(Found::Live(stream) | Found::Pulled(stream)) => stream,
            Ok(Found::File(opened)) => {
                let timeline = Arc::new(Timeline::single(opened));
                return self.describe_vod(conn, file.unwrap_or(key), timeline, None);
            }
            Ok(Found::Recorded {
                key: recorded,
                range,
                timeline,
            }) => {
                return self.describe_vod(conn, key, timeline, Some((recorded, range)));
            }
            Err(refused) => {
                if let Refusal::NotFound(_) = refused {
                    tracing::info!(stream = %key, "describe: not live");
                }
                return refuse(conn, &refused);
            }
        };
        let wait = Duration::from_millis(self.worker.ctx.config().players.wait_ms);
        let deadline = tokio::time::Instant::now() + wait;
        let tracks: Vec<Arc<Track>> = if stream.wait_start(deadline).await {
            let state = stream.lock();
            state
                .tracks()
                .into_iter()
                .flatten()
                .filter(|t| RtpCodec::for_track(t).is_ok())
                .collect()
        } else {
            Vec::new()
        };
        if tracks.is_empty() {
            tracing::info!(stream = %key, "describe: no track RTP can carry");
            return Ok(conn.session.not_found()?);
        }
        let range = SdpRange::Live;
        let (session_id, sdp) = (stream.id, Self::sdp(conn.id, key, &tracks, range));
        let Some(sdp) = sdp else {
            return Ok(conn.session.reject(500)?);
        };
        let kinds = tracks.iter().map(|t| t.kind()).collect();
        self.described = Some((Source::Live(stream), kinds));
        let _ = session_id;
        Ok(conn.session.answer_describe(sdp)?)
    }

    /// Answers a DESCRIBE of a file below the media root or of a recorded range (the
    /// tracks of its first file).
    fn describe_vod(
        &mut self,
        conn: &mut Conn<ServerSession>,
        path: &str,
        timeline: Arc<Timeline>,
        recorded: Option<(String, TimeRange)>,
    ) -> Result<(), Error> {
        let Some(first) = timeline.pieces.first() else {
            return Ok(conn.session.not_found()?);
        };
        let tracks: Vec<Arc<Track>> = first
            .file
            .movie
            .tracks
            .iter()
            .filter(|t| RtpCodec::for_track(&t.track).is_ok())
            .map(|t| Arc::new(t.track.clone()))
            .collect();
        if tracks.is_empty() {
            tracing::info!(file = %path, "describe: no track RTP can carry");
            return Ok(conn.session.not_found()?);
        }
        let range = SdpRange::Vod {
            duration_secs: crate::vod::secs_from_ticks(timeline.duration()),
        };
        let Some(sdp) = Self::sdp(conn.id, path, &tracks, range) else {
            return Ok(conn.session.reject(500)?);
        };
        let kinds = tracks.iter().map(|t| t.kind()).collect();
        let source = Source::Vod {
            timeline,
            name: path.to_string(),
            recorded,
            resume: 0,
        };
        self.described = Some((source, kinds));
        Ok(conn.session.answer_describe(sdp)?)
    }

    /// The SDP of `tracks`, with control URLs `trackID=<index>`.
    fn sdp(id: u64, name: &str, tracks: &[Arc<Track>], range: SdpRange) -> Option<Bytes> {
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
            session_id: id,
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
    async fn start_play(
        &mut self,
        conn: &mut Conn<ServerSession>,
        range: Option<PlayRange>,
        scale: Option<Scale>,
    ) -> Result<(), Error> {
        let Some((source, _)) = &self.described else {
            return Ok(conn.session.reject(455)?);
        };
        let (stream, answer_range, answer_scale) = match source {
            Source::Live(stream) => {
                let range = match range {
                    Some(PlayRange::Npt(r)) => r,
                    // A live stream has no past to seek in: ask for `NAME@..`.
                    Some(PlayRange::Clock(_)) => return Ok(conn.session.reject(457)?),
                    None => NptRange::FROM_ZERO,
                };
                let scale = scale.map(|_| Scale::NORMAL);
                (stream.clone(), PlayRange::Npt(range), scale)
            }
            Source::Vod { .. } => match self.play_vod(conn.id, range, scale).await {
                Ok(played) => played,
                Err(status) => return Ok(conn.session.reject(status)?),
            },
        };
        let Some((_, kinds)) = &self.described else {
            return Ok(conn.session.reject(455)?);
        };
        let setup: Vec<(usize, MediaKind)> = conn
            .session
            .setups()
            .iter()
            .filter_map(|s| Some((s.track, *kinds.get(s.track)?)))
            .collect();
        let format = Format {
            id: FormatId::RTP,
            video: setup.iter().any(|(_, k)| *k == MediaKind::Video),
            audio: setup.iter().any(|(_, k)| *k == MediaKind::Audio),
            transcoded: false,
        };
        // The stream makes RTP from its start keyframe on, for as long as we play.
        self.rtp_use = stream.want_rtp();
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
        conn.session
            .answer_play_at(&starts, Some(answer_range), answer_scale)?;
        // Over UDP the connection is only the control channel now; it has started too.
        conn.started();
        self.play(conn, &stream, format, start);
        Ok(())
    }

    /// Starts playing the described file or range as a PLAY asks: from an `npt` time,
    /// a `clock` time (a range's recordings planned again within what was described),
    /// or where a PAUSE left it; at the `Scale` asked for, forward only. Returns the
    /// stream, the range and scale served, or the status that refuses the PLAY (457 for
    /// a clock range of a file or outside the recordings, 456 for reverse play).
    async fn play_vod(
        &mut self,
        id: u64,
        range: Option<PlayRange>,
        scale: Option<Scale>,
    ) -> Result<(Arc<Stream>, PlayRange, Option<Scale>), u16> {
        let Some((
            Source::Vod {
                timeline,
                name,
                recorded,
                resume,
            },
            _,
        )) = &mut self.described
        else {
            return Err(455);
        };
        let speed = match scale {
            None => Speed::NORMAL,
            Some(s) => Speed::forward(s.as_f64()).ok_or(456u16)?,
        };
        let (from, clock) = match range {
            Some(PlayRange::Npt(r)) => match r.start {
                Some(NptTime::At(d)) => (crate::vod::ticks_from_secs(d.as_secs_f64()), false),
                _ => (*resume, false),
            },
            Some(PlayRange::Clock(c)) => {
                let Some((key, asked)) = recorded.clone() else {
                    return Err(457);
                };
                let (from, _) = asked.bounds();
                let within = TimeRange {
                    from: Some(c.start.map_or(from, |s| s.max(from))),
                    to: match (c.end, asked.to) {
                        (Some(e), Some(t)) => Some(e.min(t)),
                        (e, t) => e.or(t),
                    },
                };
                if within.from >= within.to && within.to.is_some() {
                    return Err(457);
                }
                let ctx = self.worker.ctx.clone();
                match ctx.timeline(&key, within).await {
                    Ok(t) => *timeline = Arc::new(t),
                    Err(e) => {
                        tracing::info!(stream = %key, "play: {e}");
                        return Err(457);
                    }
                }
                (0, true)
            }
            None => (*resume, false),
        };
        self.vod = None;
        let config = &self.worker.ctx.hub().config;
        let play = VodPlay::play(name, timeline.clone(), config, id, from, speed);
        let start = play.start_pts.max(0);
        let served = if clock {
            PlayRange::Clock(ClockRange {
                start: Some(timeline.wall_at(start)),
                end: Some(timeline.wall_end()),
            })
        } else {
            let at = |t: Timestamp| {
                Some(NptTime::At(Duration::from_secs_f64(
                    crate::vod::secs_from_ticks(t),
                )))
            };
            PlayRange::Npt(NptRange {
                start: at(start),
                end: at(timeline.duration().max(0)),
            })
        };
        let stream = play.stream.clone();
        self.vod = Some(play);
        let used = Scale {
            milli: (speed.scale() * 1000.0).round() as i64,
        };
        Ok((stream, served, scale.map(|_| used)))
    }

    /// A player's UDP output, when its tracks are set up over UDP: each kind's fixed
    /// channels mapped to the client's ports.
    fn udp_out(&self, conn: &Conn<ServerSession>) -> Option<UdpOut> {
        let udp = self.worker.udp.clone()?;
        let kinds = &self.described.as_ref()?.1;
        let mut dest = [None; 4];
        for s in conn.session.setups() {
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
        dest.iter().any(Option::is_some).then(|| {
            UdpOut::new(
                conn.sock.clone(),
                udp,
                dest,
                self.worker.ctx.config().rtsp.batch,
            )
        })
    }

    /// Claims the stream of an ANNOUNCE and reads its SDP.
    async fn announce(
        &mut self,
        conn: &mut Conn<ServerSession>,
        ask: Ask<'_>,
        sdp: &[u8],
    ) -> Result<(), Error> {
        let key = ask.key;
        if self.publishing.is_some() {
            return Ok(conn.session.reject(455)?);
        }
        let sdp = match parse_sdp(sdp) {
            Ok(s) => s,
            Err(e) => {
                tracing::info!(stream = %key, "announce: bad SDP: {e}");
                return Ok(conn.session.reject(400)?);
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
            tracks.push(Some(RtpReceiver::new(depacketizer, JITTER_DELAY)));
        }
        if kinds.is_empty() {
            tracing::info!(stream = %key, "announce: no media we can take");
            return Ok(conn.session.reject(415)?);
        }
        let ctx = conn.ctx.clone();
        let publisher = match ctx.admit_publish(&ask).await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(stream = %key, "publish refused: {e}");
                return Ok(conn.session.reject(455)?);
            }
        };
        tracing::info!(stream = %key, tracks = kinds.len(), "publish");
        conn.merge_reads(&publisher.stream);
        conn.client.publishing(key);
        self.publishing = Some(Publish {
            ingest: publisher,
            tracks,
            initial,
            udp: None,
            udp_tx: None,
            routes: Vec::new(),
        });
        Ok(conn.session.accept_announce()?)
    }
}

impl Publish {
    /// One RTP packet over UDP: reordered, then depacketized like interleaved ones.
    fn rtp_udp(&mut self, track: usize, packet: Bytes, now: Instant) {
        let Some(Some(t)) = self.tracks.get_mut(track) else {
            return;
        };
        self.ingest.bytes += packet.len() as u64;
        if let Err(e) = t.push_datagram(packet, now) {
            tracing::debug!(track, "bad RTP packet: {e}");
        }
        self.take(track);
    }

    /// Releases what the jitter buffers held long enough (see `RtpReceiver`).
    fn release(&mut self, now: Instant) {
        for track in 0..self.tracks.len() {
            if let Some(Some(t)) = self.tracks.get_mut(track) {
                t.handle_timeout(now);
                self.take(track);
            }
        }
    }

    /// The publisher said it is done: what its UDP route and jitter buffers still hold
    /// goes to the stream, holes and all, rather than with the session.
    fn finish(&mut self) {
        let now = crate::driver::now();
        if let Some(rx) = &mut self.udp {
            let mut queued = Vec::new();
            while let Ok(inbound) = rx.try_recv() {
                queued.push(inbound);
            }
            for (track, packet) in queued {
                self.rtp_udp(track, packet, now);
            }
        }
        self.release(now + Duration::from_secs(3600));
    }

    /// When the oldest held packet is due for release, if any is held.
    fn release_due(&self) -> Option<Instant> {
        self.tracks
            .iter()
            .flatten()
            .filter_map(RtpReceiver::poll_timeout)
            .min()
    }

    /// One RTP packet of SDP track `track`, interleaved: whole frames go to the stream.
    fn rtp(&mut self, track: usize, packet: &[u8]) {
        let Some(Some(t)) = self.tracks.get_mut(track) else {
            return;
        };
        self.ingest.bytes += packet.len() as u64;
        if let Err(e) = t.push_in_order(packet) {
            // That packet's frame is dropped; the track goes on.
            tracing::debug!(track, "bad RTP packet: {e}");
        }
        self.take(track);
    }

    /// Hands what track `track` received to the stream.
    fn take(&mut self, track: usize) {
        let Some(Some(t)) = self.tracks.get_mut(track) else {
            return;
        };
        while let Some(received) = t.poll() {
            match received {
                Received::Track(at, config) => self.ingest.set_track(at, config),
                Received::Frame(frame) => self.ingest.frame(frame),
            }
        }
    }
}

/// `/live/cam1/` → `live/cam1`.
/// What a DESCRIBE or ANNOUNCE asks. A user the RTSP session authenticated itself
/// (`rtsp.users`, Digest or Basic) is authorized already; otherwise credentials in
/// the URL's query (`[[users]]`, a JWT, a signed URL) or in a Basic `Authorization`
/// header (which the session left to us) are judged by every backend.
fn ask<'a>(
    conn: &Conn<ServerSession>,
    key: &'a str,
    query: &'a str,
    authenticated: bool,
    authorization: Option<&str>,
) -> Ask<'a> {
    let ask = Ask::new("rtsp", key, conn.id, conn.client.peer().ip()).http(authorization, query);
    if authenticated {
        ask.checked()
    } else {
        ask
    }
}

/// Where a cluster node that drains or is over its load sends a new RTSP player
/// (`302`, which ffmpeg, GStreamer and VLC follow; see `Cluster::redirect`).
async fn elsewhere(ctx: &crate::ctx::Ctx, path: &str, query: &str) -> Option<String> {
    let connections = ctx.hub().limits.connections();
    let cluster = ctx.relays()?.cluster()?;
    cluster.redirect("rtsp", connections, path, query).await
}

/// Answers a refusal: 401 with a Basic challenge when credentials are missing or
/// wrong (a client with credentials in its URL then sends them), 403 when they do not
/// permit it, 404 for what is neither live nor a file, 455 for a stream published
/// already or a limit reached.
fn refuse(conn: &mut Conn<ServerSession>, refused: &Refusal) -> Result<(), Error> {
    match refused {
        Refusal::Unauthorized(_) => conn.session.reject_unauthorized("sluice")?,
        Refusal::Forbidden(_) => conn.session.reject(403)?,
        Refusal::NotFound(_) | Refusal::Range(RecordedError::Nothing(_)) => {
            conn.session.not_found()?
        }
        Refusal::Range(RecordedError::BadRange(_)) => conn.session.reject(457)?,
        Refusal::InUse(_) | Refusal::Limit(_) => conn.session.reject(455)?,
    }
    Ok(())
}

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
            .find_map(|p| p.rtp().filter(|_| p.kind() == Some(kind) && !p.derived));
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
async fn silent_for(timeout: Duration, last_input: Instant, heard: &[HeardGuard]) {
    loop {
        let last = heard
            .iter()
            .map(HeardGuard::last)
            .fold(last_input, Instant::max);
        let due = last + timeout;
        if crate::driver::now() >= due {
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
