//! Per-worker fan-out: one mirror of each stream's ring per worker, and the players of
//! that worker written from it.
//!
//! Why: a frame crosses to another thread once per worker, not once per player. The
//! publisher notifies each subscribed worker's [`LocalStream`]; its pump task wakes once
//! per merge window (the stream's own, which may differ per app), copies the new
//! `Arc<Packet>`s into the worker's mirror under the stream lock, releases it, and then
//! writes every player with one vectored write of the shared bytes. No task is woken
//! per player per frame: a player's own task only wakes for its socket (control input
//! from the peer, or writability after the kernel buffer filled).
//!
//! # Invariants
//! - A player's `pending` bytes come before the packet at its `cursor`; a packet cut
//!   short by the kernel goes to `pending` whole, so a message is never interleaved
//!   with another and skipping never cuts one.
//! - No lock is held while writing: the mirror is worker-local.
//! - The pump yields every [`FLUSH_BUDGET`] players, so a stream with thousands of
//!   them does not hold the worker; a player detached meanwhile is not written again.
//! - A player behind the mirror, or too far behind its newest frame, skips to the
//!   newest start keyframe; past `max_skips` it is closed.
//! - Before any keyframe a player is moved to, it has the stream's metadata and decoder
//!   configurations: a skip can jump past a new sequence header, so each player's
//!   [`Cursor`] notes the last of each it was sent and a skip queues those that changed
//!   since.

use crate::core::cursor::Cursor;
use crate::core::format::Format;
use crate::core::hub::Stream;
use crate::core::packet::{Packet, Shape};
use crate::io::sock::Sock;
use bytes::{Buf, Bytes};
use prometheus_client::metrics::histogram::Histogram;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::io::{self, IoSlice};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::Notify;

/// A transcoded audio frame lasts at most this (AAC's 1024 samples at 48 kHz): one
/// that ends before a player's start keyframe is not sent to it.
const AUDIO_FRAME_MS: i64 = 21;

/// Most buffers handed to one `writev`.
const MAX_IOV: usize = 64;

/// Most bytes offered to one `writev`: more than any capped send buffer takes.
const MAX_WRITE: usize = 1 << 20;

/// Players the pump writes before it yields to the worker's other tasks. Counted in
/// players, not bytes: a player's write is one system call whose size its capped send
/// buffer bounds, so a count bounds the time (64 writes of a 2 Mbit/s stream's merge
/// window took about 4 ms on a 2-core VM), where a byte budget would let thousands of
/// small writes (an audio-only stream) hold the worker.
const FLUSH_BUDGET: usize = 64;

/// How players of this worker are treated (the merge window is the stream's:
/// `Stream::merge`).
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    pub max_lag_ms: i64,
    pub max_skips: u32,
    pub shape: Shape,
    /// Kernel send buffer of a player's socket (0 leaves the system's).
    pub send_buffer: usize,
}

/// Why the fan-out ends a player.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// The stream ended (its publisher did not come back).
    StreamEnded,
    /// It fell behind more than `max_skips` times.
    TooSlow,
    /// Writing to it failed.
    WriteError,
}

/// Whether `packet` is a decoder configuration of the stream's own that differs from
/// what `cursor`'s reader was sent: what ends a player of a format with fixed tracks
/// (`OutputFormat::fixed_tracks`).
fn ends_tracks(packet: &Packet, cursor: &Cursor) -> bool {
    packet.is_config() && !packet.derived && cursor.changes(packet)
}

/// The fan-out of one worker.
#[derive(Debug)]
pub struct Fanout {
    streams: RefCell<HashMap<u64, Rc<LocalStream>>>,
    pub policy: Policy,
    /// Seconds from a player's start to its first keyframe (`/metrics`).
    pub first_frame: Histogram,
}

/// One stream as seen by one worker.
#[derive(Debug)]
pub struct LocalStream {
    pub stream: Arc<Stream>,
    notify: Arc<Notify>,
    mirror: RefCell<Mirror>,
    players: RefCell<Vec<Rc<Player>>>,
    policy: Policy,
    done: Cell<bool>,
    /// The worker's [`Fanout::first_frame`].
    first_frame: Histogram,
    /// The buffers of one write, for transports that take them shared (reused).
    shared: RefCell<Vec<Bytes>>,
}

