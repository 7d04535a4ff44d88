//! SRT publishers looping a clip (`sluice-bench publish --protocol srt`): the
//! clip's frames (as the RTSP publishers read them) muxed into MPEG-TS with
//! `sluice_media`'s muxer, tables before each keyframe, on the continuous timeline
//! of the RTMP publishers and with the same wall-clock SEI stamps, sent in
//! 1316-byte payloads (seven TS packets, libsrt's live-mode norm) over a
//! `sluice_srt` caller.
//!
//! `tags_sent` counts frames; `bytes_sent` counts TS bytes handed to the
//! connection (SRT headers and retransmissions not included).
//!
//! # Invariants
//! - Every await is bounded by the run's end; while a frame is not yet due the
//!   socket is read (ACKs, loss reports) and the connection's timers run.
//! - Not paced (`--no-realtime`), a publisher waits while more than
//!   [`MAX_WAITING`] payloads are unsent: SRT has no other backpressure.

use super::publish_rtsp::RtspClip;
use super::srt::{connect, flush, socket};
use super::udp::{recv_batch, BATCH};
use super::Failure;
use crate::figures::{ms, ErrorKind};
use crate::load::publish::{PublishCtx, PublisherRow};
use bytes::BytesMut;
use sluice_media::ts::TsMuxer;
use sluice_media::MediaKind;
use sluice_srt::{CallConfig, Closed, Connection, PAYLOAD_LEN};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio::time::{sleep_until, Instant};

/// Payloads a publisher not paced lets wait in its connection before it waits too.
const MAX_WAITING: usize = 512;

/// The muxer for the clip's tracks: video, and audio when TS carries it here (not
/// Opus or G.711: Sluice's muxer has no mapping for them), with a note otherwise.
pub(crate) fn muxer(clip: &RtspClip) -> Result<(TsMuxer, Option<String>), String> {
    let video = clip.tracks.iter().find(|t| t.kind() == MediaKind::Video);
    let audio = clip.tracks.iter().find(|t| t.kind() == MediaKind::Audio);
    match TsMuxer::new(video, audio) {
        Ok(m) => Ok((m, None)),
        Err(e) if video.is_some() && audio.is_some() => TsMuxer::new(video, None)
            .map(|m| (m, Some(format!("audio left out: {e}"))))
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// One publisher's connection, socket and state.
struct Publisher<'a> {
    ctx: &'a PublishCtx,
    sock: UdpSocket,
    conn: Connection,
    scratch: Vec<u8>,
}

impl Publisher<'_> {
    /// Reads what the server sent, runs the timers, sends what is due; an error
    /// when the connection closed.
    fn service(&mut self) -> Result<(), Failure> {
        let now = std::time::Instant::now();
        let mut bad = None;
        loop {
            let conn = &mut self.conn;
            let n = recv_batch(&self.sock, |d| {
                if let Err(e) = conn.handle_datagram(now, d) {
                    bad.get_or_insert(e.to_string());
                }
            })
            .map_err(super::io_failure)?;
            if n < BATCH {
                break;
            }
        }
        if let Some(e) = bad {
            return Err((ErrorKind::Protocol, e));
        }
        self.conn.handle_timeout(now);
        flush(&self.sock, &mut self.conn, &mut self.scratch);
        match self.conn.closed() {
            None => Ok(()),
            Some(Closed::Idle) => Err((ErrorKind::Timeout, "the server went silent".into())),
            Some(c) => Err((ErrorKind::Closed, format!("closed: {c:?}"))),
        }
    }

    /// Services the connection until `until` (or the run's end); `false` at the end.
    async fn wait(&mut self, until: Instant) -> Result<bool, Failure> {
        let until = until.min(self.ctx.end);
        loop {
            self.service()?;
            let now = Instant::now();
            if now >= self.ctx.end {
                return Ok(false);
            }
            if now >= until {
                return Ok(true);
            }
            let wake = self
                .conn
                .poll_timeout(now.into_std())
                .map_or(until, |t| Instant::from_std(t).min(until));
            tokio::select! {
                r = self.sock.readable() => r.map_err(super::io_failure)?,
                () = sleep_until(wake) => {}
            }
        }
    }

    /// Hands whole TS packets of `ts` to the connection in payloads of up to
    /// [`PAYLOAD_LEN`] bytes (all of them when `all`, else only full payloads).
    fn send(&mut self, ts: &mut BytesMut, all: bool, row: &mut PublisherRow) {
        let now = std::time::Instant::now();
        while ts.len() >= PAYLOAD_LEN || (all && !ts.is_empty()) {
            let payload = ts.split_to(ts.len().min(PAYLOAD_LEN));
            self.conn.send(now, &payload);
            row.bytes_sent += payload.len() as u64;
            self.ctx.live.add_bytes(payload.len());
        }
        flush(&self.sock, &mut self.conn, &mut self.scratch);
    }
}

