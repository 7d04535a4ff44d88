//! Relay connections in the one driver: a pull from an RTMP, RTMPS, HTTP(S)-FLV or
//! RTSP origin and a push to an RTMP or RTMPS target run their sans-IO client session
//! (`sluice_rtmp::ClientSession`, `sluice_http::flv_client::FlvClient`,
//! `sluice_rtsp::ClientSession`) in
//! [`super::run`], as the server's own connections run theirs. The session is given
//! the time, so its start and silence timeouts are the driver's timer; the connection
//! is in the worker's registry (the API lists it, a kick or the shutdown ends it) and
//! ends with an [`EndReason`] as every connection does. What the session's events mean
//! stays the relays' ([`PullSink`], [`PushFeed`]); the adapters here hand them over.
//!
//! The relays sit below the driver (`FLOORS`), so each worker installs its
//! [`Relaying`] as their [`Link`] when it starts ([`install`]).

use super::{Adapter, Conn, DriveError, Next};
use crate::ctx::Ctx;
use crate::io::sock::{IntoSock, SharedTcp, Sock};
use crate::ops::EndReason;
use crate::relay::client::{rtmp_parts, rtmp_session, Media, SILENCE};
use crate::relay::error::{Peer, RelayError};
use crate::relay::link::{Connection, Link};
use crate::relay::origin::Scheme;
use crate::relay::pull::{PullSink, Stop, TICK};
use crate::relay::push::PushFeed;
use crate::relay::rtsp_pull::{self, RtspPlay};
use sluice_http::flv_client::{FlvClient, FlvClientError, FlvEvent};
use sluice_media::flv::{TAG_AUDIO, TAG_SCRIPT, TAG_VIDEO};
use sluice_rtmp::{ClientEvent, ClientSession, ClientTimeouts, RtmpError, Waited};
use sluice_rtsp::{ClientEvent as RtspEvent, ClientSession as RtspSession, RtspError};
use sluice_session::Session;

type Error = DriveError<RtmpError>;
use std::future::Future;
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

/// A client session a pull plays its origin with: what its events give the hub.
trait Played: Session {
    /// What `event` carries of the stream (`None`: nothing), or why it ends the
    /// connection; `timeout` is the pull's connect timeout.
    fn media(event: Self::Event, timeout: Duration) -> Result<Option<Media>, RelayError>;

    /// What a failure of the session means for the relay.
    fn error(e: Self::Error) -> RelayError;

    /// Bytes received from the origin.
    fn received(&self) -> u64;
}

impl Played for ClientSession {
    fn media(event: ClientEvent, timeout: Duration) -> Result<Option<Media>, RelayError> {
        Ok(Some(match event {
            ClientEvent::Video {
                timestamp_ms,
                payload,
            } => Media::Video(timestamp_ms, payload),
            ClientEvent::Audio {
                timestamp_ms,
                payload,
            } => Media::Audio(timestamp_ms, payload),
            ClientEvent::Metadata { payload } => Media::Metadata(payload),
            ClientEvent::Rejected { code, description } => {
                return Err(RelayError::Refused {
                    peer: Peer::Origin,
                    code,
                    description,
                })
            }
            ClientEvent::Status { code, .. } if ends_stream(&code) => {
                return Err(RelayError::StreamEnded(code))
            }
            ClientEvent::TimedOut(Waited::Start) => return Err(RelayError::NoStream(timeout)),
            ClientEvent::TimedOut(Waited::Input) => return Err(silent()),
            _ => return Ok(None),
        }))
    }

    fn error(e: RtmpError) -> RelayError {
        RelayError::Rtmp(e)
    }

    fn received(&self) -> u64 {
        self.bytes_received()
    }
}