#[derive(Debug, Default)]
struct Mirror {
    packets: VecDeque<Arc<Packet>>,
    first: u64,
    start: Option<u64>,
    /// Metadata and decoder configurations a new player gets before its first keyframe.
    init: Vec<Arc<Packet>>,
    newest_ts: i64,
    closed: bool,
}

impl Mirror {
    fn next(&self) -> u64 {
        self.first + self.packets.len() as u64
    }

    fn get(&self, pos: u64) -> Option<&Arc<Packet>> {
        self.packets
            .get(usize::try_from(pos.checked_sub(self.first)?).ok()?)
    }

    /// The decode time (ms) of the packet at `pos`; `i64::MIN` where there is none.
    fn ts_ms(&self, pos: u64) -> i64 {
        self.get(pos).map_or(i64::MIN, |p| p.ts_ms)
    }
}

/// One viewer: a socket, a format, and where it is in the stream.
#[derive(Debug)]
pub struct Player {
    pub id: u64,
    pub sock: Rc<Sock>,
    pub format: Format,
    io: RefCell<PlayerIo>,
    /// Wakes the player's own task: it must wait for writability, or close.
    pub wake: Notify,
    /// Where to start instead of the newest start keyframe, if still kept (RTSP
    /// announces the first packet's sequence number before the player is attached).
    start_at: Cell<Option<u64>>,
    /// Detached from its stream: the pump, which may hold it across a yield, skips it.
    detached: Cell<bool>,
    /// How far its cursor was behind the newest frame at its last write, in ms.
    lag_ms: Cell<Option<i64>>,
    /// When it was made: its time to first frame counts from here.
    created: tokio::time::Instant,
}

#[derive(Debug, Default)]
struct PlayerIo {
    /// Its place in the mirror (unplaced until its first keyframe), and the
    /// configurations it was sent (queued or written).
    cursor: Cursor,
    pending: VecDeque<Bytes>,
    blocked: bool,
    closing: Option<CloseReason>,
    skips: u32,
    /// Decode time (ms) of the keyframe it started or last skipped at: transcoded
    /// audio that ends before it (the encoder's delay puts some after it in the ring)
    /// is not sent, so that its audio starts with its video.
    start_ms: i64,
    bytes: u64,
}

/// What a player's task should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlayerWait {
    /// Nothing: wait for input or a wake-up.
    Idle,
    /// The socket is full: wait until it is writable, then call [`LocalStream::flush`].
    Writable,
    /// Close the connection.
    Close(CloseReason),
}

impl Player {
    pub fn new(id: u64, sock: Rc<Sock>, format: Format) -> Rc<Player> {
        Rc::new(Player {
            id,
            sock,
            format,
            io: RefCell::new(PlayerIo::default()),
            wake: Notify::new(),
            start_at: Cell::new(None),
            detached: Cell::new(false),
            lag_ms: Cell::new(None),
            created: tokio::time::Instant::now(),
        })
    }

    /// Starts the player at ring position `pos` (a start keyframe) when it is still
    /// kept at attach time; otherwise it starts at the newest start keyframe.
    pub fn start_at(&self, pos: u64) {
        self.start_at.set(Some(pos));
    }

    /// Queues bytes that must go out before any further media (a protocol's own
    /// messages, such as RTMP status or acknowledgements).
    pub fn queue(&self, bytes: Bytes) {
        if !bytes.is_empty() {
            self.io.borrow_mut().pending.push_back(bytes);
        }
    }

    pub fn wait(&self) -> PlayerWait {
        let io = self.io.borrow();
        match (io.closing, io.blocked) {
            (Some(reason), _) => PlayerWait::Close(reason),
            (None, true) => PlayerWait::Writable,
            (None, false) => PlayerWait::Idle,
        }
    }

    /// Bytes written to this player so far.
    pub fn bytes(&self) -> u64 {
        self.io.borrow().bytes
    }

    pub fn skips(&self) -> u32 {
        self.io.borrow().skips
    }

    /// How far behind the newest frame it was when last written (`None` before its
    /// first keyframe).
    pub fn lag_ms(&self) -> Option<i64> {
        self.lag_ms.get()
    }

    /// Whether nothing is left to write (the stream's end, say, was delivered).
    pub fn drained(&self) -> bool {
        self.io.borrow().pending.is_empty()
    }

