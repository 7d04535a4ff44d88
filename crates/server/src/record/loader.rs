//! The start-up check of the recordings: every stream directory under the record dir,
//! its index log read, each file's size and mtime compared with its record, and the
//! files that disagree (or have no record) read again with `sluice_archive`'s scans.
//!
//! Why at start and on its own threads: the files of weeks of recordings take seconds
//! to `stat` and minutes to read when no index is left; the workers serve meanwhile
//! (the API says `indexing` until it is done). The files are listed and read without
//! the stream's lock: the writer thread waits only while a stream's log is opened or
//! its results merged, and what the writer recorded meanwhile wins.
//!
//! # Invariants
//! - A file is read again only when its record is missing or its size or mtime differs:
//!   a file cut by `kill -9` after its last record is read again, and its span ends at
//!   its last complete fragment.
//! - A record of a file that is gone is removed; a file left open by a server that
//!   died (no writer has it now) is marked closed.
//! - Reads are bounded: box headers, `moov` and `moof` boxes (see `sluice_archive::fmp4`),
//!   or the two ends of a TS file.

use super::catalogue::{Catalogue, StreamEntry};
use super::index::{mtime_ns, LOG_NAME};
use sluice_archive::{ts, FileId, FileSpan, Fmp4Scan, Format};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Directory levels searched below the record dir (apps may nest).
const MAX_DEPTH: usize = 8;
/// Threads that check streams.
const MAX_THREADS: usize = 4;

/// What a load did.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Report {
    pub(super) streams: usize,
    pub(super) files: usize,
    /// Files read because their record was missing or stale.
    pub(super) scanned: usize,
    /// Records of files that are gone.
    pub(super) removed: usize,
    /// Streams whose log was torn or unreadable.
    pub(super) repaired: usize,
    /// Streams that could not be checked (an I/O error, logged).
    pub(super) failed: usize,
}

impl Report {
    fn add(&mut self, o: Report) {
        self.streams += o.streams;
        self.files += o.files;
        self.scanned += o.scanned;
        self.removed += o.removed;
        self.repaired += o.repaired;
        self.failed += o.failed;
    }
}

/// Checks every stream under the catalogue's root, then marks it loaded.
pub(super) fn load(catalogue: &Catalogue) -> Report {
    let dirs = stream_dirs(catalogue.root());
    let next = AtomicUsize::new(0);
    let total = Mutex::new(Report::default());
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_THREADS);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut mine = Report::default();
                while let Some(key) = dirs.get(next.fetch_add(1, Ordering::Relaxed)) {
                    if catalogue.stopping.load(Ordering::Relaxed) {
                        break;
                    }
                    let entry = catalogue.entry(key);
                    match check(&entry) {
                        Ok(r) => mine.add(r),
                        Err(e) => {
                            mine.failed += 1;
                            tracing::warn!(stream = key, "recordings index not checked: {e}");
                        }
                    }
                }
                total.lock().unwrap_or_else(|e| e.into_inner()).add(mine);
            });
        }
    });
    catalogue.set_loaded();
    total.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// The directories under `root` (relative, `/`-separated) holding an index log or a
/// recording named after the directory.
fn stream_dirs(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![(String::new(), 0usize)];
    while let Some((rel, depth)) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(root.join(&rel)) else {
            continue;
        };
        let name = rel.rsplit('/').next().unwrap_or_default().to_string();
        let mut is_stream = false;
        for e in entries.flatten() {
            let file_name = e.file_name();
            let Some(file_name) = file_name.to_str() else {
                continue;
            };
            if file_name == LOG_NAME {
                is_stream = true;
            }
            if file_name.starts_with('.') {
                continue;
            }
            let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
            if is_dir && depth < MAX_DEPTH {
                let child = if rel.is_empty() {
                    file_name.to_string()
                } else {
                    format!("{rel}/{file_name}")
                };
                todo.push((child, depth + 1));
            } else if !is_stream && !rel.is_empty() && FileId::parse(&name, file_name).is_some() {
                is_stream = true;
            }
        }
        if is_stream {
            out.push(rel);
        }
    }
    out.sort();
    out
}

