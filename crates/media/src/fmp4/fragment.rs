//! Movie fragments: `moof` + `mdat`, one per LL-HLS part or per segment.
//!
//! Why: a fragment is the unit the HLS segmenter publishes; it is written once and
//! its bytes are shared by every viewer, so the sample data is copied exactly once,
//! into the `mdat` behind the `moof` that describes it.
//!
//! # Layout
//! `moof` { `mfhd`, then per run `traf` { `tfhd` (default-base-is-moof), `tfdt` (v1),
//! `trun` (data offset and per-sample duration, size, flags, composition offset) } },
//! then `mdat` with the runs' samples in order. Data offsets count from the start of
//! the `moof`, so the fragment can be moved or served alone.

use super::boxes::{patch_size, patch_u32, write_box, write_full_box};
use super::Fmp4Error;
use bytes::{BufMut, Bytes, BytesMut};

/// `sample_flags` of a sync sample: `sample_depends_on` 2 (depends on no other),
/// `sample_is_non_sync_sample` 0.
pub const SAMPLE_FLAGS_SYNC: u32 = 0x0200_0000;
/// `sample_flags` of any other sample: `sample_depends_on` 1, `sample_is_non_sync_sample` 1.
pub const SAMPLE_FLAGS_NON_SYNC: u32 = 0x0101_0000;

/// `tfhd` flag: offsets are relative to the start of the enclosing `moof`.
const TFHD_DEFAULT_BASE_IS_MOOF: u32 = 0x02_0000;
/// `trun` flags.
const TRUN_DATA_OFFSET: u32 = 0x00_0001;
const TRUN_SAMPLE_DURATION: u32 = 0x00_0100;
const TRUN_SAMPLE_SIZE: u32 = 0x00_0200;
const TRUN_SAMPLE_FLAGS: u32 = 0x00_0400;
const TRUN_SAMPLE_CTS: u32 = 0x00_0800;
/// Header of an `mdat` with a 32-bit size.
const MDAT_HEADER_LEN: usize = 8;

/// One sample (a frame) of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// Ticks of the track's timescale until the next sample's decode time.
    pub duration: u32,
    /// Presentation time minus decode time, in the track's timescale.
    pub cts_offset: i32,
    /// A sync sample (keyframe; every audio frame).
    pub keyframe: bool,
    /// The coded data as the sample entry says (length-prefixed NAL units, raw AAC, an
    /// Opus packet).
    pub data: Bytes,
}

/// Consecutive samples of one track in a fragment.
#[derive(Debug, Clone, Copy)]
pub struct TrackRun<'a> {
    /// The track, as in the init segment.
    pub track_id: u32,
    /// Decode time of the first sample, in the track's timescale, from the track's start.
    pub base_decode_time: u64,
    /// The samples in decode order.
    pub samples: &'a [Sample],
}

