//! Recordings retention, the I/O: the `sluice-record-retain` thread that applies the
//! limits (see `retention`) every [`PERIOD`] and whenever the writer completes a file,
//! and the removal of files, for it and for `DELETE /api/v1/recordings/...`.
//!
//! Why a thread: a pass lists every stream's files, measures the free space (`statvfs`)
//! and unlinks files, each of which may wait on the disk; none of that may run on a
//! worker. The API's removals run on the blocking pool.
//!
//! # Invariants
//! - A file is removed only if the catalogue lists it (files the writer did not make
//!   are never touched), the writer does not have it open, and no reader holds it
//!   (`io::readers`): the removal claims it first, so no reader starts meanwhile.
//! - The catalogue forgets a file (and its index log says so) before it is unlinked,
//!   under the stream's lock: the writer may then make a new file of the same name
//!   without the catalogue losing it. If the unlink fails, the file is recorded again.
//! - Every removal is logged (`recording removed`, with its reason) and counted.

use super::catalogue::{Catalogue, StreamEntry};
use super::retention::{self, Candidate, Limits, Reason, RetentionConfig};
use super::RecordStats;
use crate::io::readers::{Claim, FileIdent, Readers};
use arc_swap::ArcSwap;
use sluice_archive::{time, FileSpan};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

/// How often a pass runs besides after each completed file: ages pass and disks fill
/// while no file is completed.
pub(super) const PERIOD: Duration = Duration::from_secs(60);

/// What the retention thread is told.
#[derive(Debug)]
pub(super) enum Wake {
    /// A file was completed: a pass now.
    Pass,
    /// The server stops.
    Stop,
}

/// The way to wake the retention thread; wakes that come while one is pending merge.
#[derive(Debug, Clone)]
pub(super) struct Nudge(SyncSender<Wake>);

impl Nudge {
    pub(super) fn new(tx: SyncSender<Wake>) -> Nudge {
        Nudge(tx)
    }