/// Checks one stream's log against its files. The files are listed and read without
/// the entry's lock (a rebuild reads thousands of files; the writer thread must not
/// wait for it): what the writer changed meanwhile wins over what was read.
fn check(entry: &StreamEntry) -> io::Result<Report> {
    let dir = entry.dir();
    let mut report = Report {
        streams: 1,
        ..Report::default()
    };
    let known: HashMap<FileId, FileSpan> = {
        let mut state = entry.lock();
        report.repaired += usize::from(state.open_log(dir)?);
        state.spans.files().iter().map(|f| (f.id, *f)).collect()
    };
    let mut on_disk = HashSet::new();
    let mut updates = Vec::new();
    for e in std::fs::read_dir(dir)?.flatten() {
        let file_name = e.file_name();
        let Some(id) = file_name
            .to_str()
            .and_then(|n| FileId::parse(entry.name(), n))
        else {
            continue;
        };
        let Ok(meta) = e.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        on_disk.insert(id);
        report.files += 1;
        let (size, mtime) = (meta.len(), mtime_ns(&meta));
        match known.get(&id) {
            Some(k) if k.bytes == size && k.mtime_ns == mtime => {
                // Left open by a server that died, unless the writer has it (below).
                if !k.closed {
                    updates.push(FileSpan { closed: true, ..*k });
                }
            }
            _ => match scan(&e.path(), id, size, mtime) {
                Ok(span) => {
                    report.scanned += 1;
                    updates.push(span);
                }
                Err(err) => {
                    tracing::warn!(path = %e.path().display(), "recording not read: {err}");
                }
            },
        }
    }
    let mut state = entry.lock();
    // The writer keeps its own file's record current, and a record it wrote since is
    // newer than what was read.
    updates.retain(|u| {
        state.writing != Some(u.id) && state.spans.get(u.id).copied() == known.get(&u.id).copied()
    });
    state.record_all(dir, &updates, false)?;
    let gone: Vec<FileSpan> = state
        .spans
        .files()
        .iter()
        .filter(|f| {
            known.contains_key(&f.id) && !on_disk.contains(&f.id) && state.writing != Some(f.id)
        })
        .copied()
        .collect();
    for span in gone {
        report.removed += 1;
        state.forget(dir, span)?;
    }
    state.compact_if_needed(dir)?;
    Ok(report)
}

/// The span of the file at `path` read from its bytes (`size` and `mtime` as the
/// directory said). A file without a complete fragment spans nothing at its name's time.
pub(super) fn scan(path: &Path, id: FileId, size: u64, mtime: i64) -> io::Result<FileSpan> {
    let file = File::open(path)?;
    let name_ms = id.name_ms();
    let mut span = FileSpan {
        id,
        start_ms: name_ms,
        end_ms: name_ms,
        bytes: size,
        mtime_ns: mtime,
        fragments: 0,
        closed: true,
    };
    match id.format {
        Format::Fmp4 => {
            let mut scan = Fmp4Scan::new(size);
            let mut window = Window::default();
            while let Some(want) = scan.next_read() {
                let bytes = window.read(&file, want.offset, want.len)?;
                if let Err(e) = scan.feed(bytes) {
                    tracing::debug!(path = %path.display(), "recording read up to an error: {e}");
                }
            }
            if let Some(s) = scan.scanned(name_ms) {
                span.start_ms = s.start_ms;
                span.end_ms = s.end_ms;
                span.fragments = s.fragments;
            }
        }
        Format::Ts => {
            let window = ts::WINDOW.min(usize::try_from(size).unwrap_or(usize::MAX));
            let mut head = vec![0; window];
            let n = read_at(&file, &mut head, 0)?;
            head.truncate(n);
            let mut tail = vec![0; window];
            let n = read_at(&file, &mut tail, size.saturating_sub(window as u64))?;
            tail.truncate(n);
            if let Some(ms) = ts::duration_ms(&head, &tail) {
                span.end_ms = name_ms.saturating_add(ms);
            }
        }
    }
    Ok(span)
}

/// Bytes of a file read ahead: a fragment's `prft`, `moof` and `mdat` header are
/// adjacent, so one read serves the scanner's several requests (a fifth of the system
/// calls of reading each). One page: a `moof` of a second of video and audio is about
/// 1.5 KB, and reading further ahead copies media nobody needs. Measured on 7200
/// hour-long files of 1 s fragments (bench/recordings-index.py, page cache warm): 14.4 s
/// with this window, 15.4 s with none, 120 s with 64 KB windows.
#[derive(Default)]
struct Window {
    buf: Vec<u8>,
    start: u64,
}

impl Window {
    const AHEAD: usize = 4 << 10;

