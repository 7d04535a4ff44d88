//! Blocking playlist reload and preload hints: can a request be answered now?
//!
//! Why: a Low-Latency HLS viewer asks for the playlist that will contain a segment or
//! part that does not exist yet (`_HLS_msn`/`_HLS_part`), or for the hinted part
//! itself. The server holds such a request for a bounded time; this file says whether
//! to answer now, hold it, or refuse it, from the timeline alone. Time stays outside:
//! the server re-asks after each timeline change and gives up after
//! `Timeline::block_limit_ms`.
//!
//! # Rules (draft-pantos-hls-rfc8216bis, "Blocking Playlist Reload")
//! - Let `edge` be the msn of the segment in progress (or of the next one).
//! - `msn > edge + 1` is too far ahead (the spec: more than two past the last
//!   complete segment): answer 400 at once.
//! - Without a part: ready once `msn < edge` (complete, or already gone).
//! - With a part: ready once `msn < edge`, or `msn == edge` and the part exists. Too
//!   far ahead when the part index is beyond the Advance Part Limit: more than
//!   `3 / part target` parts (3 when the part target is a second or more) past the
//!   last existing part, counting from part 0 for segment `edge + 1`.
//! - Once the stream ended, everything is ready: the playlist will not change.

use crate::config::MAX_PARTS_PER_SEGMENT;
use crate::query::BlockingRequest;
use crate::timeline::Timeline;

/// What to do with a blocking playlist request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// The current playlist answers it: render and send.
    Ready,
    /// Hold the request; ask again after the timeline changes.
    Wait,
    /// Further ahead than any client should ask: answer 400 at once.
    TooFarAhead,
}

/// Whether a segment or part can be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    /// It exists and is kept: serve it.
    Available,
    /// It is the next to be produced (the one a preload hint names): hold the
    /// request for a bounded time, then ask again.
    Pending,
    /// It existed but left the kept range: 404.
    Gone,
    /// It does not exist and is not the next one: 404.
    Unknown,
}

impl Timeline {
    /// Whether a blocking reload can be answered now. See the module docs for the rules.
    pub fn readiness(&self, request: BlockingRequest) -> Readiness {
        if self.ended {
            return Readiness::Ready;
        }
        let edge = self.complete_end();
        if request.msn > edge.saturating_add(1) {
            return Readiness::TooFarAhead;
        }
        if request.msn < edge {
            return Readiness::Ready;
        }
        let Some(part) = request.part else {
            return Readiness::Wait;
        };
        if part >= MAX_PARTS_PER_SEGMENT {
            return Readiness::TooFarAhead;
        }
        let existing = if request.msn == edge {
            self.open_part_count()
        } else {
            0
        };
        if part < existing {
            Readiness::Ready
        } else if part - existing >= self.advance_part_limit() {
            Readiness::TooFarAhead
        } else {
            Readiness::Wait
        }
    }

    /// Whether segment `msn` can be served: kept segments are available, the segment
    /// in progress (or the next one, between segments) is pending.
    pub fn segment_state(&self, msn: u64) -> Availability {
        if self.kept_segment(msn).is_some() {
            return Availability::Available;
        }
        let edge = self.complete_end();
        if msn < edge {
            Availability::Gone
        } else if msn == edge && !self.ended {
            Availability::Pending
        } else {
            Availability::Unknown
        }
    }

    /// Whether part `part` of segment `msn` can be served. Parts stay available as
    /// long as their segment is kept. Pending: the next part of the segment in
    /// progress, or part 0 of the segment after it (a segment may end where a preload
    /// hint expected one more part).
    pub fn part_state(&self, msn: u64, part: u32) -> Availability {
        if !self.config.low_latency {
            return Availability::Unknown;
        }
        let index = usize::try_from(part).unwrap_or(usize::MAX);
        if let Some(segment) = self.kept_segment(msn) {
            return if index < segment.parts.len() {
                Availability::Available
            } else {
                Availability::Unknown
            };
        }
        let edge = self.complete_end();
        if msn < edge {
            return Availability::Gone;
        }
        let existing = self.open_part_count();
        let pending = !self.ended
            && ((msn == edge && part == existing)
                || (self.open.is_some() && msn == edge.saturating_add(1) && part == 0));
        if msn == edge && part < existing {
            Availability::Available
        } else if pending {
            Availability::Pending
        } else {
            Availability::Unknown
        }
    }

    /// Parts of the segment in progress (0 between segments).
    fn open_part_count(&self) -> u32 {
        self.open.as_ref().map_or(0, |open| {
            u32::try_from(open.parts.len()).unwrap_or(u32::MAX)
        })
    }

    /// How many parts past the last existing one a request may ask for.
    fn advance_part_limit(&self) -> u32 {
        let limit = if self.part_target_ms < 1000 {
            3000u64.div_ceil(self.part_target_ms.max(1))
        } else {
            3
        };
        u32::try_from(limit).unwrap_or(u32::MAX)
    }
}
