//! HLS of files on demand: `/vod/<path>/index.m3u8` (fMP4) and `/vod/<path>.m3u8`
//! (MPEG-TS), with segments below `/vod/<path>/`.
//!
//! Segments are made from the shared file when first asked for and kept in a small
//! per-file cache, so a file watched by many HLS viewers is muxed about once.

use super::hls::{HlsPath, Reply};
use super::Worker;
use crate::vod::hls::{Key, VodHls};
use crate::vod::VodFile;
use bytes::Bytes;
use sluice_hls::vod::{VodPlan, VodVariant};
use std::path::Path;
use std::rc::Rc;

/// Answers an HLS request for the file `path` below the media root.
pub(crate) async fn reply(ctx: &Rc<Worker>, path: &str, what: HlsPath<'_>) -> Reply {
    let root = Path::new(&ctx.config.media_root);
    let file = match ctx.vods.open(&ctx.files, root, path).await {
        Ok(f) => f,
        Err(e) => {
            tracing::info!(file = %path, "vod hls: {e}");
            let status = if e.not_found() { 404 } else { 500 };
            return Reply::text(status, "cannot play this file\n");
        }
    };
    let hls = file
        .hls
        .get_or_init(|| VodHls::new(VodPlan::new(&file.movie, ctx.config.hls.segment_ms)));
    let tag = format!("{:x}", file.tag);
    let same = |t: &str| t == tag;
    let made = match what {
        HlsPath::TsPlaylist => {
            let name = path.rsplit('/').next().unwrap_or(path);
            return playlist(
                hls.plan()
                    .playlist(VodVariant::Ts, &format!("{name}/"), &tag),
            );
        }
        HlsPath::Fmp4Playlist => return playlist(hls.plan().playlist(VodVariant::Fmp4, "", &tag)),
        HlsPath::Init(t) if same(t) => hls
            .get_or_make(Key::Init, |p| p.init(&file.movie))
            .map(|b| ("video/mp4", b)),
        HlsPath::Ts(t, n) if same(t) => {
            segment(&file, hls, Key::Ts, n, VodPlan::ts_segment).map(|b| ("video/mp2t", b))
        }
        HlsPath::Segment(t, n) if same(t) => {
            segment(&file, hls, Key::Fmp4, n, VodPlan::fmp4_segment).map(|b| ("video/mp4", b))
        }
        _ => return Reply::text(404, "not found\n"),
    };
    match made {
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
        Err(sluice_hls::vod::VodError::NoSegment(_)) => Reply::text(404, "not found\n"),
        Err(e) => {
            tracing::warn!(file = %path, "vod hls: {e}");
            Reply::text(500, "cannot read this file\n")
        }
    }
}

type MakeSegment = fn(
    &VodPlan,
    &sluice_media::mp4::Movie,
    &Bytes,
    usize,
) -> Result<Bytes, sluice_hls::vod::VodError>;

fn segment(
    file: &VodFile,
    hls: &VodHls,
    key: fn(usize) -> Key,
    n: u64,
    make: MakeSegment,
) -> Result<Bytes, sluice_hls::vod::VodError> {
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    hls.get_or_make(key(n), |plan| make(plan, &file.movie, &file.bytes, n))
}

fn playlist(body: String) -> Reply {
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
