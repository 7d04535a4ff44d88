//! Video on demand: MP4 files of the media root, played like live streams.
//!
//! Every reader of a file shares one [`VodFile`]: one mapping of the file and one
//! demuxed sample index, dropped (and unmapped) when the last reader goes. A player of
//! the live-style protocols (RTMP, HTTP-FLV, RTSP) gets a [`VodPlay`]: a private
//! stream, outside the hub, fed in real time from the file by a pacer task on the
//! player's worker, so the whole live path (packets, fan-out, slow-player policy)
//! serves it unchanged. HLS reads the shared file directly (see `http::vod`).

pub mod hls;
pub mod recorded;

use crate::core::hub::{HubConfig, Stream};
use crate::core::ingest::Ingest;
use crate::io::filemap::{open_beneath, FileKey, FileMaps};
use bytes::Bytes;
use recorded::Timeline;
use sluice_media::mp4::{parse_movie, Movie, Position};
use sluice_media::{Frame, Timestamp, CLOCK_HZ};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// Media pushed ahead of real time: the player's buffer, and the burst a new player
/// starts with.
const LEAD: Timestamp = CLOCK_HZ as Timestamp;
/// The pacer wakes at most this often, pushing every frame due until the next wake.
const TICK: Timestamp = CLOCK_HZ as Timestamp / 20;
/// Media a private stream keeps behind its lead: how far its player may fall behind
/// before the live path's slow-player policy skips it ahead.
const KEEP_BEHIND: Timestamp = 3 * CLOCK_HZ as Timestamp;
/// How long a file nobody plays stays open for HLS, whose viewers hold nothing
/// between requests.
const LINGER: Duration = Duration::from_secs(30);

/// How often a worker lets go of files unused for [`LINGER`].
pub const SWEEP_EVERY: Duration = Duration::from_secs(5);
/// After the last frame is due, time for the merge window and the players' sockets.
const END_SLACK: Duration = Duration::from_millis(500);
/// Longest relative path accepted.
const MAX_PATH_LEN: usize = 1024;
/// How long a worker trusts what it knows of a file before it looks again (open and
/// stat, on the blocking pool): a replaced file is seen within this.
const REVALIDATE: Duration = Duration::from_secs(2);
/// Files one worker remembers.
const WORKER_FILES: usize = 256;

/// Why a file cannot be played.
#[derive(Debug, thiserror::Error)]
pub enum VodError {
    #[error("bad path")]
    BadPath,
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Mp4(#[from] sluice_media::mp4::Mp4Error),
}

impl VodError {
    /// Whether the error means the file is not there (or not for us): 404 rather than 500.
    pub fn not_found(&self) -> bool {
        match self {
            VodError::BadPath | VodError::Mp4(_) => true,
            VodError::Io(e) => matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
            ),
        }
    }
}

/// One file being played, shared by all its readers.
#[derive(Debug)]
pub struct VodFile {
    /// The path below the media root.
    pub path: String,
    /// The whole file, over its shared mapping.
    pub bytes: Bytes,
    pub movie: Movie,
    /// Names this version of the file in HLS URLs, so caches never mix versions.
    pub tag: u64,
    ident: FileKey,
    /// Recordings retention leaves the file alone while this lives.
    _hold: crate::io::readers::ReadHold,
    /// HLS segments of this file, planned on first use, made on demand and cached.
    pub hls: OnceLock<hls::VodHls>,
}

/// The files being played, shared by every worker.
#[derive(Debug, Default)]
pub struct Vods {
    open: Mutex<HashMap<String, Weak<VodFile>>>,
    /// Files kept open for a while after their last use (HLS).
    recent: Mutex<HashMap<String, (Arc<VodFile>, Instant)>>,
}

