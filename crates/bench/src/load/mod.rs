//! The players and publishers the bench runs, one file per protocol.
//!
//! Why not `sluice_bench::player::Player`: that one hands every tag to the caller as
//! `Bytes`, which the end-to-end tests need. Here thousands of players share the
//! machine with the server being measured, so each player reads into one buffer per
//! thread ([`READ_LEN`] bytes per read), scans it with `crate::scan` (RTSP:
//! `crate::rtsp`), keeps a few bytes of state and no media (RTSP: the frame being
//! depacketized, and a packet split across two reads).
//!
//! # Invariants
//! - Every await is bounded by the run's end: a player returns by itself when the
//!   run ends, whatever the server does.
//! - A player never holds the thread's read buffer across an await.

pub(crate) mod flv;
pub(crate) mod hls;
pub(crate) mod publish;
pub(crate) mod publish_rtsp;
pub(crate) mod rtmp;
pub(crate) mod rtsp;

use crate::figures::{ErrorKind, Live, PlayerRow};
use crate::target::Target;
use sluice_bench::player::Protocol;
use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::{sleep_until, Instant, Sleep};

/// Bytes per read of a normal player: large reads keep syscalls per byte low.
pub(crate) const READ_LEN: usize = 128 << 10;
/// Bytes per read of a slow player, and its socket receive buffer: small, so that
/// the server sees the backlog quickly (a large buffer hides a slow reader).
pub(crate) const SLOW_LEN: usize = 16 << 10;
/// Media a slow player reads at full speed to learn the stream's bitrate.
const SLOW_PROBE_MS: i64 = 2000;

thread_local! {
    static READ_BUF: RefCell<Box<[u8]>> = RefCell::new(vec![0u8; READ_LEN].into_boxed_slice());
}

/// A failure: its kind and what happened.
pub(crate) type Failure = (ErrorKind, String);

pub(crate) fn io_failure(e: io::Error) -> Failure {
    let kind = match e.kind() {
        io::ErrorKind::UnexpectedEof
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::ConnectionAborted => ErrorKind::Closed,
        _ => ErrorKind::Io,
    };
    (kind, e.to_string())
}

/// What every player of a run shares.
pub(crate) struct Ctx {
    pub target: Target,
    pub protocol: Protocol,
    pub live: Arc<Live>,
    /// When the run ends.
    pub end: Instant,
    /// Slow players read at this multiple of the stream's bitrate.
    pub slow_rate: f64,
}