    fn close(&self, reason: CloseReason) {
        let mut io = self.io.borrow_mut();
        // A write error overrides an earlier reason: nothing can be written any more,
        // so a closing player that was still draining must stop trying.
        if io.closing.is_none() || reason == CloseReason::WriteError {
            io.closing = Some(reason);
            if reason == CloseReason::WriteError {
                io.pending.clear();
            }
            drop(io);
            self.wake.notify_one();
        }
    }
}

impl Fanout {
    pub fn new(policy: Policy, first_frame: Histogram) -> Rc<Fanout> {
        Rc::new(Fanout {
            streams: RefCell::new(HashMap::new()),
            policy,
            first_frame,
        })
    }

    /// Adds a player of `stream` to this worker and writes it what it can get at once
    /// (the GOP cache), so its first frame does not wait for the merge window.
    pub fn attach(&self, stream: &Arc<Stream>, player: Rc<Player>) -> Rc<LocalStream> {
        let local = self
            .streams
            .borrow_mut()
            .entry(stream.id)
            .or_insert_with(|| {
                LocalStream::start(stream.clone(), self.policy, self.first_frame.clone())
            })
            .clone();
        stream.players.fetch_add(1, Ordering::Relaxed);
        local.players.borrow_mut().push(player.clone());
        local.sync();
        local.flush(&player);
        local
    }

    /// Whether every player of an ended stream on this worker has been told so (it is
    /// closing, its end queued). A shutdown waits for this before it kicks: the pump
    /// tells them at their stream's next merge window, and a connection kicked before
    /// would be dropped without hearing the end (RTMP's UnpublishNotify).
    pub fn ended_streams_told(&self) -> bool {
        self.streams.borrow().values().all(|local| {
            !local.stream.lock().closed
                || local
                    .players
                    .borrow()
                    .iter()
                    .all(|p| p.io.borrow().closing.is_some())
        })
    }

    /// Removes a player; the last one out of a stream stops this worker's mirror of it.
    pub fn detach(&self, local: &Rc<LocalStream>, player: &Rc<Player>) {
        player.detached.set(true);
        let mut players = local.players.borrow_mut();
        let before = players.len();
        players.retain(|p| !Rc::ptr_eq(p, player));
        if players.len() < before {
            local.stream.players.fetch_sub(1, Ordering::Relaxed);
        }
        if players.is_empty() {
            local.done.set(true);
            local.stream.unsubscribe(&local.notify);
            local.notify.notify_one();
            let mut streams = self.streams.borrow_mut();
            if streams
                .get(&local.stream.id)
                .is_some_and(|l| Rc::ptr_eq(l, local))
            {
                streams.remove(&local.stream.id);
            }
        }
    }
}

impl LocalStream {
    fn start(stream: Arc<Stream>, policy: Policy, first_frame: Histogram) -> Rc<LocalStream> {
        let notify = Arc::new(Notify::new());
        stream.subscribe(notify.clone());
        let local = Rc::new(LocalStream {
            stream,
            notify,
            mirror: RefCell::new(Mirror::default()),
            players: RefCell::new(Vec::new()),
            policy,
            done: Cell::new(false),
            first_frame,
            shared: RefCell::default(),
        });
        tokio::task::spawn_local(local.clone().pump());
        local
    }

    /// Wakes once per packet (notifications coalesce while it sleeps), waits out the
    /// stream's merge window, and writes every player.
    async fn pump(self: Rc<Self>) {
        let merge = self.stream.merge;
        let mut last_flush = tokio::time::Instant::now();
        loop {
            self.notify.notified().await;
            if self.done.get() {
                return;
            }
            if !merge.is_zero() {
                tokio::time::sleep_until(last_flush + merge).await;
                if self.done.get() {
                    return;
                }
            }
            last_flush = tokio::time::Instant::now();
            self.sync();
            let players: Vec<Rc<Player>> = self.players.borrow().clone();
            let closed = self.mirror.borrow().closed;
            for (i, player) in players.iter().enumerate() {
                if i > 0 && i % FLUSH_BUDGET == 0 {
                    // Players attached meanwhile were written at attach; the mirror
                    // may move on (an attach syncs it), which `place` handles.
                    tokio::task::yield_now().await;
                    if self.done.get() {
                        return;
                    }
                }
                if player.detached.get() {
                    continue;
                }
                self.flush(player);
                if closed {
                    player.close(CloseReason::StreamEnded);
                }
            }
        }
    }