impl Vods {
    /// The file at `rel` below `root`, shared with its other readers when it has not
    /// changed since they opened it. Opening, mapping and indexing run on the blocking
    /// pool: a large file's index takes milliseconds to build.
    pub async fn open(
        self: &Arc<Self>,
        files: &Arc<FileMaps>,
        root: &Path,
        rel: &str,
    ) -> Result<Arc<VodFile>, VodError> {
        let rel_path = checked_path(rel).ok_or(VodError::BadPath)?;
        let (vods, files, root, rel) = (
            self.clone(),
            files.clone(),
            root.to_path_buf(),
            rel.to_string(),
        );
        let file =
            tokio::task::spawn_blocking(move || vods.open_blocking(&files, &root, &rel_path, rel))
                .await
                .map_err(|e| VodError::Io(std::io::Error::other(e)))??;
        self.touch(&file);
        Ok(file)
    }

    fn open_blocking(
        &self,
        files: &FileMaps,
        root: &Path,
        rel_path: &Path,
        rel: String,
    ) -> Result<Arc<VodFile>, VodError> {
        let (file, meta) = open_beneath(root, rel_path)?;
        let ident = FileKey::of(&meta);
        if let Some(open) = self.lock_open().get(&rel).and_then(Weak::upgrade) {
            if open.ident == ident {
                return Ok(open);
            }
        }
        // A file being removed (recordings retention) is as good as gone.
        let hold = files.readers.hold(&meta).ok_or_else(|| {
            VodError::Io(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "being removed",
            ))
        })?;
        let bytes = files.map(&file, &meta)?;
        let movie = parse_movie(&bytes)?;
        let vod = Arc::new(VodFile {
            path: rel.clone(),
            bytes,
            movie,
            tag: ident.tag(),
            ident,
            _hold: hold,
            hls: OnceLock::new(),
        });
        let mut open = self.lock_open();
        open.retain(|_, f| f.strong_count() > 0);
        open.insert(rel, Arc::downgrade(&vod));
        Ok(vod)
    }

    fn lock_open(&self) -> std::sync::MutexGuard<'_, HashMap<String, Weak<VodFile>>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `file` open for [`LINGER`] from now.
    pub fn touch(&self, file: &Arc<VodFile>) {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent.insert(file.path.clone(), (file.clone(), Instant::now()));
    }

    /// Lets go of files unused for [`LINGER`].
    pub fn sweep(&self, now: Instant) {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent.retain(|_, (_, used)| now.duration_since(*used) < LINGER);
    }

    /// Files open now.
    pub fn open_files(&self) -> usize {
        self.lock_open()
            .values()
            .filter(|f| f.strong_count() > 0)
            .count()
    }
}

/// One worker's recently used files: a request for a file it looked at less than
/// [`REVALIDATE`] ago takes no syscall, no shared lock and no trip to the blocking
/// pool. Older, it is looked at again through [`Vods::open`], which keeps the same
/// [`VodFile`] while the file's identity (device, inode, size, mtime) holds.
#[derive(Debug, Default)]
pub struct WorkerFiles {
    files: RefCell<HashMap<String, (Arc<VodFile>, Instant)>>,
}

impl WorkerFiles {
    pub async fn open(
        &self,
        vods: &Arc<Vods>,
        maps: &Arc<FileMaps>,
        root: &Path,
        rel: &str,
    ) -> Result<Arc<VodFile>, VodError> {
        if let Some((file, checked)) = self.files.borrow().get(rel) {
            if checked.elapsed() < REVALIDATE {
                return Ok(file.clone());
            }
        }
        let file = vods.open(maps, root, rel).await?;
        let mut files = self.files.borrow_mut();
        if files.len() >= WORKER_FILES && !files.contains_key(rel) {
            let now = Instant::now();
            files.retain(|_, (_, checked)| now.duration_since(*checked) < REVALIDATE);
            if files.len() >= WORKER_FILES {
                files.clear();
            }
        }
        files.insert(rel.to_string(), (file.clone(), Instant::now()));
        Ok(file)
    }

