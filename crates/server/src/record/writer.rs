//! The `sluice-record` thread: commands in, files on disk.
//!
//! Why one thread: recordings are few and the disk is the bottleneck, not the CPU;
//! one thread keeps the writes of each file in order without locks, and its stalls
//! never reach an event loop (see the module above for the bounded queue).
//!
//! # Invariants
//! - Each fragment is handed to the kernel whole, with one `write_all`, as soon as it
//!   is made: nothing is buffered in user space between fragments, so `kill -9` loses
//!   at most the fragment in progress.
//! - A file is never overwritten: a name already taken gets a `-N` suffix.
//! - After an I/O error the file is abandoned (closed, logged once); the recording
//!   resumes with its next file, so a half-written fragment is never followed by more.
//! - Path components come from stream keys (peer input): each is reduced to
//!   `[A-Za-z0-9._-]`, and never `.`, `..` or empty, so files stay under the record dir.
//! - Each file has a record in its stream's index (see `catalogue`): written when the
//!   file is created, when it grows (at most every [`INDEX_INTERVAL_MS`]), when it is
//!   synced and when it ends (then synced too). A failing index is logged, never a
//!   reason to stop recording.
//! - A completed file wakes retention (`pruner`): limits are applied as files come.

use super::catalogue::{Catalogue, StreamEntry};
use super::fragmenter::{Format, Fragmenter, Output};
use super::index::mtime_ns;
use super::pruner::Nudge;
use super::{Command, Queue, RecordConfig};
use sluice_archive::{FileId, FileSpan};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Longest path component taken from a stream key, in bytes.
const MAX_COMPONENT_LEN: usize = 100;
/// Suffixes tried when a file name is taken (several files in one second).
const MAX_NAME_ATTEMPTS: u16 = 1000;
/// A growing file's index record is rewritten at most this often (ms): its span is at
/// most this stale after `kill -9`, until the loader reads the file again at start.
pub(super) const INDEX_INTERVAL_MS: i64 = 1000;

/// Serves commands until [`Command::Shutdown`] or until every sender is gone, then
/// completes every open file.
pub(super) fn run(
    rx: Receiver<Command>,
    queue: &Queue,
    config: &RecordConfig,
    catalogue: &Catalogue,
    nudge: Option<&Nudge>,
) {
    let mut recordings: HashMap<u64, Recording> = HashMap::new();
    while let Ok(command) = rx.recv() {
        match command {
            Command::Open { id, key, dropped } => {
                let index = catalogue.entry(&key_dir(&key).0.to_string_lossy());
                recordings.insert(
                    id,
                    Recording {
                        fragmenter: Fragmenter::new(config.fragmenter),
                        key,
                        file: None,
                        dropped,
                        index,
                        index_failed: false,
                        nudge: nudge.cloned(),
                    },
                );
            }
            Command::Tracks { id, video, audio } => {
                if let Some(r) = recordings.get_mut(&id) {
                    let result = r.fragmenter.set_tracks(video.as_deref(), audio.as_deref());
                    r.drain(result, config);
                }
            }
            Command::Frame { id, frame, cost } => {
                if let Some(r) = recordings.get_mut(&id) {
                    let result = r.fragmenter.push(&frame, unix_ms());
                    r.drain(result, config);
                }
                queue.release(cost);
            }
            Command::Flush { id } => {
                if let Some(r) = recordings.get_mut(&id) {
                    let result = r.fragmenter.flush();
                    r.drain(result, config);
                }
            }
            Command::Close { id } => {
                if let Some(mut r) = recordings.remove(&id) {
                    let result = r.fragmenter.finish();
                    r.drain(result, config);
                }
            }
            Command::Shutdown => break,
        }
    }
    for (_, mut r) in recordings.drain() {
        let result = r.fragmenter.finish();
        r.drain(result, config);
    }
}

/// One recorded stream: its fragmenter and the file being written.
struct Recording {
    key: String,
    fragmenter: Fragmenter,
    file: Option<OpenFile>,
    /// Frames its tap dropped because the queue was full.
    dropped: Arc<AtomicU64>,
    /// The stream's entry in the catalogue and its index.
    index: Arc<StreamEntry>,
    /// Its index failed (logged once until it works again).
    index_failed: bool,
    /// Wakes retention when a file is complete.
    nudge: Option<Nudge>,
}

