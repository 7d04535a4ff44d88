//! Playback of recordings by time range: `/APP/NAME@FROM..TO/index.m3u8` (HLS, fMP4),
//! `/APP/NAME@FROM..TO.m3u8` (HLS, MPEG-TS) with their segments, and
//! `/APP/NAME@FROM..TO.mp4` (one fragmented MP4 of the range, for clients that save a
//! clip). The range form is `sluice_archive::range`'s.
//!
//! Why per file: the recorder writes one fMP4 file per stretch of a publish (rotated
//! by duration), and each file is already served on demand by `vod` (one shared
//! mapping and sample index per file, held so that retention leaves it alone, and a
//! segment cache). A range is the catalogue's files for it, each cut by its own
//! `VodPlan` at keyframes, trimmed to the segments that overlap the range: the first
//! starts at the keyframe at or before FROM. Segment URIs name the file (its id, in
//! hex) and the segment's number in the file's plan, so a segment request needs the
//! stream's catalogue and that one file, not the range. Segment decode times are the
//! wall clock (see [`wall_offset`]), so a file's segments are the same in every range
//! and the files of a range share one timeline, gaps included.
//!
//! # Limits
//! - A range plays at most [`MAX_FILES`] files (the first ones); an open end is cut at
//!   now (the playlist ends: no EVENT playlist into the live stream yet).
//! - The file being written loses its last segment from playlists (it still grows).
//! - MPEG-TS recordings are skipped (the on-demand reader reads MP4).
//! - A download is built whole in memory (at most [`MAX_DOWNLOAD_BYTES`] of samples)
//!   so that its length is known and `Range` requests can be answered; each request
//!   builds it again. All downloads being built or sent hold at most
//!   [`MAX_DOWNLOADS_HELD`]; past it a request gets 503 with `Retry-After`.

use super::hls::HlsPath;
use super::reply::{self, Reply};
use super::vod::{index, made, playlist, MakeError};
use super::Worker;
use crate::record::{Listed, Recorder};
use crate::vod::hls::{Key, VodHls};
use crate::vod::recorded::{clipped, now_ms, open_root, MAX_FILES};
use crate::vod::{VodError as FileError, VodFile};
use bytes::Bytes;
use sluice_archive::range;
use sluice_archive::{time, FileId, Format};
use sluice_hls::vod::{range_playlist, RangePart, VodError, VodPlan, VodVariant};
use sluice_http::Request;
use sluice_media::{Timestamp, CLOCK_HZ};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Sample bytes one download holds at most: it is built in memory.
pub(crate) const MAX_DOWNLOAD_BYTES: u64 = 256 << 20;
/// Sample bytes all downloads being built or sent hold together: past it a download
/// waits its turn (503) rather than the server's memory growing with the requests.
const MAX_DOWNLOADS_HELD: u64 = 4 * MAX_DOWNLOAD_BYTES;
/// Bytes of [`MAX_DOWNLOADS_HELD`] in use.
static DOWNLOADS_HELD: AtomicU64 = AtomicU64::new(0);

/// A share of [`MAX_DOWNLOADS_HELD`], given back when the last piece of the body that
/// holds it is dropped (sent, or cut away by a `Range`).
struct Held(u64);

impl Held {
    fn take(bytes: u64) -> Option<Held> {
        DOWNLOADS_HELD
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|&n| n <= MAX_DOWNLOADS_HELD)
            })
            .ok()
            .map(|_| Held(bytes))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        DOWNLOADS_HELD.fetch_sub(self.0, Ordering::Relaxed);
    }
}

/// A piece of a download's body with its share of the budget, which it keeps (and
/// gives back by being dropped).
struct HeldPiece {
    bytes: Bytes,
    _share: Arc<Held>,
}

