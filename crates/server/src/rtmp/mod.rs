//! RTMP and RTMPS connections: `sluice_rtmp::ServerSession` run by the common driver
//! (over TCP, or TLS for RTMPS), and what its events mean for the hub.
//!
//! A connection starts as a plain session (handshake, connect, createStream), then
//! becomes a publisher (its media goes to a [`Publisher`]) or a player (the driver
//! hands its socket to the worker's fan-out). Protocol rules live in the session, the
//! I/O in the driver; this file is only the adapter.

use crate::core::fanout::{CloseReason, Player};
use crate::core::format::FormatId;
use crate::core::ingest::Publisher;
use crate::core::limits::Admission;
use crate::core::protocol::Protocol;
use crate::ctx::admit::{Ask, Refusal};
use crate::ctx::{Accept, Ctx};
use crate::driver::{self, Adapter, Conn, DriveError, Next};
use crate::io::sock::{IntoSock, Sock};
use crate::vod::VodPlay;
use sluice_rtmp::{
    Event, Media, RtmpError, ServerConfig, ServerEvent, ServerNotice, ServerSession, StreamRequest,
};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;
use tracing::Instrument;

type Error = DriveError<RtmpError>;

/// What this worker runs for each RTMP connection.
pub fn accept(ctx: &Rc<Ctx>) -> Accept {
    let ctx = ctx.clone();
    Rc::new(move |sock, peer, admission| {
        start(&ctx, Sock::tcp_stream(sock), peer, admission);
    })
}

/// Runs one RTMP connection over `sock` on this worker's event loop, holding its
/// place within the limits until it ends: what the TCP listener does with each
/// connection, and the harness (`testing`) with an in-memory one. Returns its id.
pub fn start(ctx: &Rc<Ctx>, sock: Sock, peer: SocketAddr, admission: Admission) -> u64 {
    let id = ctx.hub().next_id();
    tokio::task::spawn_local(task(ctx, sock, peer, id, admission));
    id
}

/// Connection `id`'s task, in its span. Spawned as it is: awaited inside another
/// future, it would be held there twice (the captured future and the one being
/// polled), doubling the task.
pub(crate) fn task(
    ctx: &Rc<Ctx>,
    sock: Sock,
    peer: SocketAddr,
    id: u64,
    admission: Admission,
) -> impl std::future::Future<Output = ()> {
    let span = tracing::info_span!("rtmp", id, %peer);
    serve(ctx.clone(), sock, peer, id, "rtmp", admission).instrument(span)
}

/// Accepts RTMPS connections: the TLS handshake (bounded in time), then RTMP.
pub fn accept_tls(ctx: &Rc<Ctx>, tls: Arc<rustls::ServerConfig>) -> Accept {
    let ctx = ctx.clone();
    let acceptor = TlsAcceptor::from(tls);
    Rc::new(move |sock, peer, admission| {
        let (ctx, acceptor) = (ctx.clone(), acceptor.clone());
        let id = ctx.hub().next_id();
        let span = tracing::info_span!("rtmps", id, %peer);
        tokio::task::spawn_local(
            async move {
                let bound = ctx.config().limits.handshake_bound();
                // A plain RTMP client, a scanner: closed at once.
                if let Some(tls) = crate::io::tls::accept(&acceptor, sock, bound).await {
                    serve(ctx, tls.into_sock(), peer, id, "rtmps", admission).await;
                }
            }
            .instrument(span),
        );
    })
}

/// One connection's future, holding its place within the limits (`admission`) until
/// it ends. The connection and its adapter are made before it and moved in, so that
/// the future holds them once: an `async fn` would also keep the locals they were made
/// from (the session, its config) for the connection's whole life, and a player's
/// task is most of the memory it costs.
fn serve(
    ctx: Rc<Ctx>,
    sock: Sock,
    peer: SocketAddr,
    id: u64,
    protocol: &'static str,
    admission: Admission,
) -> impl std::future::Future<Output = ()> {
    let session = ServerSession::new(ServerConfig {
        out_chunk_size: ctx.config().rtmp.chunk_size,
        max_message_len: ctx.config().rtmp.max_message_len,
        ..ServerConfig::default()
    });
    let client = ctx.clients().add(id, protocol, peer);
    let mut conn = Conn::new(ctx, client, Rc::new(sock), session);
    let mut rtmp = Rtmp {
        publishing: None,
        vod: None,
    };
    async move {
        tracing::debug!("connected");
        let result = driver::run(&mut conn, &mut rtmp).await;
        drop(rtmp.publishing.take());
        driver::log_end(&result);
        drop(admission);
    }
}

/// The RTMP adapter: a connection's publisher, if it publishes, and the file it
/// plays, if it plays one.
struct Rtmp {
    publishing: Option<Publisher>,
    /// Feeds the private stream of a file on demand while it is played.
    vod: Option<VodPlay>,
}

impl Adapter<ServerSession> for Rtmp {
    type Wake = ();

