//! One SRT connection on the worker its datagrams reach: its decision (stream id,
//! auth, publish or play), its [`Connection`], the task that runs its timers, and
//! [`SrtOut`], the transport through which the fan-out writes a player the stream's
//! TS form.

use super::payloads;
use super::socket::Socket;
use super::Shared;
use crate::auth::Credentials;
use crate::core::fanout::Player;
use crate::core::format::FormatId;
use crate::core::ingest::Publisher;
use crate::core::play::{PlayEnd, Playing};
use crate::core::protocol::Protocol;
use crate::ctx::admit::{Ask, Refusal};
use crate::ctx::Ctx;
use crate::io::sock::{Ready, Sock, Transport};
use crate::ops::{Client, EndReason};
use bytes::Bytes;
use sluice_media::ts::{Demuxed, TsDemuxer};
use sluice_srt::{reject, Conclusion, Connection, DataOut, Mode, StreamId};
use std::cell::{Cell, RefCell};
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Notify;

/// Payloads queued for a player past which the fan-out is told to wait (about 5 MB):
/// a player that stays behind this is skipped or dropped by the slow-player policy.
const QUEUE_HIGH: usize = 4096;

/// An accepted connection.
#[derive(Debug)]
pub struct Conn {
    pub peer: SocketAddr,
    conn: RefCell<Connection>,
    sock: Rc<Socket>,
    /// The conclusion response, sent again when the caller repeats its conclusion.
    response: Vec<u8>,
    control: RefCell<Vec<Vec<u8>>>,
    data: RefCell<Vec<DataOut>>,
    /// When the connection wants time to advance next, and what the task's timer is at.
    timeout: Cell<Option<Instant>>,
    armed: Cell<Option<Instant>>,
    wake: Notify,
    /// The fan-out waits here while the player's queue is full.
    room: Notify,
    /// A publisher's demuxer and stream, fed as datagrams arrive.
    ingest: RefCell<Option<Ingest>>,
}

#[derive(Debug)]
struct Ingest {
    publisher: Publisher,
    demux: TsDemuxer,
    client: Rc<Client>,
}

impl Ingest {
    fn push(&mut self, payload: &[u8]) {
        self.publisher.bytes += payload.len() as u64;
        self.client.count_in(payload.len());
        self.demux.push(payload);
        while let Some(out) = self.demux.poll() {
            match out {
                Demuxed::Track(at, track) => self.publisher.set_track(at, track),
                Demuxed::Frame(frame) => self.publisher.frame(frame),
                Demuxed::Cue(cue) => self.publisher.cue(&cue),
            }
        }
    }
}

impl Conn {
    /// A datagram from the peer: into the connection; received payloads into the
    /// stream; whatever it answers out.
    pub fn receive(&self, datagram: &[u8]) {
        let now = Instant::now();
        let mut conn = self.conn.borrow_mut();
        if let Err(e) = conn.handle_datagram(now, datagram) {
            tracing::debug!("srt: datagram dropped: {e}");
        }
        if let Some(ingest) = self.ingest.borrow_mut().as_mut() {
            while let Some(payload) = conn.poll_data() {
                ingest.push(&payload);
            }
        }
        drop(conn);
        self.flush(now);
    }

    pub fn repeat_response(&self) {
        self.sock
            .send(self.peer, std::slice::from_ref(&self.response), &[]);
    }

    /// Sends what the connection has to send; wakes the task when its deadline moved
    /// sooner or the connection ended, and the fan-out when the queue has room.
    fn flush(&self, now: Instant) {
        let mut control = self.control.borrow_mut();
        let mut data = self.data.borrow_mut();
        let (timeout, closed, waiting) = {
            let mut conn = self.conn.borrow_mut();
            conn.take_transmits(&mut control, &mut data);
            (
                conn.poll_timeout(now),
                conn.closed().is_some(),
                conn.waiting(),
            )
        };
        if !control.is_empty() || !data.is_empty() {
            self.sock.send(self.peer, &control, &data);
        }
        control.clear();
        data.clear();
        self.timeout.set(timeout);
        let sooner = match (timeout, self.armed.get()) {
            (Some(t), Some(a)) => t < a,
            (Some(_), None) => true,
            _ => false,
        };
        if sooner || closed {
            self.wake.notify_one();
        }
        if waiting < QUEUE_HIGH / 2 {
            self.room.notify_waiters();
        }
    }

