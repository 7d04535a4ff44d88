//! One WebRTC viewer on the worker its datagrams reach: its [`Peer`], the task that
//! runs it (timers, events, the end), and [`PeerOut`], the transport through which
//! the fan-out writes it the stream's RTP like any other player.

use super::ingest::WhipIngest;
use super::registry::{Job, Pending, Registry};
use super::tcp::TcpOut;
use super::udp::Socket;
use crate::core::fanout::Player;
use crate::core::format::Format;
use crate::core::hub::Stream;
use crate::core::play::{PlayEnd, Playing};
use crate::core::protocol::Protocol;
use crate::ctx::admit::Ask;
use crate::ctx::Ctx;
use crate::io::sock::{Ready, Sock, Transport};
use crate::ops::{Client, EndReason};
use sluice_media::rtp::{next_interleaved, RtpPacket};
use sluice_webrtc::outbound::{Datagrams, StreamPacket};
use sluice_webrtc::stun;
use sluice_webrtc::{Incoming, Peer, PeerEvent, PeerOutput, Via};
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

thread_local! {
    /// The datagrams of the session being written, gathered for one batched send: one
    /// buffer per worker, as a new viewer's start (the GOP cache) takes a few hundred
    /// KB for a moment and a buffer per viewer would keep that much.
    static BATCH: RefCell<Datagrams> = RefCell::default();
}

/// This worker's sessions by remote address.
pub type Sessions = Rc<RefCell<HashMap<SocketAddr, Rc<Session>>>>;

/// Where a session's datagrams go: the worker's UDP socket, or its own TCP
/// connection (ICE-TCP).
#[derive(Debug)]
pub enum Link {
    Udp(Rc<Socket>),
    Tcp(Rc<TcpOut>),
}

impl Link {
    fn via(&self) -> Via {
        match self {
            Link::Udp(_) => Via::Udp,
            Link::Tcp(_) => Via::Tcp,
        }
    }

    /// Sends what it can now; the rest is lost, as UDP may lose it.
    fn send_all(&self, datagrams: &Datagrams) {
        match self {
            Link::Udp(sock) => sock.send_all(datagrams),
            Link::Tcp(tcp) => tcp.send_all(datagrams),
        }
    }

    /// Keeps a video packet for NACKs (see `udp::Socket::remember`). Over TCP nothing
    /// is lost, so nothing is asked for again.
    fn remember(
        &self,
        packet: StreamPacket,
        timestamp: u32,
        marker: bool,
        payload: &[u8],
        now: Instant,
    ) {
        if let Link::Udp(sock) = self {
            sock.remember(packet, timestamp, marker, payload, now);
        }
    }
}

/// Addresses a session is reached at, at most: its own, and those an ICE restart's
/// checks come from until media follows one of them.
const MAX_ADDRESSES: usize = 8;

/// A viewer's peer and what its task must act on.
#[derive(Debug)]
pub struct Session {
    peer: RefCell<Peer>,
    link: Link,
    id: u64,
    registry: Arc<Registry>,
    /// The worker's sessions (UDP), and the addresses this one is in them under.
    sessions: Option<Sessions>,
    addrs: RefCell<Vec<SocketAddr>>,
    /// Events the peer produced, for the task.
    events: RefCell<VecDeque<PeerEvent>>,
    /// When the peer wants time to advance next.
    timeout: Cell<Option<Instant>>,
    /// What the task's timer is set to.
    armed: Cell<Option<Instant>>,
    wake: Notify,
    /// Notified when the session's task has ended.
    ended: Notify,
    /// A publisher's ingest once its publish is admitted. The receive path feeds it
    /// the peer's media itself: a packet wakes the task only when it brings the
    /// session's next deadline forward (a task wake per packet was a good part of a
    /// WHIP publisher's CPU).
    ingest: RefCell<Option<WhipIngest>>,
    /// A publisher's media the peer gave out, for `ingest` once the peer is let go.
    media: RefCell<VecDeque<(Incoming, Vec<u8>)>>,
    /// Bytes of media `ingest` took since the task last counted them for the client.
    uncounted: Cell<u64>,
}

