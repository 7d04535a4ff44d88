//! The on-disk index of one stream: an append-only log of fixed-size records, each a
//! whole [`FileSpan`] with a CRC-32, after a 16-byte header.
//!
//! Why a log of whole spans: the writer updates a file's end about once a second; an
//! append of 64 bytes is one `write` that never rewrites what is already durable, so a
//! crash (`kill -9`, power loss) can only tear the last record. Each record supersedes
//! the earlier ones of its [`FileId`]; [`read`] keeps the latest. When superseded
//! records pile up, the caller rewrites the log ([`compacted`], to a temporary file then
//! `rename`, so a crash leaves either log whole).
//!
//! # Layout (big-endian)
//! Header: `SLUICEIX`, version `u32` (1), record size `u32` (64).
//! Record: `0` version `u8` (1) · `1` format `u8` · `2` name suffix `u16` · `4` flags `u32`
//! (1 closed, 2 removed) · `8` name second `i64` · `16` start ms `i64` · `24` end ms `i64` ·
//! `32` bytes `u64` · `40` mtime ns `i64` · `48` fragments `u32` · `52` zero · `60` CRC-32
//! (ISO-HDLC) of bytes 0..60.
//!
//! # Invariants
//! - Reading stops at the first record that is short or fails its CRC: that and
//!   everything after it is a torn tail ([`LogRead::valid_len`] says where to truncate
//!   before appending again). A record of a later version with a good CRC is skipped
//!   (written by a newer server), not taken for a tear.
//! - A log never holds more than [`MAX_LOG_BYTES`]: a larger file is not read (the
//!   caller rebuilds from the files), so reading it allocates a bounded amount.

use crate::name::FileId;
use crate::span::{FileSpan, Format};
use bytes::{BufMut, BytesMut};
use std::collections::HashMap;
use thiserror::Error;

/// The header's magic.
pub const MAGIC: &[u8; 8] = b"SLUICEIX";
/// The log format's version.
pub const VERSION: u32 = 1;
/// Header bytes.
pub const HEADER_LEN: usize = 16;
/// Bytes of one record.
pub const RECORD_LEN: usize = 64;
/// The largest log read: a million records, far past what compaction leaves.
pub const MAX_LOG_BYTES: u64 = (HEADER_LEN + RECORD_LEN * 1_000_000) as u64;
/// Compaction starts with at least this many superseded records...
pub const COMPACT_MIN_SUPERSEDED: usize = 1024;

const FLAG_CLOSED: u32 = 1;
const FLAG_REMOVED: u32 = 2;
const CRC: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);

/// Why a log cannot be read at all (the caller rebuilds it from the files).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LogError {
    /// Not an index log, or one of another version or record size.
    #[error("not a Sluice index log of version {VERSION}")]
    BadHeader,
    /// Larger than [`MAX_LOG_BYTES`].
    #[error("index log larger than {MAX_LOG_BYTES} bytes")]
    TooLarge,
}

/// What a log holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogRead {
    /// The latest record of each file not removed, in the order first seen.
    pub spans: Vec<FileSpan>,
    /// Records read (superseded ones included).
    pub records: usize,
    /// Bytes up to the end of the last good record.
    pub valid_len: u64,
    /// Bytes after `valid_len` were ignored: a torn or corrupt tail.
    pub torn: bool,
}

/// The header of a new log.
pub fn header(out: &mut BytesMut) {
    out.put_slice(MAGIC);
    out.put_u32(VERSION);
    out.put_u32(RECORD_LEN as u32);
}

/// Appends the record of `span` to `out`.
pub fn encode(span: &FileSpan, out: &mut BytesMut) {
    encode_flags(span, span_flags(span), out);
}

/// Appends a record saying that the file `span` names was removed.
pub fn encode_removed(span: &FileSpan, out: &mut BytesMut) {
    encode_flags(span, span_flags(span) | FLAG_REMOVED, out);
}

fn span_flags(span: &FileSpan) -> u32 {
    if span.closed {
        FLAG_CLOSED
    } else {
        0
    }
}

