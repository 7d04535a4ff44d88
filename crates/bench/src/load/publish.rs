//! Publishers looping a clip with a continuous timeline: RTMP here (as
//! `sluice_bench::publish::publish_clip`, but bounded by the run's end at every await,
//! flushing as it goes when not paced, and counting bytes), RTSP in `publish_rtsp`,
//! SRT in `publish_srt`.
//! Both fill the same [`PublisherRow`].

use super::publish_rtsp::RtspClip;
use super::Failure;
use crate::figures::{ms, ErrorKind, Live};
use crate::rtsp::Lower;
use serde::Serialize;
use sluice_bench::clip::Clip;
use sluice_bench::rtmp::RtmpConn;
use sluice_media::flv::{TAG_SCRIPT, TAG_VIDEO};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::{sleep_until, timeout_at, Instant};

/// Bytes queued before a flush when not pacing.
const FLUSH_AT: u64 = 64 << 10;

/// How publishers reach the server, and what they need of the clip for it.
pub(crate) enum Ingest {
    /// RTMP `publish` of `stream` in application `app`.
    Rtmp {
        app: String,
        /// Stream name; `{i}` becomes the publisher's index.
        stream: String,
    },
    /// RTSP ANNOUNCE and RECORD of `url`, RTP over `lower`.
    Rtsp {
        /// `rtsp://host:port/path`; `{i}` in it becomes the publisher's index.
        url: String,
        lower: Lower,
        clip: RtspClip,
    },
    /// SRT caller with `config`'s stream id (`{i}` becomes the publisher's index),
    /// MPEG-TS of the clip's frames.
    Srt {
        config: sluice_srt::CallConfig,
        clip: RtspClip,
    },
}

/// What every publisher of a run shares.
pub(crate) struct PublishCtx {
    pub addr: SocketAddr,
    pub ingest: Ingest,
    pub clip: Clip,
    pub realtime: bool,
    /// Stamp the wall clock into each H.264 frame (an SEI NAL unit, `crate::stamp`).
    pub stamp: bool,
    pub live: Arc<Live>,
    pub end: Instant,
}

/// One publisher's figures.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PublisherRow {
    pub id: usize,
    /// RTMP: the stream name; RTSP: the URL's path (`live/cam-1`).
    pub stream: String,
    /// TCP connect to `NetStream.Publish.Start` (RTMP) or to RECORD's answer (RTSP).
    pub connect_ms: Option<f64>,
    /// Media tags of the clip sent (RTSP: the frames they carry).
    pub tags_sent: u64,
    /// RTMP: tag bodies sent (without RTMP chunk headers). RTSP: RTP packets sent,
    /// with their interleave headers over TCP.
    pub bytes_sent: u64,
    pub error_kind: Option<ErrorKind>,
    pub error: Option<String>,
}

impl PublisherRow {
    pub(crate) fn ok(&self) -> bool {
        self.connect_ms.is_some() && self.error_kind.is_none()
    }
}

/// The stream name of publisher `i` of `n`: `{i}` is replaced; without it, and with
/// more than one publisher, `-i` is appended to the name (before any `?query`).
pub(crate) fn stream_name(pattern: &str, i: usize, n: usize) -> String {
    if pattern.contains("{i}") {
        return pattern.replace("{i}", &i.to_string());
    }
    if n <= 1 {
        return pattern.to_string();
    }
    match pattern.split_once('?') {
        Some((name, q)) => format!("{name}-{i}?{q}"),
        None => format!("{pattern}-{i}"),
    }
}

/// Publishes until the run ends.
pub(crate) async fn publish(ctx: Arc<PublishCtx>, id: usize, n: usize) -> PublisherRow {
    let mut row = PublisherRow {
        id,
        stream: String::new(),
        connect_ms: None,
        tags_sent: 0,
        bytes_sent: 0,
        error_kind: None,
        error: None,
    };
    let result = match &ctx.ingest {
        Ingest::Rtmp { app, stream } => {
            row.stream = stream_name(stream, id, n);
            run(&ctx, app, &mut row).await
        }
        Ingest::Rtsp { url, lower, clip } => {
            let url = stream_name(url, id, n);
            row.stream = rtsp_path(&url).to_string();
            super::publish_rtsp::run(&ctx, clip, &url, *lower, &mut row).await
        }
        Ingest::Srt { config, clip } => {
            let mut config = config.clone();
            config.stream_id = config.stream_id.map(|s| s.replace("{i}", &id.to_string()));
            row.stream = config.stream_id.clone().unwrap_or_default();
            super::publish_srt::run(&ctx, clip, ctx.addr, config, &mut row).await
        }
    };
    let result = result.and_then(|()| match row.connect_ms {
        Some(_) => Ok(()),
        None => Err((
            ErrorKind::Timeout,
            "not publishing when the run ended".into(),
        )),
    });
    if let Err((kind, what)) = result {
        row.error_kind = Some(kind);
        row.error = Some(what);
        ctx.live.failed.fetch_add(1, Ordering::Relaxed);
    }
    row
}