impl Played for FlvClient {
    fn media(event: FlvEvent, timeout: Duration) -> Result<Option<Media>, RelayError> {
        let tag = match event {
            FlvEvent::Playing => return Ok(None),
            FlvEvent::TimedOut { start: true } => return Err(RelayError::NoStream(timeout)),
            FlvEvent::TimedOut { start: false } => return Err(silent()),
            FlvEvent::Tag(tag) => tag,
        };
        let ts = i64::from(tag.timestamp_ms);
        Ok(match tag.tag_type {
            TAG_VIDEO => Some(Media::Video(ts, tag.body)),
            TAG_AUDIO => Some(Media::Audio(ts, tag.body)),
            TAG_SCRIPT => Some(Media::Metadata(tag.body)),
            _ => None,
        })
    }

    fn error(e: FlvClientError) -> RelayError {
        match e {
            FlvClientError::Response(e) => RelayError::Http(e),
            FlvClientError::Status(status) => RelayError::Status {
                what: Peer::Origin.to_string(),
                status,
            },
            FlvClientError::Flv(e) => RelayError::BadMedia(e),
            FlvClientError::Ended => RelayError::BodyEnded,
            FlvClientError::Datagram => RelayError::Closed(Peer::Origin),
        }
    }

    fn received(&self) -> u64 {
        self.bytes_received()
    }
}

fn silent() -> RelayError {
    RelayError::Silent {
        peer: Peer::Origin,
        after: SILENCE,
    }
}

/// A worker's way of running relay connections in its driver.
pub struct Relaying {
    ctx: Weak<Ctx>,
}

/// Makes the worker of `ctx` run the relays' connections started on it.
pub fn install(ctx: &Rc<Ctx>) {
    crate::relay::link::install(Rc::new(Relaying {
        ctx: Rc::downgrade(ctx),
    }));
}

impl Link for Relaying {
    fn pull<'a>(&'a self, sink: &'a mut PullSink<'_>) -> Connection<'a, Stop> {
        Box::pin(async move {
            match self.ctx.upgrade() {
                Some(ctx) => pull(ctx, sink).await,
                None => Stop::Failed(RelayError::NoDriver),
            }
        })
    }

    fn push<'a>(&'a self, feed: &'a mut PushFeed<'_>) -> Connection<'a, Result<(), RelayError>> {
        Box::pin(async move {
            match self.ctx.upgrade() {
                Some(ctx) => push(ctx, feed).await,
                None => Err(RelayError::NoDriver),
            }
        })
    }
}

/// One connection of a pull from an RTMP(S), HTTP(S)-FLV or RTSP origin.
async fn pull(ctx: Rc<Ctx>, sink: &mut PullSink<'_>) -> Stop {
    let start = super::now();
    let timeout = sink.connect_timeout();
    let origin = sink.origin().clone();
    let key = sink.key().to_string();
    let tls = matches!(origin.scheme, Scheme::Rtmps | Scheme::Flv { tls: true })
        .then(|| sink.tls().clone());
    let dialed = tokio::time::timeout(timeout, dial(&origin.host, origin.port, tls.as_ref()));
    let Dialed { sock, peer, local } = match dialed.await {
        Ok(Ok(dialed)) => dialed,
        Ok(Err(why)) => return why.into(),
        Err(_) => return RelayError::NoStream(timeout).into(),
    };
    let opened = Opened {
        ctx,
        sock,
        peer,
        timeout,
    };
    if let Scheme::Rtsp { udp } = origin.scheme {
        let session = match rtsp_pull::session(&origin, start) {
            Ok(session) => session,
            Err(why) => return why.into(),
        };
        return play_rtsp(opened, session, RtspPlay::new(udp, local.ip()), sink).await;
    }
    if let Scheme::Flv { .. } = origin.scheme {
        let agent = concat!("sluice/", env!("CARGO_PKG_VERSION"));
        let session = FlvClient::new(&origin.flv_path(&key), &origin.authority(), agent)
            .with_timeouts(start, timeout, SILENCE);
        return play(opened, "flv-pull", session, sink).await;
    }
    let path = origin.path_of(&key);
    let (app, stream) = match rtmp_parts(&path) {
        Ok(parts) => parts,
        Err(why) => return why.into(),
    };
    let timeouts = ClientTimeouts {
        start: timeout,
        silence: SILENCE,
    };
    let mut session =
        rtmp_session(tls.is_some(), &origin.authority(), app).with_timeouts(start, timeouts);
    session.play(stream);
    play(opened, "rtmp-pull", session, sink).await
}