impl AsRef<[u8]> for HeldPiece {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// What a range URL asks for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Playback<'a> {
    /// A playlist or segment.
    Hls(HlsPath<'a>),
    /// The whole range as one fragmented MP4.
    Download,
}

/// A plain-text answer with a message made at run time.
fn message(status: u16, text: String) -> Reply {
    Reply::new(
        status,
        vec![("Content-Type", "text/plain".into())],
        vec![Bytes::from(text + "\n")],
    )
}

/// The id a segment URI's tag names: the file's name second and attempt.
fn tag_of(id: FileId) -> String {
    let secs = u64::try_from(id.name_secs).unwrap_or(0);
    format!("{:x}", secs << 16 | u64::from(id.attempt))
}

fn id_of(tag: &str) -> Option<FileId> {
    if tag.len() > 16 {
        return None;
    }
    let v = u64::from_str_radix(tag, 16).ok()?;
    Some(FileId {
        name_secs: i64::try_from(v >> 16).ok()?,
        attempt: u16::try_from(v & 0xffff).ok()?,
        format: Format::Fmp4,
    })
}

/// Answers a range request. `key` is the stream key (`app/name`), `text` the range as
/// it came in the path (still encoded).
pub(crate) async fn reply(
    worker: &Worker,
    req: &Request,
    key: &str,
    text: &str,
    what: Playback<'_>,
    peer: std::net::IpAddr,
) -> Reply {
    // HLS viewers are authorized as live HLS viewers are (credentials at the playlist,
    // then the token it gave in a cookie); a download was checked by the router.
    let mut cookie = None;
    if let Playback::Hls(path) = &what {
        let playlist = matches!(path, HlsPath::TsPlaylist | HlsPath::Fmp4Playlist);
        match super::hls::viewer_authorized(&worker.ctx, req, key, playlist, peer).await {
            Ok(c) => cookie = c,
            Err(refused) => return refused,
        }
    }
    let private = worker
        .ctx
        .auth()
        .load()
        .required(crate::auth::Action::Read, key);
    let mut reply = answer(worker, req, key, text, what).await;
    reply.headers.extend(cookie.map(|c| ("Set-Cookie", c)));
    if private {
        for (name, value) in reply.headers.iter_mut() {
            if *name == "Cache-Control" && !value.starts_with("no-") {
                *value = format!("private, {value}");
            }
        }
    }
    reply
}

/// [`reply`] once authorized.
async fn answer(
    worker: &Worker,
    req: &Request,
    key: &str,
    text: &str,
    what: Playback<'_>,
) -> Reply {
    let Some(decoded) = sluice_http::percent_decode_utf8(text) else {
        return message(400, "bad range: not UTF-8 once decoded".into());
    };
    let now = now_ms();
    let range = match range::parse(&decoded, now) {
        Ok(r) => r,
        Err(e) => return message(400, format!("bad range: {e}")),
    };
    let ctx = &worker.ctx;
    let Some(recorder) = ctx.hub().attached::<Recorder>() else {
        return message(404, "recording is off".into());
    };
    let catalogue = recorder.catalogue().clone();
    let dir_key = Recorder::dir_key(key);
    let Some(entry) = catalogue.get(&dir_key) else {
        return message(404, format!("no recordings of {key}"));
    };
    let media_root = PathBuf::from(&ctx.config().media_root);
    let (root, prefix) = open_root(catalogue.root(), &media_root);
    let segment_ms = ctx.config().hls.segment_ms;
    let open = |listed: Listed| {
        let rel = format!("{prefix}{}", listed.path);
        let root = root.clone();
        async move {
            let file = open_file(worker, &root, &rel).await?;
            file.hls
                .get_or_init(|| VodHls::new(VodPlan::new(&file.movie, segment_ms)));
            Ok::<_, FileError>((listed, file))
        }
    };
    match what {
        Playback::Hls(HlsPath::Init(tag, None)) => {
            let Some(file) = by_tag(&entry, tag) else {
                return message(404, "no such recording".into());
            };
            let closed = file.span.closed;
            match open(file).await {
                Ok((_, f)) => object(
                    made(&f, Key::Init, |plan, f| plan.init(&f.movie)).await,
                    "video/mp4",
                    closed,
                ),
                Err(e) => open_failed(&e),
            }
        }
        Playback::Hls(HlsPath::Ts(tag, n)) | Playback::Hls(HlsPath::Segment(tag, n)) => {
            let ts = matches!(what, Playback::Hls(HlsPath::Ts(..)));
            let Some(file) = by_tag(&entry, tag) else {
                return message(404, "no such recording".into());
            };
            let (closed, start_ms) = (file.span.closed, file.span.start_ms);
            let f = match open(file).await {
                Ok((_, f)) => f,
                Err(e) => return open_failed(&e),
            };
            let n = index(n);
            let Some(offset) = f.hls.get().map(|h| wall_offset(h.plan(), start_ms)) else {
                return message(500, "cannot read this recording".into());
            };
            if ts {
                let made = made(&f, Key::WallTs(n), move |plan, f| {
                    plan.ts_segment_at(&f.movie, &f.bytes, n, offset)
                })
                .await;
                object(made, "video/mp2t", closed)
            } else {
                let sequence = u32::try_from(n + 1).unwrap_or(u32::MAX);
                let made = made(&f, Key::WallFmp4(n), move |plan, f| {
                    plan.fmp4_fragment(&f.movie, &f.bytes, n, sequence, offset)
                })
                .await;
                object(made, "video/mp4", closed)
            }
        }
        Playback::Hls(HlsPath::TsPlaylist | HlsPath::Fmp4Playlist) | Playback::Download => {
            let (from, to) = clipped(range, now);
            let (listed, more) = catalogue.covering(&dir_key, from, to, MAX_FILES);
            if more {
                tracing::info!(stream = %key, "range playback: only the first {MAX_FILES} files");
            }
            let mut files = Vec::new();
            for l in listed
                .into_iter()
                .filter(|l| l.span.id.format == Format::Fmp4)
            {
                match open(l).await {
                    Ok(f) => files.push(f),
                    // A file removed meanwhile, or unreadable: the range plays without it.
                    Err(e) => tracing::info!(stream = %key, "range playback: {e}"),
                }
            }
            let chosen = choose(&files, from, to);
            if chosen.iter().all(|c| c.segments.is_empty()) {
                return message(404, "nothing recorded in this range".into());
            }
            match what {
                Playback::Download => download(req, key, &files, &chosen).await,
                Playback::Hls(path) => {
                    let name = key.rsplit('/').next().unwrap_or(key);
                    let (variant, dir) = match path {
                        HlsPath::TsPlaylist => (VodVariant::Ts, format!("{name}@{text}/")),
                        _ => (VodVariant::Fmp4, String::new()),
                    };
                    let parts: Vec<RangePart<'_>> = files
                        .iter()
                        .zip(&chosen)
                        .filter_map(|((listed, file), c)| {
                            Some(RangePart {
                                base: format!("{dir}{}", tag_of(listed.span.id)),
                                plan: file.hls.get()?.plan(),
                                segments: c.segments.clone(),
                                date_time: time::format_rfc3339(c.start_ms),
                            })
                        })
                        .collect();
                    playlist(range_playlist(variant, &parts))
                }
            }
        }
        Playback::Hls(_) => message(404, "not found".into()),
    }
}

/// Range segments run on the wall clock (90 kHz since the Unix epoch; MPEG-TS wraps
/// it every 26.5 h, as its clock does): the files of a range then make one timeline
/// with the gaps in it, which players that ignore discontinuities (ffmpeg's HLS
/// reader) play too, and a file's segments are the same bytes in every range.
fn wall_offset(plan: &VodPlan, start_ms: i64) -> Timestamp {
    let wall = start_ms.saturating_mul(Timestamp::from(CLOCK_HZ) / 1000);
    let first = plan.first_start().unwrap_or(0).saturating_sub(plan.shift());
    wall.saturating_sub(first)
}

/// The file a segment's tag names, if the stream has it.
fn by_tag(entry: &crate::record::StreamEntry, tag: &str) -> Option<Listed> {
    entry.file(id_of(tag)?)
}

async fn open_file(worker: &Worker, root: &Path, rel: &str) -> Result<Arc<VodFile>, FileError> {
    let ctx = &worker.ctx;
    if root == Path::new(&ctx.config().media_root) {
        worker
            .vod_files
            .open(ctx.vods(), ctx.files(), root, rel)
            .await
    } else {
        // Not the media root: the worker's cache is keyed by paths below it.
        ctx.vods().open(ctx.files(), root, rel).await
    }
}

fn open_failed(e: &FileError) -> Reply {
    tracing::info!("range playback: {e}");
    if e.not_found() {
        message(404, "no such recording".into())
    } else {
        message(500, "cannot read this recording".into())
    }
}

/// A segment or init segment as an answer: cacheable for long once its file is
/// complete (its URI then never names other bytes).
fn object(made: Result<Bytes, MakeError>, kind: &'static str, closed: bool) -> Reply {
    match made {
        Ok(body) => Reply::new(
            200,
            vec![
                ("Content-Type", kind.into()),
                (
                    "Cache-Control",
                    if closed { "max-age=86400" } else { "no-cache" }.into(),
                ),
            ],
            vec![body],
        ),
        Err(MakeError::Vod(VodError::NoSegment(_))) => message(404, "not found".into()),
        Err(e) => {
            tracing::warn!("range playback: {e}");
            message(500, "cannot read this recording".into())
        }
    }
}

/// One file's share of a range.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Chosen {
    /// Segments of its plan.
    segments: Range<usize>,
    /// UTC ms of the first one.
    start_ms: i64,
}

