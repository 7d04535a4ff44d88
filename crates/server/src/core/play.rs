//! The task of one player: it sleeps until its socket has input or the fan-out says
//! the socket is full or the player must go. Media itself is written by the worker's
//! pump (see `fanout`), not here.
//!
//! Every protocol plays through a [`Playing`], the fan-out's handle: attaching,
//! detaching, counting and the closing log line exist once, here.

use crate::core::fanout::{CloseReason, Fanout, LocalStream, Player, PlayerWait};
use crate::core::hub::Stream;
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// Bytes read from a player per wake-up. On the stack and not held across an await,
/// so an idle player costs no read buffer.
const READ_CHUNK: usize = 4096;

/// How long a closing player may take to drain what it is owed (an end-of-stream
/// status, a WebSocket close) before the socket is dropped.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// What ended a player.
#[derive(Debug)]
pub enum PlayEnd {
    /// The peer closed its side.
    PeerClosed,
    /// The input handler asked to stop (the protocol's own stop or close).
    Stopped,
    /// The fan-out closed it.
    Closed(CloseReason),
    /// A read failed.
    Io(io::Error),
}

/// A player attached to a stream on this worker, for as long as this handle lives:
/// dropping it detaches the player, counts it out of the stream and logs what it got.
#[derive(Debug)]
pub struct Playing {
    fanout: Rc<Fanout>,
    local: Rc<LocalStream>,
    player: Rc<Player>,
}

impl Playing {
    /// Attaches `player` to `stream` on this worker and writes it what it can get at
    /// once (the GOP cache). Its socket's kernel send buffer is capped first.
    pub fn start(fanout: &Rc<Fanout>, stream: &Arc<Stream>, player: Rc<Player>) -> Playing {
        crate::io::sock::cap_send_buffer(player.sock.tcp(), fanout.policy.send_buffer);
        let local = fanout.attach(stream, player.clone());
        Playing {
            fanout: fanout.clone(),
            local,
            player,
        }
    }

    pub fn player(&self) -> &Rc<Player> {
        &self.player
    }

    /// Runs the player until it ends; see [`run`].
    pub async fn run<E>(
        &self,
        on_input: impl FnMut(&[u8]) -> Result<bool, E>,
    ) -> Result<PlayEnd, E> {
        run(&self.local, &self.player, on_input).await
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
                PlayerWait::Writable => {
                    if let Err(e) = self.player.sock.writable().await {
                        return PlayEnd::Io(e);
                    }
                    self.local.on_writable(&self.player);
                }
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
        tracing::info!(
            stream = %self.local.stream.key,
            bytes = self.player.bytes(),
            skips = self.player.skips(),
            "stop playing"
        );
    }
}

/// Runs `player` until it ends. `on_input` gets every chunk of bytes the peer sends
/// and returns `Ok(false)` to stop; its error ends the player too.
async fn run<E>(
    local: &LocalStream,
    player: &Player,
    mut on_input: impl FnMut(&[u8]) -> Result<bool, E>,
) -> Result<PlayEnd, E> {
    loop {
        let wait = player.wait();
        if let PlayerWait::Close(reason) = wait {
            return Ok(PlayEnd::Closed(reason));
        }
        tokio::select! {
            r = player.sock.readable() => {
                if let Err(e) = r {
                    return Ok(PlayEnd::Io(e));
                }
                let mut buf = [0u8; READ_CHUNK];
                match player.sock.try_read(&mut buf) {
                    Ok(0) => return Ok(PlayEnd::PeerClosed),
                    Ok(n) => {
                        if !on_input(&buf[..n])? {
                            return Ok(PlayEnd::Stopped);
                        }
                        local.flush(player);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Ok(PlayEnd::Io(e)),
                }
            }
            r = player.sock.writable(), if wait == PlayerWait::Writable => {
                if let Err(e) = r {
                    return Ok(PlayEnd::Io(e));
                }
                local.on_writable(player);
            }
            _ = player.wake.notified(), if wait == PlayerWait::Idle => {}
        }
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