/// A pull's connection, made.
struct Opened {
    ctx: Rc<Ctx>,
    sock: Sock,
    peer: SocketAddr,
    /// The pull's connect timeout.
    timeout: Duration,
}

/// Plays the origin over `session` until the pull stops or the origin fails.
async fn play<S: Played>(
    opened: Opened,
    protocol: &'static str,
    session: S,
    sink: &mut PullSink<'_>,
) -> Stop {
    let Opened {
        ctx,
        sock,
        peer,
        timeout,
    } = opened;
    // An origin that takes nothing of what we say must not hold the pull.
    let mut conn = connection(&ctx, protocol, sock, peer, session).bound_writes(SILENCE);
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut adapter = Pull {
        sink,
        timeout,
        stop: None,
        counted: 0,
        tick,
    };
    let result = super::run(&mut conn, &mut adapter).await;
    adapter.count(&conn);
    match (adapter.stop, result) {
        (Some(stop), _) => stop,
        (None, Err(e)) => Stop::Failed(relay_error(e, Peer::Origin, S::error)),
        (None, Ok(())) => RelayError::Closed(Peer::Origin).into(),
    }
}

/// Plays an RTSP server over `session` until the pull stops or the server fails.
async fn play_rtsp(
    opened: Opened,
    session: RtspSession,
    play: RtspPlay,
    sink: &mut PullSink<'_>,
) -> Stop {
    let Opened {
        ctx,
        sock,
        peer,
        timeout,
    } = opened;
    // A server that takes nothing of what we say must not hold the pull.
    let mut conn = connection(&ctx, "rtsp-pull", sock, peer, session).bound_writes(SILENCE);
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let now = tokio::time::Instant::now();
    let mut adapter = RtspPull {
        sink,
        play,
        timeout,
        started: now,
        heard: now,
        stop: None,
        tick,
    };
    let result = super::run(&mut conn, &mut adapter).await;
    match (adapter.stop, result) {
        (Some(stop), _) => stop,
        (None, Err(e)) => Stop::Failed(relay_error(e, Peer::Server, RelayError::Rtsp)),
        (None, Ok(())) => RelayError::Closed(Peer::Server).into(),
    }
}

/// A pull's adapter for an RTSP server: the session's events and RTP over UDP go
/// through the pull's [`RtspPlay`] to its sink.
struct RtspPull<'s, 'a> {
    sink: &'s mut PullSink<'a>,
    play: RtspPlay,
    /// The pull's connect timeout: PLAY must be answered within it.
    timeout: Duration,
    started: tokio::time::Instant,
    /// When the server last said anything on the connection.
    heard: tokio::time::Instant,
    stop: Option<Stop>,
    tick: tokio::time::Interval,
}

/// What woke an RTSP pull beside its connection.
enum RtspWake {
    Tick,
    Play(rtsp_pull::Wake),
}

impl RtspPull<'_, '_> {
    /// Gives `media` to the sink.
    fn deliver(&mut self, media: Vec<Media>) -> Result<Next, DriveError<RtspError>> {
        self.sink.count_bytes(self.play.take_bytes());
        if media.is_empty() {
            return Ok(Next::Continue);
        }
        let mut result = Ok(());
        for m in media {
            result = self.sink.media(m);
            if result.is_err() {
                break;
            }
        }
        let result = result.and_then(|()| self.sink.tick());
        step(&mut self.stop, result)
    }

