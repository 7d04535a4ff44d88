//! Relay connections in the one driver: a pull from an RTMP or RTMPS origin and a
//! push to an RTMP or RTMPS target run their `sluice_rtmp::ClientSession` in
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
use sluice_rtmp::{ClientEvent, ClientSession, ClientTimeouts, RtmpError, Waited};
use std::future::Future;
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

type Error = DriveError<RtmpError>;

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

/// One connection of a pull from an RTMP(S) origin.
async fn pull(ctx: Rc<Ctx>, sink: &mut PullSink<'_>) -> Stop {
    let start = super::now();
    let timeout = sink.connect_timeout();
    let origin = sink.origin().clone();
    let path = origin.path_of(sink.key());
    let (app, stream) = match rtmp_parts(&path) {
        Ok(parts) => parts,
        Err(why) => return why.into(),
    };
    let tls = (origin.scheme == Scheme::Rtmps).then(|| sink.tls().clone());
    let dialed = tokio::time::timeout(timeout, dial(&origin.host, origin.port, tls.as_ref()));
    let (sock, peer) = match dialed.await {
        Ok(Ok(dialed)) => dialed,
        Ok(Err(why)) => return why.into(),
        Err(_) => return RelayError::NoStream(timeout).into(),
    };
    let timeouts = ClientTimeouts {
        start: timeout,
        silence: SILENCE,
    };
    let mut session =
        rtmp_session(tls.is_some(), &origin.authority(), app).with_timeouts(start, timeouts);
    session.play(stream);
    let mut conn = connection(&ctx, "rtmp-pull", sock, peer, session);
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
        (None, Err(e)) => Stop::Failed(relay_error(e, Peer::Origin)),
        (None, Ok(())) => RelayError::Closed(Peer::Origin).into(),
    }
}

/// One connection of a push to an RTMP(S) target.
async fn push(ctx: Rc<Ctx>, feed: &mut PushFeed<'_>) -> Result<(), RelayError> {
    let timeout = feed.timeout();
    let target = feed.target().clone();
    let tls = target.tls.then(|| feed.tls().clone());
    let (sock, peer) = tokio::time::timeout(timeout, dial(&target.host, target.port, tls.as_ref()))
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
        (false, Err(e)) => Err(relay_error(e, Peer::Target)),
        (false, Ok(())) => Err(RelayError::Closed(Peer::Target)),
    }
}

/// A relay's connection as the driver runs it: in the worker's registry, bounded by
/// its session's own timeouts rather than the server's idle and start bounds, which
/// are for peers that connect to us.
fn connection(
    ctx: &Rc<Ctx>,
    protocol: &'static str,
    sock: Sock,
    peer: SocketAddr,
    session: ClientSession,
) -> Conn<ClientSession> {
    let client = ctx.clients().add(ctx.hub().next_id(), protocol, peer);
    Conn::new(ctx.clone(), client, Rc::new(sock), session)
        .without_idle_timeout()
        .without_start_deadline()
}

/// A connection to `host:port`, over TLS with `tls` when given.
async fn dial(
    host: &str,
    port: u16,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<(Sock, SocketAddr), RelayError> {
    let addr = || format!("{host}:{port}");
    let tcp = TcpStream::connect((host, port))
        .await
        .map_err(|source| RelayError::Connect {
            addr: addr(),
            source,
        })?;
    let _ = tcp.set_nodelay(true);
    let peer = tcp.peer_addr().map_err(RelayError::Socket)?;
    let Some(tls) = tls else {
        return Ok((Sock::tcp_stream(tcp), peer));
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
    Ok((tls.into_sock(), peer))
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
    fn count(&mut self, conn: &Conn<ClientSession>) {
        let read = conn.session.bytes_received();
        self.sink.count_bytes(read - self.counted);
        self.counted = read;
    }

    fn step(&mut self, result: Result<(), Stop>) -> Result<Next, Error> {
        match result {
            Ok(()) => Ok(Next::Continue),
            Err(Stop::Failed(why)) => Err(DriveError::Relay(why)),
            Err(stop) => {
                self.stop = Some(stop);
                Ok(Next::Close)
            }
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

impl Adapter<ClientSession> for Pull<'_, '_> {
    type Wake = ();

    async fn on_event(
        &mut self,
        conn: &mut Conn<ClientSession>,
        event: ClientEvent,
    ) -> Result<Next, Error> {
        let media = match event {
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
                return Err(DriveError::Relay(RelayError::Refused {
                    peer: Peer::Origin,
                    code,
                    description,
                }))
            }
            ClientEvent::Status { code, .. } if ends_stream(&code) => {
                return Err(DriveError::Relay(RelayError::StreamEnded(code)))
            }
            ClientEvent::TimedOut(Waited::Start) => {
                return Err(DriveError::Relay(RelayError::NoStream(self.timeout)))
            }
            ClientEvent::TimedOut(Waited::Input) => {
                return Err(DriveError::Relay(RelayError::Silent {
                    peer: Peer::Origin,
                    after: SILENCE,
                }))
            }
            _ => return Ok(Next::Continue),
        };
        self.count(conn);
        let result = self.sink.media(media).and_then(|()| self.sink.tick());
        self.step(result)
    }

    fn wait(&mut self) -> impl Future<Output = ()> {
        async {
            self.tick.tick().await;
        }
    }

    fn on_wake(&mut self, conn: &mut Conn<ClientSession>, (): ()) -> Result<Next, Error> {
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

/// What ended a relay's connection, as the relays tell it.
fn relay_error(e: Error, peer: Peer) -> RelayError {
    match e {
        DriveError::Relay(e) => e,
        DriveError::Session(e) => RelayError::Rtmp(e),
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
        | R::Read(_)
        | R::Write(_)
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
