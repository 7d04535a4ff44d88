//! A player's side of the fan-out: it waits until the fan-out says its socket is full
//! or it must go. Media itself is written by the worker's pump (see `fanout`), not
//! here; the connection's input is the driver's.
//!
//! Every protocol plays through a [`Playing`], the fan-out's handle: attaching,
//! detaching, counting and the closing log line exist once, here.

use crate::core::fanout::{CloseReason, Fanout, LocalStream, Player, PlayerWait};
use crate::core::hub::{FormUse, Stream, TranscodeUse};
use crate::core::protocol::Protocol;
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// How long a closing connection may take to write what it is owed (an end-of-stream
/// status, a WebSocket close) before the socket is dropped.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// What ended a player.
#[derive(Debug)]
pub enum PlayEnd {
    /// The fan-out closed it.
    Closed(CloseReason),
    /// Waiting for the socket failed.
    Io(io::Error),
}

/// A player attached to a stream on this worker, for as long as this handle lives:
/// dropping it detaches the player, counts it out of the stream and logs what it got.
#[derive(Debug)]
pub struct Playing {
    fanout: Rc<Fanout>,
    local: Rc<LocalStream>,
    player: Rc<Player>,
    protocol: Protocol,
    /// Keeps the stream's transcoding running while the player takes its output
    /// (a format that carries no Opus, of an Opus stream: `Stream::format_for`).
    _transcoded: Option<TranscodeUse>,
    /// Keeps the player's form made in stream order, if its format's is (RTP, TS).
    _form: Option<FormUse>,
}

impl Playing {
    /// Attaches `player` to `stream` on this worker and writes it what it can get at
    /// once (the GOP cache); it is counted as a viewer over `protocol`. Its socket's
    /// kernel send buffer is capped first.
    pub fn start(
        fanout: &Rc<Fanout>,
        stream: &Arc<Stream>,
        player: Rc<Player>,
        protocol: Protocol,
    ) -> Playing {
        crate::io::sock::cap_send_buffer(player.sock.tcp(), fanout.policy.send_buffer);
        stream.count_player(player.format.id, protocol, true);
        // Before the attach: the form starts at the start keyframe the player gets.
        let form = stream.want_form(player.format.id);
        let transcoded = player
            .format
            .transcoded
            .then(|| stream.want_transcoded())
            .flatten();
        let local = fanout.attach(stream, player.clone());
        Playing {
            fanout: fanout.clone(),
            local,
            player,
            protocol,
            _transcoded: transcoded,
            _form: form,
        }
    }

    pub fn player(&self) -> &Rc<Player> {
        &self.player
    }

    /// Writes what the player is owed now (queued bytes, new media), as far as its
    /// socket takes it.
    pub fn flush(&self) {
        self.local.flush(&self.player);
    }

    /// Waits until the fan-out ends the player, meanwhile continuing its writes
    /// whenever its full socket becomes writable again. Input is the caller's.
    pub async fn wait_end(&self) -> PlayEnd {
        loop {
            match self.player.wait() {
                PlayerWait::Close(reason) => return PlayEnd::Closed(reason),
                // A close comes while the socket is full, too: a peer that vanished
                // never makes it writable again.
                PlayerWait::Writable => tokio::select! {
                    r = self.player.sock.writable() => {
                        if let Err(e) = r {
                            return PlayEnd::Io(e);
                        }
                        self.local.on_writable(&self.player);
                    }
                    () = self.player.wake.notified() => {}
                },
                PlayerWait::Idle => self.player.wake.notified().await,
            }
        }
    }

    /// Writes what the player is still owed, for a bounded time.
    pub async fn drain(&self) {
        drain(&self.local, &self.player).await
    }
}

impl Drop for Playing {
    fn drop(&mut self) {
        self.fanout.detach(&self.local, &self.player);
        self.local
            .stream
            .count_player(self.player.format.id, self.protocol, false);
        tracing::info!(
            stream = %self.local.stream.key,
            bytes = self.player.bytes(),
            skips = self.player.skips(),
            "stop playing"
        );
    }
}

/// Writes what the player is still owed, for a bounded time.
async fn drain(local: &LocalStream, player: &Player) {
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, async {
        loop {
            local.on_writable(player);
            if player.drained() || player.wait() == PlayerWait::Close(CloseReason::WriteError) {
                return;
            }
            if player.sock.writable().await.is_err() {
                return;
            }
            // A socket that reports writable but takes nothing must not starve the worker.
            tokio::task::yield_now().await;
        }
    })
    .await;
}

/// The end of `playing`, or never when nothing plays: for the `select!` of a task that
/// plays only some of the time.
pub async fn end_of(playing: Option<&Playing>) -> PlayEnd {
    match playing {
        Some(p) => p.wait_end().await,
        None => std::future::pending().await,
    }
}