/// The segments of each file that overlap `[from, to)`: a segment's wall-clock time is
/// its file's start plus its decode time since the file's first segment. The file being
/// written loses its last segment (it may still grow).
fn choose(files: &[(Listed, Arc<VodFile>)], from: i64, to: i64) -> Vec<Chosen> {
    files
        .iter()
        .map(|(listed, file)| {
            let Some(hls) = file.hls.get() else {
                return Chosen {
                    segments: 0..0,
                    start_ms: listed.span.start_ms,
                };
            };
            let plan = hls.plan();
            let mut usable = plan.segments.len();
            if !listed.span.closed {
                usable = usable.saturating_sub(1);
            }
            let (segments, start_ms) = plan.within(usable, listed.span.start_ms, from, to);
            Chosen { segments, start_ms }
        })
        .collect()
}

/// The range as one fragmented MP4: the first file's init segment, then every chosen
/// segment as a fragment, decode times running on across files (gaps closed up, so a
/// player never waits through one; the wall-clock times are in the playlist form). A
/// file whose init segment differs from the first's (other codec settings) ends the
/// download there.
async fn download(
    req: &Request,
    key: &str,
    files: &[(Listed, Arc<VodFile>)],
    chosen: &[Chosen],
) -> Reply {
    let mut jobs: Vec<(Arc<VodFile>, Range<usize>)> = Vec::new();
    let mut bytes = 0u64;
    for ((_, file), c) in files.iter().zip(chosen) {
        if c.segments.is_empty() {
            continue;
        }
        if let Some(hls) = file.hls.get() {
            bytes += hls.plan().sample_bytes(&file.movie, c.segments.clone());
        }
        jobs.push((file.clone(), c.segments.clone()));
    }
    if bytes > MAX_DOWNLOAD_BYTES {
        return message(
            413,
            format!(
                "the range holds {bytes} bytes of media, more than a download may ({MAX_DOWNLOAD_BYTES}); ask for a shorter range"
            ),
        );
    }
    let Some(held) = Held::take(bytes) else {
        let mut busy = message(
            503,
            "other downloads of recordings are being made; try again shortly".into(),
        );
        busy.headers.push(("Retry-After", "5".into()));
        return busy;
    };
    let held = Arc::new(held);
    let first_ms = chosen
        .iter()
        .find(|c| !c.segments.is_empty())
        .map_or(0, |c| c.start_ms);
    let built = tokio::task::spawn_blocking(move || stitch(&jobs)).await;
    let body = match built {
        Ok(Ok(body)) => body
            .into_iter()
            .map(|piece| {
                Bytes::from_owner(HeldPiece {
                    bytes: piece,
                    _share: held.clone(),
                })
            })
            .collect::<Vec<_>>(),
        Ok(Err(e)) => {
            tracing::warn!(stream = %key, "range download: {e}");
            return message(500, "cannot read this recording".into());
        }
        Err(e) => {
            tracing::warn!(stream = %key, "range download: {e}");
            return message(500, "cannot read this recording".into());
        }
    };
    let len: u64 = body.iter().map(|b| b.len() as u64).sum();
    let etag = format!("\"r{:x}\"", fingerprint(files, chosen));
    let name = key.rsplit('/').next().unwrap_or(key);
    let stamp: String = time::format_rfc3339(first_ms)
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(15)
        .collect();
    let mut headers = vec![
        ("Content-Type", "video/mp4".to_string()),
        (
            "Content-Disposition",
            format!("attachment; filename=\"{}-{stamp}.mp4\"", safe_name(name)),
        ),
        ("Accept-Ranges", "bytes".into()),
        ("ETag", etag.clone()),
        ("Cache-Control", "no-cache".into()),
    ];
    match sluice_http::files::requested_range(req, len, &etag, None) {
        None => Reply::new(200, headers, body),
        Some(Some(r)) => {
            headers.push((
                "Content-Range",
                format!("bytes {}-{}/{len}", r.start, r.end.saturating_sub(1)),
            ));
            Reply::new(206, headers, reply::slice(&body, r))
        }
        Some(None) => Reply::new(
            416,
            vec![("Content-Range", format!("bytes */{len}"))],
            Vec::new(),
        ),
    }
}