    /// Forgets files not looked at for [`LINGER`], so that they can be unmapped.
    pub fn sweep(&self, now: Instant) {
        self.files
            .borrow_mut()
            .retain(|_, (_, checked)| now.duration_since(*checked) < LINGER);
    }
}

/// A relative path of plain segments: no `..`, `.`, empty segment, NUL or backslash.
/// (Opening beneath the root refuses ways out anyway; this keeps errors clear.)
pub fn checked_path(rel: &str) -> Option<PathBuf> {
    let ok = !rel.is_empty()
        && rel.len() <= MAX_PATH_LEN
        && !rel.contains(['\0', '\\'])
        && rel
            .split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != "..");
    ok.then(|| PathBuf::from(rel))
}

/// How fast a [`VodPlay`] plays: RTSP's `Scale`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Speed(f64);

impl Speed {
    /// Real time.
    pub const NORMAL: Speed = Speed(1.0);
    /// Fastest accepted.
    pub const MAX: f64 = 16.0;
    /// Above this only video keyframes are sent (a decoder cannot keep up with every
    /// frame, and a player shows few of them).
    pub const ALL_FRAMES_UP_TO: f64 = 2.0;

    /// A forward speed, clamped to (0, [`Speed::MAX`]]; `None` for reverse, zero or
    /// not a number (reverse play is not supported).
    pub fn forward(scale: f64) -> Option<Speed> {
        (scale.is_finite() && scale > 0.0).then(|| Speed(scale.clamp(0.01, Speed::MAX)))
    }

    pub fn scale(self) -> f64 {
        self.0
    }

    fn keyframes_only(self) -> bool {
        self.0 > Speed::ALL_FRAMES_UP_TO
    }

    /// Media pushed ahead of the clock: [`LEAD`], scaled, so that the player's buffer
    /// holds as much real time at any speed.
    fn lead(self) -> Timestamp {
        (self.0.max(1.0) * LEAD as f64) as Timestamp
    }

    /// Real time for `ticks` of media.
    fn real(self, ticks: Timestamp) -> Timestamp {
        (ticks as f64 / self.0) as Timestamp
    }
}

/// One player's private stream fed from a file, or from the pieces of a recorded
/// range, in real time. Dropping it stops the pacer.
pub struct VodPlay {
    pub stream: Arc<Stream>,
    /// Timeline time of the first frame's presentation: where playing starts (RTSP's
    /// `npt`).
    pub start_pts: Timestamp,
    /// Timeline time of the newest frame pushed.
    pushed: Rc<Cell<Timestamp>>,
    speed: Speed,
    pacer: tokio::task::AbortHandle,
}

impl Drop for VodPlay {
    fn drop(&mut self) {
        self.pacer.abort();
    }
}

impl VodPlay {
    /// Starts playing `file` from the keyframe at or before `from` (90 kHz): the
    /// tracks and the first [`LEAD`] of media are in the stream when this returns, so a
    /// player attached now starts at once; the rest follows in real time. Must run on
    /// a worker (the pacer is a local task).
    pub fn start(file: Arc<VodFile>, config: &HubConfig, id: u64, from: Timestamp) -> VodPlay {
        let name = format!("vod/{}", file.path);
        let timeline = Arc::new(Timeline::single(file));
        VodPlay::play(&name, timeline, config, id, from, Speed::NORMAL)
    }