    /// Asks for a pass soon.
    pub(super) fn pass(&self) {
        match self.0.try_send(Wake::Pass) {
            Ok(()) | Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

/// What a removal needs besides the file.
#[derive(Debug, Clone)]
pub struct Removal {
    pub(super) catalogue: Arc<Catalogue>,
    pub(super) readers: Arc<Readers>,
    pub(super) stats: Arc<RecordStats>,
}

/// Why a file was not removed.
#[derive(Debug, thiserror::Error)]
pub enum RemoveError {
    /// The writer has it open.
    #[error("{path}: being recorded")]
    Writing { path: String },
    /// A player or download holds it.
    #[error("{path}: being read")]
    Reading { path: String },
    /// No such stream.
    #[error("no recordings of this stream")]
    NoStream,
    /// The file system refused.
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
}

/// A file removed.
#[derive(Debug, Clone)]
pub struct Removed {
    /// Its path under the record dir.
    pub path: String,
    pub span: FileSpan,
}

/// A file claimed for removal, forgotten by the catalogue, not unlinked yet.
struct Doomed<'a> {
    path: PathBuf,
    listed: String,
    span: FileSpan,
    bytes: u64,
    _claim: Claim<'a>,
}

impl Removal {
    /// Removes the files of `entry` wholly within `[from, to)`, all or none: none when
    /// one of them is being read (a 409 for the API). The file being written is never
    /// wholly within a range (its end is still to come): it is kept, as are files
    /// partly within. Files gone from the disk meanwhile are forgotten, as removed.
    pub fn remove_range(
        &self,
        key: &str,
        from: i64,
        to: i64,
        reason: Reason,
    ) -> Result<Vec<Removed>, RemoveError> {
        let entry = self.catalogue.get(key).ok_or(RemoveError::NoStream)?;
        let doomed = {
            let mut state = entry.lock();
            let spans: Vec<FileSpan> = state
                .spans
                .files()
                .iter()
                .filter(|s| s.start_ms >= from && s.end_ms <= to)
                .filter(|s| state.writing != Some(s.id))
                .copied()
                .collect();
            // Every file claimed before any is forgotten: all or none.
            let mut doomed = Vec::with_capacity(spans.len());
            for span in &spans {
                doomed.extend(self.claim(&entry, &state, *span)?);
            }
            for span in spans {
                forget(&entry, &mut state, span);
            }
            doomed
        };
        Ok(self.unlink_all(&entry, doomed, reason))
    }

    /// Removes one file of `entry` (for a retention pass).
    fn remove_one(
        &self,
        entry: &StreamEntry,
        span: FileSpan,
        reason: Reason,
    ) -> Result<Option<Removed>, RemoveError> {
        let doomed = {
            let mut state = entry.lock();
            if state.spans.get(span.id).is_none() {
                return Ok(None);
            }
            let doomed = self.claim(entry, &state, span)?;
            forget(entry, &mut state, span);
            doomed
        };
        Ok(self
            .unlink_all(entry, doomed.into_iter().collect(), reason)
            .pop())
    }

    /// Claims `span`'s file for removal (under the entry's lock); `None` when it is
    /// gone from the disk already (the caller forgets it all the same).
    fn claim<'a>(
        &'a self,
        entry: &StreamEntry,
        state: &super::catalogue::State,
        span: FileSpan,
    ) -> Result<Option<Doomed<'a>>, RemoveError> {
        let listed = format!("{}/{}", entry.key(), span.id.file_name(entry.name()));
        if state.writing == Some(span.id) {
            return Err(RemoveError::Writing { path: listed });
        }
        let path = entry.dir().join(span.id.file_name(entry.name()));
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                tracing::info!(path = %path.display(), "recording gone from the disk: forgotten");
                return Ok(None);
            }
            Err(source) => {
                return Err(RemoveError::Io {
                    path: listed,
                    source,
                })
            }
        };
        let Some(claim) = self.readers.claim(FileIdent::of(&meta)) else {
            return Err(RemoveError::Reading { path: listed });
        };
        Ok(Some(Doomed {
            path,
            listed,
            span,
            bytes: meta.len(),
            _claim: claim,
        }))
    }

    /// Unlinks what was claimed and forgotten, logging and counting each; a file that
    /// cannot be unlinked is recorded again (and logged).
    fn unlink_all(
        &self,
        entry: &StreamEntry,
        doomed: Vec<Doomed<'_>>,
        reason: Reason,
    ) -> Vec<Removed> {
        let mut removed = Vec::with_capacity(doomed.len());
        for d in doomed {
            if let Err(e) = std::fs::remove_file(&d.path) {
                if e.kind() != io::ErrorKind::NotFound {
                    tracing::warn!(path = %d.path.display(), reason = reason.name(), "recording not removed: {e}");
                    let mut state = entry.lock();
                    if let Err(e) = state.record(entry.dir(), d.span, false) {
                        tracing::warn!(stream = entry.key(), "recordings index not updated: {e}");
                    }
                    continue;
                }
            }
            self.stats.removed[reason.index()].fetch_add(1, Ordering::Relaxed);
            self.stats.removed_bytes[reason.index()].fetch_add(d.bytes, Ordering::Relaxed);
            tracing::info!(
                path = %d.path.display(),
                reason = reason.name(),
                bytes = d.bytes,
                start = %time::format_rfc3339(d.span.start_ms),
                end = %time::format_rfc3339(d.span.end_ms),
                "recording removed"
            );
            removed.push(Removed {
                path: d.listed,
                span: d.span,
            });
        }
        removed
    }
}

/// The catalogue and the index log forget `span` (under the entry's lock).
fn forget(entry: &StreamEntry, state: &mut super::catalogue::State, span: FileSpan) {
    let dir = entry.dir();
    if let Err(e) = state
        .forget(dir, span)
        .and_then(|()| state.compact_if_needed(dir))
    {
        tracing::warn!(stream = entry.key(), "recordings index not updated: {e}");
    }
}