impl Session {
    /// A datagram from `from`: into the peer, and whatever it answers out.
    pub fn receive(&self, from: SocketAddr, datagram: &[u8]) {
        self.take_restart(datagram);
        let via = self.link.via();
        let result = self
            .peer
            .borrow_mut()
            .handle_datagram(Instant::now(), via, from, datagram);
        if let Err(e) = result {
            tracing::debug!("webrtc: datagram dropped: {e}");
        }
        self.follow();
        self.drain();
    }

    /// The session's id (its client entry).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// An ICE restart a PATCH asked for (`http::whep::patch`, on any worker) starts
    /// with the first check that bears its credentials.
    fn take_restart(&self, datagram: &[u8]) {
        let Some((ours, _)) = stun::binding_username(datagram) else {
            return;
        };
        if ours == self.peer.borrow().ufrag() {
            return;
        }
        if let Some((ours, theirs)) = self.registry.take_restart(ours, self.id) {
            tracing::info!("webrtc: ICE restart");
            self.peer.borrow_mut().restart_ice(ours, theirs);
        }
    }

    /// Takes datagrams from `from` too (an ICE restart's checks); false when the
    /// session has as many addresses as it may.
    pub fn reached_at(&self, from: SocketAddr) -> bool {
        let mut addrs = self.addrs.borrow_mut();
        if addrs.len() >= MAX_ADDRESSES {
            return false;
        }
        addrs.push(from);
        true
    }

    /// Once media follows one of the session's addresses, the others are forgotten.
    fn follow(&self) {
        let (Some(sessions), Some(remote)) = (&self.sessions, self.peer.borrow().remote()) else {
            return;
        };
        let mut addrs = self.addrs.borrow_mut();
        if addrs.len() > 1 && addrs.contains(&remote) {
            let mut map = sessions.borrow_mut();
            for a in addrs.iter().filter(|a| **a != remote) {
                map.remove(a);
            }
            addrs.retain(|a| *a == remote);
        }
    }

    /// Sends what the peer has to send and keeps its events and timeout for the task,
    /// which is woken only when it has something new to do.
    fn drain(&self) {
        BATCH.with(|batch| {
            let mut peer = self.peer.borrow_mut();
            let mut out = batch.borrow_mut();
            self.collect(&mut peer, &mut out);
            drop(peer);
            // A full socket drops datagrams: RTP and STUN recover from loss, and waiting
            // here would hold every other session.
            self.link.send_all(&out);
            out.clear();
        });
        // Fed with neither the peer nor the batch borrowed: the stream's players may be
        // written to on the way.
        loop {
            let next = self.media.borrow_mut().pop_front();
            let Some((codec, rtp)) = next else {
                break;
            };
            self.feed(codec, rtp);
        }
        let due = self.ingest.borrow().as_ref().and_then(WhipIngest::due);
        let sooner = match (earliest(self.timeout.get(), due), self.armed.get()) {
            (Some(t), Some(a)) => t < a,
            (Some(_), None) => true,
            _ => false,
        };
        if sooner || !self.events.borrow().is_empty() {
            self.wake.notify_one();
        }
    }

    /// One RTP packet of the publisher's, into its ingest (none before the publish is
    /// admitted: what comes before is dropped).
    fn feed(&self, codec: Incoming, rtp: Vec<u8>) {
        if let Some(i) = self.ingest.borrow_mut().as_mut() {
            self.uncounted.set(self.uncounted.get() + rtp.len() as u64);
            i.push(codec, rtp, Instant::now());
        }
    }

