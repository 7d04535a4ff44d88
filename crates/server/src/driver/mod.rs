//! The one connection driver: runs any [`Session`] over any [`Sock`], for every
//! protocol. It reads, feeds the session with the time, drains its outputs, re-arms
//! its timer, and hands each event to the protocol's [`Adapter`], which is where the
//! hub is reached. A connection that starts playing gives its socket to the worker's
//! fan-out ([`Playing`]); the driver then queues the session's own bytes to the player
//! so they go out in order with the media.
//!
//! ```text
//!  sock ──read──▶ session.handle_input(now) ──poll_output──┬─ Transmit ─▶ out / player queue ─▶ sock
//!                 session.handle_timeout(now) ◀─ timer     └─ Event ────▶ adapter.on_event ──▶ hub
//!  adapter.wait() ─▶ adapter.on_wake (a protocol's other inputs: UDP, jitter timers)
//!  fan-out closes the player ─▶ adapter.on_play_end
//! ```
//!
//! # Invariants
//! - Transmits reach the socket in the order the session produced them, before any
//!   media that follows them (they are queued ahead of the player's cursor).
//! - Nothing is read while queued output waits for a socket that is not playing (a
//!   peer that does not read cannot make us buffer its input).
//! - What is still owed when the connection ends is written for at most
//!   [`DRAIN_TIMEOUT`].

use crate::core::fanout::{CloseReason, Player};
use crate::core::hub::Stream;
use crate::core::play::{PlayEnd, Playing, DRAIN_TIMEOUT};
use crate::core::protocol::Protocol;
use crate::ctx::admit::Refusal;
use crate::ctx::Ctx;
use crate::io::sock::{write_all, Sock};
use crate::ops::{Client, EndReason};
use crate::relay::error::RelayError;
use bytes::Bytes;
use sluice_session::{Input, Output, Session};
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

pub mod relay;

/// Bytes read from the socket per wake-up, into the worker's scratch buffer
/// (`Ctx::read_buf`), so an idle connection (a player) costs no read buffer.
pub const READ_CHUNK: usize = 16 << 10;

/// Reads per wake-up of a publisher whose reads are merged: what a merge window of a
/// fast stream left in the socket is taken at once, up to this many chunks (the rest
/// waits for the next wake-up, which comes at once).
const MERGED_READS: usize = 16;

/// The time sessions are given: tokio's clock, so that a test on a paused clock
/// (`testing`) drives every timeout of the driver and the sessions alike.
pub fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

/// What an adapter asks of the driver after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Continue,
    /// Write what is owed, then end the connection.
    Close,
}

/// Why a connection ended, whatever the protocol.
#[derive(Debug, thiserror::Error)]
pub enum DriveError<E: std::error::Error + 'static> {
    #[error(transparent)]
    Session(E),
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    #[error("nothing received for {0:?}")]
    Idle(Duration),
    #[error("did not start publishing or playing within {0:?}")]
    Handshake(Duration),
    /// The admission refused the publish or play the peer asked for.
    #[error("play {key}: {refusal}")]
    Refused { key: String, refusal: Refusal },
    #[error("bad media: {0}")]
    Media(#[from] sluice_media::flv::FlvError),
    /// A relay's pull or push ended (its origin or target failed, refused, timed out).
    #[error(transparent)]
    Relay(RelayError),
    #[error("player closed: {0:?}")]
    Closed(CloseReason),
    #[error("session timed out")]
    Timeout,
    #[error("peer took nothing of its answer for {0:?}")]
    Stalled(Duration),
    #[error("kicked by the API")]
    Kicked,
}

/// A protocol's side of the driver: what its events mean for the hub.
pub trait Adapter<S: Session> {
    /// Something else the adapter waits for beside the socket and the session's timer.
    type Wake;

    /// Acts on one event of the session: answers it through `conn.session`, starts or
    /// stops playing, or asks to close.
    fn on_event(
        &mut self,
        conn: &mut Conn<S>,
        event: S::Event,
    ) -> impl Future<Output = Result<Next, DriveError<S::Error>>>;

