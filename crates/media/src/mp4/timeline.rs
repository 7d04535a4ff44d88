//! One track's samples as they are appended, from sample tables or fragments.
//!
//! Why: both sources give per-sample durations in the track's timescale; adding them up
//! here, in track ticks, and converting each sum to 90 kHz keeps timestamps exact (a
//! 1/48000 s duration has no exact 90 kHz value, so adding converted durations drifts).
//!
//! # Invariants
//! - `samples` only holds samples whose bytes lie inside the file; the first that does
//!   not ends the timeline and later pushes are dropped.
//! - Every push is counted against the movie's [`Budget`].

use super::{Mp4Error, Sample, MAX_SAMPLES};
use crate::{Timestamp, CLOCK_HZ};

/// The part of an edit list we apply: media time `media_start` plays at `lead`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Edit {
    /// Media time (track ticks) of the first presented sample (`elst` media_time).
    pub(super) media_start: i64,
    /// When that sample plays, in 90 kHz ticks (the empty edit's duration).
    pub(super) lead: Timestamp,
}

/// How many more samples the movie may hold.
#[derive(Debug)]
pub(super) struct Budget {
    left: usize,
    limit: usize,
}

impl Budget {
    /// [`MAX_SAMPLES`], and no more samples than the file has bytes: a real sample takes
    /// at least one, so a count beyond that is a table lying about itself.
    pub(super) fn for_file(file_len: usize) -> Self {
        let limit = MAX_SAMPLES.min(file_len);
        Budget { left: limit, limit }
    }

    pub(super) fn left(&self) -> usize {
        self.left
    }

    fn take(&mut self) -> Result<(), Mp4Error> {
        self.left = self.left.checked_sub(1).ok_or(Mp4Error::TooLarge {
            what: "sample count",
            len: self.limit as u64 + 1,
            limit: self.limit as u64,
        })?;
        Ok(())
    }
}

/// One sample in the track's own units, before conversion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RawSample {
    pub(super) offset: u64,
    pub(super) size: u32,
    /// Track ticks until the next sample's decode time.
    pub(super) duration: u32,
    /// Presentation minus decode time, in track ticks.
    pub(super) cts: i32,
    pub(super) keyframe: bool,
}

/// The samples of one track so far, and the decode time of the next.
#[derive(Debug)]
pub(super) struct Timeline {
    track_id: u32,
    timescale: u32,
    edit: Edit,
    audio: bool,
    file_len: u64,
    /// Decode time of the next sample, in track ticks.
    next_dts: u64,
    ended: bool,
    samples: Vec<Sample>,
}

impl Timeline {
    /// An empty timeline for the track `track_id`; `timescale` must be nonzero. Audio
    /// samples are all sync samples.
    pub(super) fn new(
        track_id: u32,
        timescale: u32,
        edit: Edit,
        audio: bool,
        file_len: u64,
    ) -> Self {
        Timeline {
            track_id,
            timescale: timescale.max(1),
            edit,
            audio,
            file_len,
            next_dts: 0,
            ended: false,
            samples: Vec::new(),
        }
    }

    pub(super) fn track_id(&self) -> u32 {
        self.track_id
    }

    /// Makes room for `n` more samples, as far as the budget allows; call it only with
    /// counts the file's bytes back.
    pub(super) fn reserve(&mut self, n: usize, budget: &Budget) {
        self.samples.reserve(n.min(budget.left()));
    }

    /// Sets the decode time of the next sample (a fragment's `tfdt`); once the timeline
    /// has ended its end stays where the last kept sample ends.
    pub(super) fn set_decode_time(&mut self, t: u64) {
        if !self.ended {
            self.next_dts = t;
        }
    }

    /// Appends a sample; `Ok(false)` once the timeline has ended (this or an earlier
    /// sample lies outside the file), so callers can stop early.
    pub(super) fn push(&mut self, s: RawSample, budget: &mut Budget) -> Result<bool, Mp4Error> {
        if self.ended {
            return Ok(false);
        }
        let inside = s
            .offset
            .checked_add(u64::from(s.size))
            .is_some_and(|end| end <= self.file_len);
        if !inside {
            self.ended = true;
            return Ok(false);
        }
        budget.take()?;
        let dts_track = i128::from(self.next_dts);
        let dts = self.clock(dts_track);
        let pts = self.clock(dts_track + i128::from(s.cts));
        let cts = pts.saturating_sub(dts);
        self.samples.push(Sample {
            offset: s.offset,
            size: s.size,
            dts,
            cts: i32::try_from(cts).unwrap_or(if cts < 0 { i32::MIN } else { i32::MAX }),
            keyframe: s.keyframe || self.audio,
        });
        self.next_dts = self.next_dts.saturating_add(u64::from(s.duration));
        Ok(true)
    }

