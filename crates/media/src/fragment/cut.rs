//! Where a fragment or a part ends: the rules, as a pure decision.
//!
//! Why pure: the live [`Fragmenter`](super::Fragmenter) asks at every frame, and the
//! planner of a file's segments asks at every sample of its index before any byte is
//! read; both must cut at the same places for the same media.
//!
//! A *start point* is a frame a decoder can start at, of the track that leads the
//! cutting: a video keyframe, or any audio frame of a stream without video.

use crate::Timestamp;

/// Where fragments and parts end. Durations are in [`CLOCK_HZ`](crate::CLOCK_HZ) ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutRules {
    /// A fragment ends at the first start point this long (or longer) after its start.
    pub fragment_ticks: Timestamp,
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
            part_ticks: None,
            forced_cut_factor: None,
            max_bytes: None,
        }
    }

    /// What a frame that arrives at `progress` ends: `start` when it is a start point,
    /// `leader` when it is of the leading track (video, or audio without video).
    pub fn cut(&self, progress: &Progress, start: bool, leader: bool) -> Option<Cut> {
        if start && progress.fragment >= self.fragment_ticks {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(fragment: Timestamp, part: Timestamp, bytes: usize) -> Progress {
        Progress {
            fragment,
            part,
            bytes,
        }
    }

    #[test]
    fn each_rule_cuts_where_it_says() {
        let rules = CutRules {
            fragment_ticks: 1000,
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
}