    /// Up to `len` bytes at `offset` (fewer at the end of the file).
    fn read(&mut self, file: &File, offset: u64, len: usize) -> io::Result<&[u8]> {
        let end = self.start + self.buf.len() as u64;
        let held = offset >= self.start && offset.saturating_add(len as u64) <= end;
        if !held {
            self.buf.resize(len.max(Self::AHEAD), 0);
            let n = read_at(file, &mut self.buf, offset)?;
            self.buf.truncate(n);
            self.start = offset;
        }
        let from = (offset - self.start) as usize;
        let to = from.saturating_add(len).min(self.buf.len());
        Ok(self.buf.get(from..to).unwrap_or_default())
    }
}

/// Reads up to `buf.len()` bytes at `offset`; fewer only at the end of the file.
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        let Some(rest) = buf.get_mut(done..) else {
            break;
        };
        match file.read_at(rest, offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::fragmenter::tests::{audio, config, drain, file_bytes, frames, video};
    use crate::record::fragmenter::{Format as Container, Fragmenter};
    use std::sync::Arc;

    const T0: i64 = 1_795_773_600_250;

    /// A recording of `seconds` (1 s fragments) begun at `unix_ms`, as the writer
    /// leaves it.
    fn recording(unix_ms: i64, seconds: i64) -> Vec<u8> {
        let mut f = Fragmenter::new(config(Container::Fmp4));
        f.set_tracks(Some(&video()), Some(&audio())).unwrap();
        for frame in frames(0, seconds * 25, 25, false) {
            f.push(&frame, unix_ms).unwrap();
        }
        f.finish().unwrap();
        file_bytes(&drain(&mut f)).remove(0)
    }

    fn spans(catalogue: &Catalogue) -> Vec<FileSpan> {
        catalogue
            .get("live/cam")
            .unwrap()
            .lock()
            .spans
            .files()
            .to_vec()
    }

    #[test]
    fn rebuilds_then_trusts_the_index_then_reads_what_changed() {
        let root = std::env::temp_dir().join(format!("sluice-loader-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("live/cam");
        std::fs::create_dir_all(&dir).unwrap();
        let a = FileId::new(T0, 0, Format::Fmp4);
        let b = FileId::new(T0 + 10_000, 0, Format::Fmp4);
        std::fs::write(dir.join(a.file_name("cam")), recording(T0, 3)).unwrap();
        std::fs::write(dir.join(b.file_name("cam")), recording(T0 + 10_000, 2)).unwrap();
        // Not recordings: ignored.
        std::fs::write(dir.join("notes.txt"), b"x").unwrap();

        // No index: both files read; times from their prft boxes.
        let first = Arc::new(Catalogue::new(root.clone()));
        let r = load(&first);
        assert_eq!((r.streams, r.files, r.scanned, r.removed), (1, 2, 2, 0));
        assert!(first.loaded());
        let found = spans(&first);
        let times: Vec<(i64, i64)> = found.iter().map(|s| (s.start_ms, s.end_ms)).collect();
        assert_eq!(times, [(T0, T0 + 3000), (T0 + 10_000, T0 + 12_000)]);
        assert!(found.iter().all(|s| s.closed && s.fragments > 0));
        assert!(dir.join(LOG_NAME).exists());

        // Index present and right: nothing read, the same spans.
        let second = Catalogue::new(root.clone());
        let r = load(&second);
        assert_eq!((r.files, r.scanned), (2, 0));
        assert_eq!(spans(&second), found);

        // A cut fragment appended to b (kill -9 mid-write) and a gone: b read again,
        // same span (its complete fragments), a forgotten.
        let mut cut = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join(b.file_name("cam")))
            .unwrap();
        std::io::Write::write_all(&mut cut, &[0, 0, 1, 0, b'm', b'o', b'o', b'f', 1, 2]).unwrap();
        std::fs::remove_file(dir.join(a.file_name("cam"))).unwrap();
        let third = Catalogue::new(root.clone());
        let r = load(&third);
        assert_eq!((r.files, r.scanned, r.removed), (1, 1, 1));
        let now = spans(&third);
        assert_eq!(now.len(), 1);
        assert_eq!((now[0].start_ms, now[0].end_ms), (T0 + 10_000, T0 + 12_000));
        assert_eq!(now[0].bytes, found[1].bytes + 10);

        // A torn index tail: repaired, nothing lost but the torn record.
        let mut log = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join(LOG_NAME))
            .unwrap();
        std::io::Write::write_all(&mut log, &[7; 20]).unwrap();
        let fourth = Catalogue::new(root.clone());
        let r = load(&fourth);
        assert_eq!((r.repaired, r.scanned), (1, 0));
        assert_eq!(spans(&fourth), now);
        std::fs::remove_dir_all(root).unwrap();
    }
}
