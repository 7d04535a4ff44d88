//! Progressive sample tables (ISO/IEC 14496-12 §8.6, §8.7): the boxes of `stbl` expanded
//! into one sample after another.
//!
//! Why: a progressive file describes its samples as run-length tables: durations (`stts`),
//! composition offsets (`ctts`), sync samples (`stss`), sizes (`stsz`/`stz2`), and where
//! chunks of consecutive samples lie (`stsc` and `stco`/`co64`). We walk all of them in
//! step, reading entries in place; nothing is copied out of the tables.
//!
//! # Invariants
//! - Every table is checked to hold its declared entries before it is read.
//! - The walk stops at the first sample a table does not describe (`stsz` count, `stts`
//!   total or chunks exhausted) or the timeline rejects (outside the file). A missing
//!   `ctts` entry is offset 0; a missing `stss` entry is not a sync sample.

use super::boxes::{be_u32_at, be_u64_at, BoxRef, Reader};
use super::timeline::{Budget, RawSample, Timeline};
use super::Mp4Error;

/// Appends the samples the `stbl` box describes to `timeline`. A table without samples
/// (the `moov` of a fragmented file) or without `stsz` adds none.
pub(super) fn read_sample_table(
    stbl: &BoxRef<'_>,
    timeline: &mut Timeline,
    budget: &mut Budget,
) -> Result<(), Mp4Error> {
    let mut stts = None;
    let mut ctts = None;
    let mut stss = None;
    let mut sizes = None;
    let mut stsc = None;
    let mut chunks = None;
    for b in stbl.children() {
        let b = b?;
        match &b.kind {
            b"stts" => stts = Some(runs(b.body, "stts")?),
            b"ctts" => ctts = Some(runs(b.body, "ctts")?),
            b"stss" => stss = Some(sync_samples(b.body)?),
            b"stsz" => sizes = Some(stsz(b.body)?),
            b"stz2" => sizes = Some(stz2(b.body)?),
            b"stsc" => stsc = Some(sample_to_chunk(b.body)?),
            b"stco" => chunks = Some(chunk_offsets(b.body, 4)?),
            b"co64" => chunks = Some(chunk_offsets(b.body, 8)?),
            _ => {}
        }
    }
    let Some(sizes) = sizes else {
        return Ok(());
    };
    if sizes.count == 0 {
        return Ok(());
    }
    let count = sizes.count as usize;
    if count > budget.left() {
        return Err(Mp4Error::TooLarge {
            what: "sample count",
            len: count as u64,
            limit: budget.left() as u64,
        });
    }
    let mut stts = stts.ok_or(Mp4Error::Missing { what: "stts" })?;
    let stsc = stsc.ok_or(Mp4Error::Missing { what: "stsc" })?;
    let chunks = chunks.ok_or(Mp4Error::Missing { what: "stco" })?;
    if let SizeKind::Table { data, .. } = sizes.kind {
        // Backed by at least half a byte per sample (stz2 with 4-bit sizes).
        timeline.reserve(count.min(data.len().saturating_mul(2)), budget);
    }

    let mut sync = stss.map(|table| SyncSamples { table, next: 0 });
    let mut stsc_entry = 0usize;
    let mut sample = 0usize;
    'chunks: for chunk in 0..chunks.count {
        // stsc `first_chunk` is 1-based; the entry in force is the last one starting at
        // or before this chunk.
        let chunk_number = u32::try_from(chunk + 1).unwrap_or(u32::MAX);
        while be_u32_at(stsc, stsc_entry + 1, 12, 0).is_some_and(|first| first <= chunk_number) {
            stsc_entry += 1;
        }
        let per_chunk = be_u32_at(stsc, stsc_entry, 12, 4).unwrap_or(0);
        let mut offset = chunks.get(chunk);
        for _ in 0..per_chunk {
            if sample >= count {
                break 'chunks;
            }
            let (Some(size), Some(duration)) = (sizes.get(sample), stts.next()) else {
                break 'chunks;
            };
            let cts = ctts.as_mut().and_then(Runs::next).unwrap_or(0) as i32;
            let keyframe = sync.as_mut().is_none_or(|s| s.contains(sample));
            let raw = RawSample {
                offset,
                size,
                duration,
                cts,
                keyframe,
            };
            if !timeline.push(raw, budget)? {
                break 'chunks;
            }
            // Past u64 the next sample is outside any file, which ends the timeline.
            offset = offset.saturating_add(u64::from(size));
            sample += 1;
        }
    }
    Ok(())
}