    /// The fan-out ended the player (the stream ended, too slow, a write failed).
    fn on_play_end(
        &mut self,
        conn: &mut Conn<S>,
        reason: CloseReason,
    ) -> impl Future<Output = Result<Next, DriveError<S::Error>>> {
        let _ = conn;
        async move {
            match reason {
                CloseReason::StreamEnded => Ok(Next::Close),
                other => Err(DriveError::Closed(other)),
            }
        }
    }

    /// Waits for the adapter's other inputs; never returns by default.
    fn wait(&mut self) -> impl Future<Output = Self::Wake> {
        std::future::pending()
    }

    /// One of the adapter's other inputs is ready.
    fn on_wake(
        &mut self,
        conn: &mut Conn<S>,
        wake: Self::Wake,
    ) -> Result<Next, DriveError<S::Error>> {
        let _ = (conn, wake);
        Ok(Next::Continue)
    }
}

/// One connection: its socket, its session, and its player while it plays.
pub struct Conn<S: Session> {
    pub ctx: Rc<Ctx>,
    pub id: u64,
    /// The connection's entry in its worker's registry (the API's view, kicks).
    pub client: Client,
    pub sock: Rc<Sock>,
    pub session: S,
    /// Transmits waiting for the socket while not playing.
    out: VecDeque<Bytes>,
    /// Events the session produced behind transmits taken early (see `play`).
    held: VecDeque<S::Event>,
    playing: Option<Playing>,
    /// A connection that sends nothing this long while not playing is closed (`None`:
    /// the session keeps its own timeout).
    idle: Option<Duration>,
    /// While the session takes its input buffered (a publisher), the socket is read at
    /// most once per this long (see `publishers.read_merge_ms`).
    read_merge: Option<Duration>,
    /// A connection must start publishing or playing by then (`handshake_timeout_ms`):
    /// the idle timeout alone lets a peer that trickles a byte now and then hold a
    /// connection forever.
    start_by: Option<(tokio::time::Instant, Duration)>,
    /// A peer that takes none of what is owed to it this long is given up on (a
    /// relay's target); `None`: the idle and start bounds are the only ones.
    write_bound: Option<Duration>,
}

impl<S: Session> Conn<S> {
    pub fn new(ctx: Rc<Ctx>, client: Client, sock: Rc<Sock>, session: S) -> Self {
        let idle = Some(Duration::from_millis(ctx.config().limits.idle_timeout_ms));
        let handshake = Duration::from_millis(ctx.config().limits.handshake_timeout_ms);
        let start_by =
            (!handshake.is_zero()).then(|| (tokio::time::Instant::now() + handshake, handshake));
        Conn {
            ctx,
            id: client.id(),
            client,
            sock,
            session,
            out: VecDeque::new(),
            held: VecDeque::new(),
            playing: None,
            idle,
            read_merge: None,
            start_by,
            write_bound: None,
        }
    }

    /// Gives up on a peer that takes nothing of what is owed to it for `bound`.
    pub fn bound_writes(mut self, bound: Duration) -> Self {
        self.write_bound = Some(bound);
        self
    }

    /// The connection publishes or plays: its start is no longer bounded.
    pub fn started(&mut self) {
        self.start_by = None;
    }

    /// Leaves bounding the start to the session (HTTP bounds each request head).
    pub fn without_start_deadline(mut self) -> Self {
        self.start_by = None;
        self
    }

    /// Merges the reads of a publisher of `stream`: at most one per
    /// `publishers.read_merge_ms`, and never a longer wait than the stream's merge window.
    pub fn merge_reads(&mut self, stream: &Stream) {
        let configured = Duration::from_millis(self.ctx.config().publishers.read_merge_ms);
        self.read_merge = read_merge(configured, stream.merge);
        self.started();
    }

    /// Leaves timing out a silent peer to the session (`poll_timeout`).
    pub fn without_idle_timeout(mut self) -> Self {
        self.idle = None;
        self
    }

    /// Whether the connection is a player now.
    pub fn playing(&self) -> Option<&Playing> {
        self.playing.as_ref()
    }