/// Writes one fragment: `moof` (`mfhd` with `sequence`, one `traf` per run) and an
/// `mdat` with every run's samples in order.
///
/// `trun` is version 1 when a composition offset is negative, else version 0; it lists
/// composition offsets only when one is nonzero. Sync samples get
/// [`SAMPLE_FLAGS_SYNC`], others [`SAMPLE_FLAGS_NON_SYNC`].
///
/// A track id of 0 is [`Fmp4Error::InvalidInput`]; a fragment whose `mdat` or offsets do
/// not fit 32 bits (4 GiB) is [`Fmp4Error::TooLarge`]. Writes nothing on error.
pub fn write_fragment(
    out: &mut BytesMut,
    sequence: u32,
    runs: &[TrackRun<'_>],
) -> Result<(), Fmp4Error> {
    let mut data_len = 0usize;
    let mut sample_count = 0usize;
    for run in runs {
        if run.track_id == 0 {
            return Err(Fmp4Error::InvalidInput { what: "track id 0" });
        }
        for s in run.samples {
            u32::try_from(s.data.len()).map_err(|_| Fmp4Error::TooLarge {
                what: "sample",
                len: s.data.len(),
                limit: u32::MAX as usize,
            })?;
            data_len = data_len.saturating_add(s.data.len());
        }
        sample_count = sample_count.saturating_add(run.samples.len());
    }
    let mdat_len = data_len.saturating_add(MDAT_HEADER_LEN);
    if u32::try_from(mdat_len).is_err() {
        return Err(Fmp4Error::TooLarge {
            what: "mdat",
            len: mdat_len,
            limit: u32::MAX as usize,
        });
    }
    // moof: 8 + mfhd 16 + per run traf 8 + tfhd 16 + tfdt 20 + trun 20, 16 per sample.
    let moof_estimate = 24usize
        .saturating_add(runs.len().saturating_mul(64))
        .saturating_add(sample_count.saturating_mul(16));
    out.reserve(moof_estimate.saturating_add(mdat_len));

    let start = out.len();
    let result = write_moof_mdat(out, sequence, runs, data_len);
    if result.is_err() {
        out.truncate(start);
    }
    result
}

fn write_moof_mdat(
    out: &mut BytesMut,
    sequence: u32,
    runs: &[TrackRun<'_>],
    data_len: usize,
) -> Result<(), Fmp4Error> {
    let moof_start = out.len();
    // Where each run's data_offset field is, to patch once the moof size is known.
    let mut offset_fields = Vec::with_capacity(runs.len());
    write_box(out, b"moof", |out| {
        write_full_box(out, b"mfhd", 0, 0, |out| {
            out.put_u32(sequence);
            Ok(())
        })?;
        for run in runs {
            write_box(out, b"traf", |out| {
                write_full_box(out, b"tfhd", 0, TFHD_DEFAULT_BASE_IS_MOOF, |out| {
                    out.put_u32(run.track_id);
                    Ok(())
                })?;
                write_full_box(out, b"tfdt", 1, 0, |out| {
                    out.put_u64(run.base_decode_time);
                    Ok(())
                })?;
                offset_fields.push(write_trun(out, run)?);
                Ok(())
            })?;
        }
        Ok(())
    })?;
    let moof_len = out.len().saturating_sub(moof_start);

    // Each run's data starts after the moof, the mdat header and the runs before it.
    let mut offset = moof_len.saturating_add(MDAT_HEADER_LEN);
    for (run, field) in runs.iter().zip(offset_fields) {
        let value = i32::try_from(offset).map_err(|_| Fmp4Error::TooLarge {
            what: "trun data offset",
            len: offset,
            limit: i32::MAX as usize,
        })?;
        patch_u32(out, field, value as u32);
        let run_len = run
            .samples
            .iter()
            .fold(0usize, |n, s| n.saturating_add(s.data.len()));
        offset = offset.saturating_add(run_len);
    }

    let mdat_start = out.len();
    out.put_u32(0);
    out.put_slice(b"mdat");
    for run in runs {
        for s in run.samples {
            out.put_slice(&s.data);
        }
    }
    debug_assert_eq!(out.len() - mdat_start, data_len + MDAT_HEADER_LEN);
    patch_size(out, mdat_start)
}

/// Writes a `trun` for `run` and returns where its `data_offset` field is.
fn write_trun(out: &mut BytesMut, run: &TrackRun<'_>) -> Result<usize, Fmp4Error> {
    let any_cts = run.samples.iter().any(|s| s.cts_offset != 0);
    let negative_cts = run.samples.iter().any(|s| s.cts_offset < 0);
    let version = u8::from(negative_cts);
    let mut flags = TRUN_DATA_OFFSET | TRUN_SAMPLE_DURATION | TRUN_SAMPLE_SIZE | TRUN_SAMPLE_FLAGS;
    if any_cts {
        flags |= TRUN_SAMPLE_CTS;
    }
    let count = u32::try_from(run.samples.len()).map_err(|_| Fmp4Error::TooLarge {
        what: "trun sample count",
        len: run.samples.len(),
        limit: u32::MAX as usize,
    })?;
    let mut field = 0;
    write_full_box(out, b"trun", version, flags, |out| {
        out.put_u32(count);
        field = out.len();
        out.put_i32(0); // data_offset, patched later
        for s in run.samples {
            out.put_u32(s.duration);
            // Checked to fit by the caller.
            out.put_u32(s.data.len() as u32);
            out.put_u32(if s.keyframe {
                SAMPLE_FLAGS_SYNC
            } else {
                SAMPLE_FLAGS_NON_SYNC
            });
            if any_cts {
                // Version 0 is unsigned, used only when no offset is negative; version 1
                // is signed. Both are the same 32 bits.
                out.put_i32(s.cts_offset);
            }
        }
        Ok(())
    })?;
    Ok(field)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(len: usize, cts: i32, keyframe: bool) -> Sample {
        Sample {
            duration: 3000,
            cts_offset: cts,
            keyframe,
            data: Bytes::from(vec![len as u8; len]),
        }
    }

    #[test]
    fn offsets_point_at_each_run() {
        let video = [sample(10, 0, true), sample(5, 3000, false)];
        let audio = [sample(7, 0, true)];
        let runs = [
            TrackRun {
                track_id: 1,
                base_decode_time: 0,
                samples: &video,
            },
            TrackRun {
                track_id: 2,
                base_decode_time: 0,
                samples: &audio,
            },
        ];
        let mut out = BytesMut::new();
        assert_eq!(write_fragment(&mut out, 1, &runs), Ok(()));
        let moof_len = u32::from_be_bytes([out[0], out[1], out[2], out[3]]) as usize;
        // moof 8 + mfhd 16 + traf(8 + tfhd 16 + tfdt 20 + trun 20 + 2 * 16) + traf(8 + 16 + 20 + 20 + 12)
        assert_eq!(
            moof_len,
            8 + 16 + (8 + 16 + 20 + 20 + 32) + (8 + 16 + 20 + 20 + 12)
        );
        assert_eq!(&out[moof_len + 4..moof_len + 8], b"mdat");
        assert_eq!(out.len(), moof_len + 8 + 22);
        assert_eq!(&out[moof_len + 8..moof_len + 18], &[10; 10]);
        assert_eq!(&out[moof_len + 23..], &[7; 7]);
    }

    #[test]
    fn errors_write_nothing() {
        let s = [sample(1, 0, true)];
        let mut out = BytesMut::from(&b"keep"[..]);
        let runs = [TrackRun {
            track_id: 0,
            base_decode_time: 0,
            samples: &s,
        }];
        assert!(write_fragment(&mut out, 1, &runs).is_err());
        assert_eq!(&out[..], b"keep");
    }
}
