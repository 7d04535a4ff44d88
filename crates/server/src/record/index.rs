//! One stream's index log on disk (`<stream dir>/.sluice-index`): opened, appended to,
//! compacted. The format and its crash rules are `sluice_archive::log`'s; this is the
//! file I/O.
//!
//! Why beside the files: the index travels with the recordings (a copied or mounted
//! directory keeps it), and each stream's log is written by one thread at a time
//! (under its catalogue entry's lock), so no two writers interleave records.
//!
//! # Invariants
//! - Appends are whole records in one `write` on an `O_APPEND` file; after opening, a
//!   torn tail is truncated first, so a new record never follows garbage.
//! - A log that cannot be read (another version, too large) is replaced by an empty one:
//!   the loader then rebuilds the stream from its files.
//! - Compaction writes `.sluice-index.tmp`, syncs it and renames it over the log: a
//!   crash leaves the old log or the new one, never half of one.
//! - Appends are not synced one by one (the page cache survives `kill -9`); a log that
//!   lost records to a power cut is stale, and stale files are read again at start.

use bytes::BytesMut;
use sluice_archive::log::{self, LogError, RECORD_LEN};
use sluice_archive::FileSpan;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::Path;

/// A file's modification time in ns since the Unix epoch, as the index keeps it.
pub(super) fn mtime_ns(meta: &std::fs::Metadata) -> i64 {
    use std::os::unix::fs::MetadataExt;
    meta.mtime()
        .saturating_mul(1_000_000_000)
        .saturating_add(meta.mtime_nsec())
}

/// The log's file name in a stream's directory.
pub const LOG_NAME: &str = ".sluice-index";
const TMP_NAME: &str = ".sluice-index.tmp";

/// An open log and how many records it holds.
#[derive(Debug)]
pub(super) struct Log {
    file: File,
    records: usize,
}

/// What opening a log found.
#[derive(Debug, Default)]
pub(super) struct Opened {
    /// The latest span of each file in it.
    pub spans: Vec<FileSpan>,
    /// It had a torn tail (truncated), or could not be read at all (replaced).
    pub repaired: bool,
}

impl Log {
    /// Opens (or creates) the log in `dir`, repairing a torn tail.
    pub(super) fn open(dir: &Path) -> io::Result<(Log, Opened)> {
        let path = dir.join(LOG_NAME);
        let mut bytes = Vec::new();
        let existing = match File::open(&path) {
            Ok(f) => {
                let len = f.metadata()?.len();
                if len <= log::MAX_LOG_BYTES {
                    f.take(log::MAX_LOG_BYTES).read_to_end(&mut bytes)?;
                    Some(log::read(&bytes))
                } else {
                    Some(Err(LogError::TooLarge))
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        match existing {
            Some(Ok(read)) => {
                let file = OpenOptions::new().append(true).open(&path)?;
                if read.torn {
                    file.set_len(read.valid_len)?;
                }
                let log = Log {
                    file,
                    records: read.records,
                };
                let opened = Opened {
                    spans: read.spans,
                    repaired: read.torn,
                };
                Ok((log, opened))
            }
            Some(Err(e)) => {
                tracing::warn!(path = %path.display(), "recordings index replaced: {e}");
                let log = Log::create(dir)?;
                Ok((
                    log,
                    Opened {
                        spans: Vec::new(),
                        repaired: true,
                    },
                ))
            }
            None => Ok((Log::create(dir)?, Opened::default())),
        }
    }

    /// A new, empty log in `dir`, replacing any: not synced (a torn header is read as
    /// no log, and the stream is rebuilt from its files), so that the first start over
    /// thousands of streams does not wait for thousands of syncs.
    fn create(dir: &Path) -> io::Result<Log> {
        let mut header = BytesMut::new();
        log::header(&mut header);
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(dir.join(LOG_NAME))?;
        file.write_all(&header)?;
        drop(file);
        let file = OpenOptions::new().append(true).open(dir.join(LOG_NAME))?;
        Ok(Log { file, records: 0 })
    }

    /// Replaces the log in `dir` with one holding `spans`.
    pub(super) fn rewrite<'a>(
        dir: &Path,
        spans: impl IntoIterator<Item = &'a FileSpan>,
    ) -> io::Result<Log> {
        let bytes = log::compacted(spans);
        let tmp = dir.join(TMP_NAME);
        let path = dir.join(LOG_NAME);
        {
            let mut f = File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_data()?;
        }
        std::fs::rename(&tmp, &path)?;
        // The rename itself is durable once the directory is synced.
        File::open(dir)?.sync_all()?;
        let file = OpenOptions::new().append(true).open(&path)?;
        Ok(Log {
            file,
            records: bytes.len().saturating_sub(log::HEADER_LEN) / RECORD_LEN,
        })
    }

    /// Appends the records of `spans`, in one write.
    pub(super) fn append(&mut self, spans: &[FileSpan]) -> io::Result<()> {
        let mut out = BytesMut::with_capacity(RECORD_LEN * spans.len());
        for span in spans {
            log::encode(span, &mut out);
        }
        self.file.write_all(&out)?;
        self.records += spans.len();
        Ok(())
    }

    /// Appends a record saying that `span`'s file is gone.
    pub(super) fn append_removed(&mut self, span: &FileSpan) -> io::Result<()> {
        let mut out = BytesMut::with_capacity(RECORD_LEN);
        log::encode_removed(span, &mut out);
        self.file.write_all(&out)?;
        self.records += 1;
        Ok(())
    }

    /// Makes the appended records durable.
    pub(super) fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// Whether enough records are superseded, with `live` files, to compact.
    pub(super) fn wants_compaction(&self, live: usize) -> bool {
        log::needs_compaction(self.records, live)
    }

    /// Records in the file.
    #[cfg(test)]
    fn records(&self) -> usize {
        self.records
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_archive::{FileId, Format};

    fn span(secs: i64, end_ms: i64) -> FileSpan {
        FileSpan {
            id: FileId::new(secs * 1000, 0, Format::Fmp4),
            start_ms: secs * 1000,
            end_ms,
            bytes: 100,
            mtime_ns: 1,
            fragments: 1,
            closed: false,
        }
    }

    #[test]
    fn a_torn_tail_is_truncated_before_the_next_append() {
        let dir = std::env::temp_dir().join(format!("sluice-index-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (mut log, opened) = Log::open(&dir).unwrap();
        assert!(opened.spans.is_empty());
        log.append(&[span(1, 2000)]).unwrap();
        log.append(&[span(1, 3000)]).unwrap();
        drop(log);
        // kill -9 in the middle of a write: half a record.
        let path = dir.join(LOG_NAME);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[0xab; 30]).unwrap();
        drop(f);
        let (mut log, opened) = Log::open(&dir).unwrap();
        assert!(opened.repaired);
        assert_eq!(opened.spans, vec![span(1, 3000)]);
        log.append(&[span(2, 4000)]).unwrap();
        drop(log);
        let (log, opened) = Log::open(&dir).unwrap();
        assert!(!opened.repaired);
        assert_eq!(opened.spans, vec![span(1, 3000), span(2, 4000)]);
        assert_eq!(log.records(), 3);
        // Compaction keeps the live records only.
        let log = Log::rewrite(&dir, &opened.spans).unwrap();
        assert_eq!(log.records(), 2);
        assert!(!dir.join(TMP_NAME).exists());
        // Garbage in place of the log: replaced, empty.
        std::fs::write(&path, b"not a log").unwrap();
        let (_, opened) = Log::open(&dir).unwrap();
        assert!(opened.repaired && opened.spans.is_empty());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