/// Runs one player to the end of the run and returns its figures.
pub(crate) async fn play(ctx: Arc<Ctx>, id: usize, slow: bool) -> PlayerRow {
    let mut row = PlayerRow::new(id, slow);
    let result = match (&ctx.target, ctx.protocol) {
        (Target::Http { .. }, Protocol::Flv | Protocol::WsFlv) => flv::play(&ctx, &mut row).await,
        (Target::Rtmp { .. }, Protocol::Rtmp) => rtmp::play(&ctx, &mut row).await,
        (Target::Http { .. }, Protocol::Hls) => hls::play(&ctx, &mut row).await,
        (Target::Http { .. }, Protocol::LlHls) => hls::play_low_latency(&ctx, &mut row).await,
        (Target::Rtsp { .. }, Protocol::Rtsp | Protocol::RtspUdp) => {
            rtsp::play(&ctx, &mut row).await
        }
        _ => Err((
            ErrorKind::Protocol,
            "URL scheme does not match --protocol".into(),
        )),
    };
    let result = result.and_then(|()| match row.connect_ms {
        Some(_) => Ok(()),
        None => Err((ErrorKind::Timeout, "not playing when the run ended".into())),
    });
    if let Err((kind, what)) = result {
        row.fail(kind, what);
        ctx.live
            .failed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    row
}

/// One TCP connection of a player, bounded by the run's end.
pub(crate) struct Conn {
    sock: TcpStream,
    end: Pin<Box<Sleep>>,
    read_len: usize,
    throttle: Option<Throttle>,
}

impl Conn {
    /// Connects; `None` when the run ended first.
    pub(crate) async fn open(
        addr: SocketAddr,
        slow: Option<f64>,
        end: Instant,
    ) -> Result<Option<Conn>, Failure> {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        }
        .map_err(io_failure)?;
        if slow.is_some() {
            socket
                .set_recv_buffer_size(SLOW_LEN as u32)
                .map_err(io_failure)?;
        }
        let sock = match tokio::time::timeout_at(end, socket.connect(addr)).await {
            Err(_) => return Ok(None),
            Ok(Err(e)) => return Err((ErrorKind::Connect, e.to_string())),
            Ok(Ok(s)) => s,
        };
        sock.set_nodelay(true).map_err(io_failure)?;
        Ok(Some(Conn {
            sock,
            end: Box::pin(sleep_until(end)),
            read_len: if slow.is_some() { SLOW_LEN } else { READ_LEN },
            throttle: slow.map(|factor| Throttle {
                factor,
                since: None,
            }),
        }))
    }

    /// Writes all of `bytes`; `false` when the run ended first.
    pub(crate) async fn write(&mut self, bytes: &[u8]) -> Result<bool, Failure> {
        tokio::select! {
            biased;
            _ = &mut self.end => Ok(false),
            r = self.sock.write_all(bytes) => r.map(|_| true).map_err(io_failure),
        }
    }

    /// Writes all of `bytes` within `limit`, whether the run ended or not (a last
    /// goodbye, such as RTSP's TEARDOWN); `false` when it did not go out in time.
    pub(crate) async fn write_within(&mut self, bytes: &[u8], limit: Duration) -> bool {
        matches!(
            tokio::time::timeout(limit, self.sock.write_all(bytes)).await,
            Ok(Ok(()))
        )
    }

    /// Waits for bytes and passes what one read returns to `f`, with the time they
    /// came; `None` when the run ended. A closed connection is a `Closed` failure.
    pub(crate) async fn read<R>(
        &mut self,
        live: &Live,
        f: impl FnOnce(&[u8], Instant) -> R,
    ) -> Result<Option<R>, Failure> {
        let mut f = Some(f);
        loop {
            tokio::select! {
                biased;
                _ = &mut self.end => return Ok(None),
                r = self.sock.readable() => r.map_err(io_failure)?,
            }
            if let Some(r) = self.read_now(Some(live), &mut f)? {
                return Ok(Some(r));
            }
        }
    }

    /// [`Conn::read`] without waiting: `None` when no bytes are there now.
    pub(crate) fn try_read<R>(
        &mut self,
        live: &Live,
        f: impl FnOnce(&[u8], Instant) -> R,
    ) -> Result<Option<R>, Failure> {
        self.read_now(Some(live), &mut Some(f))
    }

    /// [`Conn::try_read`] for a publisher: what it reads (answers to its requests) is
    /// not a figure, so it is not counted.
    pub(crate) fn try_read_uncounted<R>(
        &mut self,
        f: impl FnOnce(&[u8], Instant) -> R,
    ) -> Result<Option<R>, Failure> {
        self.read_now(None, &mut Some(f))
    }

    /// One read into the thread's buffer; `f` is taken (and called) when bytes came.
    fn read_now<R, F: FnOnce(&[u8], Instant) -> R>(
        &mut self,
        live: Option<&Live>,
        f: &mut Option<F>,
    ) -> Result<Option<R>, Failure> {
        READ_BUF.with(|buf| {
            let mut buf = buf.borrow_mut();
            let len = self.read_len.min(buf.len());
            match self.sock.try_read(&mut buf[..len]) {
                Ok(0) => Err((ErrorKind::Closed, "closed by the server".to_string())),
                Ok(n) => {
                    if let Some(live) = live {
                        live.add_bytes(n);
                    }
                    let f = f.take().expect("called once: the caller returns after it");
                    Ok(Some(f(&buf[..n], Instant::now())))
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
                Err(e) => Err(io_failure(e)),
            }
        })
    }

    /// Waits for the connection to have bytes to read or for `other` to finish,
    /// whichever comes first, bounded by the run's end.
    pub(crate) async fn readable_or<T>(
        &mut self,
        other: impl std::future::Future<Output = T>,
    ) -> Result<Woke<T>, Failure> {
        tokio::select! {
            biased;
            _ = &mut self.end => Ok(Woke::Ended),
            r = self.sock.readable() => r.map(|()| Woke::Readable).map_err(io_failure),
            t = other => Ok(Woke::Other(t)),
        }
    }

    /// Our address on the connection (where a server sends RTP over UDP).
    pub(crate) fn local_ip(&self) -> Result<std::net::IpAddr, Failure> {
        self.sock.local_addr().map(|a| a.ip()).map_err(io_failure)
    }

    /// For a slow player, waits until its reading is back under its rate; `false`
    /// when the run ended meanwhile.
    pub(crate) async fn pace(&mut self, row: &PlayerRow) -> bool {
        self.pace_counts(row.bytes, row.media_ms).await
    }

    /// [`Conn::pace`] from counts: `bytes` read so far on this connection and the
    /// media time they carried.
    pub(crate) async fn pace_counts(&mut self, bytes: u64, media_ms: i64) -> bool {
        let Some(t) = &mut self.throttle else {
            return true;
        };
        let Some(due) = t.due(bytes, media_ms, Instant::now()) else {
            return true;
        };
        tokio::select! {
            biased;
            _ = &mut self.end => false,
            _ = sleep_until(due) => true,
        }
    }
}

/// What [`Conn::readable_or`] woke for.
pub(crate) enum Woke<T> {
    /// The run ended.
    Ended,
    /// The connection has bytes to read ([`Conn::try_read`]).
    Readable,
    /// The other future finished.
    Other(T),
}

/// Holds a slow player to `factor` times the stream's bitrate, learnt from the first
/// [`SLOW_PROBE_MS`] of media (bytes over media time, so a GOP-cache burst counts
/// with the media it carries).
struct Throttle {
    factor: f64,
    /// When throttling started, the bytes then, and the rate in bytes/s.
    since: Option<(Instant, u64, f64)>,
}

impl Throttle {
    fn due(&mut self, bytes: u64, media_ms: i64, now: Instant) -> Option<Instant> {
        let (t0, b0, rate) = match self.since {
            Some(s) => s,
            None if media_ms >= SLOW_PROBE_MS => {
                let rate = bytes as f64 * 1000.0 / media_ms as f64 * self.factor;
                self.since = Some((now, bytes, rate.max(1.0)));
                return None;
            }
            None => return None,
        };
        let due = t0 + std::time::Duration::from_secs_f64(bytes.saturating_sub(b0) as f64 / rate);
        (due > now).then_some(due)
    }
}
