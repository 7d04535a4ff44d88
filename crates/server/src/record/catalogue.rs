//! The recordings catalogue: every recorded stream's files and their spans, in memory,
//! read by the API (and later by playback) and by retention, kept by the writer thread,
//! the loader and removals.
//!
//! Why in memory: listing a stream's recordings for a range must answer in
//! milliseconds with weeks of files; a stream's spans are sorted once and queried by
//! binary search (`sluice_archive::StreamSpans`), and no request touches the disk.
//!
//! # Invariants
//! - A stream's entry is keyed by its directory under the record dir (`app/name`, each
//!   component made safe as the writer makes it).
//! - A stream's spans and its index log change together, under the entry's lock: the
//!   writer thread (a file opened, grown, closed), the loader (files checked at start)
//!   and removals (retention, the API's `DELETE`) take it in turn, so the log's records
//!   never interleave. The lock is never
//!   held across a request's await; the API holds it for one query.
//! - The first user of an entry opens its log and takes in the spans it holds.

use super::index::Log;
use sluice_archive::span::Summary;
use sluice_archive::{FileId, FileSpan, StreamSpans};
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

/// Every recorded stream under the record dir.
#[derive(Debug)]
pub struct Catalogue {
    root: PathBuf,
    streams: RwLock<BTreeMap<String, Arc<StreamEntry>>>,
    /// The loader has checked every stream found at start.
    loaded: AtomicBool,
    /// The server stops: the loader ends early.
    pub(super) stopping: AtomicBool,
}

/// One stream's recordings.
#[derive(Debug)]
pub struct StreamEntry {
    key: String,
    dir: PathBuf,
    /// The stream's name: its files are `<name>-<time>.<ext>`.
    name: String,
    state: Mutex<State>,
}

/// What an entry's lock guards.
#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) spans: StreamSpans,
    log: Option<Log>,
    /// The file the writer has open, if any.
    pub(super) writing: Option<FileId>,
}

/// One file of a listing.
#[derive(Debug, Clone)]
pub struct Listed {
    /// Its path under the record dir.
    pub path: String,
    /// Its span.
    pub span: FileSpan,
}

impl Catalogue {
    /// An empty catalogue of the recordings under `root`.
    pub fn new(root: PathBuf) -> Catalogue {
        Catalogue {
            root,
            streams: RwLock::new(BTreeMap::new()),
            loaded: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
        }
    }

    /// The record dir.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether the loader finished: until then, streams not yet checked may be missing.
    pub fn loaded(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }

    pub(super) fn set_loaded(&self) {
        self.loaded.store(true, Ordering::Release);
    }

    /// The entry of the stream whose directory is `key` (relative), made if new.
    pub(super) fn entry(&self, key: &str) -> Arc<StreamEntry> {
        if let Some(e) = self.get(key) {
            return e;
        }
        let mut streams = self.streams.write().unwrap_or_else(|e| e.into_inner());
        streams
            .entry(key.to_string())
            .or_insert_with(|| {
                let name = key.rsplit('/').next().unwrap_or(key).to_string();
                Arc::new(StreamEntry {
                    key: key.to_string(),
                    dir: self.root.join(key),
                    name,
                    state: Mutex::new(State::default()),
                })
            })
            .clone()
    }

    /// The entry of the stream whose directory is `key`.
    pub fn get(&self, key: &str) -> Option<Arc<StreamEntry>> {
        let streams = self.streams.read().unwrap_or_else(|e| e.into_inner());
        streams.get(key).cloned()
    }

    /// Every stream's entry, by key.
    pub(super) fn entries(&self) -> Vec<Arc<StreamEntry>> {
        let streams = self.streams.read().unwrap_or_else(|e| e.into_inner());
        streams.values().cloned().collect()
    }

    /// Every stream with at least one file, with its summary, by key.
    pub fn summaries(&self) -> Vec<(String, Summary)> {
        self.entries()
            .iter()
            .map(|e| (e.key.clone(), e.lock().spans.summary()))
            .filter(|(_, s)| s.files > 0)
            .collect()
    }

    /// The files and byte ranges that hold `[from, to)` of the stream whose directory
    /// is `key`, in time order, at most `limit` of them (and whether there were more):
    /// for playback by range. Each file is whole up to `span.bytes`; its fragments carry
    /// `prft` boxes to seek within it.
    pub fn covering(&self, key: &str, from: i64, to: i64, limit: usize) -> (Vec<Listed>, bool) {
        self.get(key)
            .map_or_else(|| (Vec::new(), false), |e| e.files(from, to, limit))
    }
}

impl StreamEntry {
    /// The stream's directory key (`app/name`).
    pub fn key(&self) -> &str {
        &self.key
    }

    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// At most `limit` files holding any of `[from, to)`, and whether there were more.
    pub fn files(&self, from: i64, to: i64, limit: usize) -> (Vec<Listed>, bool) {
        let state = self.lock();
        let mut out = Vec::new();
        let mut more = false;
        for span in state.spans.query(from, to) {
            if out.len() == limit {
                more = true;
                break;
            }
            out.push(Listed {
                path: format!("{}/{}", self.key, span.id.file_name(&self.name)),
                span: *span,
            });
        }
        (out, more)
    }

