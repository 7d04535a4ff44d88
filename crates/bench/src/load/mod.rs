//! The players and publishers the bench runs, one file per protocol.
//!
//! Why not `sluice_bench::player::Player`: that one hands every tag to the caller as
//! `Bytes`, which the end-to-end tests need. Here thousands of players share the
//! machine with the server being measured, so each player reads into one buffer per
//! thread ([`READ_LEN`] bytes per read), scans it with `crate::scan` (RTSP:
//! `sluice_rtsp::ClientSession::handle_input_in_place`), keeps a few bytes of state and
//! no media (RTSP: the frame being depacketized, and a packet split across two reads).
//!
//! Over TLS (`https://`, `wss://`) a read takes ciphertext into a second per-thread
//! buffer and `crate::tls::decrypt` turns it into plaintext in the first; a player
//! keeps rustls's connection state and nothing else.
//!
//! # Invariants
//! - Every await is bounded by the run's end: a player returns by itself when the
//!   run ends, whatever the server does.
//! - A player never holds the thread's read buffer across an await.

pub(crate) mod flv;
pub(crate) mod hls;
pub(crate) mod publish;
pub(crate) mod publish_rtsp;
pub(crate) mod publish_srt;
pub(crate) mod rtmp;
pub(crate) mod rtsp;
pub(crate) mod srt;
pub(crate) mod udp;
pub(crate) mod whep;

use crate::figures::{ErrorKind, Live, PlayerRow};
use crate::target::Target;
use crate::tls::{self, TlsClient};
use rustls::ClientConnection;
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

/// Ciphertext bytes per read of a TLS player: what decrypts into [`READ_LEN`] bytes
/// of plaintext with room for the record rustls holds back (`tls::CARRY`).
const TLS_READ_LEN: usize = READ_LEN - tls::CARRY;

thread_local! {
    static READ_BUF: RefCell<Box<[u8]>> = RefCell::new(vec![0u8; READ_LEN].into_boxed_slice());
    /// Ciphertext of TLS players (allocated on a thread's first TLS read).
    static TLS_BUF: RefCell<Box<[u8]>> = RefCell::new(vec![0u8; TLS_READ_LEN].into_boxed_slice());
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
    /// For `https://` and `wss://` targets.
    pub tls: Option<TlsClient>,
}