    /// Becomes a player of `stream` over `protocol`: what the session said so far goes
    /// out first, then the stream from its newest keyframe (or ring position `start`).
    pub fn play(&mut self, stream: &Arc<Stream>, player: Rc<Player>, protocol: Protocol) {
        for bytes in self.out.drain(..) {
            player.queue(bytes);
        }
        while let Some(output) = self.session.poll_output() {
            match output {
                Output::Transmit(t) => player.queue(t.data),
                Output::Event(e) => self.held.push_back(e),
            }
        }
        self.client.playing(&stream.key, &player);
        self.started();
        self.playing = Some(Playing::start(self.ctx.fanout(), stream, player, protocol));
    }

    /// Stops playing: what is owed is written (bounded), then the socket is the
    /// connection's again.
    pub async fn stop_playing(&mut self) {
        let playing = self.playing.take();
        if let Some(playing) = &playing {
            playing.drain().await;
        }
        // While the player still is: its figures go with the notification.
        self.client.idle();
    }

    /// What is owed to the socket now, taken out for the adapter to write itself
    /// (ahead of a body it sends with `sendfile`, say): earlier answers and the
    /// session's transmits up to its next event. Not while playing.
    pub fn take_transmits(&mut self) -> VecDeque<Bytes> {
        while let Some(output) = self.session.poll_output() {
            match output {
                Output::Transmit(t) => self.out.push_back(t.data),
                Output::Event(e) => {
                    self.held.push_back(e);
                    break;
                }
            }
        }
        std::mem::take(&mut self.out)
    }

    fn transmit(&mut self, data: Bytes) {
        match &self.playing {
            Some(p) => p.player().queue(data),
            None => self.out.push_back(data),
        }
    }

    /// Moves the session's transmits to where they go, up to the first event.
    fn next_event(&mut self) -> Option<S::Event> {
        if let Some(e) = self.held.pop_front() {
            return Some(e);
        }
        while let Some(output) = self.session.poll_output() {
            match output {
                Output::Transmit(t) => self.transmit(t.data),
                Output::Event(e) => return Some(e),
            }
        }
        None
    }

    /// Only the session's transmits (after an error, or before closing).
    fn keep_transmits(&mut self) {
        while let Some(output) = self.session.poll_output() {
            if let Output::Transmit(t) = output {
                self.transmit(t.data);
            }
        }
    }

    /// Writes what is owed: directly, or through the player's queue.
    async fn flush(&mut self) -> Result<(), DriveError<S::Error>> {
        match (&self.playing, self.write_bound) {
            (Some(p), _) => p.flush(),
            (None, None) => write_all(&self.sock, &mut self.out).await?,
            (None, Some(bound)) => {
                tokio::time::timeout(bound, write_all(&self.sock, &mut self.out))
                    .await
                    .map_err(|_| DriveError::Stalled(bound))??
            }
        }
        Ok(())
    }

    /// Writes what is owed at the end, for a bounded time.
    async fn finish(&mut self) {
        self.keep_transmits();
        match self.playing.take() {
            Some(p) => {
                p.drain().await;
                // While the player still is: its figures go with the notification.
                self.client.idle();
            }
            None => {
                let _ =
                    tokio::time::timeout(DRAIN_TIMEOUT, write_all(&self.sock, &mut self.out)).await;
            }
        }
        // TLS says goodbye (close_notify): some clients (GnuTLS) complain otherwise.
        self.sock.close();
    }
}

/// Logs how a connection ended: cleanly or with its peer gone (I/O) at info, anything
/// else (a peer breaking the protocol, a refusal, a timeout) at warn.
pub fn log_end<E: std::error::Error>(result: &Result<(), DriveError<E>>) {
    match result {
        Ok(()) => tracing::info!("closed"),
        Err(DriveError::Io(e)) => tracing::info!("closed: {e}"),
        Err(DriveError::Kicked) => tracing::info!("closed: kicked (API, takeover or shutdown)"),
        Err(e) => tracing::warn!("closed: {e}"),
    }
}

/// What woke the driver.
enum Woke<W> {
    Readable(io::Result<()>),
    /// A merged publisher may be read again.
    HoldEnd,
    /// The API ended the connection.
    Kicked,
    Timer,
    Idle,
    Player(PlayEnd),
    Adapter(W),
}