    /// Takes the peer's outputs up to its timeout: datagrams into `out`, events and the
    /// timeout for the task; NACKed packets found in the worker's history go out again.
    fn collect(&self, peer: &mut Peer, out: &mut Datagrams) {
        loop {
            match peer.poll_output() {
                PeerOutput::Transmit {
                    destination,
                    contents,
                } => out.push(destination, &contents),
                PeerOutput::Event(PeerEvent::Media { codec, rtp })
                    if self.ingest.borrow().is_some() =>
                {
                    self.media.borrow_mut().push_back((codec, rtp))
                }
                PeerOutput::Event(e) => self.events.borrow_mut().push_back(e),
                PeerOutput::Timeout(at) => {
                    self.timeout.set(Some(at));
                    break;
                }
            }
        }
        if let Link::Udp(sock) = &self.link {
            while let Some(resend) = peer.next_resend() {
                let mut found = false;
                sock.recall(resend.packet, |kept| {
                    found = true;
                    peer.resend(resend, kept.timestamp, kept.marker, &kept.payload, out);
                });
                let counter = if found {
                    &super::RESENT
                } else {
                    &super::RESEND_MISSES
                };
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
}

/// Starts the session of `pending` on this worker, its peer at `from` over `link`;
/// a UDP session is in this worker's `sessions` until it ends.
pub fn start(
    ctx: &Rc<Ctx>,
    link: Link,
    registry: &Arc<Registry>,
    pending: Pending,
    from: SocketAddr,
    sessions: Option<&Sessions>,
) -> Rc<Session> {
    let Pending {
        peer,
        job,
        id,
        resource,
        slot,
        ..
    } = pending;
    let session = Rc::new(Session {
        peer: RefCell::new(peer),
        link,
        id,
        registry: registry.clone(),
        sessions: sessions.cloned(),
        addrs: RefCell::new(vec![from]),
        events: RefCell::default(),
        timeout: Cell::new(None),
        armed: Cell::new(None),
        wake: Notify::new(),
        ended: Notify::new(),
        ingest: RefCell::new(None),
        media: RefCell::default(),
        uncounted: Cell::new(0),
    });
    let span = tracing::info_span!("webrtc", id, peer = %from);
    let task = {
        let (ctx, registry, session, sessions) = (
            ctx.clone(),
            registry.clone(),
            session.clone(),
            sessions.cloned(),
        );
        async move {
            let client = ctx.clients().add(id, "webrtc", from);
            let _slot = slot;
            let held = Held::new();
            let reason = match job {
                Job::Play {
                    stream,
                    format,
                    opus: _opus,
                } => play(&ctx, &session, &client, id, stream, format, &held).await,
                // Boxed: the publisher's admission (authorization, takeover) is a large
                // future, and unboxed it would size every player's task as well.
                Job::Publish { key, ip } => {
                    let reason = Box::pin(publish(&ctx, &session, &client, id, key, ip)).await;
                    // The stream ends here, not when the last reference to the session goes.
                    drop(session.ingest.take());
                    client.count_in(session.uncounted.take() as usize);
                    reason
                }
            };
            if let Some(sessions) = sessions {
                let mut map = sessions.borrow_mut();
                for a in session.addrs.borrow().iter() {
                    if map.get(a).is_some_and(|s| Rc::ptr_eq(s, &session)) {
                        map.remove(a);
                    }
                }
            }
            registry.forget(&resource);
            tracing::info!(reason = reason.as_str(), "webrtc session ended");
            client.ended(reason);
            session.ended.notify_one();
        }
    };
    tokio::task::spawn_local(tracing::Instrument::instrument(task, span));
    session
}

/// What woke a session's task.
enum Woke {
    /// The peer's timer, or the publisher's jitter buffers or keyframe requests.
    Timer,
    /// New events from the peer.
    Events,
    Played(PlayEnd),
    /// A player of the published stream asked for a keyframe.
    KeyframeWanted,
    Kicked,
}

impl Session {
    /// Waits for the next thing to do, `extra` (a deadline of the caller's) included.
    async fn wait(
        &self,
        client: &Client,
        playing: Option<&Playing>,
        extra: Option<Instant>,
        keyframe_wanted: Option<&Notify>,
    ) -> Woke {
        let at = match (self.timeout.get(), extra) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.armed.set(at);
        let woke = tokio::select! {
            () = sleep_until(at.map(tokio::time::Instant::from_std)) => Woke::Timer,
            () = self.wake.notified() => Woke::Events,
            end = crate::core::play::end_of(playing) => Woke::Played(end),
            () = notified(keyframe_wanted) => Woke::KeyframeWanted,
            () = client.kicked() => Woke::Kicked,
        };
        super::TASK_WAKES.fetch_add(1, Relaxed);
        woke
    }

    /// Advances the peer's time; an error ends the session.
    fn tick(&self) -> Result<(), EndReason> {
        let result = self.peer.borrow_mut().handle_timeout(Instant::now());
        if let Err(e) = result {
            tracing::info!("webrtc: {e}");
            return Err(EndReason::ProtocolError);
        }
        self.drain();
        Ok(())
    }

    fn next_event(&self) -> Option<PeerEvent> {
        self.events.borrow_mut().pop_front()
    }

    fn close(&self) {
        self.peer.borrow_mut().close();
        self.drain();
    }

    /// The peer's connection is gone (its TCP connection closed): the task ends.
    pub fn hang_up(&self) {
        self.peer.borrow_mut().close();
        self.wake.notify_one();
    }

    /// Returns once the session's task has ended.
    pub async fn ended(&self) {
        self.ended.notified().await;
    }
}

/// A viewer (WHEP): plays `stream` from when ICE and DTLS are done.
async fn play(
    ctx: &Rc<Ctx>,
    session: &Rc<Session>,
    client: &Client,
    id: u64,
    stream: Arc<Stream>,
    format: Format,
    held: &Held,
) -> EndReason {
    // The stream makes its RTP form while we play.
    let _rtp = stream.want_rtp();
    let mut playing: Option<Playing> = None;
    loop {
        if !held.settled.get() && playing.is_some() && !session.peer.borrow().in_handshake() {
            held.settle();
            tracing::debug!("webrtc: the viewer's handshake settled; str0m released");
        }
        while let Some(event) = session.next_event() {
            match event {
                PeerEvent::Connected if playing.is_none() => {
                    let srtp = session.peer.borrow().srtp_profile();
                    tracing::info!(stream = %stream.key, ?format, ?srtp, "play");
                    let out = Rc::new(Sock::new(PeerOut(session.clone())));
                    let player = Player::new(id, out, format);
                    client.playing(&stream.key, &player);
                    playing = Some(Playing::start(
                        ctx.fanout(),
                        &stream,
                        player,
                        Protocol::Webrtc,
                    ));
                }
                PeerEvent::Disconnected => return EndReason::Disconnected,
                // Passed on to a publisher that makes keyframes on demand (WHIP);
                // others cannot be asked, and the GOP cache serves new players.
                PeerEvent::KeyframeRequest => stream.keyframe_wanted.notify_one(),
                _ => {}
            }
        }
        if !session.peer.borrow().is_alive() {
            return EndReason::Closed;
        }
        match session.wait(client, playing.as_ref(), None, None).await {
            Woke::Timer => {
                if let Err(reason) = session.tick() {
                    return reason;
                }
            }
            Woke::Events | Woke::KeyframeWanted => {}
            Woke::Played(PlayEnd::Closed(r)) => {
                tracing::info!("player closed: {r:?}");
                session.close();
                return EndReason::StreamEnded;
            }
            Woke::Played(PlayEnd::Io(_)) => return EndReason::IoError,
            Woke::Kicked => {
                session.close();
                return EndReason::Kicked;
            }
        }
    }
}

/// A publisher (WHIP): publishes `key` from when ICE and DTLS are done, asking for a
/// keyframe every `webrtc.keyframe_interval_ms` so that the stream's GOP cache stays
/// fresh for new players (a browser sends keyframes only when asked).
async fn publish(
    ctx: &Rc<Ctx>,
    session: &Rc<Session>,
    client: &Client,
    id: u64,
    key: String,
    ip: std::net::IpAddr,
) -> EndReason {
    let interval = Duration::from_millis(ctx.config().webrtc.keyframe_interval_ms.max(100));
    // The published stream, once admitted; its ingest is the session's (`feed`).
    let mut stream: Option<Arc<Stream>> = None;
    let mut next_keyframe: Option<Instant> = None;
    let mut last_keyframe_request = Instant::now();
    loop {
        while let Some(event) = session.next_event() {
            match event {
                PeerEvent::Connected if stream.is_none() => {
                    // Authorized at its offer (WHIP's HTTP route).
                    let ask = Ask::new("webrtc", &key, id, ip).checked();
                    let publisher = match ctx.admit_publish(&ask).await {
                        Ok(p) => p,
                        Err(e) => {
                            tracing::warn!(stream = %key, "publish refused: {e}");
                            session.close();
                            return EndReason::Refused;
                        }
                    };
                    let (video, audio) = session.peer.borrow().receives();
                    tracing::info!(stream = %key, video, audio, "publish");
                    client.publishing(&key);
                    stream = Some(publisher.stream.clone());
                    *session.ingest.borrow_mut() = Some(WhipIngest::new(publisher, video, audio));
                    next_keyframe = Some(Instant::now() + interval);
                }
                // Queued before the ingest was there (the admission's wait).
                PeerEvent::Media { codec, rtp } => session.feed(codec, rtp),
                PeerEvent::SenderReport {
                    codec,
                    ntp,
                    rtp_time,
                } => {
                    if let Some(i) = session.ingest.borrow_mut().as_mut() {
                        i.sender_report(codec, ntp, rtp_time);
                    }
                }
                PeerEvent::Disconnected => return EndReason::Disconnected,
                _ => {}
            }
        }
        if !session.peer.borrow().is_alive() {
            return EndReason::Closed;
        }
        client.count_in(session.uncounted.take() as usize);
        let due = session.ingest.borrow().as_ref().and_then(WhipIngest::due);
        let due = earliest(due, next_keyframe);
        let wanted = stream.as_ref().map(|s| &s.keyframe_wanted);
        match session.wait(client, None, due, wanted).await {
            Woke::Timer => {
                let now = Instant::now();
                if let Some(i) = session.ingest.borrow_mut().as_mut() {
                    i.release(now);
                }
                if next_keyframe.is_some_and(|at| now >= at) {
                    session.peer.borrow_mut().request_keyframe();
                    last_keyframe_request = now;
                    next_keyframe = Some(now + interval);
                }
                if let Err(reason) = session.tick() {
                    return reason;
                }
            }
            // Sooner than the regular request, but not more often than the players'
            // requests are worth: a keyframe costs the whole stream bandwidth.
            Woke::KeyframeWanted => {
                let soonest = last_keyframe_request + MIN_KEYFRAME_REQUEST_GAP;
                next_keyframe = next_keyframe.map(|at| at.min(soonest));
            }
            Woke::Events | Woke::Played(_) => {}
            Woke::Kicked => {
                session.close();
                return EndReason::Kicked;
            }
        }
    }
}

/// The earlier of two deadlines, either of which may be unset.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A session counted in `webrtc::SESSIONS` while it lives: as run by str0m, then, once
/// a viewer's str0m is dropped, as settled.
struct Held {
    settled: Cell<bool>,
}

impl Held {
    fn new() -> Held {
        super::SESSIONS[0].fetch_add(1, Relaxed);
        Held {
            settled: Cell::new(false),
        }
    }

    fn settle(&self) {
        if !self.settled.replace(true) {
            super::SESSIONS[0].fetch_sub(1, Relaxed);
            super::SESSIONS[1].fetch_add(1, Relaxed);
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        super::SESSIONS[usize::from(self.settled.get())].fetch_sub(1, Relaxed);
    }
}

/// A WHIP publisher is asked for a keyframe for its players at most this often.
const MIN_KEYFRAME_REQUEST_GAP: Duration = Duration::from_millis(500);

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn notified(notify: Option<&Notify>) {
    match notify {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
}

/// The transport the fan-out writes a WebRTC viewer through: each RTP packet of the
/// stream's shared form goes out with the viewer's header and SRTP, in one batch per
/// write. RTCP of the form (RTSP's sender reports) is dropped: the peer makes its own.
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
        BATCH.with(|batch| {
            let mut peer = self.0.peer.borrow_mut();
            let mut out = batch.borrow_mut();
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
                        let video = channel == 0;
                        let id = StreamPacket {
                            ssrc: h.ssrc,
                            seq: h.sequence,
                        };
                        // Browsers do not NACK Opus, which conceals a loss itself.
                        if video {
                            self.0
                                .link
                                .remember(id, h.timestamp, h.marker, p.payload, now);
                        }
                        peer.send_rtp(video, id, h.timestamp, h.marker, p.payload, now, &mut out);
                    }
                }
            }
        });
        // Sends the batch, with whatever else the peer has to send.
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