/// A run-length table of (count, value) pairs, `stts` or `ctts`, read one sample at a time.
struct Runs<'a> {
    table: &'a [u8],
    entry: usize,
    /// Samples left in the current entry.
    left: u32,
}

impl Runs<'_> {
    /// The value for the next sample; `None` when the table is exhausted. Entries with a
    /// count of 0 are skipped (each is backed by 8 bytes, so this is bounded).
    fn next(&mut self) -> Option<u32> {
        while self.left == 0 {
            self.entry += 1;
            self.left = be_u32_at(self.table, self.entry, 8, 0)?;
        }
        self.left -= 1;
        be_u32_at(self.table, self.entry, 8, 4)
    }
}

/// `stts` and `ctts`: version and flags, entry count, then (count, value) entries.
/// `ctts` values are signed in version 1 and unsigned in version 0; writers put negative
/// offsets in version 0 too, and no real offset reaches 2^31, so both read as `i32`.
fn runs<'a>(body: &'a [u8], what: &'static str) -> Result<Runs<'a>, Mp4Error> {
    let mut r = Reader::new(body, what);
    r.version_flags()?;
    let n = r.u32()?;
    let table = r.table(n, 8)?;
    Ok(Runs {
        table,
        entry: 0,
        left: be_u32_at(table, 0, 8, 0).unwrap_or(0),
    })
}

/// `stss`: the 1-based numbers of the sync samples, ascending.
fn sync_samples(body: &[u8]) -> Result<&[u8], Mp4Error> {
    let mut r = Reader::new(body, "stss");
    r.version_flags()?;
    let n = r.u32()?;
    r.table(n, 4)
}

/// A cursor over `stss` for samples asked in increasing order.
struct SyncSamples<'a> {
    table: &'a [u8],
    next: usize,
}

impl SyncSamples<'_> {
    /// Whether 0-based `sample` is listed.
    fn contains(&mut self, sample: usize) -> bool {
        let number = (sample as u64).saturating_add(1);
        while let Some(n) = be_u32_at(self.table, self.next, 4, 0) {
            match u64::from(n).cmp(&number) {
                std::cmp::Ordering::Less => self.next += 1,
                std::cmp::Ordering::Equal => return true,
                std::cmp::Ordering::Greater => return false,
            }
        }
        false
    }
}

/// Sample sizes: one for all, or a table of 4-, 8-, 16- or 32-bit entries.
struct Sizes<'a> {
    count: u32,
    kind: SizeKind<'a>,
}

enum SizeKind<'a> {
    Fixed(u32),
    Table { bits: u8, data: &'a [u8] },
}

impl Sizes<'_> {
    fn get(&self, i: usize) -> Option<u32> {
        if i >= self.count as usize {
            return None;
        }
        match self.kind {
            SizeKind::Fixed(s) => Some(s),
            SizeKind::Table { bits: 32, data } => be_u32_at(data, i, 4, 0),
            SizeKind::Table { bits: 16, data } => {
                let at = i.checked_mul(2)?;
                let b = data.get(at..at.checked_add(2)?)?;
                Some(u32::from(u16::from_be_bytes(b.try_into().ok()?)))
            }
            SizeKind::Table { bits: 8, data } => data.get(i).map(|&b| u32::from(b)),
            SizeKind::Table { data, .. } => {
                // 4 bits: the high nibble first.
                let b = data.get(i / 2)?;
                Some(u32::from(if i & 1 == 0 { b >> 4 } else { b & 0x0f }))
            }
        }
    }
}

/// `stsz`: a size for every sample, or 0 and then one per sample.
fn stsz(body: &[u8]) -> Result<Sizes<'_>, Mp4Error> {
    let mut r = Reader::new(body, "stsz");
    r.version_flags()?;
    let fixed = r.u32()?;
    let count = r.u32()?;
    let kind = if fixed != 0 {
        SizeKind::Fixed(fixed)
    } else {
        SizeKind::Table {
            bits: 32,
            data: r.table(count, 4)?,
        }
    };
    Ok(Sizes { count, kind })
}