    /// The pull's bounds: PLAY answered in time, then a server never silent for long.
    fn check(&self) -> Result<(), RelayError> {
        let now = tokio::time::Instant::now();
        if !self.play.playing() {
            if now.duration_since(self.started) >= self.timeout {
                return Err(RelayError::NoStream(self.timeout));
            }
            return Ok(());
        }
        let heard = self.heard.max(self.play.last_udp());
        if now.duration_since(heard) >= SILENCE {
            return Err(RelayError::Silent {
                peer: Peer::Server,
                after: SILENCE,
            });
        }
        Ok(())
    }
}

impl Adapter<RtspSession> for RtspPull<'_, '_> {
    type Wake = RtspWake;

    async fn on_event(
        &mut self,
        conn: &mut Conn<RtspSession>,
        event: RtspEvent,
    ) -> Result<Next, DriveError<RtspError>> {
        self.heard = tokio::time::Instant::now();
        let mut media = Vec::new();
        self.play
            .on_event(&mut conn.session, event, &mut media)
            .map_err(DriveError::Relay)?;
        self.deliver(media)
    }

    async fn wait(&mut self) -> RtspWake {
        tokio::select! {
            _ = self.tick.tick() => RtspWake::Tick,
            wake = self.play.wait() => RtspWake::Play(wake),
        }
    }

    fn on_wake(
        &mut self,
        _conn: &mut Conn<RtspSession>,
        wake: RtspWake,
    ) -> Result<Next, DriveError<RtspError>> {
        match wake {
            RtspWake::Tick => {
                self.check().map_err(DriveError::Relay)?;
                let result = self.sink.tick();
                step(&mut self.stop, result)
            }
            RtspWake::Play(wake) => {
                let mut media = Vec::new();
                self.play
                    .on_wake(wake, super::now(), &mut media)
                    .map_err(DriveError::Relay)?;
                self.deliver(media)
            }
        }
    }
}

/// One connection of a push to an RTMP(S) target.
async fn push(ctx: Rc<Ctx>, feed: &mut PushFeed<'_>) -> Result<(), RelayError> {
    let timeout = feed.timeout();
    let target = feed.target().clone();
    let tls = target.tls.then(|| feed.tls().clone());
    let Dialed { sock, peer, .. } =
        tokio::time::timeout(timeout, dial(&target.host, target.port, tls.as_ref()))
            .await
            .map_err(|_| RelayError::ConnectTimeout(timeout))??;
    let session = feed.session(super::now());
    let mut conn = connection(&ctx, "rtmp-push", sock, peer, session).bound_writes(timeout);
    let mut adapter = Push {
        feed,
        timeout,
        publishing: false,
        done: false,
    };
    let result = super::run(&mut conn, &mut adapter).await;
    match (adapter.done, result) {
        (true, _) => Ok(()),
        (false, Err(e)) => Err(relay_error(e, Peer::Target, RelayError::Rtmp)),
        (false, Ok(())) => Err(RelayError::Closed(Peer::Target)),
    }
}

/// A relay's connection as the driver runs it: in the worker's registry, bounded by
/// its session's own timeouts rather than the server's idle and start bounds, which
/// are for peers that connect to us.
fn connection<S: Session>(
    ctx: &Rc<Ctx>,
    protocol: &'static str,
    sock: Sock,
    peer: SocketAddr,
    session: S,
) -> Conn<S> {
    let client = ctx.clients().add(ctx.hub().next_id(), protocol, peer);
    Conn::new(ctx.clone(), client, Rc::new(sock), session)
        .without_idle_timeout()
        .without_start_deadline()
}

/// A connection made: its socket, its peer's address and its own.
struct Dialed {
    sock: Sock,
    peer: SocketAddr,
    local: SocketAddr,
}

