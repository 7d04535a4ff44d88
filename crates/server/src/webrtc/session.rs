//! One WebRTC viewer on the worker its datagrams reach: its [`Peer`], the task that
//! runs it (timers, events, the end), and [`PeerOut`], the transport through which
//! the fan-out writes it the stream's RTP like any other player.

use super::registry::{Pending, Registry};
use crate::core::fanout::Player;
use crate::core::play::{PlayEnd, Playing};
use crate::ctx::Ctx;
use crate::io::sock::{Ready, Sock, Transport};
use sluice_media::rtp::{next_interleaved, RtpPacket};
use sluice_webrtc::{Peer, PeerEvent, PeerOutput};
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;
use tokio::net::UdpSocket;
use tokio::sync::Notify;

/// This worker's sessions by remote address.
pub type Sessions = Rc<RefCell<HashMap<SocketAddr, Rc<Session>>>>;

/// A viewer's peer and what its task must act on.
#[derive(Debug)]
pub struct Session {
    peer: RefCell<Peer>,
    sock: Rc<UdpSocket>,
    /// Events the peer produced, for the task.
    events: RefCell<VecDeque<PeerEvent>>,
    /// When the peer wants time to advance next.
    timeout: Cell<Option<Instant>>,
    /// What the task's timer is set to.
    armed: Cell<Option<Instant>>,
    wake: Notify,
}

impl Session {
    /// A datagram from `from`: into the peer, and whatever it answers out.
    pub fn receive(&self, from: SocketAddr, datagram: &[u8]) {
        let result = self
            .peer
            .borrow_mut()
            .handle_datagram(Instant::now(), from, datagram);
        if let Err(e) = result {
            tracing::debug!("webrtc: datagram dropped: {e}");
        }
        self.drain();
    }

    /// Sends what the peer has to send and keeps its events and timeout for the task,
    /// which is woken only when it has something new to do.
    fn drain(&self) {
        let mut peer = self.peer.borrow_mut();
        loop {
            match peer.poll_output() {
                PeerOutput::Transmit {
                    destination,
                    contents,
                } => {
                    // A full socket drops the datagram: RTP and STUN recover from
                    // loss, and waiting here would hold every other session.
                    let _ = self.sock.try_send_to(&contents, destination);
                }
                PeerOutput::Event(e) => self.events.borrow_mut().push_back(e),
                PeerOutput::Timeout(at) => {
                    self.timeout.set(Some(at));
                    break;
                }
            }
        }
        drop(peer);
        let sooner = match (self.timeout.get(), self.armed.get()) {
            (Some(t), Some(a)) => t < a,
            (Some(_), None) => true,
            _ => false,
        };
        if sooner || !self.events.borrow().is_empty() {
            self.wake.notify_one();
        }
    }
}

/// Starts the session of `pending` on this worker, its peer at `from`.
pub fn start(
    ctx: &Rc<Ctx>,
    sock: &Rc<UdpSocket>,
    registry: &Arc<Registry>,
    pending: Pending,
    from: SocketAddr,
    sessions: &Sessions,
) -> Rc<Session> {
    let Pending {
        peer,
        stream,
        format,
        id,
        resource,
        slot,
        ..
    } = pending;
    let session = Rc::new(Session {
        peer: RefCell::new(peer),
        sock: sock.clone(),
        events: RefCell::default(),
        timeout: Cell::new(None),
        armed: Cell::new(None),
        wake: Notify::new(),
    });
    let span = tracing::info_span!("webrtc", id, peer = %from);
    let started = Started {
        stream,
        format,
        id,
        resource,
        slot,
    };
    let task = run(
        ctx.clone(),
        registry.clone(),
        session.clone(),
        started,
        from,
        sessions.clone(),
    );
    tokio::task::spawn_local(tracing::Instrument::instrument(task, span));
    session
}

/// What the session's task takes of its [`Pending`].
struct Started {
    stream: Arc<crate::core::hub::Stream>,
    format: crate::core::format::Format,
    id: u64,
    resource: String,
    slot: crate::core::limits::UdpSlot,
}

