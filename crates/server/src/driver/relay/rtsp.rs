//! A pull's adapter for an RTSP server: the session's events and RTP over UDP go
//! through the pull's `RtspPlay` (requests, tracks, sockets) to its sink.

use super::{connection, pull_ended, pull_tick, step, Opened};
use crate::driver::{Adapter, Conn, DriveError, Next};
use crate::relay::client::{Media, SILENCE};
use crate::relay::error::{Peer, RelayError};
use crate::relay::pull::{PullSink, Stop};
use crate::relay::rtsp_pull::{self, RtspPlay};
use sluice_rtsp::{ClientEvent as RtspEvent, ClientSession as RtspSession, RtspError};
use std::time::Duration;

/// Plays an RTSP server over `session` until the pull stops or the server fails.
pub(super) async fn play_rtsp(
    opened: Opened,
    session: RtspSession,
    play: RtspPlay,
    sink: &mut PullSink<'_>,
) -> Stop {
    let Opened {
        ctx,
        sock,
        peer,
        timeout,
    } = opened;
    // A server that takes nothing of what we say must not hold the pull.
    let mut conn = connection(&ctx, "rtsp-pull", sock, peer, session).bound_writes(SILENCE);
    let now = tokio::time::Instant::now();
    let mut adapter = RtspPull {
        sink,
        play,
        timeout,
        started: now,
        heard: now,
        stop: None,
        tick: pull_tick(),
    };
    let result = crate::driver::run(&mut conn, &mut adapter).await;
    pull_ended(adapter.stop, result, Peer::Server, RelayError::Rtsp)
}

/// A pull's adapter for an RTSP server: the session's events and RTP over UDP go
/// through the pull's [`RtspPlay`] to its sink.
struct RtspPull<'s, 'a> {
    sink: &'s mut PullSink<'a>,
    play: RtspPlay,
    /// The pull's connect timeout: PLAY must be answered within it.
    timeout: Duration,
    started: tokio::time::Instant,
    /// When the server last said anything on the connection.
    heard: tokio::time::Instant,
    stop: Option<Stop>,
    tick: tokio::time::Interval,
}

/// What woke an RTSP pull beside its connection.
enum RtspWake {
    Tick,
    Play(rtsp_pull::Wake),
}

impl RtspPull<'_, '_> {
    /// Gives `media` to the sink.
    fn deliver(&mut self, media: Vec<Media>) -> Result<Next, DriveError<RtspError>> {
        self.sink.count_bytes(self.play.take_bytes());
        if media.is_empty() {
            return Ok(Next::Continue);
        }
        let mut result = Ok(());
        for m in media {
            result = self.sink.media(m);
            if result.is_err() {
                break;
            }
        }
        let result = result.and_then(|()| self.sink.tick());
        step(&mut self.stop, result)
    }

    /// The pull's bounds: PLAY answered in time, then a server never silent for long.
    fn check(&self) -> Result<(), RelayError> {
        let now = tokio::time::Instant::now();
        if !self.play.playing() {
            if now.duration_since(self.started) >= self.timeout {
                return Err(RelayError::NoStream(self.timeout));
            }
            return Ok(());
        }
        let heard = self.heard.max(self.play.last_udp());
        if now.duration_since(heard) >= SILENCE {
            return Err(RelayError::Silent {
                peer: Peer::Server,
                after: SILENCE,
            });
        }
        Ok(())
    }
}

impl Adapter<RtspSession> for RtspPull<'_, '_> {
    type Wake = RtspWake;

    async fn on_event(
        &mut self,
        conn: &mut Conn<RtspSession>,
        event: RtspEvent,
    ) -> Result<Next, DriveError<RtspError>> {
        self.heard = tokio::time::Instant::now();
        let mut media = Vec::new();
        self.play
            .on_event(&mut conn.session, event, &mut media)
            .map_err(DriveError::Relay)?;
        self.deliver(media)
    }

    async fn wait(&mut self) -> RtspWake {
        tokio::select! {
            _ = self.tick.tick() => RtspWake::Tick,
            wake = self.play.wait() => RtspWake::Play(wake),
        }
    }

    fn on_wake(
        &mut self,
        _conn: &mut Conn<RtspSession>,
        wake: RtspWake,
    ) -> Result<Next, DriveError<RtspError>> {
        match wake {
            RtspWake::Tick => {
                self.check().map_err(DriveError::Relay)?;
                let result = self.sink.tick();
                step(&mut self.stop, result)
            }
            RtspWake::Play(wake) => {
                let mut media = Vec::new();
                self.play
                    .on_wake(wake, crate::driver::now(), &mut media)
                    .map_err(DriveError::Relay)?;
                self.deliver(media)
            }
        }
    }
}