struct OpenFile {
    file: File,
    path: PathBuf,
    bytes: u64,
    /// What the index says of it.
    span: FileSpan,
    /// When its record was last written (Unix ms).
    indexed_ms: i64,
}

impl Recording {
    /// Carries out what the fragmenter asked for.
    fn drain(
        &mut self,
        result: Result<(), sluice_media::fragment::FragmentError>,
        config: &RecordConfig,
    ) {
        if let Err(e) = result {
            tracing::debug!(stream = %self.key, "recording dropped media: {e}");
        }
        while let Some(output) = self.fragmenter.poll_output() {
            if let Err((path, e)) = self.apply(output, config) {
                tracing::warn!(stream = %self.key, path = %path.display(), "recording abandoned: {e}");
                config.stats.failures.fetch_add(1, Ordering::Relaxed);
                self.file = None;
                self.index.lock().writing = None;
            }
        }
    }

    /// Writes the open file's record to the index: always when `now`, else if the last
    /// one is [`INDEX_INTERVAL_MS`] old. `closed` when the file is complete (the record
    /// is then synced).
    fn index(&mut self, closed: bool, now: bool) {
        let Some(open) = &mut self.file else {
            return;
        };
        let time = unix_ms();
        if !now && time.saturating_sub(open.indexed_ms) < INDEX_INTERVAL_MS {
            return;
        }
        open.indexed_ms = time;
        open.span.bytes = open.bytes;
        open.span.closed = closed;
        open.span.mtime_ns = open.file.metadata().map_or(0, |m| mtime_ns(&m));
        let span = open.span;
        let result = {
            let mut state = self.index.lock();
            state.writing = (!closed).then_some(span.id);
            state.record(self.index.dir(), span, closed)
        };
        match result {
            Ok(()) => self.index_failed = false,
            Err(e) if !self.index_failed => {
                self.index_failed = true;
                tracing::warn!(stream = %self.key, "recordings index not updated: {e}");
            }
            Err(_) => {}
        }
    }

    fn apply(&mut self, output: Output, config: &RecordConfig) -> Result<(), (PathBuf, io::Error)> {
        if let Output::Begin { header, unix_ms } = output {
            self.file = None;
            let format = config.fragmenter.format;
            let (file, path, id) = create(&config.dir, &self.key, format, unix_ms)
                .map_err(|e| (config.dir.clone(), e))?;
            let mut open = OpenFile {
                file,
                path,
                bytes: 0,
                span: FileSpan {
                    id,
                    start_ms: unix_ms,
                    end_ms: unix_ms,
                    bytes: 0,
                    mtime_ns: 0,
                    fragments: 0,
                    closed: false,
                },
                indexed_ms: 0,
            };
            tracing::debug!(stream = %self.key, path = %open.path.display(), "recording");
            let written = open.file.write_all(&header);
            open.bytes = header.len() as u64;
            config.stats.bytes.fetch_add(open.bytes, Ordering::Relaxed);
            let path = open.path.clone();
            self.file = Some(open);
            written.map_err(|e| (path, e))?;
            self.index(false, true);
            return Ok(());
        }
        // Without a file (none yet, or abandoned), the rest of this one is dropped.
        let Some(open) = &mut self.file else {
            return Ok(());
        };
        let result = match output {
            Output::Begin { .. } => Ok(()),
            Output::Append { bytes, end_ms } => {
                open.bytes = open.bytes.saturating_add(bytes.len() as u64);
                config
                    .stats
                    .bytes
                    .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                let written = open.file.write_all(&bytes);
                if written.is_ok() {
                    open.span.end_ms = end_ms.max(open.span.start_ms);
                    open.span.fragments = open.span.fragments.saturating_add(1);
                    self.index(false, false);
                }
                written
            }
            Output::Patch { offset, bytes } => open.file.write_all_at(&bytes, offset),
            Output::Sync => {
                let synced = open.file.sync_data();
                if synced.is_ok() {
                    self.index(false, true);
                }
                synced
            }
            Output::End { duration_ms } => {
                let synced = open.file.sync_data();
                if synced.is_ok() {
                    self.index(true, true);
                    let Some(open) = &mut self.file else {
                        return Ok(());
                    };
                    config.stats.files.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(
                        stream = %self.key,
                        path = %open.path.display(),
                        duration_s = duration_ms as f64 / 1000.0,
                        bytes = open.bytes,
                        dropped_frames = self.dropped.load(Ordering::Relaxed),
                        "recorded"
                    );
                    if let Some(n) = &config.notifier {
                        n.notify(
                            crate::hooks::Ended::Record,
                            serde_json::json!({
                                "path": self.key,
                                "file": open.path.display().to_string(),
                                "duration_s": duration_ms as f64 / 1000.0,
                                "bytes": open.bytes,
                            }),
                        );
                    }
                    self.file = None;
                    if let Some(nudge) = &self.nudge {
                        nudge.pass();
                    }
                }
                synced
            }
        };
        result.map_err(|e| (open_path(&self.file), e))
    }
}