/// A connection to `host:port`, over TLS with `tls` when given.
async fn dial(
    host: &str,
    port: u16,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<Dialed, RelayError> {
    let addr = || format!("{host}:{port}");
    let tcp = TcpStream::connect((host, port))
        .await
        .map_err(|source| RelayError::Connect {
            addr: addr(),
            source,
        })?;
    let _ = tcp.set_nodelay(true);
    let peer = tcp.peer_addr().map_err(RelayError::Socket)?;
    let local = tcp.local_addr().map_err(RelayError::Socket)?;
    let Some(tls) = tls else {
        return Ok(Dialed {
            sock: Sock::tcp_stream(tcp),
            peer,
            local,
        });
    };
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|_| RelayError::ServerName(host.to_string()))?;
    let tls = tokio_rustls::TlsConnector::from(tls.clone())
        .connect(name, SharedTcp(Rc::new(tcp)))
        .await
        .map_err(|source| RelayError::Tls {
            addr: addr(),
            source,
        })?;
    Ok(Dialed {
        sock: tls.into_sock(),
        peer,
        local,
    })
}

/// A pull's adapter: the origin's media and a tick go to the pull's sink.
struct Pull<'s, 'a> {
    sink: &'s mut PullSink<'a>,
    /// The pull's connect timeout (the session's start timeout).
    timeout: Duration,
    /// Why the pull stops, when not because the origin failed.
    stop: Option<Stop>,
    /// The session's bytes counted so far.
    counted: u64,
    tick: tokio::time::Interval,
}

impl Pull<'_, '_> {
    /// Counts what the session read since the last count.
    fn count<S: Played>(&mut self, conn: &Conn<S>) {
        let read = conn.session.received();
        self.sink.count_bytes(read - self.counted);
        self.counted = read;
    }

    fn step<E: std::error::Error>(
        &mut self,
        result: Result<(), Stop>,
    ) -> Result<Next, DriveError<E>> {
        step(&mut self.stop, result)
    }
}

/// The driver's next step after a pull's sink said `result`: `stop` keeps why the
/// pull stops when it is not a failure.
fn step<E: std::error::Error>(
    stop: &mut Option<Stop>,
    result: Result<(), Stop>,
) -> Result<Next, DriveError<E>> {
    match result {
        Ok(()) => Ok(Next::Continue),
        Err(Stop::Failed(why)) => Err(DriveError::Relay(why)),
        Err(why) => {
            *stop = Some(why);
            Ok(Next::Close)
        }
    }
}

/// The `onStatus` codes that end a played stream.
fn ends_stream(code: &str) -> bool {
    matches!(
        code,
        "NetStream.Play.UnpublishNotify"
            | "NetStream.Play.Stop"
            | "NetStream.Play.Complete"
            | "NetStream.Play.StreamNotFound"
    )
}

impl<S: Played> Adapter<S> for Pull<'_, '_> {
    type Wake = ();

    async fn on_event(
        &mut self,
        conn: &mut Conn<S>,
        event: S::Event,
    ) -> Result<Next, DriveError<S::Error>> {
        let media = match S::media(event, self.timeout) {
            Ok(Some(media)) => media,
            Ok(None) => return Ok(Next::Continue),
            Err(why) => return Err(DriveError::Relay(why)),
        };
        self.count(conn);
        let result = self.sink.media(media).and_then(|()| self.sink.tick());
        self.step(result)
    }

    async fn wait(&mut self) {
        self.tick.tick().await;
    }

    fn on_wake(&mut self, conn: &mut Conn<S>, (): ()) -> Result<Next, DriveError<S::Error>> {
        self.count(conn);
        let result = self.sink.tick();
        self.step(result)
    }
}

/// A push's adapter: once the target accepted the publish, the stream's ring feeds
/// the session whenever the stream has something new.
struct Push<'f, 'a> {
    feed: &'f mut PushFeed<'a>,
    /// How long the target has to accept the publish.
    timeout: Duration,
    /// The target accepted the publish.
    publishing: bool,
    /// The push is no longer wanted.
    done: bool,
}