    /// Starts playing `timeline` from the keyframe at or before timeline time `from`,
    /// at `speed`; as [`VodPlay::start`]. The stream is named `name`.
    pub fn play(
        name: &str,
        timeline: Arc<Timeline>,
        config: &HubConfig,
        id: u64,
        from: Timestamp,
        speed: Speed,
    ) -> VodPlay {
        let keep_ms = (speed.lead() + KEEP_BEHIND) / (CLOCK_HZ as Timestamp / 1000);
        let stream = Stream::private(name, id, config, keep_ms);
        let ingest = Ingest::new(stream.clone());
        let (piece, seek) = timeline.locate(from).unwrap_or((0, 0));
        let mut cursor = Cursor {
            timeline,
            piece,
            pos: Position::default(),
            announced: None,
            speed,
            ingest,
        };
        let start_pts = cursor.enter(piece, seek);
        let start = cursor.peek().unwrap_or(start_pts);
        let pushed = Rc::new(Cell::new(start));
        let t0 = tokio::time::Instant::now();
        cursor.push_due(start + speed.lead(), &pushed);
        let pacer =
            tokio::task::spawn_local(pace(cursor, start, t0, pushed.clone())).abort_handle();
        VodPlay {
            stream,
            start_pts,
            pushed,
            speed,
            pacer,
        }
    }

    /// About where the viewer is now (timeline time): what was pushed, less the lead.
    pub fn position(&self) -> Timestamp {
        (self.pushed.get() - self.speed.lead()).max(self.start_pts)
    }
}

/// Where a pacer is in its timeline, and the stream it feeds.
struct Cursor {
    timeline: Arc<Timeline>,
    piece: usize,
    pos: Position,
    /// The piece whose tracks the stream was given last.
    announced: Option<usize>,
    speed: Speed,
    ingest: Ingest,
}

impl Cursor {
    /// Moves to piece `n` at its decode time `seek`; returns the timeline time at
    /// which its first video frame is presented.
    fn enter(&mut self, n: usize, seek: Timestamp) -> Timestamp {
        self.piece = n;
        let Some(p) = self.timeline.pieces.get(n) else {
            return 0;
        };
        let movie = &p.file.movie;
        self.pos = movie.seek(seek);
        let first = movie.peek_dts(&self.pos).unwrap_or(p.first);
        movie
            .video()
            .and_then(|v| {
                let s = movie.tracks[v].samples.get(self.pos.sample(v)?)?;
                Some(p.to_timeline(s.dts + Timestamp::from(s.cts)))
            })
            .unwrap_or(p.to_timeline(first))
    }

    /// Timeline time of the next frame, moving on to the next piece when this one
    /// is done; `None` at the end.
    fn peek(&mut self) -> Option<Timestamp> {
        loop {
            let p = self.timeline.pieces.get(self.piece)?;
            if let Some(dts) = p.file.movie.peek_dts(&self.pos).filter(|&d| d < p.end) {
                return Some(p.to_timeline(dts));
            }
            let next = self.piece + 1;
            let seek = self.timeline.pieces.get(next)?.seek;
            self.enter(next, seek);
        }
    }

    /// Pushes every frame due before timeline time `until`. Returns false when the
    /// timeline cannot be read further (a sample outside a truncated file).
    fn push_due(&mut self, until: Timestamp, pushed: &Cell<Timestamp>) -> bool {
        while let Some(next) = self.peek().filter(|&t| t < until) {
            let timeline = self.timeline.clone();
            let Some(p) = timeline.pieces.get(self.piece) else {
                break;
            };
            let movie = &p.file.movie;
            let origin = timeline.origin;
            if self.announced != Some(self.piece) {
                // A file with other codec settings: the stream takes its tracks (the
                // same ones again are ignored).
                for t in &movie.tracks {
                    self.ingest.set_track(next - origin, t.track.clone());
                }
                self.announced = Some(self.piece);
            }
            let Some((track, sample)) = movie.next(&mut self.pos) else {
                break;
            };
            let key_video = Some(track) == movie.video()
                && movie
                    .tracks
                    .get(track)
                    .and_then(|t| t.samples.get(sample))
                    .is_some_and(|s| s.keyframe);
            if self.speed.keyframes_only() && !key_video {
                continue;
            }
            match movie.frame(&p.file.bytes, track, sample) {
                Ok(frame) => {
                    let (dts, pts) = (p.to_timeline(frame.dts), p.to_timeline(frame.pts));
                    pushed.set(dts);
                    self.ingest.frame(Frame {
                        dts: dts - origin,
                        pts: pts - origin,
                        ..frame
                    });
                }
                Err(e) => {
                    tracing::info!(file = %p.file.path, "vod: {e}");
                    return false;
                }
            }
        }
        true
    }
}