fn encode_flags(span: &FileSpan, flags: u32, out: &mut BytesMut) {
    let start = out.len();
    out.put_u8(1);
    out.put_u8(span.id.format.code());
    out.put_u16(span.id.attempt);
    out.put_u32(flags);
    out.put_i64(span.id.name_secs);
    out.put_i64(span.start_ms);
    out.put_i64(span.end_ms);
    out.put_u64(span.bytes);
    out.put_i64(span.mtime_ns);
    out.put_u32(span.fragments);
    out.put_bytes(0, 8);
    let crc = CRC.checksum(out.get(start..).unwrap_or_default());
    out.put_u32(crc);
}

/// One record: `Ok(None)` for a good record this version does not know.
fn decode(r: &[u8]) -> Result<Option<(FileSpan, u32)>, ()> {
    let (body, crc) = r.split_at_checked(RECORD_LEN - 4).ok_or(())?;
    if crc != CRC.checksum(body).to_be_bytes() {
        return Err(());
    }
    let be = |at: usize| -> [u8; 8] {
        let mut b = [0; 8];
        b.copy_from_slice(body.get(at..at + 8).unwrap_or(&[0; 8]));
        b
    };
    let be4 = |at: usize| -> [u8; 4] {
        let mut b = [0; 4];
        b.copy_from_slice(body.get(at..at + 4).unwrap_or(&[0; 4]));
        b
    };
    let (Some(&1), Some(format)) = (
        body.first(),
        body.get(1).copied().and_then(Format::from_code),
    ) else {
        return Ok(None);
    };
    let attempt = u16::from_be_bytes([
        body.get(2).copied().unwrap_or(0),
        body.get(3).copied().unwrap_or(0),
    ]);
    let flags = u32::from_be_bytes(be4(4));
    let span = FileSpan {
        id: FileId {
            name_secs: i64::from_be_bytes(be(8)),
            attempt,
            format,
        },
        start_ms: i64::from_be_bytes(be(16)),
        end_ms: i64::from_be_bytes(be(24)),
        bytes: u64::from_be_bytes(be(32)),
        mtime_ns: i64::from_be_bytes(be(40)),
        fragments: u32::from_be_bytes(be4(48)),
        closed: flags & FLAG_CLOSED != 0,
    };
    Ok(Some((span, flags)))
}

/// Reads a whole log; see the module docs for torn tails.
pub fn read(bytes: &[u8]) -> Result<LogRead, LogError> {
    if bytes.len() as u64 > MAX_LOG_BYTES {
        return Err(LogError::TooLarge);
    }
    let (head, body) = bytes
        .split_at_checked(HEADER_LEN)
        .ok_or(LogError::BadHeader)?;
    let mut expected = BytesMut::with_capacity(HEADER_LEN);
    header(&mut expected);
    if head != &expected[..] {
        return Err(LogError::BadHeader);
    }
    let mut out = LogRead {
        valid_len: HEADER_LEN as u64,
        ..LogRead::default()
    };
    let mut at: HashMap<FileId, usize> = HashMap::new();
    let mut spans: Vec<Option<FileSpan>> = Vec::new();
    for r in body.chunks(RECORD_LEN) {
        let Ok(decoded) = decode(r) else {
            out.torn = true;
            break;
        };
        out.records += 1;
        out.valid_len += RECORD_LEN as u64;
        let Some((span, flags)) = decoded else {
            continue;
        };
        let kept = (flags & FLAG_REMOVED == 0).then_some(span);
        match at.get(&span.id) {
            Some(&i) => {
                if let Some(slot) = spans.get_mut(i) {
                    *slot = kept;
                }
            }
            None => {
                at.insert(span.id, spans.len());
                spans.push(kept);
            }
        }
    }
    out.spans = spans.into_iter().flatten().collect();
    Ok(out)
}

/// A new log holding `spans` only: written to a temporary file and renamed over the
/// old one.
pub fn compacted<'a>(spans: impl IntoIterator<Item = &'a FileSpan>) -> BytesMut {
    let mut out = BytesMut::new();
    header(&mut out);
    for s in spans {
        encode(s, &mut out);
    }
    out
}