    fn tick(&self) {
        let now = Instant::now();
        self.conn.borrow_mut().handle_timeout(now);
        self.flush(now);
    }

    fn close(&self) {
        let now = Instant::now();
        self.conn.borrow_mut().close(now);
        self.flush(now);
    }
}

/// Decides on a concluded handshake on a task of its own, then runs the connection.
pub fn start(
    ctx: &Rc<Ctx>,
    shared: &Arc<Shared>,
    sock: &Rc<Socket>,
    conclusion: Conclusion,
    from: SocketAddr,
    now: Instant,
) {
    let peer_key = (from, conclusion.peer_socket_id);
    // Admission first: a connection's state lives past any one datagram.
    let slots = ctx
        .hub()
        .limits
        .admit(from.ip())
        .and_then(|a| Ok((a, ctx.hub().limits.udp_session(from.ip())?)));
    let Ok(slots) = slots else {
        sock.send(from, &[conclusion.reject(reject::UNAVAILABLE)], &[]);
        return;
    };
    sock.by_peer
        .borrow_mut()
        .insert(peer_key, conclusion.socket_id);
    let id = ctx.hub().next_id();
    let span = tracing::info_span!("srt", id, peer = %from);
    let (ctx, shared, sock) = (ctx.clone(), shared.clone(), sock.clone());
    let task = async move {
        let _slots = slots;
        let client = Rc::new(ctx.clients().add(id, "srt", from));
        let reason = run(&ctx, &shared, &sock, &client, id, conclusion, from, now).await;
        sock.by_peer.borrow_mut().remove(&peer_key);
        tracing::info!(reason = reason.as_str(), "srt connection ended");
        client.ended(reason);
    };
    tokio::task::spawn_local(tracing::Instrument::instrument(task, span));
}

/// What a connection asked for, decided.
enum Decision {
    Publish(Publisher),
    Play(Arc<crate::core::hub::Stream>, Option<crate::vod::VodPlay>),
}

#[allow(clippy::too_many_arguments)]
async fn run(
    ctx: &Rc<Ctx>,
    shared: &Arc<Shared>,
    sock: &Rc<Socket>,
    client: &Rc<Client>,
    id: u64,
    c: Conclusion,
    from: SocketAddr,
    now: Instant,
) -> EndReason {
    let decision = match decide(ctx, id, &c, from).await {
        Ok(d) => d,
        Err((code, why)) => {
            tracing::info!(stream_id = ?c.stream_id.as_deref().map(StreamId::parse), code, "srt: refused: {why}");
            sock.send(from, &[c.reject(code)], &[]);
            return EndReason::Refused;
        }
    };
    let socket_id = c.socket_id;
    let response = c.response.clone();
    let encrypted = c.keys.is_some();
    let latency = c.latency;
    let conn = Rc::new(Conn {
        peer: from,
        conn: RefCell::new(Connection::accepted(c, shared.idle, now)),
        sock: sock.clone(),
        response,
        control: RefCell::default(),
        data: RefCell::default(),
        timeout: Cell::new(None),
        armed: Cell::new(None),
        wake: Notify::new(),
        room: Notify::new(),
        ingest: RefCell::new(None),
    });
    sock.conns.borrow_mut().insert(socket_id, conn.clone());
    let reason = match decision {
        Decision::Publish(publisher) => {
            let key = publisher.stream.key.clone();
            tracing::info!(stream = %key, encrypted, ?latency, "publish");
            client.publishing(&key);
            *conn.ingest.borrow_mut() = Some(Ingest {
                publisher,
                demux: TsDemuxer::new(),
                client: client.clone(),
            });
            conn.flush(Instant::now());
            serve(&conn, client, None).await
        }
        Decision::Play(stream, vod) => {
            tracing::info!(stream = %stream.key, encrypted, ?latency, "play");
            conn.flush(Instant::now());
            let out = Rc::new(Sock::new(SrtOut(conn.clone())));
            let player = Player::new(id, out, stream.format_for(FormatId::TS));
            client.playing(&stream.key, &player);
            let playing = Playing::start(ctx.fanout(), &stream, player, Protocol::Srt);
            let reason = serve(&conn, client, Some(&playing)).await;
            drop(playing);
            drop(vod);
            reason
        }
    };
    // The stream's end goes with the connection's: the publisher is dropped now.
    conn.ingest.borrow_mut().take();
    sock.conns.borrow_mut().remove(&socket_id);
    reason
}