/// `stz2`: compact sizes of 4, 8 or 16 bits.
fn stz2(body: &[u8]) -> Result<Sizes<'_>, Mp4Error> {
    let mut r = Reader::new(body, "stz2");
    r.version_flags()?;
    r.skip(3)?;
    let bits = r.u8()?;
    let count = r.u32()?;
    let len = match bits {
        4 => (count as usize).div_ceil(2),
        8 => count as usize,
        16 => (count as usize).saturating_mul(2),
        _ => {
            return Err(Mp4Error::Malformed {
                what: "stz2 field size",
            })
        }
    };
    let data = r.take(len)?;
    Ok(Sizes {
        count,
        kind: SizeKind::Table { bits, data },
    })
}

/// `stsc`: (first_chunk, samples_per_chunk, sample_description_index) entries.
fn sample_to_chunk(body: &[u8]) -> Result<&[u8], Mp4Error> {
    let mut r = Reader::new(body, "stsc");
    r.version_flags()?;
    let n = r.u32()?;
    r.table(n, 12)
}

/// Chunk offsets of `stco` (32-bit) or `co64` (64-bit).
struct ChunkOffsets<'a> {
    table: &'a [u8],
    wide: bool,
    count: usize,
}

impl ChunkOffsets<'_> {
    /// The offset of chunk `i`; `i < count`, so it is present.
    fn get(&self, i: usize) -> u64 {
        let v = if self.wide {
            be_u64_at(self.table, i)
        } else {
            be_u32_at(self.table, i, 4, 0).map(u64::from)
        };
        // Out of range cannot happen; if it did, an offset past any file ends the track.
        v.unwrap_or(u64::MAX)
    }
}

fn chunk_offsets(body: &[u8], entry_len: usize) -> Result<ChunkOffsets<'_>, Mp4Error> {
    let what = if entry_len == 8 { "co64" } else { "stco" };
    let mut r = Reader::new(body, what);
    r.version_flags()?;
    let n = r.u32()?;
    Ok(ChunkOffsets {
        table: r.table(n, entry_len)?,
        wide: entry_len == 8,
        count: n as usize,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full(body: &[u8]) -> Vec<u8> {
        let mut v = vec![0, 0, 0, 0];
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn runs_skip_empty_entries() {
        let body = full(&[
            0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 2, 0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0, 7,
        ]);
        let mut r = runs(&body, "stts").expect("stts");
        let values: Vec<_> = std::iter::from_fn(|| r.next()).collect();
        assert_eq!(values, [5, 5, 7]);
    }

    #[test]
    fn declared_counts_must_be_backed() {
        let body = full(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 1]);
        assert!(runs(&body, "stts").is_err());
        assert!(sync_samples(&body).is_err());
        assert!(chunk_offsets(&body, 8).is_err());
        let stsz_body = full(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
        assert!(stsz(&stsz_body).is_err());
        // A fixed size needs no table.
        let fixed = full(&[0, 0, 0, 9, 0xff, 0xff, 0xff, 0xff]);
        assert!(stsz(&fixed).is_ok_and(|s| s.get(5) == Some(9)));
    }

    #[test]
    fn stz2_field_sizes() {
        let four = full(&[0, 0, 0, 4, 0, 0, 0, 3, 0x12, 0x30]);
        let s = stz2(&four).expect("stz2");
        assert_eq!(
            (s.get(0), s.get(1), s.get(2), s.get(3)),
            (Some(1), Some(2), Some(3), None)
        );
        let sixteen = full(&[0, 0, 0, 16, 0, 0, 0, 2, 1, 0, 0, 7]);
        let s = stz2(&sixteen).expect("stz2");
        assert_eq!((s.get(0), s.get(1)), (Some(256), Some(7)));
        assert!(stz2(&full(&[0, 0, 0, 12, 0, 0, 0, 0])).is_err());
        assert!(stz2(&full(&[0, 0, 0, 8, 0, 0, 0, 3, 1, 2])).is_err());
    }

    #[test]
    fn sync_cursor() {
        let table = [0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 4];
        let mut s = SyncSamples {
            table: &table,
            next: 0,
        };
        let keys: Vec<_> = (0..6).map(|i| s.contains(i)).collect();
        assert_eq!(keys, [true, false, false, true, false, false]);
    }
}
