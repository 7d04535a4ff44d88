//! 33-bit PTS/DTS to [`Timestamp`]s: unwrapped, and rebased to the program's start.
//!
//! Why: MPEG timestamps wrap every 2^33 ticks (26.5 hours) and start anywhere (ffmpeg
//! starts at 1.4 s, encoders at their uptime). The hub wants times that grow without
//! wrapping and start near 0, and audio and video must keep their distance, so one
//! base serves every stream of the program.
//!
//! # Invariants
//! - Each stream's times are unwrapped against its own previous DTS: a step of less
//!   than 2^32 ticks (13.25 h) either way is taken as the step it is.
//! - A stream's first DTS is unwrapped against the last DTS of any stream, so streams
//!   that start on either side of a wrap stay together.
//! - The first DTS of the program becomes 0; every later time is relative to it.

use super::super::packet::TIMESTAMP_MODULUS;
use crate::Timestamp;

/// The difference `a - b` of two 33-bit times, taken as the shortest way round:
/// in `-2^32..2^32`.
pub(super) fn diff33(a: u64, b: u64) -> i64 {
    let half = TIMESTAMP_MODULUS / 2;
    // Both are below 2^33 (masked by the PES reader), so they fit i64.
    let d = (a as i64)
        .wrapping_sub(b as i64)
        .rem_euclid(TIMESTAMP_MODULUS);
    if d >= half {
        d - TIMESTAMP_MODULUS
    } else {
        d
    }
}

/// The last DTS of one stream, as read and unwrapped.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct StreamClock {
    last: Option<(u64, i64)>,
}

/// The program's clock: the base shared by its streams.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Clock {
    /// The unwrapped first DTS, which becomes 0.
    base: Option<i64>,
    /// The last DTS of any stream, as read and unwrapped.
    last: Option<(u64, i64)>,
}

impl Clock {
    /// The rebased `(pts, dts)` of a PES of `stream` from its 33-bit PTS and DTS; a
    /// missing DTS is the PTS.
    pub(super) fn times(
        &mut self,
        stream: &mut StreamClock,
        pts: u64,
        dts: Option<u64>,
    ) -> (Timestamp, Timestamp) {
        let dts33 = dts.unwrap_or(pts);
        let dts = match stream.last.or(self.last) {
            None => i64::try_from(dts33).unwrap_or(0),
            Some((raw, ext)) => ext.saturating_add(diff33(dts33, raw)),
        };
        stream.last = Some((dts33, dts));
        self.last = stream.last;
        let pts = dts.saturating_add(diff33(pts, dts33));
        let base = *self.base.get_or_insert(dts);
        (pts.saturating_sub(base), dts.saturating_sub(base))
    }

    /// Where a 33-bit time another stream names (an SCTE-35 splice time) falls on the
    /// program's timeline, next to the last time seen; `None` before the first.
    pub(super) fn place(&self, pts33: u64) -> Option<Timestamp> {
        let (raw, ext) = self.last?;
        let base = self.base?;
        Some(ext.saturating_add(diff33(pts33, raw)).saturating_sub(base))
    }

    /// The last DTS seen, on the program's timeline.
    pub(super) fn now(&self) -> Option<Timestamp> {
        Some(self.last?.1.saturating_sub(self.base?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 1 << 33;

    #[test]
    fn differences_take_the_short_way() {
        assert_eq!(diff33(5, 3), 2);
        assert_eq!(diff33(3, 5), -2);
        assert_eq!(diff33(1, M - 1), 2);
        assert_eq!(diff33(M - 1, 1), -2);
        assert_eq!(diff33(M / 2, 0), -(1 << 32));
        assert_eq!(diff33(M / 2 - 1, 0), (1 << 32) - 1);
    }

    #[test]
    fn unwraps_and_rebases() {
        let mut clock = Clock::default();
        let mut video = StreamClock::default();
        let mut audio = StreamClock::default();
        let start = M - 6000;
        // Video: B-frame timing across the wrap.
        assert_eq!(
            clock.times(&mut video, start + 3000, Some(start)),
            (3000, 0)
        );
        assert_eq!(clock.times(&mut video, 0, Some(start + 3000)), (6000, 3000));
        assert_eq!(clock.times(&mut video, 3000, Some(0)), (9000, 6000));
        // Audio starts after the wrap and lines up with video.
        assert_eq!(clock.times(&mut audio, 1000, None), (7000, 7000));
        // And goes on past a second wrap, a day later.
        let mut t = 1000u64;
        let mut expected = 7000i64;
        for _ in 0..40 {
            t = (t + (1 << 28)) % M;
            expected += 1 << 28;
            assert_eq!(clock.times(&mut audio, t, None), (expected, expected));
        }
        // A small step back is a step back.
        assert_eq!(
            clock.times(&mut audio, (t + M - 10) % M, None).0,
            expected - 10
        );
    }

    #[test]
    fn audio_first_sets_the_base() {
        let mut clock = Clock::default();
        let (mut v, mut a) = (StreamClock::default(), StreamClock::default());
        assert_eq!(clock.times(&mut a, 126_000, None), (0, 0));
        assert_eq!(
            clock.times(&mut v, 126_000 + 3000, Some(126_000 - 3000)),
            (3000, -3000)
        );
    }
}
