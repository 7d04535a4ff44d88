//! Movie fragments (ISO/IEC 14496-12 §8.8): `moof` boxes whose `traf`s add samples to
//! the tracks of the `moov`.
//!
//! Why: our recorder, our fMP4 writer and `ffmpeg -movflags frag_keyframe` write
//! fragmented files, and a recording killed mid-write is still a valid prefix of one.
//!
//! Where a sample's data is: each `traf` has a base offset (`tfhd` base-data-offset, else
//! the `moof` start when default-base-is-moof is set or for the first `traf`, else the
//! end of the previous `traf`'s data); a `trun` with a data offset starts there, one
//! without continues after the previous `trun`. Sample fields a `trun` leaves out come
//! from `tfhd`, then from the track's `trex`.

use super::boxes::{BoxRef, Reader};
use super::timeline::{Budget, RawSample, Timeline};
use super::Mp4Error;

/// `tfhd` flags.
const TFHD_BASE_DATA_OFFSET: u32 = 0x00_0001;
const TFHD_SAMPLE_DESCRIPTION_INDEX: u32 = 0x00_0002;
const TFHD_DEFAULT_DURATION: u32 = 0x00_0008;
const TFHD_DEFAULT_SIZE: u32 = 0x00_0010;
const TFHD_DEFAULT_FLAGS: u32 = 0x00_0020;
const TFHD_DEFAULT_BASE_IS_MOOF: u32 = 0x02_0000;
/// `trun` flags.
const TRUN_DATA_OFFSET: u32 = 0x00_0001;
const TRUN_FIRST_SAMPLE_FLAGS: u32 = 0x00_0004;
const TRUN_DURATION: u32 = 0x00_0100;
const TRUN_SIZE: u32 = 0x00_0200;
const TRUN_FLAGS: u32 = 0x00_0400;
const TRUN_CTS: u32 = 0x00_0800;
/// `sample_is_non_sync_sample` in sample flags.
const SAMPLE_NON_SYNC: u32 = 0x0001_0000;

/// Per-sample defaults of a track (`trex`, overridden per fragment by `tfhd`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Defaults {
    pub(super) duration: u32,
    pub(super) size: u32,
    pub(super) flags: u32,
}

/// A `trex`: the track it is for and its defaults.
pub(super) fn read_trex(body: &[u8]) -> Result<(u32, Defaults), Mp4Error> {
    let mut r = Reader::new(body, "trex");
    r.version_flags()?;
    let track_id = r.u32()?;
    r.u32()?; // default_sample_description_index
    Ok((
        track_id,
        Defaults {
            duration: r.u32()?,
            size: r.u32()?,
            flags: r.u32()?,
        },
    ))
}

/// Adds the samples of one `moof` to the timelines of their tracks; `trafs` of other
/// tracks are read only for where their data ends. `trex` is sorted by track id.
pub(super) fn read_moof(
    moof: &BoxRef<'_>,
    trex: &[(u32, Defaults)],
    timelines: &mut [Timeline],
    budget: &mut Budget,
) -> Result<(), Mp4Error> {
    let mut prev_end = None;
    for b in moof.children() {
        let b = b?;
        if &b.kind == b"traf" {
            prev_end = Some(read_traf(
                &b, moof.start, prev_end, trex, timelines, budget,
            )?);
        }
    }
    Ok(())
}

