//! RTMP connections: the driver between a socket and `sluice_rtmp::ServerSession`.
//!
//! A connection starts as a plain session (handshake, connect, createStream), then
//! becomes a publisher (its media goes to an [`Ingest`]) or a player (a [`Player`] of the
//! worker's fan-out, which writes its media). Protocol rules live in the session; this
//! file only moves bytes and events.

use crate::core::fanout::{CloseReason, Player};
use crate::core::ingest::Publisher;
use crate::core::packet::Format;
use crate::core::play::{PlayEnd, Playing};
use crate::ctx::{Accept, Ctx};
use crate::io::sock::{write_all, Sock};
use bytes::Bytes;
use sluice_rtmp::{RtmpError, ServerConfig, ServerEvent, ServerOutput, ServerSession};
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tracing::Instrument;

/// Why a connection ended badly.
#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error(transparent)]
    Rtmp(#[from] RtmpError),
    #[error("bad media from publisher: {0}")]
    Media(#[from] sluice_media::flv::FlvError),
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    #[error("nothing received for {0:?}")]
    Idle(Duration),
    #[error("{0}")]
    Refused(String),
}

/// What this worker runs for each RTMP connection.
pub fn accept(ctx: &Rc<Ctx>) -> Accept {
    let ctx = ctx.clone();
    Rc::new(move |sock, peer| {
        tokio::task::spawn_local(serve(ctx.clone(), sock, peer));
    })
}

async fn serve(ctx: Rc<Ctx>, sock: TcpStream, peer: SocketAddr) {
    let id = ctx.hub.next_id();
    let span = tracing::info_span!("rtmp", id, %peer);
    async move {
        tracing::debug!("connected");
        let mut conn = Conn {
            ctx: ctx.clone(),
            id,
            sock: Rc::new(Sock::tcp_stream(sock)),
            session: ServerSession::new(ServerConfig {
                out_chunk_size: ctx.config.rtmp.chunk_size,
                max_message_len: ctx.config.rtmp.max_message_len,
                ..ServerConfig::default()
            }),
            out: VecDeque::new(),
            publishing: None,
        };
        let result = conn.run().await;
        conn.unpublish();
        match result {
            Ok(()) => tracing::info!("closed"),
            Err(SessionError::Io(e)) => tracing::info!("closed: {e}"),
            Err(e) => tracing::warn!("closed: {e}"),
        }
    }
    .instrument(span)
    .await
}

struct Conn {
    ctx: Rc<Ctx>,
    id: u64,
    sock: Rc<Sock>,
    session: ServerSession,
    /// Session output waiting to be written while not playing.
    out: VecDeque<Bytes>,
    publishing: Option<Publisher>,
}

/// What an event asks the connection to do next.
enum Next {
    Continue,
    Play(String),
    Close,
}

impl Conn {
    async fn run(&mut self) -> Result<(), SessionError> {
        let idle = Duration::from_millis(self.ctx.config.limits.idle_timeout_ms);
        let mut deadline = Instant::now() + idle;
        loop {
            match self.drain_events()? {
                Next::Continue => {}
                Next::Close => {
                    write_all(&self.sock, &mut self.out).await?;
                    return Ok(());
                }
                Next::Play(key) => {
                    write_all(&self.sock, &mut self.out).await?;
                    if self.play(key).await? {
                        return Ok(());
                    }
                    deadline = Instant::now() + idle;
                    continue;
                }
            }
            write_all(&self.sock, &mut self.out).await?;
            tokio::select! {
                r = self.sock.readable() => {
                    r?;
                    let mut buf = [0u8; 16 << 10];
                    match self.sock.try_read(&mut buf) {
                        Ok(0) => return Ok(()),
                        Ok(n) => {
                            self.session.handle_input(&buf[..n])?;
                            deadline = Instant::now() + idle;
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return Err(SessionError::Idle(idle)),
            }
        }
    }

    /// Handles everything the session has to say; writes are queued in `out`.
    fn drain_events(&mut self) -> Result<Next, SessionError> {
        while let Some(output) = self.session.poll_output() {
            match output {
                ServerOutput::Write(bytes) => self.out.push_back(bytes),
                ServerOutput::Event(event) => match self.on_event(event)? {
                    Next::Continue => {}
                    other => {
                        // Answers to the event (status, rejections) go out first.
                        while let Some(ServerOutput::Write(bytes)) = self.session.poll_output() {
                            self.out.push_back(bytes);
                        }
                        return Ok(other);
                    }
                },
            }
        }
        Ok(Next::Continue)
    }

    fn on_event(&mut self, event: ServerEvent) -> Result<Next, SessionError> {
        match event {
            ServerEvent::Connected { app, tc_url } => {
                tracing::debug!(%app, tc_url = tc_url.as_deref().unwrap_or(""), "connect");
            }
            ServerEvent::Publish { app, name, query } => {
                let key = format!("{app}/{name}");
                match Publisher::new(&self.ctx.hub, &key, self.id) {
                    Ok(publisher) => {
                        tracing::info!(stream = %key, query = %query, "publish");
                        self.session.accept_publish();
                        self.publishing = Some(publisher);
                    }
                    Err(e) => {
                        tracing::warn!(stream = %key, "publish refused: {e}");
                        self.session
                            .reject_publish("NetStream.Publish.BadName", &e.to_string());
                        return Ok(Next::Close);
                    }
                }
            }
            ServerEvent::Play { app, name, query } => {
                tracing::debug!(query = %query, "play request");
                return Ok(Next::Play(format!("{app}/{name}")));
            }
            ServerEvent::Video {
                timestamp_ms,
                payload,
            } => {
                if let Some(ingest) = &mut self.publishing {
                    ingest.video(timestamp_ms, &payload)?;
                }
            }
            ServerEvent::Audio {
                timestamp_ms,
                payload,
            } => {
                if let Some(ingest) = &mut self.publishing {
                    ingest.audio(timestamp_ms, &payload)?;
                }
            }
            ServerEvent::Metadata { payload } => {
                if let Some(ingest) = &mut self.publishing {
                    ingest.metadata(payload);
                }
            }
            ServerEvent::Unpublish => {
                self.unpublish();
                return Ok(Next::Close);
            }
            ServerEvent::StopPlay | ServerEvent::Pause { .. } => {}
            ServerEvent::Ignored { what } => tracing::debug!("ignored {what}"),
        }
        Ok(Next::Continue)
    }

    /// Ends publishing, leaving the stream to its players for the grace window.
    fn unpublish(&mut self) {
        self.publishing = None;
    }

    /// Plays `key` until the player ends. Returns whether the connection is done.
    async fn play(&mut self, key: String) -> Result<bool, SessionError> {
        // A file on demand plays as a private stream, kept alive by `_vod`.
        let file = crate::vod::rtmp_path(&key);
        let found = self
            .ctx
            .stream_or_file(&key, file.as_deref(), self.id)
            .await;
        let Some((stream, _vod)) = found else {
            self.session.reject_play(
                "NetStream.Play.StreamNotFound",
                &format!("{key} is not live"),
            );
            self.drain_events()?;
            write_all(&self.sock, &mut self.out).await?;
            return Err(SessionError::Refused(format!("{key} is not live")));
        };
        tracing::info!(stream = %key, "play");
        self.session.accept_play();
        let player = Player::new(self.id, self.sock.clone(), Format::Rtmp);
        let mut stop = false;
        while let Some(output) = self.session.poll_output() {
            if let ServerOutput::Write(bytes) = output {
                player.queue(bytes);
            }
        }
        let playing = Playing::start(&self.ctx.fanout, &stream, player.clone());
        let session = &mut self.session;
        let end = playing.run(|input| {
            session.handle_input(input)?;
            while let Some(output) = session.poll_output() {
                match output {
                    ServerOutput::Write(bytes) => player.queue(bytes),
                    ServerOutput::Event(ServerEvent::StopPlay) => stop = true,
                    ServerOutput::Event(ServerEvent::Ignored { what }) => {
                        tracing::debug!("ignored {what}")
                    }
                    ServerOutput::Event(_) => {}
                }
            }
            Ok::<bool, SessionError>(!stop)
        })
        .await;
        self.finish_play(&playing, end).await
    }

    async fn finish_play(
        &mut self,
        playing: &Playing,
        end: Result<PlayEnd, SessionError>,
    ) -> Result<bool, SessionError> {
        match end? {
            PlayEnd::PeerClosed => Ok(true),
            PlayEnd::Io(e) => Err(e.into()),
            PlayEnd::Stopped => Ok(false),
            PlayEnd::Closed(reason) => {
                if reason == CloseReason::StreamEnded {
                    self.session.send_status(
                        "status",
                        "NetStream.Play.UnpublishNotify",
                        "stream ended",
                    );
                    while let Some(ServerOutput::Write(bytes)) = self.session.poll_output() {
                        playing.player().queue(bytes);
                    }
                    playing.drain().await;
                    Ok(true)
                } else {
                    Err(SessionError::Refused(format!("player closed: {reason:?}")))
                }
            }
        }
    }
}
