//! Relay connections in the one driver: a pull from an RTMP, RTMPS, HTTP(S)-FLV or
//! RTSP origin and a push to an RTMP or RTMPS target run their sans-IO client session
//! (`sluice_rtmp::ClientSession`, `sluice_http::flv_client::FlvClient`,
//! `sluice_rtsp::ClientSession`) in [`super::run`], as the server's own connections
//! run theirs. The session is given
//! the time, so its start and silence timeouts are the driver's timer; the connection
//! is in the worker's registry (the API lists it, a kick or the shutdown ends it) and
//! ends with an [`EndReason`] as every connection does. What the session's events mean
//! stays the relays' ([`PullSink`], [`PushFeed`]); the adapters hand them over:
//! [`played`] (RTMP, RTMPS, HTTP-FLV pulls), [`rtsp`] (RTSP pulls), [`push`]. Here:
//! dialing (TCP, TLS with the relays' CA bundle), the registry entry, what a
//! `DriveError` means for the relays, and the [`EndReason`] of a [`RelayError`].
//!
//! The relays sit below the driver (`FLOORS`), so each worker installs its
//! [`Relaying`] as their [`Link`] when it starts ([`install`]).

mod played;
mod push;
mod rtsp;

use super::{Conn, DriveError, Next};
use crate::ctx::Ctx;
use crate::io::sock::{IntoSock, SharedTcp, Sock};
use crate::ops::EndReason;
use crate::relay::client::{rtmp_parts, rtmp_session, SILENCE};
use crate::relay::error::{Peer, RelayError};
use crate::relay::link::{Connection, Link};
use crate::relay::origin::Scheme;
use crate::relay::pull::{PullSink, Stop};
use crate::relay::push::PushFeed;
use crate::relay::rtsp_pull::{self, RtspPlay};
use sluice_http::flv_client::FlvClient;
use sluice_rtmp::ClientTimeouts;
use sluice_session::Session;
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

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
                Some(ctx) => push::push(ctx, feed).await,
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
        return rtsp::play_rtsp(opened, session, RtspPlay::new(udp, local.ip()), sink).await;
    }
    if let Scheme::Flv { .. } = origin.scheme {
        let agent = concat!("sluice/", env!("CARGO_PKG_VERSION"));
        let session = FlvClient::new(&origin.flv_path(&key), &origin.authority(), agent)
            .with_timeouts(start, timeout, SILENCE);
        return played::play(opened, "flv-pull", session, sink).await;
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
    played::play(opened, "rtmp-pull", session, sink).await
}

/// A pull's connection, made.
struct Opened {
    ctx: Rc<Ctx>,
    sock: Sock,
    peer: SocketAddr,
    /// The pull's connect timeout.
    timeout: Duration,
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

/// A pull's tick: the sink's idle and stop checks while the origin sends nothing.
fn pull_tick() -> tokio::time::Interval {
    let mut tick = tokio::time::interval(crate::relay::pull::TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick
}

/// How a pull's connection ended: why its adapter stopped it, else the driver's
/// `result` as the relays tell it (`peer` the origin's side, `session` what a failure
/// of its session means).
fn pull_ended<E: std::error::Error>(
    stop: Option<Stop>,
    result: Result<(), DriveError<E>>,
    peer: Peer,
    session: impl FnOnce(E) -> RelayError,
) -> Stop {
    match (stop, result) {
        (Some(stop), _) => stop,
        (None, Err(e)) => Stop::Failed(relay_error(e, peer, session)),
        (None, Ok(())) => RelayError::Closed(peer).into(),
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