fn open_path(file: &Option<OpenFile>) -> PathBuf {
    file.as_ref().map(|f| f.path.clone()).unwrap_or_default()
}

pub(super) fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(0))
}

/// Creates `<dir>/<app>/<stream>/<stream>-<UTC time>[-N].<ext>`, with its directories,
/// never replacing a file.
fn create(
    dir: &Path,
    key: &str,
    format: Format,
    unix_ms: i64,
) -> io::Result<(File, PathBuf, FileId)> {
    let (relative, stream) = key_dir(key);
    let dir = dir.join(relative);
    std::fs::create_dir_all(&dir)?;
    let format = match format {
        Format::Fmp4 => sluice_archive::Format::Fmp4,
        Format::Ts => sluice_archive::Format::Ts,
    };
    for attempt in 0..MAX_NAME_ATTEMPTS {
        let id = FileId::new(unix_ms, attempt, format);
        let path = dir.join(id.file_name(&stream));
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => return Ok((file, path, id)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "every file name for this second is taken",
    ))
}

/// The directory of a stream's recordings under the record dir (`app/…/stream`) and
/// the stream's name, each component made safe.
pub(super) fn key_dir(key: &str) -> (PathBuf, String) {
    let (app, stream) = key.rsplit_once('/').unwrap_or(("", key));
    let mut dir = PathBuf::new();
    let mut apps = app.split('/').filter(|c| !c.is_empty()).peekable();
    if apps.peek().is_none() {
        dir.push("_");
    }
    for component in apps {
        dir.push(safe_component(component));
    }
    let stream = safe_component(stream);
    dir.push(&stream);
    (dir, stream)
}

/// `text` as a harmless file name: bytes outside `[A-Za-z0-9._-]` become `_`, at most
/// [`MAX_COMPONENT_LEN`] of them, and never empty, `.` or `..`.
fn safe_component(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(MAX_COMPONENT_LEN)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.chars().all(|c| c == '.') {
        out = out.replace('.', "_");
        if out.is_empty() {
            out.push('_');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_say_the_stream_and_the_utc_time() {
        let ms = 1_709_210_096_789; // 2024-02-29T12:34:56.789Z
        let name = |attempt, format| FileId::new(ms, attempt, format).file_name("cam1");
        assert_eq!(
            name(0, sluice_archive::Format::Fmp4),
            "cam1-20240229-123456.mp4"
        );
        assert_eq!(
            name(2, sluice_archive::Format::Ts),
            "cam1-20240229-123456-2.ts"
        );
    }

    #[test]
    fn keys_map_to_safe_directories() {
        let dir = |key: &str| key_dir(key).0.to_string_lossy().into_owned();
        assert_eq!(dir("live/cam1"), "live/cam1");
        assert_eq!(dir("a/b/cam"), "a/b/cam");
        assert_eq!(dir("cam"), "_/cam");
        assert_eq!(dir("../.."), "__/__");
        assert_eq!(dir("live/../x"), "live/__/x");
        assert_eq!(dir("live/c a?m"), "live/c_a_m");
        assert_eq!(dir("live/"), "live/_");
        assert_eq!(dir("//x"), "_/x");
        assert_eq!(key_dir(&format!("live/{}", "x".repeat(500))).1.len(), 100);
    }

    #[test]
    fn a_taken_name_gets_a_suffix() {
        let dir = std::env::temp_dir().join(format!("sluice-record-names-{}", std::process::id()));
        let ms = 1_709_210_096_789;
        let (_, first, _) = create(&dir, "live/cam", Format::Fmp4, ms).unwrap();
        let (_, second, id) = create(&dir, "live/cam", Format::Fmp4, ms).unwrap();
        assert_eq!(id.attempt, 1);
        assert!(
            first.ends_with("live/cam/cam-20240229-123456.mp4"),
            "{first:?}"
        );
        assert!(
            second.ends_with("live/cam/cam-20240229-123456-1.mp4"),
            "{second:?}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