/// The stream id read, authorized, and the stream published or found; else the
/// rejection code for the caller and why.
async fn decide(
    ctx: &Rc<Ctx>,
    id: u64,
    c: &Conclusion,
    from: SocketAddr,
) -> Result<Decision, (u32, String)> {
    let sid = StreamId::parse(c.stream_id.as_deref().unwrap_or_default())
        .map_err(|e| (reject::BAD_REQUEST, e.to_string()))?;
    let query = sid.query.clone().unwrap_or_default();
    let mut credentials = Credentials::from_query(&query);
    if sid.user.is_some() {
        credentials.user = sid.user.clone();
    }
    if sid.password.is_some() {
        credentials.password = sid.password.clone();
    }
    let key = sid.resource.clone();
    let ask = Ask::new("srt", &key, id, from.ip())
        .query(&query)
        .credentials(credentials);
    let code = |refused: &Refusal| match refused {
        Refusal::Unauthorized(_) => reject::UNAUTHORIZED,
        Refusal::Forbidden(_) => reject::FORBIDDEN,
        Refusal::NotFound(_) | Refusal::Range(_) => reject::NOT_FOUND,
        Refusal::InUse(_) => reject::CONFLICT,
        Refusal::Limit(_) => reject::UNAVAILABLE,
    };
    let decided = match sid.mode {
        Mode::Publish => ctx.admit_publish(&ask).await.map(Decision::Publish),
        Mode::Read => {
            let file = crate::vod::rtmp_path(&key);
            let source = ctx.admit_play(&ask, file.as_deref()).await;
            source.map(|s| {
                let (stream, vod) = s.start(ctx, id);
                Decision::Play(stream, vod)
            })
        }
    };
    decided.map_err(|refused| (code(&refused), refused.to_string()))
}

/// Runs an accepted connection's timers until it ends.
async fn serve(conn: &Rc<Conn>, client: &Client, playing: Option<&Playing>) -> EndReason {
    loop {
        match conn.conn.borrow().closed() {
            Some(sluice_srt::Closed::Shutdown) => return EndReason::Closed,
            Some(sluice_srt::Closed::Idle) => return EndReason::Idle,
            Some(sluice_srt::Closed::Local) => return EndReason::ClosedByServer,
            None => {}
        }
        let at = conn.timeout.get();
        conn.armed.set(at);
        tokio::select! {
            () = sleep_until(at) => conn.tick(),
            () = conn.wake.notified() => {}
            end = crate::core::play::end_of(playing) => {
                conn.close();
                return match end {
                    PlayEnd::Closed(r) => {
                        tracing::info!("player closed: {r:?}");
                        EndReason::StreamEnded
                    }
                    PlayEnd::Io(_) => EndReason::IoError,
                };
            }
            () = client.kicked() => {
                conn.close();
                return EndReason::Kicked;
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// The transport the fan-out writes an SRT player through: the stream's TS form cut
/// into payloads of seven TS packets across the frames of a write (`payloads`), slices
/// of the shared bytes where they lie in one frame, numbered and sent by the player's
/// connection (which keeps them for retransmission).
#[derive(Debug)]
pub struct SrtOut(Rc<Conn>);

impl SrtOut {
    fn queue(&self, bufs: impl Iterator<Item = Bytes>) -> io::Result<usize> {
        if self.0.conn.borrow().waiting() >= QUEUE_HIGH {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let now = Instant::now();
        let mut total = 0;
        {
            let mut conn = self.0.conn.borrow_mut();
            let bufs = bufs.inspect(|b| total += b.len());
            payloads::cut(bufs, |p| conn.send_shared(now, p));
        }
        self.0.flush(now);
        Ok(total)
    }
}

impl Transport for SrtOut {
    fn try_read(&self, _buf: &mut [u8]) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }

    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.queue(bufs.iter().map(|b| Bytes::copy_from_slice(b)))
    }

    fn takes_shared(&self) -> bool {
        true
    }

    fn try_write_shared(&self, bufs: &[Bytes]) -> io::Result<usize> {
        self.queue(bufs.iter().cloned())
    }

    fn readable(&self) -> Ready<'_> {
        Box::pin(std::future::pending())
    }

    fn writable(&self) -> Ready<'_> {
        Box::pin(async move {
            while self.0.conn.borrow().waiting() >= QUEUE_HIGH {
                self.0.room.notified().await;
            }
            Ok(())
        })
    }
}