    /// The decode time after the last kept sample, in 90 kHz ticks.
    pub(super) fn end(&self) -> Timestamp {
        self.clock(i128::from(self.next_dts))
    }

    pub(super) fn into_samples(self) -> Vec<Sample> {
        self.samples
    }

    /// Track ticks to 90 kHz with the edit applied, rounding down.
    fn clock(&self, t: i128) -> Timestamp {
        let shifted = (t - i128::from(self.edit.media_start)) * i128::from(CLOCK_HZ);
        let ticks = shifted.div_euclid(i128::from(self.timescale)) + i128::from(self.edit.lead);
        Timestamp::try_from(ticks).unwrap_or(if ticks < 0 {
            Timestamp::MIN
        } else {
            Timestamp::MAX
        })
    }
}

/// `duration` ticks of `timescale` in 90 kHz ticks, rounding down; 0 for timescale 0.
pub(super) fn to_clock(duration: u64, timescale: u32) -> Timestamp {
    if timescale == 0 {
        return 0;
    }
    let t = i128::from(duration) * i128::from(CLOCK_HZ) / i128::from(timescale);
    Timestamp::try_from(t).unwrap_or(Timestamp::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(offset: u64, duration: u32, cts: i32) -> RawSample {
        RawSample {
            offset,
            size: 1,
            duration,
            cts,
            keyframe: false,
        }
    }

    #[test]
    fn no_drift_at_44100() {
        let mut t = Timeline::new(1, 44_100, Edit::default(), true, 1 << 30);
        let mut budget = Budget::for_file(1 << 30);
        for i in 0..100_000 {
            assert_eq!(t.push(raw(i, 1024, 0), &mut budget), Ok(true));
        }
        // 100000 frames of 1024 samples: 102400000 / 44100 s, floor in 90 kHz ticks.
        assert_eq!(t.end(), 102_400_000 * 90_000 / 44_100);
        let s = t.into_samples();
        assert_eq!(s[99_999].dts, 99_999 * 1024 * 90_000 / 44_100);
        assert!(s.iter().all(|s| s.keyframe));
    }

    #[test]
    fn edit_shift_and_negative_times() {
        let edit = Edit {
            media_start: 1024,
            lead: 900,
        };
        let mut t = Timeline::new(1, 12_800, edit, false, 100);
        let mut budget = Budget::for_file(100);
        assert_eq!(t.push(raw(0, 512, 1024), &mut budget), Ok(true));
        let s = t.into_samples();
        // dts 0 - 1024 ticks = -80 ms = -7200, plus the 10 ms lead; pts at the lead.
        assert_eq!((s[0].dts, s[0].cts), (-7200 + 900, 7200));
    }

    #[test]
    fn ends_at_first_sample_outside_the_file() {
        let mut t = Timeline::new(1, 1000, Edit::default(), false, 10);
        let mut budget = Budget::for_file(100);
        assert_eq!(t.push(raw(9, 10, 0), &mut budget), Ok(true));
        assert_eq!(t.push(raw(10, 10, 0), &mut budget), Ok(false));
        assert_eq!(t.push(raw(0, 10, 0), &mut budget), Ok(false));
        assert_eq!(t.push(raw(u64::MAX, 10, 0), &mut budget), Ok(false));
        t.set_decode_time(1 << 20);
        assert_eq!(t.end(), 900);
        assert_eq!(t.into_samples().len(), 1);
    }

    #[test]
    fn budget_is_an_error() {
        let mut t = Timeline::new(1, 1000, Edit::default(), false, 10);
        let mut budget = Budget::for_file(2);
        assert_eq!(t.push(raw(0, 1, 0), &mut budget), Ok(true));
        assert_eq!(t.push(raw(0, 1, 0), &mut budget), Ok(true));
        assert!(t.push(raw(0, 1, 0), &mut budget).is_err());
    }
}