/// Publishes with `config` to `addr` until the run ends.
pub(crate) async fn run(
    ctx: &PublishCtx,
    clip: &RtspClip,
    addr: SocketAddr,
    config: CallConfig,
    row: &mut PublisherRow,
) -> Result<(), Failure> {
    let (mut mux, _) = muxer(clip).map_err(|e| (ErrorKind::Protocol, e))?;
    let start = Instant::now();
    let sock = socket(addr)?;
    let conn = match connect(&sock, config, ctx.end).await {
        Ok(Some(c)) => c,
        Ok(None) => return Ok(()),
        Err((ErrorKind::Protocol, what)) => return Err((ErrorKind::Connect, what)),
        Err(e) => return Err(e),
    };
    row.connect_ms = Some(ms(start.elapsed()));
    ctx.live.connected.fetch_add(1, Ordering::Relaxed);
    let mut p = Publisher {
        ctx,
        sock,
        conn,
        scratch: Vec::with_capacity(1500),
    };
    let mut ts = BytesMut::with_capacity(64 << 10);
    let mut stamped = BytesMut::new();
    let has_video = clip.tracks.iter().any(|t| t.kind() == MediaKind::Video);
    mux.write_tables(&mut ts);
    let t0 = Instant::now();
    'rounds: for round in 0i64.. {
        for f in &clip.frames {
            let at = f
                .ts_ms
                .saturating_add(round.saturating_mul(clip.duration_ms));
            let due = t0 + Duration::from_millis(u64::try_from(at).unwrap_or(0));
            if ctx.realtime && due > Instant::now() {
                p.send(&mut ts, true, row);
                if !p.wait(due).await? {
                    break 'rounds;
                }
            } else if !ctx.realtime {
                p.send(&mut ts, false, row);
                while p.conn.waiting() > MAX_WAITING {
                    if !p.wait(Instant::now() + Duration::from_millis(1)).await? {
                        break 'rounds;
                    }
                }
                p.service()?;
            }
            if Instant::now() >= ctx.end {
                break 'rounds;
            }
            let payload = if f.stampable && ctx.stamp {
                crate::stamp::stamp_nals(&mut stamped, &f.payload, crate::stamp::unix_us());
                stamped.split().freeze()
            } else {
                f.payload.clone()
            };
            let frame = f.frame(at, payload);
            // A player joining mid-stream finds the tables before the next keyframe.
            if frame.keyframe && has_video && frame.kind == MediaKind::Video {
                mux.write_tables(&mut ts);
            }
            // The audio track may have been left out (see `muxer`).
            if mux.write_frame(&frame, &mut ts).is_ok() {
                row.tags_sent += 1;
            }
        }
        if clip.duration_ms <= 0 {
            break;
        }
    }
    p.conn.close(std::time::Instant::now());
    flush(&p.sock, &mut p.conn, &mut p.scratch);
    Ok(())
}