/// Reads one `traf`; returns the end of its data (for a next `traf` without a base).
fn read_traf(
    traf: &BoxRef<'_>,
    moof_start: u64,
    prev_end: Option<u64>,
    trex: &[(u32, Defaults)],
    timelines: &mut [Timeline],
    budget: &mut Budget,
) -> Result<u64, Mp4Error> {
    let tfhd = traf.children().require(b"tfhd", "tfhd")?;
    let mut r = Reader::new(tfhd.body, "tfhd");
    let (_, flags) = r.version_flags()?;
    let track_id = r.u32()?;
    let mut d = trex
        .binary_search_by_key(&track_id, |&(id, _)| id)
        .ok()
        .and_then(|i| trex.get(i))
        .map(|&(_, d)| d)
        .unwrap_or_default();
    let explicit_base = if flags & TFHD_BASE_DATA_OFFSET != 0 {
        Some(r.u64()?)
    } else {
        None
    };
    if flags & TFHD_SAMPLE_DESCRIPTION_INDEX != 0 {
        r.u32()?;
    }
    if flags & TFHD_DEFAULT_DURATION != 0 {
        d.duration = r.u32()?;
    }
    if flags & TFHD_DEFAULT_SIZE != 0 {
        d.size = r.u32()?;
    }
    if flags & TFHD_DEFAULT_FLAGS != 0 {
        d.flags = r.u32()?;
    }
    let base = match (explicit_base, prev_end) {
        (Some(b), _) => b,
        (None, Some(end)) if flags & TFHD_DEFAULT_BASE_IS_MOOF == 0 => end,
        _ => moof_start,
    };

    let mut timeline = timelines.iter_mut().find(|t| t.track_id() == track_id);
    let mut pos = base;
    for b in traf.children() {
        let b = b?;
        match &b.kind {
            b"tfdt" => {
                let mut r = Reader::new(b.body, "tfdt");
                let (version, _) = r.version_flags()?;
                let t = r.u32_or_u64(version)?;
                if let Some(tl) = timeline.as_deref_mut() {
                    tl.set_decode_time(t);
                }
            }
            b"trun" => pos = read_trun(b.body, base, pos, d, &mut timeline, budget)?,
            _ => {}
        }
    }
    Ok(pos)
}

/// Reads one `trun` whose data starts at `pos` unless it says otherwise; returns where
/// its data ends. Once the timeline ends (a sample outside the file) it is dropped.
fn read_trun(
    body: &[u8],
    base: u64,
    pos: u64,
    d: Defaults,
    timeline: &mut Option<&mut Timeline>,
    budget: &mut Budget,
) -> Result<u64, Mp4Error> {
    let mut r = Reader::new(body, "trun");
    let (_, flags) = r.version_flags()?;
    let count = r.u32()?;
    let mut pos = if flags & TRUN_DATA_OFFSET != 0 {
        // An offset before the file start is past any file: it ends the timeline.
        base.checked_add_signed(i64::from(r.i32()?))
            .unwrap_or(u64::MAX)
    } else {
        pos
    };
    let first_flags = if flags & TRUN_FIRST_SAMPLE_FLAGS != 0 {
        Some(r.u32()?)
    } else {
        None
    };
    let fields = [TRUN_DURATION, TRUN_SIZE, TRUN_FLAGS, TRUN_CTS];
    let stride = 4 * fields.iter().filter(|&&f| flags & f != 0).count();
    let table = r.table(count, stride)?;
    if let Some(tl) = timeline.as_deref_mut() {
        tl.reserve((table.len() / stride.max(1)).min(count as usize), budget);
    }
    let mut t = Reader::new(table, "trun");
    let mut field = |flag: u32, default: u32| -> Result<u32, Mp4Error> {
        if flags & flag != 0 {
            t.u32()
        } else {
            Ok(default)
        }
    };
    for i in 0..count {
        if stride == 0 && timeline.is_none() {
            // Nothing to read or keep: the rest of the run is `count - i` default sizes.
            let left = u64::from(count - i);
            return Ok(pos.saturating_add(left.saturating_mul(u64::from(d.size))));
        }
        let duration = field(TRUN_DURATION, d.duration)?;
        let size = field(TRUN_SIZE, d.size)?;
        let sample_flags = field(TRUN_FLAGS, d.flags)?;
        // Signed in version 1; version 0 read the same way, as for `ctts`.
        let cts = field(TRUN_CTS, 0)? as i32;
        let sample_flags = match first_flags {
            Some(f) if i == 0 => f,
            _ => sample_flags,
        };
        if let Some(tl) = timeline.as_deref_mut() {
            let raw = RawSample {
                offset: pos,
                size,
                duration,
                cts,
                keyframe: sample_flags & SAMPLE_NON_SYNC == 0,
            };
            if !tl.push(raw, budget)? {
                *timeline = None;
            }
        }
        pos = pos.saturating_add(u64::from(size));
    }
    Ok(pos)
}