/// Runs `conn` with `adapter` until the connection ends.
pub async fn run<S, A>(conn: &mut Conn<S>, adapter: &mut A) -> Result<(), DriveError<S::Error>>
where
    S: Session,
    A: Adapter<S>,
{
    let result = drive(conn, adapter).await;
    conn.finish().await;
    let reason = result.as_ref().err().map(DriveError::end_reason);
    conn.client.ended(reason.unwrap_or(EndReason::Closed));
    result
}

impl<E: std::error::Error> DriveError<E> {
    /// Why the connection ended, as `/metrics` counts it.
    pub fn end_reason(&self) -> EndReason {
        match self {
            DriveError::Session(_) => EndReason::ProtocolError,
            DriveError::Io(_) => EndReason::IoError,
            DriveError::Idle(_) => EndReason::Idle,
            DriveError::Handshake(_) => EndReason::HandshakeTimeout,
            DriveError::Refused { .. } => EndReason::Refused,
            DriveError::Media(_) => EndReason::BadMedia,
            DriveError::Relay(e) => relay::end_reason(e),
            DriveError::Closed(reason) => EndReason::from(*reason),
            DriveError::Timeout => EndReason::Timeout,
            DriveError::Stalled(_) => EndReason::Stalled,
            DriveError::Kicked => EndReason::Kicked,
        }
    }
}