    /// Copies what is new in the stream's ring into this worker's mirror.
    fn sync(&self) {
        let state = self.stream.lock();
        let mut m = self.mirror.borrow_mut();
        let ring = &state.ring;
        if m.next() < ring.first() || m.next() > ring.next() {
            m.packets.clear();
            m.first = ring.first();
        }
        let from = m.next();
        if m.packets.is_empty() {
            m.first = ring.copy_since(from, &mut m.packets);
        } else {
            ring.copy_since(from, &mut m.packets);
        }
        while m.first < ring.first() && m.packets.pop_front().is_some() {
            m.first += 1;
        }
        m.start = ring.start();
        m.init.clear();
        m.init.extend(state.configs().cloned());
        m.newest_ts = m.packets.back().map_or(0, |p| p.ts_ms);
        m.closed = state.closed;
    }

    /// Writes `player` everything it is owed, until done or the socket is full.
    pub fn flush(&self, player: &Player) {
        let m = self.mirror.borrow();
        let mut io = player.io.borrow_mut();
        let shape = &self.policy.shape;
        // A closing player is written only what it is owed (an end-of-stream status).
        let media = match io.closing {
            None => true,
            Some(CloseReason::WriteError) => return,
            Some(_) => false,
        };
        if media {
            if let Err(reason) = self.place(&m, player, &mut io) {
                drop(io);
                player.close(reason);
                return;
            }
        }
        let fixed_tracks = player.format.id.fixed_tracks();
        let shared = player.sock.takes_shared();
        while !io.blocked {
            // On the stack: no allocation per player per write.
            let mut iov = [IoSlice::new(&[]); MAX_IOV];
            // Only players whose transport keeps shared buffers take the scratch list.
            let mut refs = shared.then(|| self.shared.borrow_mut());
            if let Some(r) = refs.as_mut() {
                r.clear();
            }
            let mut n = 0;
            let mut offered = 0usize;
            // Whether the write holds less than the player is owed (the limits above).
            let mut cut = false;
            for b in &io.pending {
                if n == MAX_IOV || offered >= MAX_WRITE {
                    cut = true;
                    break;
                }
                iov[n] = IoSlice::new(b);
                if let Some(r) = refs.as_mut() {
                    r.push(b.clone());
                }
                n += 1;
                offered += b.len();
            }
            if let Some(cursor) = io.cursor.pos().filter(|_| media) {
                let mut pos = cursor;
                while let Some(p) = m.get(pos) {
                    if n == MAX_IOV || offered >= MAX_WRITE {
                        cut = true;
                        break;
                    }
                    if fixed_tracks && ends_tracks(p, &io.cursor) {
                        if offered == 0 {
                            // All before the new configuration went out: the player
                            // ends, as at the stream's end, and starts again with it.
                            drop(refs);
                            drop(io);
                            player.close(CloseReason::StreamEnded);
                            return;
                        }
                        break;
                    }
                    let bytes = Self::bytes_for(p, player.format, shape, io.start_ms);
                    if !bytes.is_empty() {
                        iov[n] = IoSlice::new(bytes);
                        if let Some(r) = refs.as_mut() {
                            r.push(bytes.clone());
                        }
                        n += 1;
                        offered += bytes.len();
                    }
                    pos += 1;
                }
            }
            if offered == 0 {
                // Nothing new; a TLS socket may still hold ciphertext for the kernel.
                match player.sock.try_flush() {
                    Ok(true) => return,
                    Ok(false) => {
                        io.blocked = true;
                        break;
                    }
                    Err(_) => {
                        drop(io);
                        player.close(CloseReason::WriteError);
                        return;
                    }
                }
            }
            let result = match &refs {
                Some(r) => player.sock.try_write_shared(r),
                None => player.sock.try_write_vectored(&iov[..n]),
            };
            drop(refs);
            let written = match result {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    io.blocked = true;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    drop(io);
                    player.close(CloseReason::WriteError);
                    return;
                }
            };
            io.bytes += written as u64;
            self.stream
                .bytes_out
                .fetch_add(written as u64, Ordering::Relaxed);
            if written < offered || player.sock.has_pending_output() {
                io.blocked = true;
            }
            if media {
                Self::consume(&m, player.format, shape, &mut io, written);
            } else {
                Self::consume_pending(&mut io, written);
            }
            if !io.blocked && !cut {
                // All it was owed went out, and nothing is held in user space: done,
                // without another pass that would find nothing to write.
                break;
            }
        }
        if io.blocked {
            drop(io);
            player.wake.notify_one();
        }
    }

    /// Advances past up to `written` bytes of `pending`; returns how many are left.
    fn consume_pending(io: &mut PlayerIo, mut written: usize) -> usize {
        while written > 0 {
            let Some(front) = io.pending.front_mut() else {
                break;
            };
            if written >= front.len() {
                written -= front.len();
                io.pending.pop_front();
            } else {
                front.advance(written);
                return 0;
            }
        }
        written
    }

    /// The player's socket became writable again: continue where the kernel stopped it.
    pub fn on_writable(&self, player: &Player) {
        player.io.borrow_mut().blocked = false;
        self.flush(player);
    }

    /// Starts a new player at the newest keyframe, and moves a lagging one there, each
    /// with the configurations it lacks. Fails when the player has skipped too often,
    /// or a skip would pass a new configuration its format cannot take in line.
    fn place(&self, m: &Mirror, player: &Player, io: &mut PlayerIo) -> Result<(), CloseReason> {
        let Some(start) = m.start else {
            return Ok(());
        };
        let shape = &self.policy.shape;
        let format = player.format;
        let PlayerIo {
            cursor,
            pending,
            skips,
            start_ms,
            ..
        } = io;
        if cursor.pos().is_none() {
            pending.extend(format.id.preamble(&m.init));
        }
        // A configuration goes out in the player's format (and not at all where the
        // format does not carry it).
        let queue = |config: &Arc<Packet>| {
            let bytes = config.bytes(format, shape);
            if !bytes.is_empty() {
                pending.push_back(bytes.clone());
            }
        };
        match cursor.pos() {
            None => {
                let hint = player
                    .start_at
                    .take()
                    .filter(|&p| p <= start && m.get(p).is_some());
                let at = hint.unwrap_or(start);
                cursor.jump(at, &m.init, queue);
                *start_ms = m.ts_ms(at);
                self.first_frame
                    .observe(player.created.elapsed().as_secs_f64());
            }
            Some(pos) => {
                let (lag, behind) = match m.get(pos) {
                    Some(p) => {
                        let lag = m.newest_ts - p.ts_ms;
                        (lag, lag > self.policy.max_lag_ms)
                    }
                    None => (0, pos < m.first),
                };
                player.lag_ms.set(Some(lag));
                if behind && pos < start {
                    // A skip that would pass a new configuration ends a player whose
                    // format describes its tracks once (fMP4), as reading up to it would.
                    if format.id.fixed_tracks() && m.init.iter().any(|c| ends_tracks(c, cursor)) {
                        return Err(CloseReason::StreamEnded);
                    }
                    // `start` follows the current video configuration (the ring resets
                    // it on a new one), which the skipped span may have held.
                    cursor.jump(start, &m.init, queue);
                    *start_ms = m.ts_ms(start);
                    *skips += 1;
                    self.stream.skips.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(
                        player = player.id,
                        skips = *skips,
                        "slow player skipped to the newest keyframe"
                    );
                    if *skips > self.policy.max_skips {
                        return Err(CloseReason::TooSlow);
                    }
                }
            }
        }
        Ok(())
    }

    /// The bytes of `p` for a player of `format` that started at `start_ms` (see
    /// [`PlayerIo::start_ms`]).
    fn bytes_for<'a>(p: &'a Packet, format: Format, shape: &Shape, start_ms: i64) -> &'a Bytes {
        static EMPTY: Bytes = Bytes::new();
        if p.derived && p.ts_ms + AUDIO_FRAME_MS <= start_ms && !p.is_config() {
            return &EMPTY;
        }
        p.bytes(format, shape)
    }

    /// Advances past `written` bytes: pending first, then packets from the cursor; a
    /// packet written in part leaves its rest in `pending`.
    fn consume(m: &Mirror, format: Format, shape: &Shape, io: &mut PlayerIo, written: usize) {
        let mut written = Self::consume_pending(io, written);
        while written > 0 {
            let Some(p) = io.cursor.pos().and_then(|pos| m.get(pos)) else {
                break;
            };
            let bytes = Self::bytes_for(p, format, shape, io.start_ms);
            let len = bytes.len();
            io.cursor.advance(p);
            if written >= len {
                written -= len;
                continue;
            }
            // Keep the unwritten rest of this packet, shared, ahead of everything else.
            io.pending.push_back(bytes.slice(written..));
            written = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::format::FormatId;
    use crate::core::hub::HubConfig;
    use crate::core::ingest::Ingest;
    use crate::core::ring::RingLimits;
    use crate::io::sock::{Ready, Transport};
    use bytes::BytesMut;
    use sluice_media::codec::AvcConfig;
    use sluice_media::flv::{self, TagReader, VideoTag, TAG_VIDEO};
    use sluice_media::{Frame, MediaKind, Track, TrackConfig};
    use std::time::Duration;

    /// A socket that takes at most `room` more bytes.
    #[derive(Debug, Default)]
    struct Wire {
        out: RefCell<Vec<u8>>,
        room: Cell<usize>,
        /// Calls to `try_write_vectored` and `try_flush`.
        writes: Cell<usize>,
        flushes: Cell<usize>,
    }

    impl Transport for Rc<Wire> {
        fn try_read(&self, _: &mut [u8]) -> io::Result<usize> {
            Err(io::ErrorKind::WouldBlock.into())
        }

        fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            self.writes.set(self.writes.get() + 1);
            let mut n = 0;
            for b in bufs {
                let take = b.len().min(self.room.get());
                self.out.borrow_mut().extend_from_slice(&b[..take]);
                self.room.set(self.room.get() - take);
                n += take;
                if take < b.len() {
                    break;
                }
            }
            if n == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        }

        fn try_flush(&self) -> io::Result<bool> {
            self.flushes.set(self.flushes.get() + 1);
            Ok(true)
        }

        fn readable(&self) -> Ready<'_> {
            Box::pin(std::future::pending())
        }

        fn writable(&self) -> Ready<'_> {
            Box::pin(std::future::pending())
        }
    }

    /// An H.264 configuration; `level` tells two apart.
    fn avc(level: u8) -> Track {
        let sps = Bytes::from(vec![0x67, 0x42, 0xc0, level, 0xd9, 0x00, 0xa0, 0x47]);
        let pps = Bytes::from_static(&[0x68, 0xce, 0x3c, 0x80]);
        Track::new(TrackConfig::H264(
            AvcConfig::from_parameter_sets(&[sps], &[pps]).unwrap(),
        ))
    }

    /// What a player got of the video: configurations and frames.
    #[derive(Debug, PartialEq)]
    enum Got {
        Config(Track),
        Frame { ts: u32, key: bool },
    }

    /// One stream, a worker's fan-out of it (100 ms lag bound, no merge window) and one
    /// HTTP-FLV player.
    struct Fixture {
        ingest: Ingest,
        stream: Arc<Stream>,
        fanout: Rc<Fanout>,
        local: Rc<LocalStream>,
        player: Rc<Player>,
        wire: Rc<Wire>,
    }

    impl Fixture {
        /// Publishes configuration `level` and a keyframe at 0, then attaches the player.
        fn new(level: u8) -> Fixture {
            let config = HubConfig {
                ring: RingLimits {
                    max_ms: 60_000,
                    max_bytes: 1 << 30,
                },
                publish_grace: Duration::ZERO,
                policy: crate::keys::PerStream::fixed(crate::core::hub::StreamPolicy {
                    merge: Duration::ZERO,
                    ..Default::default()
                }),
                rtp: false,
                shape: Shape {
                    rtmp_chunk_size: 4096,
                },
                derive: None,
            };
            let stream = Stream::private("live/test", 1, &config, i64::MAX);
            let mut ingest = Ingest::new(stream.clone());
            ingest.set_track(0, avc(level));
            ingest.frame(frame(0));
            let fanout = Fanout::new(
                Policy {
                    max_lag_ms: 100,
                    max_skips: 100,
                    shape: Shape {
                        rtmp_chunk_size: 4096,
                    },
                    send_buffer: 0,
                },
                Histogram::new([0.1]),
            );
            let (player, wire) = attach(&fanout, &stream);
            let local = fanout.streams.borrow()[&stream.id].clone();
            Fixture {
                ingest,
                stream,
                fanout,
                local,
                player,
                wire,
            }
        }

        /// Publishes 25 fps video from `from` to `to` ms (a keyframe each second), with
        /// a pump round after each frame.
        fn frames(&mut self, from: i64, to: i64) {
            for ms in (from..=to).step_by(40) {
                self.ingest.frame(frame(ms));
                self.local.sync();
                self.local.flush(&self.player);
            }
        }

        /// The video tags the player got.
        fn got(&self) -> Vec<Got> {
            let mut buf = BytesMut::from(&self.wire.out.borrow()[..]);
            let mut reader = TagReader::new();
            let mut got = Vec::new();
            while let Some(tag) = reader.read(&mut buf).unwrap() {
                if tag.tag_type != TAG_VIDEO {
                    continue;
                }
                got.push(match flv::parse_video(&tag.body).unwrap() {
                    VideoTag::Config(track) => Got::Config(track),
                    VideoTag::Frame { keyframe, .. } => Got::Frame {
                        ts: tag.timestamp_ms,
                        key: keyframe,
                    },
                    other => panic!("{other:?}"),
                });
            }
            got
        }
    }

    /// Attaches one more HTTP-FLV player, its socket taking everything.
    fn attach(fanout: &Rc<Fanout>, stream: &Arc<Stream>) -> (Rc<Player>, Rc<Wire>) {
        let wire = Rc::new(Wire::default());
        wire.room.set(usize::MAX);
        let sock = Rc::new(Sock::new(wire.clone()));
        let player = Player::new(1, sock, Format::all(FormatId::FLV));
        fanout.attach(stream, player.clone());
        (player, wire)
    }

    fn frame(ms: i64) -> Frame {
        let t = Frame::ticks_from_ms(ms);
        Frame {
            kind: MediaKind::Video,
            dts: t,
            pts: t,
            keyframe: ms % 1000 == 0,
            payload: Bytes::from_static(&[0, 0, 0, 2, 0x65, 0x88]),
        }
    }

    /// Runs `f` as a worker does: a current-thread runtime and a local task set.
    fn on_worker(f: impl std::future::Future<Output = ()>) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&rt, f);
    }

    /// fMP4 describes its tracks once, in the init segment: a player gets what came
    /// before a new configuration, then is ended (its viewer reconnects for the new one);
    /// the same configuration again (a publisher that came back) changes nothing.
    #[test]
    fn a_new_configuration_ends_an_fmp4_player_after_what_came_before_it() {
        on_worker(async {
            let mut f = Fixture::new(0x1e);
            let _form = f.stream.want_form(FormatId::FMP4);
            let wire = Rc::new(Wire::default());
            wire.room.set(usize::MAX);
            let sock = Rc::new(Sock::new(wire.clone()));
            let player = Player::new(2, sock, Format::all(FormatId::FMP4));
            f.fanout.attach(&f.stream, player.clone());
            f.frames(40, 960);
            f.local.flush(&player);
            assert_eq!(player.wait(), PlayerWait::Idle);
            let moofs = |wire: &Wire| {
                wire.out
                    .borrow()
                    .windows(4)
                    .filter(|w| w == b"moof")
                    .count()
            };
            assert_eq!(
                wire.out.borrow().get(4..8),
                Some(&b"ftyp"[..]),
                "init first"
            );
            assert_eq!(moofs(&wire), 25, "a fragment per frame");
            // A publisher that comes back with the same configuration: it plays on.
            f.ingest = Ingest::new(f.stream.clone());
            f.ingest.set_track(Frame::ticks_from_ms(1000), avc(0x1e));
            f.frames(1000, 1040);
            f.local.flush(&player);
            assert_eq!(player.wait(), PlayerWait::Idle);
            assert_eq!(moofs(&wire), 27);
            f.ingest.set_track(Frame::ticks_from_ms(1080), avc(0x1f));
            f.frames(1080, 1120);
            f.local.flush(&player);
            assert_eq!(player.wait(), PlayerWait::Close(CloseReason::StreamEnded));
            assert_eq!(moofs(&wire), 27, "nothing after the new configuration");
            // The FLV player goes on with the new configuration.
            assert_eq!(f.player.wait(), PlayerWait::Idle);
        });
    }

    #[test]
    fn a_player_skipped_past_a_new_configuration_gets_it_before_the_keyframe() {
        on_worker(async {
            let mut f = Fixture::new(0x1e);
            f.frames(40, 960);
            // The socket fills up while the stream goes on and changes configuration.
            f.wire.room.set(0);
            f.frames(1000, 1960);
            f.ingest.set_track(Frame::ticks_from_ms(2000), avc(0x1f));
            f.frames(2000, 2400);
            f.wire.room.set(usize::MAX);
            f.local.on_writable(&f.player);
            assert!(f.player.skips() >= 1, "skipped");
            let got = f.got();
            let first_new = got
                .iter()
                .position(|g| matches!(g, Got::Frame { ts, .. } if *ts >= 2000))
                .unwrap();
            assert_eq!(
                got[first_new],
                Got::Frame {
                    ts: 2000,
                    key: true
                }
            );
            assert_eq!(
                got[first_new - 1],
                Got::Config(avc(0x1f)),
                "the new configuration comes right before the keyframe: {got:?}"
            );
            assert_eq!(
                got[first_new - 2],
                Got::Frame {
                    ts: 960,
                    key: false
                },
                "the player skipped over the change"
            );
        });
    }

    #[test]
    fn a_skip_sends_no_configuration_the_player_has() {
        on_worker(async {
            let mut f = Fixture::new(0x1e);
            f.frames(40, 960);
            f.wire.room.set(0);
            f.frames(1000, 2960);
            f.wire.room.set(usize::MAX);
            f.local.on_writable(&f.player);
            assert_eq!(f.player.skips(), 1);
            let configs = f
                .got()
                .iter()
                .filter(|g| matches!(g, Got::Config(_)))
                .count();
            assert_eq!(configs, 1, "only the first one");
        });
    }

    #[test]
    fn a_flush_writes_all_it_owes_in_as_few_calls_as_the_limits_allow() {
        on_worker(async {
            let mut f = Fixture::new(0x1e);
            // 100 frames (no keyframe: no skip) come in while the player is not
            // written: more than one write's buffers.
            for ms in (8..=800).step_by(8) {
                f.ingest.frame(frame(ms));
            }
            f.local.sync();
            let (writes, flushes) = (f.wire.writes.get(), f.wire.flushes.get());
            f.local.flush(&f.player);
            let frames = f
                .got()
                .iter()
                .filter(|g| matches!(g, Got::Frame { ts, .. } if *ts >= 8))
                .count();
            assert_eq!(frames, 100, "everything owed went out");
            assert_eq!(f.wire.writes.get() - writes, 100usize.div_ceil(MAX_IOV));
            assert_eq!(
                f.wire.flushes.get() - flushes,
                0,
                "no pass after the last write to find nothing left"
            );
        });
    }

    #[test]
    fn the_pump_yields_within_a_round_and_skips_players_detached_meanwhile() {
        on_worker(async {
            let mut f = Fixture::new(0x1e);
            let mut players = vec![(f.player.clone(), f.wire.clone())];
            for _ in 1..3 * FLUSH_BUDGET {
                players.push(attach(&f.fanout, &f.stream));
            }
            let len = |w: &Rc<Wire>| w.out.borrow().len();
            let before: Vec<usize> = players.iter().map(|(_, w)| len(w)).collect();
            let grew = |i: usize| len(&players[i].1) > before[i];
            let last = players.len() - 1;
            // The pump writes this frame, not us.
            f.ingest.frame(frame(40));
            let until = |i: usize| {
                tokio::time::timeout(Duration::from_secs(10), async move {
                    while !grew(i) {
                        tokio::task::yield_now().await;
                    }
                })
            };
            until(0).await.expect("the pump wrote the first player");
            assert!(
                !grew(last),
                "the pump let others run before its last player"
            );
            f.fanout.detach(&f.local, &players[last].0);
            until(last - 1).await.expect("the pump went on");
            assert!((0..last).all(grew), "every attached player written");
            assert!(!grew(last), "not the one detached meanwhile");
        });
    }
}