/// Pushes frames until the timeline ends, each [`LEAD`] before its time.
async fn pace(
    mut cursor: Cursor,
    start: Timestamp,
    t0: tokio::time::Instant,
    pushed: Rc<Cell<Timestamp>>,
) {
    let speed = cursor.speed;
    let lead = speed.lead();
    while let Some(next) = cursor.peek() {
        let due = speed.real(next - start - lead);
        if due > 0 {
            tokio::time::sleep_until(t0 + duration(due)).await;
        }
        let elapsed =
            Timestamp::try_from(t0.elapsed().as_micros() * u128::from(CLOCK_HZ) / 1_000_000)
                .unwrap_or(Timestamp::MAX / 2);
        let media = (elapsed as f64 * speed.0) as Timestamp;
        if !cursor.push_due(start + media + lead + TICK, &pushed) {
            break;
        }
    }
    // The end of the stream cuts off what players have not been written yet: close
    // when the last frame is due, not a lead ahead of it.
    tokio::time::sleep_until(t0 + duration(speed.real(pushed.get() - start)) + END_SLACK).await;
    tracing::debug!(stream = %cursor.ingest.stream.key, "vod: end");
    cursor.ingest.stream.close();
}

/// A non-negative span of ticks as a duration (saturating: a crafted file's times can
/// be anything).
fn duration(ticks: Timestamp) -> Duration {
    let micros = u128::try_from(ticks.max(0)).unwrap_or(0) * 1_000_000 / u128::from(CLOCK_HZ);
    Duration::from_micros(u64::try_from(micros).unwrap_or(u64::MAX))
}

/// The file an RTMP play of `key` (`app/name`) names, if its app is `vod`. Clients
/// such as ffmpeg prefix MP4 names with `mp4:`.
pub fn rtmp_path(key: &str) -> Option<String> {
    let path = key.strip_prefix("vod/")?;
    // The prefix is on the stream name, after the app's last `/`.
    Some(match path.rsplit_once('/') {
        Some((dir, name)) => format!("{dir}/{}", name.strip_prefix("mp4:").unwrap_or(name)),
        None => path.strip_prefix("mp4:").unwrap_or(path).to_string(),
    })
}

/// Ticks of a duration in seconds (for `npt`).
pub fn ticks_from_secs(secs: f64) -> Timestamp {
    (secs * f64::from(CLOCK_HZ)) as Timestamp
}

/// Seconds of ticks.
pub fn secs_from_ticks(ticks: Timestamp) -> f64 {
    ticks as f64 / f64::from(CLOCK_HZ)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rtmp_names_lose_their_mp4_prefix() {
        assert_eq!(rtmp_path("vod/mp4:a.mp4").as_deref(), Some("a.mp4"));
        assert_eq!(rtmp_path("vod/sub/mp4:a.mp4").as_deref(), Some("sub/a.mp4"));
        assert_eq!(rtmp_path("vod/sub/a.mp4").as_deref(), Some("sub/a.mp4"));
        assert_eq!(rtmp_path("live/a"), None);
    }

    #[test]
    fn paths_are_plain_segments() {
        assert!(checked_path("a/b.mp4").is_some());
        assert!(checked_path("b.mp4").is_some());
        for bad in [
            "",
            "/a.mp4",
            "a//b.mp4",
            "../a.mp4",
            "a/./b.mp4",
            "a/..",
            "a\\b",
            "a\0b",
        ] {
            assert!(checked_path(bad).is_none(), "{bad:?}");
        }
    }
}