/// Whether a log of `records` records, `live` of them current, is worth rewriting:
/// when at least [`COMPACT_MIN_SUPERSEDED`] are superseded and they outnumber the live.
pub fn needs_compaction(records: usize, live: usize) -> bool {
    let superseded = records.saturating_sub(live);
    superseded >= COMPACT_MIN_SUPERSEDED && superseded >= live
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(secs: i64, end: i64) -> FileSpan {
        FileSpan {
            id: FileId::new(secs * 1000, 0, Format::Fmp4),
            start_ms: secs * 1000,
            end_ms: end,
            bytes: 1234,
            mtime_ns: 99,
            fragments: 3,
            closed: false,
        }
    }

    fn log(spans: &[FileSpan]) -> BytesMut {
        let mut out = BytesMut::new();
        header(&mut out);
        for s in spans {
            encode(s, &mut out);
        }
        out
    }

    #[test]
    fn the_latest_record_of_each_file_wins() {
        let a = span(10, 11_000);
        let b = span(20, 21_000);
        let a2 = FileSpan {
            end_ms: 15_000,
            closed: true,
            ..a
        };
        let bytes = log(&[a, b, a2]);
        let r = read(&bytes).unwrap();
        assert_eq!(r.spans, vec![a2, b]);
        assert_eq!(
            (r.records, r.valid_len, r.torn),
            (3, bytes.len() as u64, false)
        );
    }

    #[test]
    fn a_torn_tail_is_ignored() {
        let a = span(10, 11_000);
        let full = log(&[a, span(10, 12_000)]);
        for cut in HEADER_LEN + RECORD_LEN..full.len() {
            let r = read(&full[..cut]).unwrap();
            assert_eq!(r.spans, vec![a], "cut at {cut}");
            assert_eq!(r.valid_len, (HEADER_LEN + RECORD_LEN) as u64);
            assert_eq!(r.torn, cut > HEADER_LEN + RECORD_LEN);
        }
        // A tail of zeros (the file was extended, the data never came) is torn too.
        let mut zeros = full.clone();
        zeros.put_bytes(0, 100);
        assert!(read(&zeros).unwrap().torn);
    }

    #[test]
    fn a_crc_mismatch_ends_the_log() {
        let mut bytes = log(&[span(1, 2000), span(2, 3000), span(3, 4000)]);
        let byte = HEADER_LEN + RECORD_LEN + 20;
        bytes[byte] ^= 1;
        let r = read(&bytes).unwrap();
        assert_eq!(r.spans, vec![span(1, 2000)]);
        assert!(r.torn);
        assert_eq!(r.valid_len, (HEADER_LEN + RECORD_LEN) as u64);
    }

    #[test]
    fn removed_files_and_unknown_versions() {
        let a = span(1, 2000);
        let mut bytes = log(&[a, span(2, 3000)]);
        encode_removed(&span(2, 3000), &mut bytes);
        // A newer server's record: good CRC, version 2.
        let mut newer = BytesMut::new();
        encode(&span(5, 6000), &mut newer);
        newer[0] = 2;
        let crc = CRC.checksum(&newer[..RECORD_LEN - 4]);
        newer[RECORD_LEN - 4..].copy_from_slice(&crc.to_be_bytes());
        bytes.extend_from_slice(&newer);
        let r = read(&bytes).unwrap();
        assert_eq!(r.spans, vec![a]);
        assert_eq!((r.records, r.torn), (4, false));
    }

    #[test]
    fn bad_headers_and_compaction() {
        assert_eq!(read(b"SLUICEIX"), Err(LogError::BadHeader));
        let mut other = log(&[]);
        other[11] = 2;
        assert_eq!(read(&other), Err(LogError::BadHeader));
        // An hour of updates once a second: compacted to the one record.
        let updates: Vec<FileSpan> = (0..3600).map(|s| span(0, s * 1000)).collect();
        let r = read(&log(&updates)).unwrap();
        assert!(needs_compaction(r.records, r.spans.len()));
        let small = compacted(&r.spans);
        assert_eq!(small.len(), HEADER_LEN + RECORD_LEN);
        assert_eq!(read(&small).unwrap().spans, vec![span(0, 3_599_000)]);
        assert!(!needs_compaction(1000, 10));
        assert!(!needs_compaction(2000, 1500));
    }
}
