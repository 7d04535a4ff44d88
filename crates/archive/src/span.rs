//! The span model: which wall-clock time (UTC ms) each recording file holds, and a
//! stream's files sorted by time for range queries.
//!
//! Why spans per file: a file is the unit the writer makes, the disk holds and
//! playback opens; a file holds one stretch of the publisher's timeline (the recorder
//! starts a new file when timestamps jump), so its span is `[start, end)` and the
//! stream was down (or not recorded) in the gaps between files.
//!
//! # Invariants
//! - [`StreamSpans`] keeps its files sorted by `(start_ms, id)`, and `reach[i]` is the
//!   largest `end_ms` of files `0..=i`: `reach` never decreases, so the first file that
//!   can overlap `[from, to)` is found by binary search even when files overlap (a
//!   clock stepped back), and the last by binary search on `start_ms`.
//! - A [`FileId`] appears at most once.

use crate::name::FileId;

/// Two files this close (ms) or closer are one continuous run: each file's clock is
/// anchored at the arrival of its first frame, so consecutive files of one publish
/// may differ by queueing jitter without a real gap.
pub const GAP_TOLERANCE_MS: i64 = 1000;

/// The container of a recording file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Format {
    /// Fragmented MP4 (`.mp4`).
    Fmp4,
    /// MPEG-TS (`.ts`).
    Ts,
}

impl Format {
    /// The file name extension.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Fmp4 => "mp4",
            Format::Ts => "ts",
        }
    }

    /// The format of a file name extension.
    pub fn from_extension(ext: &str) -> Option<Format> {
        match ext {
            "mp4" => Some(Format::Fmp4),
            "ts" => Some(Format::Ts),
            _ => None,
        }
    }

    /// The code in index records.
    pub fn code(self) -> u8 {
        match self {
            Format::Fmp4 => 1,
            Format::Ts => 2,
        }
    }

    /// The format of an index record's code.
    pub fn from_code(code: u8) -> Option<Format> {
        match code {
            1 => Some(Format::Fmp4),
            2 => Some(Format::Ts),
            _ => None,
        }
    }
}

/// One recording file and the time it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileSpan {
    /// Which file (its name, with the stream's).
    pub id: FileId,
    /// UTC ms of its first sample.
    pub start_ms: i64,
    /// UTC ms of the end of its last complete fragment.
    pub end_ms: i64,
    /// Its size in bytes when the span was taken: every fragment within is complete.
    pub bytes: u64,
    /// Its modification time (ns since the Unix epoch) when the span was taken: a file
    /// whose size or mtime differs is stale and is read again.
    pub mtime_ns: i64,
    /// Complete fragments.
    pub fragments: u32,
    /// The writer completed it (no more fragments will come).
    pub closed: bool,
}

impl FileSpan {
    /// Whether it holds any of `[from, to)`.
    pub fn overlaps(&self, from: i64, to: i64) -> bool {
        self.start_ms < to && self.end_ms > from
    }
}

/// A stretch without gaps: consecutive files whose spans touch (within
/// [`GAP_TOLERANCE_MS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// UTC ms.
    pub start_ms: i64,
    /// UTC ms.
    pub end_ms: i64,
    /// Files in it.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
}

/// What a stream holds in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    /// UTC ms of the first file's start (0 without files).
    pub first_ms: i64,
    /// UTC ms of the latest end (0 without files).
    pub last_ms: i64,
    /// Bytes of every file.
    pub bytes: u64,
    /// Files.
    pub files: usize,
}

/// One stream's files, sorted by time; see the module docs for the invariants.
#[derive(Debug, Clone, Default)]
pub struct StreamSpans {
    files: Vec<FileSpan>,
    reach: Vec<i64>,
    bytes: u64,
}

impl StreamSpans {
    /// The spans of `files`, in any order; of two with one id, the later wins.
    pub fn from_files(files: impl IntoIterator<Item = FileSpan>) -> StreamSpans {
        let mut by_id = std::collections::HashMap::new();
        for f in files {
            by_id.insert(f.id, f);
        }
        let mut files: Vec<FileSpan> = by_id.into_values().collect();
        files.sort_by_key(|f| (f.start_ms, f.id));
        let mut s = StreamSpans {
            files,
            reach: Vec::new(),
            bytes: 0,
        };
        s.reindex(0);
        s
    }

    /// Recomputes `reach` and the byte total from file `from` on.
    fn reindex(&mut self, from: usize) {
        self.reach.truncate(from);
        let mut reach = from
            .checked_sub(1)
            .and_then(|i| self.reach.get(i).copied())
            .unwrap_or(i64::MIN);
        for f in self.files.get(from..).unwrap_or_default() {
            reach = reach.max(f.end_ms);
            self.reach.push(reach);
        }
        self.bytes = self.files.iter().map(|f| f.bytes).sum();
    }

    /// Adds a file, or replaces the one with its id. Cheap for the newest file (the
    /// writer's updates): it is looked for last-first.
    pub fn upsert(&mut self, span: FileSpan) {
        let old = self.files.iter().rposition(|f| f.id == span.id);
        let mut from = match old {
            Some(i) => {
                self.files.remove(i);
                i
            }
            None => self.files.len(),
        };
        let at = self
            .files
            .partition_point(|f| (f.start_ms, f.id) < (span.start_ms, span.id));
        self.files.insert(at, span);
        from = from.min(at);
        self.reindex(from);
    }