impl Push<'_, '_> {
    fn feed(&mut self, conn: &mut Conn<ClientSession>) -> Next {
        if self.feed.feed(&mut conn.session) {
            Next::Continue
        } else {
            self.done = true;
            Next::Close
        }
    }
}

impl Adapter<ClientSession> for Push<'_, '_> {
    type Wake = ();

    async fn on_event(
        &mut self,
        conn: &mut Conn<ClientSession>,
        event: ClientEvent,
    ) -> Result<Next, Error> {
        match event {
            ClientEvent::PublishStarted => {
                self.publishing = true;
                Ok(self.feed(conn))
            }
            ClientEvent::Rejected { code, description } => {
                Err(DriveError::Relay(RelayError::Refused {
                    peer: Peer::Target,
                    code,
                    description,
                }))
            }
            ClientEvent::TimedOut(_) => {
                Err(DriveError::Relay(RelayError::NotAccepted(self.timeout)))
            }
            _ => Ok(Next::Continue),
        }
    }

    fn wait(&mut self) -> impl Future<Output = ()> {
        self.feed.changed()
    }

    /// The stream has something new; what was fed before is written (the driver
    /// waits only once it is).
    fn on_wake(&mut self, conn: &mut Conn<ClientSession>, (): ()) -> Result<Next, Error> {
        self.feed.written();
        if !self.publishing {
            return Ok(Next::Continue);
        }
        Ok(self.feed(conn))
    }
}

/// What ended a relay's connection, as the relays tell it (`session`: what a failure
/// of its session means).
fn relay_error<E: std::error::Error>(
    e: DriveError<E>,
    peer: Peer,
    session: impl FnOnce(E) -> RelayError,
) -> RelayError {
    match e {
        DriveError::Relay(e) => e,
        DriveError::Session(e) => session(e),
        DriveError::Io(e) => RelayError::Conn(e),
        DriveError::Stalled(after) => RelayError::Stalled { peer, after },
        DriveError::Idle(after) => RelayError::Silent { peer, after },
        DriveError::Handshake(after) => RelayError::NoStream(after),
        DriveError::Media(e) => RelayError::BadMedia(e),
        DriveError::Kicked => RelayError::Kicked,
        // A relay's session plays nothing here and is refused nothing by the
        // admission; its own timeouts come as events.
        DriveError::Refused { .. } | DriveError::Closed(_) | DriveError::Timeout => {
            RelayError::Closed(peer)
        }
    }
}

/// Why a relay's connection ended, in the one vocabulary of every connection.
pub fn end_reason(e: &RelayError) -> EndReason {
    use RelayError as R;
    match e {
        R::Connect { .. }
        | R::ConnectTimeout(_)
        | R::Resolve { .. }
        | R::NoAddress(_)
        | R::ServerName(_)
        | R::Tls { .. }
        | R::Socket(_)
        | R::Receive(_)
        | R::Send(_)
        | R::Conn(_)
        | R::NoDriver => EndReason::IoError,
        R::Closed(_) | R::SrtClosed(_) => EndReason::Closed,
        R::Silent { .. } | R::NoNewSegment(_) => EndReason::Idle,
        R::Stalled { .. } => EndReason::Stalled,
        R::NoStream(_) | R::NotAccepted(_) | R::NoAnswer(_) => EndReason::HandshakeTimeout,
        R::Refused { .. } | R::Status { .. } | R::RtspRefused { .. } | R::Publish(_) => {
            EndReason::Refused
        }
        R::StreamEnded(_) | R::BodyEnded | R::TornDown | R::PlaylistEnded => EndReason::StreamEnded,
        R::BadMedia(_) => EndReason::BadMedia,
        R::Kicked => EndReason::Kicked,
        _ => EndReason::ProtocolError,
    }
}