/// Runs passes until told to stop.
pub(super) fn run(rx: Receiver<Wake>, removal: &Removal, config: &ArcSwap<RetentionConfig>) {
    loop {
        match rx.recv_timeout(PERIOD) {
            Ok(Wake::Pass) | Err(RecvTimeoutError::Timeout) => pass(removal, &config.load()),
            Ok(Wake::Stop) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// One pass: the files over the limits go, oldest first, those in use left for a
/// later pass.
pub(super) fn pass(removal: &Removal, config: &RetentionConfig) {
    let catalogue = &removal.catalogue;
    // Until the index is loaded, streams are missing and the totals are short.
    if config.is_off() || !catalogue.loaded() {
        return;
    }
    let mut files: Vec<(Arc<StreamEntry>, FileSpan)> = Vec::new();
    let mut candidates = Vec::new();
    for entry in catalogue.entries() {
        let group = config.group(entry.key());
        let state = entry.lock();
        for span in state.spans.files() {
            candidates.push(Candidate {
                group,
                start_ms: span.start_ms,
                end_ms: span.end_ms,
                bytes: span.bytes,
                busy: state.writing == Some(span.id),
            });
            files.push((entry.clone(), *span));
        }
    }
    let mut limits = Limits {
        groups: config.groups(),
        max_bytes: config.max_bytes,
        min_free_bytes: config.min_free_bytes,
        free_bytes: config
            .min_free_bytes
            .and_then(|_| free_bytes(catalogue.root())),
        now_ms: super::writer::unix_ms(),
    };
    // Files found in use are marked and the rest chosen again, so that the next oldest
    // goes in their place; each round marks one more or ends the pass.
    let mut gone = vec![false; files.len()];
    loop {
        let alive: Vec<usize> = (0..files.len()).filter(|&i| !gone[i]).collect();
        let now: Vec<Candidate> = alive.iter().map(|&i| candidates[i]).collect();
        let mut found_busy = false;
        for (j, reason) in retention::select(&now, &limits) {
            if catalogue.stopping.load(Ordering::Relaxed) {
                return;
            }
            let Some(&i) = alive.get(j) else { continue };
            let (entry, span) = &files[i];
            match removal.remove_one(entry, *span, reason) {
                Ok(removed) => {
                    gone[i] = true;
                    if let (Some(free), Some(r)) = (&mut limits.free_bytes, removed) {
                        *free = free.saturating_add(r.span.bytes);
                    }
                }
                Err(e) => {
                    match &e {
                        RemoveError::Io { .. } => tracing::warn!("recording not removed: {e}"),
                        _ => tracing::debug!("recording kept for now: {e}"),
                    }
                    candidates[i].busy = true;
                    found_busy = true;
                }
            }
        }
        if !found_busy {
            return;
        }
    }
}

/// Bytes free to unprivileged users on the file system of `dir`.
fn free_bytes(dir: &Path) -> Option<u64> {
    match rustix::fs::statvfs(dir) {
        Ok(st) => Some(st.f_bavail.saturating_mul(st.f_frsize)),
        Err(e) => {
            tracing::warn!(dir = %dir.display(), "free space not known: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_archive::{FileId, Format};

    const T0: i64 = 1_795_773_600_000;

    /// A stream with three files of 100 bytes, 10 s each, on disk and in the catalogue.
    fn three_files(name: &str) -> (Removal, Arc<StreamEntry>, Vec<FileSpan>) {
        let root =
            std::env::temp_dir().join(format!("sluice-pruner-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let catalogue = Arc::new(Catalogue::new(root));
        let entry = catalogue.entry("live/cam");
        std::fs::create_dir_all(entry.dir()).unwrap();
        let spans: Vec<FileSpan> = (0..3)
            .map(|i| FileSpan {
                id: FileId::new(T0 + i * 10_000, 0, Format::Fmp4),
                start_ms: T0 + i * 10_000,
                end_ms: T0 + i * 10_000 + 10_000,
                bytes: 100,
                mtime_ns: 0,
                fragments: 10,
                closed: true,
            })
            .collect();
        for span in &spans {
            let path = entry.dir().join(span.id.file_name("cam"));
            std::fs::write(path, [0; 100]).unwrap();
            entry.lock().record(entry.dir(), *span, false).unwrap();
        }
        catalogue.set_loaded();
        let removal = Removal {
            catalogue,
            readers: Default::default(),
            stats: Default::default(),
        };
        (removal, entry, spans)
    }

    fn on_disk(entry: &StreamEntry, span: &FileSpan) -> bool {
        entry.dir().join(span.id.file_name("cam")).exists()
    }

    fn listed(entry: &StreamEntry) -> usize {
        entry.lock().spans.files().len()
    }

    #[test]
    fn a_pass_skips_the_files_being_written_or_read_until_they_are_free() {
        let (removal, entry, spans) = three_files("pass");
        entry.lock().writing = Some(spans[2].id);
        let meta = std::fs::metadata(entry.dir().join(spans[0].id.file_name("cam"))).unwrap();
        let played = removal.readers.hold(&meta).unwrap();
        let config = RetentionConfig {
            max_bytes: Some(1),
            ..RetentionConfig::default()
        };
        pass(&removal, &config);
        // The oldest is being read, the newest written: the middle one goes.
        assert!(on_disk(&entry, &spans[0]) && on_disk(&entry, &spans[2]));
        assert!(!on_disk(&entry, &spans[1]));
        assert_eq!(listed(&entry), 2);
        let bytes = Reason::Bytes.index();
        assert_eq!(removal.stats.removed[bytes].load(Ordering::Relaxed), 1);
        assert_eq!(
            removal.stats.removed_bytes[bytes].load(Ordering::Relaxed),
            100
        );
        // The player ends: the next pass removes it.
        drop(played);
        pass(&removal, &config);
        assert!(!on_disk(&entry, &spans[0]));
        assert_eq!(listed(&entry), 1);
        assert_eq!(removal.stats.removed[bytes].load(Ordering::Relaxed), 2);
        // The index log says so too.
        let again = Catalogue::new(removal.catalogue.root().to_path_buf());
        let e = again.entry("live/cam");
        e.lock().open_log(e.dir()).unwrap();
        assert_eq!(e.lock().spans.files(), &spans[2..]);
        std::fs::remove_dir_all(removal.catalogue.root()).unwrap();
    }

    #[test]
    fn a_range_is_removed_all_or_none() {
        let (removal, entry, spans) = three_files("range");
        let all = (T0, T0 + 30_000);
        // Being read: nothing removed, and the claims taken are let go.
        let meta = std::fs::metadata(entry.dir().join(spans[1].id.file_name("cam"))).unwrap();
        let played = removal.readers.hold(&meta).unwrap();
        let r = removal.remove_range("live/cam", all.0, all.1, Reason::Api);
        assert!(matches!(r, Err(RemoveError::Reading { .. })), "{r:?}");
        assert!(spans.iter().all(|s| on_disk(&entry, s)));
        assert_eq!(listed(&entry), 3);
        drop(played);
        assert!(
            removal.readers.hold(&meta).is_some(),
            "no claim left behind"
        );
        // Only the files wholly within: the first two.
        let removed = removal
            .remove_range("live/cam", all.0, all.1 - 1, Reason::Api)
            .unwrap();
        let paths: Vec<&str> = removed.iter().map(|r| r.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "live/cam/cam-20261127-100000.mp4",
                "live/cam/cam-20261127-100010.mp4"
            ]
        );
        assert!(!on_disk(&entry, &spans[0]) && !on_disk(&entry, &spans[1]));
        assert_eq!(listed(&entry), 1);
        let api = Reason::Api.index();
        assert_eq!(removal.stats.removed[api].load(Ordering::Relaxed), 2);
        // The file being written is kept, whatever the range.
        entry.lock().writing = Some(spans[2].id);
        let removed = removal
            .remove_range("live/cam", all.0, i64::MAX - 1, Reason::Api)
            .unwrap();
        assert!(removed.is_empty() && on_disk(&entry, &spans[2]));
        entry.lock().writing = None;
        // A file gone from the disk behind our back is forgotten, not an error.
        std::fs::remove_file(entry.dir().join(spans[2].id.file_name("cam"))).unwrap();
        let removed = removal
            .remove_range("live/cam", all.0, all.1, Reason::Api)
            .unwrap();
        assert!(removed.is_empty());
        assert_eq!(listed(&entry), 0);
        assert!(matches!(
            removal.remove_range("live/nope", 0, 1, Reason::Api),
            Err(RemoveError::NoStream)
        ));
        std::fs::remove_dir_all(removal.catalogue.root()).unwrap();
    }
}
