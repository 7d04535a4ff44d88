//! HLS of files on demand: `/vod/<path>/index.m3u8` (fMP4) and `/vod/<path>.m3u8`
//! (MPEG-TS), with segments below `/vod/<path>/`.
//!
//! Segments are made from the shared file when first asked for and kept in a small
//! per-file cache, so a file watched by many HLS viewers is muxed about once. A
//! request for a file the worker knows takes no syscall and no shared lock (see
//! `vod::WorkerFiles`); muxing a segment, and the page faults of reading the file's
//! mapping for it, run on the blocking pool, off the event loop.

use super::hls::HlsPath;
use super::reply::Reply;
use super::Worker;
use crate::vod::hls::{Key, VodHls};
use crate::vod::VodFile;
use bytes::Bytes;
use sluice_hls::vod::{VodError, VodPlan, VodVariant};
use std::path::Path;
use std::sync::Arc;

/// Answers an HLS request for the file `path` below the media root.
pub(crate) async fn reply(worker: &Worker, path: &str, what: HlsPath<'_>) -> Reply {
    let ctx = &worker.ctx;
    let root = Path::new(&ctx.config().media_root);
    let file = match worker
        .vod_files
        .open(ctx.vods(), ctx.files(), root, path)
        .await
    {
        Ok(f) => f,
        Err(e) => {
            tracing::info!(file = %path, "vod hls: {e}");
            let status = if e.not_found() { 404 } else { 500 };
            return Reply::text(status, "cannot play this file\n");
        }
    };
    let hls = file
        .hls
        .get_or_init(|| VodHls::new(VodPlan::new(&file.movie, ctx.config().hls.segment_ms)));
    let tag = format!("{:x}", file.tag);
    let same = |t: &str| t == tag;
    let object = match what {
        HlsPath::TsPlaylist => {
            let name = path.rsplit('/').next().unwrap_or(path);
            return playlist(
                hls.plan()
                    .playlist(VodVariant::Ts, &format!("{name}/"), &tag),
            );
        }
        HlsPath::Fmp4Playlist => return playlist(hls.plan().playlist(VodVariant::Fmp4, "", &tag)),
        HlsPath::Init(t, None) if same(t) => made(&file, Key::Init, |plan, f| plan.init(&f.movie))
            .await
            .map(|b| ("video/mp4", b)),
        HlsPath::Ts(t, n) if same(t) => {
            let n = index(n);
            made(&file, Key::Ts(n), move |plan, f| {
                plan.ts_segment(&f.movie, &f.bytes, n)
            })
            .await
            .map(|b| ("video/mp2t", b))
        }
        HlsPath::Segment(t, n) if same(t) => {
            let n = index(n);
            made(&file, Key::Fmp4(n), move |plan, f| {
                plan.fmp4_segment(&f.movie, &f.bytes, n)
            })
            .await
            .map(|b| ("video/mp4", b))
        }
        _ => return Reply::text(404, "not found\n"),
    };
    match object {
        Ok((kind, body)) => Reply {
            file: None,
            status: 200,
            headers: vec![
                ("Content-Type", kind.into()),
                // The URL names this version of the file: it never changes.
                ("Cache-Control", "public, max-age=86400, immutable".into()),
            ],
            body: vec![body],
        },
        Err(MakeError::Vod(VodError::NoSegment(_))) => Reply::text(404, "not found\n"),
        Err(e) => {
            tracing::warn!(file = %path, "vod hls: {e}");
            Reply::text(500, "cannot read this file\n")
        }
    }
}

pub(super) fn index(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// The object `key` of `file`: from the cache, or made on the blocking pool and kept.
pub(super) async fn made(
    file: &Arc<VodFile>,
    key: Key,
    make: impl FnOnce(&VodPlan, &VodFile) -> Result<Bytes, VodError> + Send + 'static,
) -> Result<Bytes, MakeError> {
    let Some(hls) = file.hls.get() else {
        return Err(MakeError::Vod(VodError::NoSegment(0)));
    };
    if let Some(bytes) = hls.get(key) {
        return Ok(bytes);
    }
    let shared = file.clone();
    let bytes = tokio::task::spawn_blocking(move || match shared.hls.get() {
        Some(hls) => make(hls.plan(), &shared),
        None => Err(VodError::NoSegment(0)),
    })
    .await
    .map_err(MakeError::Lost)?
    .map_err(MakeError::Vod)?;
    hls.put(key, bytes.clone());
    Ok(bytes)
}

/// Why an object of a file could not be made.
#[derive(Debug, thiserror::Error)]
pub(super) enum MakeError {
    #[error("{0}")]
    Vod(VodError),
    /// The muxing task did not finish.
    #[error("muxing stopped: {0}")]
    Lost(tokio::task::JoinError),
}

pub(super) fn playlist(body: String) -> Reply {
    Reply {
        file: None,
        status: 200,
        headers: vec![
            ("Content-Type", "application/vnd.apple.mpegurl".into()),
            ("Cache-Control", "no-cache".into()),
        ],
        body: vec![Bytes::from(body)],
    }
}
