//! Where a fragment or a part ends: the rules, as a pure decision.
//!
//! Why pure: the live [`Fragmenter`](super::Fragmenter) asks at every frame, and the
//! planner of a file's segments asks at every sample of its index before any byte is
//! read; both must cut at the same places for the same media.
//!
//! A *start point* is a frame a decoder can start at, of the track that leads the
//! cutting: a video keyframe, or any audio frame of a stream without video.
//!
//! Aligned cutting ([`CutRules::aligned`], live HLS): the stream's timeline is divided
//! into slots of `fragment_ticks`, each centred on a multiple of it, and a fragment
//! ends at the first start point in another slot. Where a fragment ends then depends
//! only on where it began, never on where cutting began: two servers that start
//! segmenting the same stream at different keyframes cut it alike from their second
//! fragment on, and number and name its segments alike.

use crate::Timestamp;

/// Where fragments and parts end. Durations are in [`CLOCK_HZ`](crate::CLOCK_HZ) ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutRules {
    /// A fragment ends at the first start point this long (or longer) after its start
    /// (or, [`aligned`](Self::aligned), in the next slot of this length).
    pub fragment_ticks: Timestamp,
    /// Fragments follow the stream's timeline: a fragment ends at the first start point
    /// whose [`slot`](Self::slot) differs from that of the fragment's first frame,
    /// instead of `fragment_ticks` after it. See the module docs.
    pub aligned: bool,
    /// Parts (LL-HLS): within a fragment, a part ends at the first frame of the leading
    /// track this long after the part's start, start point or not.
    pub part_ticks: Option<Timestamp>,
    /// A fragment ends at any frame once it has lasted this many times
    /// `fragment_ticks` without a start point: a stream with long (or no) GOPs still
    /// gets fragments, so what is lost when a process dies stays bounded.
    pub forced_cut_factor: Option<i64>,
    /// A fragment ends at any frame once it holds this many bytes of media (payloads
    /// plus [`FRAME_OVERHEAD`](super::FRAME_OVERHEAD) each): memory stays bounded
    /// whatever the source sends.
    pub max_bytes: Option<usize>,
}

/// How far the fragment in progress has come when a frame arrives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Decode time of the fragment's first frame (read by aligned rules only).
    pub start: Timestamp,
    /// Ticks from the fragment's start to the frame.
    pub fragment: Timestamp,
    /// Ticks from the part's start to the frame (the fragment's start for its first).
    pub part: Timestamp,
    /// Bytes of media the fragment holds.
    pub bytes: usize,
}

/// What a frame ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// The fragment in progress; the frame starts the next.
    Fragment,
    /// The part in progress; the frame starts the next part of the same fragment.
    Part,
}

impl CutRules {
    /// Cuts at start points only, every `fragment_ticks`: segments of a file on demand.
    pub fn at_start_points(fragment_ticks: Timestamp) -> CutRules {
        CutRules {
            fragment_ticks,
            aligned: false,
            part_ticks: None,
            forced_cut_factor: None,
            max_bytes: None,
        }
    }

    /// What a frame that arrives at `progress` ends: `start` when it is a start point,
    /// `leader` when it is of the leading track (video, or audio without video).
    pub fn cut(&self, progress: &Progress, start: bool, leader: bool) -> Option<Cut> {
        let due = if self.aligned {
            let at = progress.start.saturating_add(progress.fragment);
            self.slot(at) != self.slot(progress.start)
        } else {
            progress.fragment >= self.fragment_ticks
        };
        if start && due {
            return Some(Cut::Fragment);
        }
        let forced = self
            .forced_cut_factor
            .is_some_and(|k| progress.fragment >= self.fragment_ticks.saturating_mul(k));
        let full = self.max_bytes.is_some_and(|max| progress.bytes >= max);
        if forced || full {
            return Some(Cut::Fragment);
        }
        match self.part_ticks {
            Some(part) if leader && progress.part >= part => Some(Cut::Part),
            _ => None,
        }
    }

    /// The slot of the stream's timeline that decode time `dts` falls in: slot `n`
    /// holds the times nearest `n * fragment_ticks` (from half a fragment before it to
    /// just under half after), so keyframes every `fragment_ticks` from time 0 sit in
    /// the middle of their slots and jitter of up to half a fragment moves none.
    pub fn slot(&self, dts: Timestamp) -> i64 {
        let len = self.fragment_ticks.max(1);
        dts.saturating_add(len / 2).div_euclid(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(fragment: Timestamp, part: Timestamp, bytes: usize) -> Progress {
        Progress {
            start: 0,
            fragment,
            part,
            bytes,
        }
    }

    #[test]
    fn each_rule_cuts_where_it_says() {
        let rules = CutRules {
            fragment_ticks: 1000,
            aligned: false,
            part_ticks: Some(300),
            forced_cut_factor: Some(4),
            max_bytes: Some(100),
        };
        // Start points after the fragment duration end it; before, only parts.
        assert_eq!(rules.cut(&at(1000, 0, 0), true, true), Some(Cut::Fragment));
        assert_eq!(rules.cut(&at(999, 300, 0), true, true), Some(Cut::Part));
        assert_eq!(rules.cut(&at(999, 299, 0), true, true), None);
        // Parts are cut on the leading track only.
        assert_eq!(rules.cut(&at(999, 300, 0), false, false), None);
        assert_eq!(rules.cut(&at(1500, 300, 0), false, true), Some(Cut::Part));
        // Forced and size cuts need no start point, nor the leading track.
        assert_eq!(
            rules.cut(&at(4000, 0, 0), false, false),
            Some(Cut::Fragment)
        );
        assert_eq!(
            rules.cut(&at(10, 0, 100), false, false),
            Some(Cut::Fragment)
        );
        let plain = CutRules::at_start_points(1000);
        assert_eq!(
            plain.cut(&at(1 << 40, 1 << 40, usize::MAX), false, true),
            None
        );
    }

    #[test]
    fn aligned_rules_cut_where_the_slot_changes_whatever_the_start() {
        let rules = CutRules {
            aligned: true,
            ..CutRules::at_start_points(1000)
        };
        let from = |start: Timestamp, at: Timestamp| Progress {
            start,
            fragment: at - start,
            ..Progress::default()
        };
        // Slot 1 is 500..1500: a keyframe at 1400 is still in it, one at 1500 is not.
        assert_eq!(rules.slot(499), 0);
        assert_eq!(rules.slot(500), 1);
        assert_eq!(rules.slot(1499), 1);
        assert_eq!(rules.slot(-501), -1);
        assert_eq!(rules.cut(&from(600, 1400), true, true), None);
        assert_eq!(rules.cut(&from(600, 1500), true, true), Some(Cut::Fragment));
        // A fragment that began late in its slot still ends at the same place.
        assert_eq!(
            rules.cut(&from(1300, 1500), true, true),
            Some(Cut::Fragment)
        );
        // Timestamps that went back end it too (another slot), and only start points cut.
        assert_eq!(rules.cut(&from(5000, 100), true, true), Some(Cut::Fragment));
        assert_eq!(rules.cut(&from(600, 1500), false, true), None);
    }
}