async fn run(
    ctx: Rc<Ctx>,
    registry: Arc<Registry>,
    session: Rc<Session>,
    started: Started,
    from: SocketAddr,
    sessions: Sessions,
) {
    let Started {
        stream,
        format,
        id,
        resource,
        slot,
    } = started;
    let client = ctx.clients.add(id, "webrtc", from);
    let _slot = slot;
    // The stream makes its RTP form while we play.
    let _rtp = stream.want_rtp();
    let mut playing: Option<Playing> = None;
    tracing::info!(stream = %stream.key, "webrtc session");
    let reason = loop {
        let event = session.events.borrow_mut().pop_front();
        if let Some(event) = event {
            match event {
                PeerEvent::Connected if playing.is_none() => {
                    tracing::info!(stream = %stream.key, ?format, "play");
                    let out = Rc::new(Sock::new(PeerOut(session.clone())));
                    let player = Player::new(id, out, format);
                    client.playing(&stream.key, &player);
                    playing = Some(Playing::start(&ctx.fanout, &stream, player));
                }
                PeerEvent::Disconnected => break "disconnected",
                // A publisher that can make a keyframe on demand comes with WHIP.
                PeerEvent::Connected | PeerEvent::KeyframeRequest => {}
            }
            continue;
        }
        if !session.peer.borrow().is_alive() {
            break "closed";
        }
        let at = session.timeout.get().map(tokio::time::Instant::from_std);
        session.armed.set(session.timeout.get());
        tokio::select! {
            () = sleep_until(at) => {
                let now = Instant::now();
                let result = session.peer.borrow_mut().handle_timeout(now);
                if let Err(e) = result {
                    tracing::info!("webrtc: {e}");
                    break "protocol_error";
                }
                session.drain();
            }
            () = session.wake.notified() => {}
            end = player_end(playing.as_ref()) => match end {
                PlayEnd::Closed(r) => {
                    tracing::info!("player closed: {r:?}");
                    break "stream_ended";
                }
                PlayEnd::Io(_) => break "io_error",
            },
            () = client.kicked() => {
                session.peer.borrow_mut().close();
                session.drain();
                break "kicked";
            }
        }
    };
    drop(playing);
    sessions.borrow_mut().remove(&from);
    registry.forget(&resource);
    tracing::info!(reason, "webrtc session ended");
    client.ended(reason);
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn player_end(playing: Option<&Playing>) -> PlayEnd {
    match playing {
        Some(p) => p.wait_end().await,
        None => std::future::pending().await,
    }
}

/// The transport the fan-out writes a WebRTC viewer through: each RTP packet of the
/// stream's shared form goes into the peer (its header, SRTP) and out as a datagram.
/// RTCP of the form (RTSP's sender reports) is dropped: the peer makes its own.
#[derive(Debug)]
pub struct PeerOut(Rc<Session>);

impl Transport for PeerOut {
    fn try_read(&self, _buf: &mut [u8]) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }

    /// Takes everything: a datagram the socket cannot take now is dropped, as RTP
    /// over UDP is (the viewer asks again for what it misses).
    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let now = Instant::now();
        let mut total = 0;
        {
            let mut peer = self.0.peer.borrow_mut();
            for buf in bufs {
                total += buf.len();
                let mut rest: &[u8] = buf;
                while let Some((channel, packet, len)) = next_interleaved(rest) {
                    rest = rest.get(len..).unwrap_or_default();
                    if channel % 2 == 1 {
                        continue;
                    }
                    if let Ok(p) = RtpPacket::parse(packet) {
                        let h = p.header;
                        peer.write_rtp(channel == 0, h.timestamp, h.marker, p.payload, now);
                    }
                }
            }
            if let Err(e) = peer.handle_timeout(now) {
                tracing::debug!("webrtc: {e}");
            }
        }
        self.0.drain();
        Ok(total)
    }

    fn readable(&self) -> Ready<'_> {
        Box::pin(std::future::pending())
    }

    fn writable(&self) -> Ready<'_> {
        Box::pin(std::future::ready(Ok(())))
    }
}