/// Letters, digits, `-` and `_` of a stream name, for a file name in a header.
fn safe_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Names the bytes of a download: which file versions and segments it holds.
fn fingerprint(files: &[(Listed, Arc<VodFile>)], chosen: &[Chosen]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut mix = |v: u64| {
        h ^= v;
        h = h.wrapping_mul(0x0100_0000_01b3);
    };
    for ((_, f), c) in files.iter().zip(chosen) {
        mix(f.tag);
        mix(c.segments.start as u64);
        mix(c.segments.end as u64);
    }
    h
}

/// Muxes the init segment and the fragments of `jobs` (each file's segments), decode
/// times running on from one file to the next.
fn stitch(jobs: &[(Arc<VodFile>, Range<usize>)]) -> Result<Vec<Bytes>, VodError> {
    let mut out = Vec::new();
    let mut init: Option<Bytes> = None;
    let mut at: Timestamp = 0;
    let mut sequence: u32 = 1;
    for (file, segments) in jobs {
        let Some(hls) = file.hls.get() else { continue };
        let plan = hls.plan();
        let this_init = plan.init(&file.movie)?;
        match &init {
            None => {
                out.push(this_init.clone());
                init = Some(this_init);
            }
            Some(first) if *first != this_init => {
                tracing::info!(file = %file.path, "range download ends: the tracks changed");
                break;
            }
            Some(_) => {}
        }
        let Some(begin) = plan.segments.get(segments.start) else {
            continue;
        };
        // This file's first chosen segment goes out at `at`.
        let offset = at.saturating_sub(begin.start.saturating_sub(plan.shift()));
        for n in segments.clone() {
            let fragment = plan.fmp4_fragment(&file.movie, &file.bytes, n, sequence, offset)?;
            out.push(fragment);
            sequence = sequence.saturating_add(1);
            if let Some(s) = plan.segments.get(n) {
                at = at.saturating_add(s.duration);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downloads_share_a_budget_given_back_with_the_last_piece() {
        let a = Arc::new(Held::take(MAX_DOWNLOAD_BYTES).unwrap());
        let rest = MAX_DOWNLOADS_HELD - MAX_DOWNLOAD_BYTES;
        let b = Held::take(rest).unwrap();
        assert!(Held::take(1).is_none(), "the budget is spent");
        let piece = Bytes::from_owner(HeldPiece {
            bytes: Bytes::from_static(b"moof"),
            _share: a.clone(),
        });
        let cut = piece.slice(1..3);
        drop((a, piece, b));
        // `cut` still holds its download's share.
        assert!(Held::take(rest + 1).is_none());
        drop(cut);
        drop(Held::take(MAX_DOWNLOADS_HELD).unwrap());
    }

    #[test]
    fn tags_name_files() {
        let id = FileId::new(1_795_773_600_250, 3, Format::Fmp4);
        assert_eq!(id_of(&tag_of(id)), Some(id));
        assert_eq!(id_of("zz"), None);
        assert_eq!(id_of(&"f".repeat(17)), None);
    }
}