    async fn on_event(
        &mut self,
        conn: &mut Conn<ServerSession>,
        event: ServerEvent,
    ) -> Result<Next, Error> {
        match event {
            Event::Publish(req) => return Ok(Box::pin(self.publish(conn, &req)).await),
            Event::Play(req) => {
                tracing::debug!(query = %req.query, "play request");
                Box::pin(self.play(conn, &req)).await?;
            }
            Event::Media(media) => {
                if let Some(ingest) = &mut self.publishing {
                    let parsed = match media {
                        Media::Video {
                            timestamp_ms,
                            payload,
                        } => ingest.video(timestamp_ms, &payload),
                        Media::Audio {
                            timestamp_ms,
                            payload,
                        } => ingest.audio(timestamp_ms, &payload),
                        Media::Metadata { payload } => {
                            ingest.metadata(payload);
                            Ok(())
                        }
                        Media::CuePoint { timestamp_ms, cue } => {
                            ingest.cue(&cue_of(timestamp_ms, &cue));
                            Ok(())
                        }
                    };
                    parsed?;
                }
            }
            Event::Stop if conn.playing().is_some() => {
                Box::pin(conn.stop_playing()).await;
                self.vod = None;
            }
            // The publisher stopped: leave the stream to its players for the grace window.
            Event::Stop | Event::Close => {
                self.publishing = None;
                return Ok(Next::Close);
            }
            Event::Other(ServerNotice::Connected { app, tc_url }) => {
                tracing::debug!(%app, tc_url = tc_url.as_deref().unwrap_or(""), "connect");
            }
            Event::Other(ServerNotice::Pause { .. }) => {}
            Event::Other(ServerNotice::Ignored { what }) => tracing::debug!("ignored {what}"),
        }
        Ok(Next::Continue)
    }

    async fn on_play_end(
        &mut self,
        conn: &mut Conn<ServerSession>,
        reason: CloseReason,
    ) -> Result<Next, Error> {
        if reason != CloseReason::StreamEnded {
            return Err(DriveError::Closed(reason));
        }
        conn.session
            .send_status("status", "NetStream.Play.UnpublishNotify", "stream ended");
        Ok(Next::Close)
    }
}

impl Rtmp {
    async fn publish(&mut self, conn: &mut Conn<ServerSession>, req: &StreamRequest) -> Next {
        let key = req.key();
        let ctx = conn.ctx.clone();
        let ask = Ask::new("rtmp", &key, conn.id, conn.client.peer().ip()).query(&req.query);
        match ctx.admit_publish(&ask).await {
            Ok(publisher) => {
                tracing::info!(stream = %key, query = %req.query, "publish");
                conn.session.accept_publish();
                conn.merge_reads(&publisher.stream);
                conn.client.publishing(&key);
                self.publishing = Some(publisher);
                Next::Continue
            }
            Err(refused @ (Refusal::Unauthorized(_) | Refusal::Forbidden(_))) => {
                conn.session
                    .reject_publish("NetStream.Publish.Unauthorized", &refused.to_string());
                Next::Close
            }
            Err(e) => {
                tracing::warn!(stream = %key, "publish refused: {e}");
                conn.session
                    .reject_publish("NetStream.Publish.BadName", &e.to_string());
                Next::Close
            }
        }
    }

    /// Starts playing what `req` asks for: a live stream, or a file on demand (`vod/...`,
    /// authorized on the file's path).
    async fn play(
        &mut self,
        conn: &mut Conn<ServerSession>,
        req: &StreamRequest,
    ) -> Result<(), Error> {
        let key = req.key();
        let ctx = conn.ctx.clone();
        let file = crate::vod::rtmp_path(&key);
        let ask = Ask::new("rtmp", &key, conn.id, conn.client.peer().ip()).query(&req.query);
        let ask = match &file {
            Some(path) => ask.judged_on(path),
            None => ask,
        };
        let (stream, vod) = match ctx.admit_play(&ask, file.as_deref()).await {
            Ok(source) => source.start(&ctx, conn.id),
            Err(refused @ (Refusal::Unauthorized(_) | Refusal::Forbidden(_))) => {
                conn.session
                    .reject_play("NetStream.Play.Unauthorized", &refused.to_string());
                return Err(DriveError::Refused {
                    key,
                    refusal: refused,
                });
            }
            Err(refusal) => {
                // A recorded range says what is wrong with it (or that it is empty).
                let why = match &refusal {
                    Refusal::Range(e) => e.to_string(),
                    _ => format!("{key} is not live"),
                };
                conn.session
                    .reject_play("NetStream.Play.StreamNotFound", &why);
                return Err(DriveError::Refused { key, refusal });
            }
        };
        tracing::info!(stream = %key, "play");
        conn.session.accept_play();
        let player = Player::new(
            conn.id,
            conn.sock.clone(),
            stream.format_for(FormatId::RTMP),
        );
        conn.play(&stream, player, Protocol::Rtmp);
        self.vod = vod;
        Ok(())
    }
}

/// An `onCuePoint` as the SCTE-35 cue it stands for: a `splice_insert` of its event
/// at the message's time plus its pre-roll, out of the network when it starts a break,
/// with its break's length (returning by itself).
fn cue_of(timestamp_ms: i64, cue: &sluice_rtmp::CuePoint) -> sluice_media::ts::Cue {
    let ticks = |ms: u64| i64::try_from(ms).unwrap_or(i64::MAX).saturating_mul(90);
    let at = timestamp_ms
        .saturating_mul(90)
        .saturating_add(ticks(cue.pre_roll_ms));
    let insert = sluice_media::ts::SpliceInsert::program(
        cue.event_id,
        cue.start,
        Some(at as u64),
        cue.break_ms.map(|ms| ticks(ms) as u64),
    );
    sluice_media::ts::Cue {
        at,
        info: insert.section(),
    }
}