async fn drive<S, A>(conn: &mut Conn<S>, adapter: &mut A) -> Result<(), DriveError<S::Error>>
where
    S: Session,
    A: Adapter<S>,
{
    let idle_after = |idle: Option<Duration>| idle.map(|d| tokio::time::Instant::now() + d);
    let mut idle_deadline = idle_after(conn.idle);
    // Timers are armed lazily: a deadline that moves later (every request or read
    // pushes the idle and head deadlines on) keeps the earlier timer, which then wakes
    // a session that finds nothing due and is re-armed. So a busy connection touches
    // the timer wheel about once per timeout, not once per request.
    let far = || tokio::time::Instant::now() + Duration::from_secs(86_400 * 365);
    let mut timer = std::pin::pin!(tokio::time::sleep_until(far()));
    let mut timer_armed: Option<tokio::time::Instant> = None;
    let mut idle = std::pin::pin!(tokio::time::sleep_until(far()));
    let mut idle_armed: Option<tokio::time::Instant> = None;
    // A merged publisher's socket is not polled until this passes (see `merge_reads`).
    let mut hold = std::pin::pin!(tokio::time::sleep_until(far()));
    let mut holding = false;
    loop {
        while let Some(event) = conn.next_event() {
            match adapter.on_event(conn, event).await {
                Ok(Next::Continue) => {}
                Ok(Next::Close) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        conn.flush().await?;
        if conn.session.is_closed() {
            return Ok(());
        }
        let wanted = conn
            .session
            .poll_timeout()
            .map(tokio::time::Instant::from_std);
        arm(timer.as_mut(), &mut timer_armed, wanted);
        let idle_wanted = idle_deadline.filter(|_| conn.playing.is_none());
        arm(idle.as_mut(), &mut idle_armed, idle_wanted);
        arm(
            idle.as_mut(),
            &mut idle_armed,
            conn.start_by.map(|(by, _)| by),
        );
        let woke = {
            let wait = adapter.wait();
            tokio::select! {
                r = conn.sock.readable(), if !holding => Woke::Readable(r),
                () = &mut hold, if holding => Woke::HoldEnd,
                () = &mut timer, if timer_armed.is_some() => Woke::Timer,
                () = &mut idle, if idle_armed.is_some() => Woke::Idle,
                end = crate::core::play::end_of(conn.playing.as_ref()) => Woke::Player(end),
                w = wait => Woke::Adapter(w),
                () = conn.client.kicked() => Woke::Kicked,
            }
        };
        match woke {
            Woke::Readable(r) => {
                r?;
                match read_input(conn)? {
                    Some(0) => return Ok(()),
                    Some(_) => {
                        idle_deadline = idle_after(conn.idle);
                        if let Some(merge) = conn.read_merge {
                            if conn.session.input_buffer().is_some() {
                                hold.as_mut().reset(tokio::time::Instant::now() + merge);
                                holding = true;
                            }
                        }
                    }
                    None => {}
                }
            }
            Woke::HoldEnd => holding = false,
            Woke::Kicked => return Err(DriveError::Kicked),
            Woke::Timer => {
                timer_armed = None;
                conn.session.handle_timeout(now());
            }
            Woke::Idle => {
                idle_armed = None;
                let now = tokio::time::Instant::now();
                if let Some((_, bound)) = conn.start_by.filter(|(by, _)| now >= *by) {
                    return Err(DriveError::Handshake(bound));
                }
                let due = idle_deadline.is_some_and(|d| now >= d);
                if due && conn.playing.is_none() {
                    return Err(DriveError::Idle(conn.idle.unwrap_or_default()));
                }
            }
            Woke::Player(PlayEnd::Closed(reason)) => {
                if adapter.on_play_end(conn, reason).await? == Next::Close {
                    return Ok(());
                }
            }
            Woke::Player(PlayEnd::Io(e)) => return Err(e.into()),
            Woke::Adapter(w) => {
                if adapter.on_wake(conn, w)? == Next::Close {
                    return Ok(());
                }
            }
        }
    }
}

/// Reads what the peer sent and hands it to the session: straight into the session's
/// own buffer when it offers one (a publisher), otherwise through the worker's scratch
/// buffer (no read buffer per connection, and no zeroing per read). `None`: nothing
/// was there after all; `Some(0)`: the peer closed.
fn read_input<S: Session>(conn: &mut Conn<S>) -> Result<Option<usize>, DriveError<S::Error>> {
    let would_block = |r: io::Result<usize>| match r {
        Ok(n) => Ok(Some(n)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    };
    let now = now();
    if conn.session.input_buffer().is_some() {
        // A merged publisher drains what its window left; otherwise one chunk a wake-up.
        let chunks = if conn.read_merge.is_some() {
            MERGED_READS
        } else {
            1
        };
        let mut total = None;
        for _ in 0..chunks {
            let Some(buf) = conn.session.input_buffer() else {
                break;
            };
            buf.reserve(READ_CHUNK);
            let spare = buf.capacity() - buf.len();
            let n = match would_block(conn.sock.try_read_buf(buf))? {
                None => break,
                // What came before the end is handled first: its events (the
                // publisher's last frames, a TEARDOWN) are still queued in the
                // session, and the next wake-up finds the end again.
                Some(0) if total.is_some() => break,
                Some(0) => return Ok(Some(0)),
                Some(n) => n,
            };
            total = Some(total.unwrap_or(0) + n);
            conn.client.count_in(n);
            conn.session
                .handle_buffered(now)
                .map_err(DriveError::Session)?;
            if n < spare {
                break;
            }
        }
        return Ok(total);
    }
    let ctx = conn.ctx.clone();
    let mut buf = ctx.read_buf().borrow_mut();
    let read = would_block(conn.sock.try_read(&mut buf))?;
    if let Some(n) = read.filter(|&n| n > 0) {
        conn.client.count_in(n);
        let input = Input::Stream(buf.get(..n).unwrap_or_default());
        conn.session
            .handle_input(now, input)
            .map_err(DriveError::Session)?;
    }
    Ok(read)
}

/// A publisher's read interval: the configured one, never longer than its stream's
/// merge window; `None` reads at once.
fn read_merge(configured: Duration, stream_merge: Duration) -> Option<Duration> {
    Some(configured.min(stream_merge)).filter(|d| !d.is_zero())
}

/// Arms `timer` for `wanted` unless it is armed for an earlier time already (see
/// `drive`); an armed timer nothing wants any more just fires for nothing.
fn arm(
    timer: std::pin::Pin<&mut tokio::time::Sleep>,
    armed: &mut Option<tokio::time::Instant>,
    wanted: Option<tokio::time::Instant>,
) {
    if let Some(w) = wanted {
        if armed.is_none_or(|a| a > w) {
            timer.reset(w);
            *armed = Some(w);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_merge_is_bounded_by_the_merge_window() {
        let ms = Duration::from_millis;
        assert_eq!(read_merge(ms(40), ms(200)), Some(ms(40)));
        assert_eq!(read_merge(ms(40), ms(10)), Some(ms(10)));
        assert_eq!(read_merge(ms(40), ms(0)), None);
        assert_eq!(read_merge(ms(0), ms(200)), None);
    }
}