    /// Removes a file; whether it was there.
    pub fn remove(&mut self, id: FileId) -> bool {
        let Some(i) = self.files.iter().position(|f| f.id == id) else {
            return false;
        };
        self.files.remove(i);
        self.reindex(i);
        true
    }

    /// The file with `id`.
    pub fn get(&self, id: FileId) -> Option<&FileSpan> {
        self.files.iter().rev().find(|f| f.id == id)
    }

    /// Every file, by time.
    pub fn files(&self) -> &[FileSpan] {
        &self.files
    }

    /// The files that hold any of `[from, to)`, by time: two binary searches, then only
    /// the files in between (all of which overlap unless files overlap each other).
    pub fn query(&self, from: i64, to: i64) -> impl Iterator<Item = &FileSpan> {
        let first = self.reach.partition_point(|&r| r <= from);
        let last = self.files.partition_point(|f| f.start_ms < to);
        self.files
            .get(first..last.max(first))
            .unwrap_or_default()
            .iter()
            .filter(move |f| f.overlaps(from, to))
    }

    /// The gapless runs of the files that hold any of `[from, to)`, clipped to it.
    pub fn runs(&self, from: i64, to: i64) -> Vec<Run> {
        let mut runs: Vec<Run> = Vec::new();
        for f in self.query(from, to) {
            let (start, end) = (f.start_ms.max(from), f.end_ms.min(to));
            match runs.last_mut() {
                Some(r) if start <= r.end_ms.saturating_add(GAP_TOLERANCE_MS) => {
                    r.end_ms = r.end_ms.max(end);
                    r.files += 1;
                    r.bytes += f.bytes;
                }
                _ => runs.push(Run {
                    start_ms: start,
                    end_ms: end,
                    files: 1,
                    bytes: f.bytes,
                }),
            }
        }
        runs
    }

    /// First and last times, bytes and files.
    pub fn summary(&self) -> Summary {
        Summary {
            first_ms: self.files.first().map_or(0, |f| f.start_ms),
            last_ms: self.reach.last().copied().unwrap_or(0),
            bytes: self.bytes,
            files: self.files.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(secs: i64, start: i64, end: i64) -> FileSpan {
        FileSpan {
            id: FileId::new(secs * 1000, 0, Format::Fmp4),
            start_ms: start,
            end_ms: end,
            bytes: 10,
            mtime_ns: 0,
            fragments: 1,
            closed: true,
        }
    }

    /// What a linear scan finds, to hold the binary searches against.
    fn linear(s: &StreamSpans, from: i64, to: i64) -> Vec<FileSpan> {
        s.files()
            .iter()
            .filter(|f| f.overlaps(from, to))
            .copied()
            .collect()
    }

    #[test]
    fn queries_find_what_a_scan_finds() {
        // Hourly files with a gap at 5..7, and one overlapping file (clock stepped back).
        let mut files: Vec<FileSpan> = (0..10)
            .filter(|h| !(5..7).contains(h))
            .map(|h| span(h, h * 3600, (h + 1) * 3600))
            .collect();
        files.push(span(100, 1000, 20_000));
        let s = StreamSpans::from_files(files.into_iter().rev());
        for from in (-3600..40_000).step_by(900) {
            for len in [0, 1, 900, 3600, 7200, 50_000] {
                let got: Vec<FileSpan> = s.query(from, from + len).copied().collect();
                assert_eq!(got, linear(&s, from, from + len), "{from} +{len}");
            }
        }
        assert_eq!(s.query(0, 3600).count(), 2);
        assert_eq!(s.query(3600 * 6, 3600 * 7).count(), 0);
    }

    #[test]
    fn runs_show_the_gaps() {
        let s = StreamSpans::from_files([
            span(0, 0, 10_000),
            span(10, 10_400, 20_000),
            span(30, 30_000, 40_000),
        ]);
        let runs = s.runs(5_000, 35_000);
        assert_eq!(runs.len(), 2);
        assert_eq!(
            (runs[0].start_ms, runs[0].end_ms, runs[0].files),
            (5_000, 20_000, 2)
        );
        assert_eq!((runs[1].start_ms, runs[1].end_ms), (30_000, 35_000));
        let sum = s.summary();
        assert_eq!(
            (sum.first_ms, sum.last_ms, sum.files, sum.bytes),
            (0, 40_000, 3, 30)
        );
    }

    #[test]
    fn upsert_replaces_by_id_and_keeps_the_order() {
        let mut s = StreamSpans::default();
        s.upsert(span(0, 0, 1000));
        s.upsert(span(2, 2000, 2500));
        s.upsert(span(2, 2000, 3000));
        assert_eq!(s.files().len(), 2);
        assert_eq!(s.summary().last_ms, 3000);
        // A rebuilt file found to start earlier moves.
        s.upsert(span(2, -500, 3000));
        assert_eq!(s.files()[0].start_ms, -500);
        assert_eq!(s.query(-100, 0).count(), 1);
        assert!(s.remove(FileId::new(2000, 0, Format::Fmp4)));
        assert_eq!(s.summary().last_ms, 1000);
        assert_eq!(s.summary().bytes, 10);
    }
}