    /// The file `id`, if the stream has it (playback names files by id).
    pub fn file(&self, id: FileId) -> Option<Listed> {
        let state = self.lock();
        state.spans.get(id).map(|span| Listed {
            path: format!("{}/{}", self.key, span.id.file_name(&self.name)),
            span: *span,
        })
    }

    /// The gapless runs within `[from, to)`.
    pub fn runs(&self, from: i64, to: i64) -> Vec<sluice_archive::span::Run> {
        self.lock().spans.runs(from, to)
    }
}

impl State {
    /// Opens the log (taking in the spans it holds) if it is not open yet; whether it
    /// had to be repaired (a torn tail, or unreadable).
    pub(super) fn open_log(&mut self, dir: &Path) -> io::Result<bool> {
        if self.log.is_some() {
            return Ok(false);
        }
        std::fs::create_dir_all(dir)?;
        let (log, opened) = Log::open(dir)?;
        for span in opened.spans {
            // What the writer already said about a file is newer than the log.
            if self.spans.get(span.id).is_none() {
                self.spans.upsert(span);
            }
        }
        self.log = Some(log);
        Ok(opened.repaired)
    }

    /// The log, opened on first use.
    fn log(&mut self, dir: &Path) -> io::Result<&mut Log> {
        self.open_log(dir)?;
        self.log
            .as_mut()
            .ok_or_else(|| io::Error::other("index log not open"))
    }

    /// Records `span` in memory and in the log (synced when `durable`), compacting the
    /// log when it is mostly superseded records.
    pub(super) fn record(&mut self, dir: &Path, span: FileSpan, durable: bool) -> io::Result<()> {
        self.record_all(dir, &[span], durable)
    }

    /// [`State::record`] of several files, appended in one write.
    pub(super) fn record_all(
        &mut self,
        dir: &Path,
        spans: &[FileSpan],
        durable: bool,
    ) -> io::Result<()> {
        if spans.is_empty() {
            return Ok(());
        }
        if spans.len() > 1 {
            let mut all: Vec<FileSpan> = self.spans.files().to_vec();
            all.extend_from_slice(spans);
            self.spans = StreamSpans::from_files(all);
        } else {
            for span in spans {
                self.spans.upsert(*span);
            }
        }
        let log = self.log(dir)?;
        log.append(spans)?;
        if durable {
            log.sync()?;
        }
        self.compact_if_needed(dir)
    }

    /// Forgets a file that is gone from the disk.
    pub(super) fn forget(&mut self, dir: &Path, span: FileSpan) -> io::Result<()> {
        self.spans.remove(span.id);
        self.log(dir)?.append_removed(&span)
    }

    /// Rewrites the log when most of its records are superseded.
    pub(super) fn compact_if_needed(&mut self, dir: &Path) -> io::Result<()> {
        let live = self.spans.files().len();
        if self.log(dir)?.wants_compaction(live) {
            self.log = Some(Log::rewrite(dir, self.spans.files())?);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_archive::Format;

    #[test]
    fn a_growing_file_keeps_the_log_small_and_listings_current() {
        let root = std::env::temp_dir().join(format!("sluice-catalogue-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let catalogue = Catalogue::new(root.clone());
        let entry = catalogue.entry("live/cam");
        let id = FileId::new(1_000_000, 0, Format::Fmp4);
        // An hour of updates, once a second, as the writer makes them.
        for s in 0..3600 {
            let span = FileSpan {
                id,
                start_ms: 1_000_000,
                end_ms: 1_000_000 + s * 1000,
                bytes: s as u64 * 100,
                mtime_ns: s,
                fragments: s as u32,
                closed: s == 3599,
            };
            entry.lock().record(entry.dir(), span, s == 3599).unwrap();
        }
        let log = std::fs::metadata(root.join("live/cam").join(super::super::index::LOG_NAME))
            .unwrap()
            .len();
        assert!(log < 16 + 64 * 2100, "compacted: {log} bytes");
        let (files, more) = catalogue.covering("live/cam", 4_000_000, 4_000_001, 10);
        assert!(!more);
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].path, "live/cam/cam-19700101-001640.mp4");
        assert!(files[0].span.closed);
        let summaries = catalogue.summaries();
        assert_eq!(summaries[0].1.last_ms, 1_000_000 + 3_599_000);
        // A new catalogue reads the same back.
        let again = Catalogue::new(root.clone());
        let entry = again.entry("live/cam");
        entry.lock().open_log(entry.dir()).unwrap();
        assert_eq!(entry.files(0, i64::MAX, 10).0[0].span, files[0].span);
        std::fs::remove_dir_all(root).unwrap();
    }
}