/// The path of an `rtsp://` URL, without its leading `/` (the stream's key).
fn rtsp_path(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.find('/')
        .and_then(|i| rest.get(i + 1..))
        .unwrap_or_default()
}

fn client_failure(e: sluice_bench::ClientError) -> Failure {
    use sluice_bench::ClientError as E;
    let kind = match &e {
        E::Io(io) => super::io_failure(std::io::Error::new(io.kind(), "")).0,
        E::Closed => ErrorKind::Closed,
        E::Rtmp(_) | E::Flv(_) | E::Refused(_) => ErrorKind::Protocol,
    };
    (kind, e.to_string())
}

async fn run(ctx: &PublishCtx, app: &str, row: &mut PublisherRow) -> Result<(), Failure> {
    let start = Instant::now();
    let end = ctx.end;
    let mut conn = match timeout_at(end, RtmpConn::connect(ctx.addr, app, false)).await {
        Err(_) => return Ok(()),
        Ok(Err(e)) => {
            let (_, what) = client_failure(e);
            return Err((ErrorKind::Connect, what));
        }
        Ok(Ok(c)) => c,
    };
    match timeout_at(end, conn.publish(&row.stream)).await {
        Err(_) => return Ok(()),
        Ok(r) => r.map_err(client_failure)?,
    }
    row.connect_ms = Some(ms(start.elapsed()));
    ctx.live.connected.fetch_add(1, Ordering::Relaxed);
    let clip = &ctx.clip;
    if let Some(meta) = clip.tags.iter().find(|t| t.tag_type == TAG_SCRIPT) {
        conn.send(TAG_SCRIPT, 0, &meta.body);
    }
    let t0 = Instant::now();
    let mut pending = 0u64;
    let mut stamped = Vec::new();
    'rounds: for round in 0i64.. {
        for tag in clip.tags.iter().filter(|t| t.tag_type != TAG_SCRIPT) {
            let ts = tag.ts_ms + round * clip.duration_ms;
            if ctx.realtime {
                let due = t0 + Duration::from_millis(u64::try_from(ts).unwrap_or(0));
                if due > Instant::now() {
                    if !flush(&mut conn, end).await? {
                        break 'rounds;
                    }
                    ctx.live.add_bytes(pending as usize);
                    pending = 0;
                    sleep_until(due.min(end)).await;
                }
            } else if pending >= FLUSH_AT {
                if !flush(&mut conn, end).await? {
                    break 'rounds;
                }
                ctx.live.add_bytes(pending as usize);
                pending = 0;
            }
            if Instant::now() >= end {
                break 'rounds;
            }
            let body: &[u8] = if ctx.stamp
                && tag.tag_type == TAG_VIDEO
                && crate::stamp::stamp_frame(&mut stamped, &tag.body, crate::stamp::unix_us())
            {
                &stamped
            } else {
                &tag.body
            };
            conn.send(tag.tag_type, ts as u32, body);
            row.tags_sent += 1;
            row.bytes_sent += body.len() as u64;
            pending += body.len() as u64;
        }
        if clip.duration_ms <= 0 {
            break;
        }
    }
    // A last, short chance to close cleanly; the run's end is the bound that matters.
    let _ = tokio::time::timeout(Duration::from_millis(500), conn.close()).await;
    Ok(())
}

/// Flushes queued tags; `false` when the run ended first.
async fn flush(conn: &mut RtmpConn, end: Instant) -> Result<bool, Failure> {
    match timeout_at(end, conn.flush()).await {
        Err(_) => Ok(false),
        Ok(r) => r.map(|_| true).map_err(client_failure),
    }
}

#[cfg(test)]
mod tests {
    use super::{rtsp_path, stream_name};

    #[test]
    fn stream_names() {
        assert_eq!(stream_name("cam1", 3, 1), "cam1");
        assert_eq!(stream_name("cam1", 3, 5), "cam1-3");
        assert_eq!(stream_name("cam1?k=v", 3, 5), "cam1-3?k=v");
        assert_eq!(stream_name("cam{i}", 3, 5), "cam3");
        // RTSP: the same rules on the whole URL.
        let url = stream_name("rtsp://h:8554/live/cam?k=v", 2, 3);
        assert_eq!(url, "rtsp://h:8554/live/cam-2?k=v");
        assert_eq!(rtsp_path(&url), "live/cam-2?k=v");
        assert_eq!(rtsp_path("rtsp://h/live/c{i}"), "live/c{i}");
        assert_eq!(rtsp_path("rtsp://h"), "");
    }
}
