//! Video on demand: MP4 files of the media root, played like live streams.
//!
//! Every reader of a file shares one [`VodFile`]: one mapping of the file and one
//! demuxed sample index, dropped (and unmapped) when the last reader goes. A player of
//! the live-style protocols (RTMP, HTTP-FLV, RTSP) gets a [`VodPlay`]: a private
//! stream, outside the hub, fed in real time from the file by a pacer task on the
//! player's worker, so the whole live path (packets, fan-out, slow-player policy)
//! serves it unchanged. HLS reads the shared file directly (see `http::vod`).

pub mod hls;

use crate::core::hub::{HubConfig, Stream};
use crate::core::ingest::Ingest;
use crate::io::filemap::{open_beneath, FileKey, FileMaps};
use bytes::Bytes;
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

/// One player's private stream fed from a file in real time. Dropping it stops the
/// pacer.
pub struct VodPlay {
    pub stream: Arc<Stream>,
    /// Presentation time of the first frame: where playing starts (RTSP's `npt`).
    pub start_pts: Timestamp,
    /// Decode time of the newest frame pushed.
    pushed: Rc<Cell<Timestamp>>,
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
        let stream = Stream::private(&format!("vod/{}", file.path), id, config);
        let mut ingest = Ingest::new(stream.clone());
        let movie = &file.movie;
        let mut pos = movie.seek(from.max(0));
        let start = movie.peek_dts(&pos).unwrap_or(0);
        let start_pts = movie
            .video()
            .and_then(|v| {
                let s = movie.tracks[v].samples.get(pos.sample(v)?)?;
                Some(s.dts + Timestamp::from(s.cts))
            })
            .unwrap_or(start);
        // Players want timestamps from 0 up; B-frames can put the first dts below.
        let shift = movie.negative_start();
        for t in &movie.tracks {
            ingest.set_track(start - shift, t.track.clone());
        }
        let pushed = Rc::new(Cell::new(start));
        let t0 = tokio::time::Instant::now();
        push_due(&file, &mut ingest, &mut pos, start + LEAD, shift, &pushed);
        let pacer = tokio::task::spawn_local(pace(
            file.clone(),
            ingest,
            pos,
            start,
            shift,
            t0,
            pushed.clone(),
        ))
        .abort_handle();
        VodPlay {
            stream,
            start_pts,
            pushed,
            pacer,
        }
    }

    /// About where the viewer is now: what was pushed, less the lead.
    pub fn position(&self) -> Timestamp {
        (self.pushed.get() - LEAD).max(self.start_pts)
    }
}

/// Pushes frames until the file ends, each [`LEAD`] before its time.
async fn pace(
    file: Arc<VodFile>,
    mut ingest: Ingest,
    mut pos: Position,
    start: Timestamp,
    shift: Timestamp,
    t0: tokio::time::Instant,
    pushed: Rc<Cell<Timestamp>>,
) {
    while let Some(next) = file.movie.peek_dts(&pos) {
        let due = next - start - LEAD;
        if due > 0 {
            tokio::time::sleep_until(t0 + duration(due)).await;
        }
        let elapsed =
            Timestamp::try_from(t0.elapsed().as_micros() * u128::from(CLOCK_HZ) / 1_000_000)
                .unwrap_or(Timestamp::MAX / 2);
        if !push_due(
            &file,
            &mut ingest,
            &mut pos,
            start + elapsed + LEAD + TICK,
            shift,
            &pushed,
        ) {
            break;
        }
    }
    // The end of the stream cuts off what players have not been written yet: close
    // when the last frame is due, not a lead ahead of it.
    tokio::time::sleep_until(t0 + duration(pushed.get() - start) + END_SLACK).await;
    tracing::debug!(file = %file.path, "vod: end of file");
    ingest.stream.close();
}

/// A non-negative span of ticks as a duration (saturating: a crafted file's times can
/// be anything).
fn duration(ticks: Timestamp) -> Duration {
    let micros = u128::try_from(ticks.max(0)).unwrap_or(0) * 1_000_000 / u128::from(CLOCK_HZ);
    Duration::from_micros(u64::try_from(micros).unwrap_or(u64::MAX))
}

/// Pushes every frame with a decode time before `until`. Returns false when the
/// file cannot be read further (a sample outside a truncated file).
fn push_due(
    file: &VodFile,
    ingest: &mut Ingest,
    pos: &mut Position,
    until: Timestamp,
    shift: Timestamp,
    pushed: &Cell<Timestamp>,
) -> bool {
    let movie = &file.movie;
    while movie.peek_dts(pos).is_some_and(|dts| dts < until) {
        let Some((track, sample)) = movie.next(pos) else {
            break;
        };
        match movie.frame(&file.bytes, track, sample) {
            Ok(frame) => {
                pushed.set(frame.dts);
                ingest.frame(Frame {
                    dts: frame.dts - shift,
                    pts: frame.pts - shift,
                    ..frame
                });
            }
            Err(e) => {
                tracing::info!(file = %file.path, "vod: {e}");
                return false;
            }
        }
    }
    true
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