/// Runs one player to the end of the run and returns its figures.
pub(crate) async fn play(ctx: Arc<Ctx>, id: usize, slow: bool) -> PlayerRow {
    let mut row = PlayerRow::new(id, slow);
    let result = match (&ctx.target, ctx.protocol) {
        (
            Target::Http { .. },
            Protocol::Flv | Protocol::WsFlv | Protocol::Fmp4 | Protocol::WsFmp4,
        ) => flv::play(&ctx, &mut row).await,
        (Target::Rtmp { .. }, Protocol::Rtmp) => rtmp::play(&ctx, &mut row).await,
        (Target::Http { .. }, Protocol::Hls) => hls::play(&ctx, &mut row).await,
        (Target::Http { .. }, Protocol::LlHls) => hls::play_low_latency(&ctx, &mut row).await,
        (Target::Rtsp { .. }, Protocol::Rtsp | Protocol::RtspUdp) => {
            rtsp::play(&ctx, &mut row).await
        }
        (Target::Http { .. }, Protocol::Whep) => whep::play(&ctx, &mut row).await,
        (Target::Srt { .. }, Protocol::Srt) => srt::play(&ctx, &mut row).await,
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

/// One TCP connection of a player, bounded by the run's end; over TLS when opened
/// with a [`TlsClient`].
pub(crate) struct Conn {
    sock: TcpStream,
    /// The TLS session, once its handshake is done.
    tls: Option<Box<ClientConnection>>,
    end: Pin<Box<Sleep>>,
    read_len: usize,
    throttle: Option<Throttle>,
}

impl Conn {
    /// Connects, and with `tls` runs the TLS handshake; `None` when the run ended first.
    pub(crate) async fn open(
        addr: SocketAddr,
        slow: Option<f64>,
        end: Instant,
        tls: Option<&TlsClient>,
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
        let mut conn = Conn {
            sock,
            tls: None,
            end: Box::pin(sleep_until(end)),
            read_len: if slow.is_some() { SLOW_LEN } else { READ_LEN },
            throttle: slow.map(|factor| Throttle {
                factor,
                since: None,
            }),
        };
        if let Some(tls) = tls {
            if !conn.handshake(tls).await? {
                return Ok(None);
            }
        }
        Ok(Some(conn))
    }

    /// The TLS handshake; `false` when the run ended first.
    async fn handshake(&mut self, client: &TlsClient) -> Result<bool, Failure> {
        let mut tls = Box::new(client.connect()?);
        loop {
            if !flush_tls(&self.sock, &mut self.end, &mut tls).await? {
                return Ok(false);
            }
            if !tls.is_handshaking() {
                client.handshaken(&tls);
                self.tls = Some(tls);
                return Ok(true);
            }
            tokio::select! {
                biased;
                _ = &mut self.end => return Ok(false),
                r = self.sock.readable() => r.map_err(io_failure)?,
            }
            match tls.read_tls(&mut SockReader(&self.sock)) {
                Ok(0) => {
                    return Err((
                        ErrorKind::Closed,
                        "closed by the server during the TLS handshake".into(),
                    ))
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(io_failure(e)),
            }
            if let Err(e) = tls.process_new_packets() {
                // Our alert, if the socket takes it now.
                let _ = tls.write_tls(&mut SockWriter(&self.sock));
                return Err((ErrorKind::Tls, format!("TLS handshake: {e}")));
            }
        }
    }

    /// Writes all of `bytes`; `false` when the run ended first.
    pub(crate) async fn write(&mut self, bytes: &[u8]) -> Result<bool, Failure> {
        if let Some(tls) = &mut self.tls {
            io::Write::write_all(&mut tls.writer(), bytes).map_err(io_failure)?;
            return flush_tls(&self.sock, &mut self.end, tls).await;
        }
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
            // Tried before waiting: TLS may hold plaintext from an earlier read (and
            // a plain socket's readiness is cached, so this costs no syscall).
            if let Some(r) = self.read_now(Some(live), &mut f)? {
                return Ok(Some(r));
            }
            tokio::select! {
                biased;
                _ = &mut self.end => return Ok(None),
                r = self.sock.readable() => r.map_err(io_failure)?,
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
        if self.tls.is_some() {
            return self.read_tls_now(live, f);
        }
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

    /// [`Conn::read_now`] over TLS: plaintext rustls holds, else one read of
    /// ciphertext decrypted into the thread's buffer. Counts plaintext bytes (the
    /// same payload as over plain TCP).
    fn read_tls_now<R, F: FnOnce(&[u8], Instant) -> R>(
        &mut self,
        live: Option<&Live>,
        f: &mut Option<F>,
    ) -> Result<Option<R>, Failure> {
        let Some(tls) = self.tls.as_deref_mut() else {
            return Ok(None);
        };
        let cipher_len = self.read_len.min(TLS_READ_LEN);
        let got = READ_BUF.with(|out| {
            let mut out = out.borrow_mut();
            // Held back from an earlier read first, without touching the socket.
            let held = tls::decrypt(tls, &[], &mut out)?;
            if held.len > 0 || held.closed {
                return Ok(Some(held));
            }
            TLS_BUF.with(|cipher| {
                let mut cipher = cipher.borrow_mut();
                let len = cipher_len.min(cipher.len());
                match self.sock.try_read(&mut cipher[..len]) {
                    Ok(0) => Err((ErrorKind::Closed, "closed by the server".to_string())),
                    Ok(n) => tls::decrypt(tls, &cipher[..n], &mut out).map(Some),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
                    Err(e) => Err(io_failure(e)),
                }
            })
        })?;
        // Answers to post-handshake messages, if any, as far as the socket takes them.
        if tls.wants_write() {
            match tls.write_tls(&mut SockWriter(&self.sock)) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(io_failure(e)),
            }
        }
        match got {
            None => Ok(None),
            Some(d) if d.len > 0 => {
                if let Some(live) = live {
                    live.add_bytes(d.len);
                }
                let f = f.take().expect("called once: the caller returns after it");
                READ_BUF.with(|out| Ok(Some(f(&out.borrow()[..d.len], Instant::now()))))
            }
            Some(d) if d.closed => Err((
                ErrorKind::Closed,
                "closed by the server (TLS close_notify)".into(),
            )),
            // Ciphertext without a whole record yet, or a session ticket.
            Some(_) => Ok(None),
        }
    }

    /// Waits for the connection to have bytes to read or for `other` to finish,
    /// whichever comes first, bounded by the run's end.
    pub(crate) async fn readable_or<T>(
        &mut self,
        other: impl std::future::Future<Output = T>,
    ) -> Result<Woke<T>, Failure> {
        // rustls not wanting to read: it holds plaintext, or close_notify came.
        if self.tls.as_deref().is_some_and(|t| !t.wants_read()) {
            return Ok(Woke::Readable);
        }
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

/// Sends what rustls has to send; `false` when the run ended first.
async fn flush_tls(
    sock: &TcpStream,
    end: &mut Pin<Box<Sleep>>,
    tls: &mut ClientConnection,
) -> Result<bool, Failure> {
    while tls.wants_write() {
        match tls.write_tls(&mut SockWriter(sock)) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                tokio::select! {
                    biased;
                    _ = &mut *end => return Ok(false),
                    r = sock.writable() => r.map_err(io_failure)?,
                }
            }
            Err(e) => return Err(io_failure(e)),
        }
    }
    Ok(true)
}

/// `io::Read` on a tokio socket without waiting (`WouldBlock` when nothing is there).
struct SockReader<'a>(&'a TcpStream);

impl io::Read for SockReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

/// `io::Write` on a tokio socket without waiting (`WouldBlock` when it is full).
struct SockWriter<'a>(&'a TcpStream);

impl io::Write for SockWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
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
