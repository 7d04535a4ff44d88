//! The timeline of one variant: which segments and parts exist, their media sequence
//! numbers, durations, discontinuities and wall-clock times. No media bytes.
//!
//! Why: the server keeps segment bytes in memory keyed by media sequence number
//! (msn); this type decides which msn exist, which are listed in the playlist, and
//! when one leaves the kept range so the caller can free its bytes. Rendering
//! (`render.rs`) and blocking-reload logic (`readiness.rs`) read it.
//!
//! # Call contract
//! `start_segment` (at a keyframe), then `add_part` any number of times (Low-Latency
//! only), then `end_segment`; repeat. `end_stream` once at the end. A call out of this
//! order is [`HlsError::Unexpected`] and changes nothing. Time is an input: the
//! caller passes durations (90 kHz ticks) and the wall clock; nothing here reads a clock.
//!
//! Names: a segment's URI is made from its *name*, a number that is its msn unless the
//! caller names segments itself (`start_named_segment`): live HLS names them by their
//! start on the stream's timeline, so that the same media has the same URI on every
//! server, and numbers the first one from the timeline too (`set_first_msn`).
//!
//! # Invariants
//! - msn are consecutive from the first (0 unless set) and never reused: `kept` holds
//!   `kept_start..next` complete segments, oldest first, then at most one segment in
//!   progress.
//! - Names only grow, so a name is never reused either.
//! - `kept.len() <= window + keep_extra`; the listed segments are the newest
//!   `min(window, kept.len())` of them. A segment that leaves `kept` is returned once
//!   by `end_segment`/`end_stream` and is never listed again.
//! - The media sequence (first listed msn) and the discontinuity sequence only grow.
//! - The target duration and part target only grow: a live playlist must not shrink
//!   them, and every listed duration rounds to at most them.

use std::collections::VecDeque;
use std::ops::Range;

use crate::config::{HlsConfig, Variant, MAX_PARTS_PER_SEGMENT, MAX_SEGMENT_TICKS};
use crate::daterange::DateRange;
use crate::HlsError;

/// 90 kHz ticks per millisecond.
const TICKS_PER_MS: u64 = 90;

/// One part (partial segment) of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Part {
    /// Duration in 90 kHz ticks, > 0.
    pub(crate) duration: u64,
    /// Starts with a keyframe (`INDEPENDENT=YES`).
    pub(crate) independent: bool,
}

/// One segment, complete or in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Segment {
    /// Media sequence number.
    pub(crate) msn: u64,
    /// What its URI is made from: its msn, or the caller's name for it.
    pub(crate) name: u64,
    /// Duration in 90 kHz ticks; 0 while in progress.
    pub(crate) duration: u64,
    /// Follows a publisher restart (`EXT-X-DISCONTINUITY`).
    pub(crate) discontinuity: bool,
    /// Wall clock of its first frame, Unix ms (`EXT-X-PROGRAM-DATE-TIME`).
    pub(crate) wall_clock_ms: i64,
    /// Its parts, in order; empty without Low-Latency HLS.
    pub(crate) parts: Vec<Part>,
    /// `EXT-X-DATERANGE` tags that begin with it (ad markers).
    pub(crate) date_ranges: Vec<DateRange>,
}

/// The segments and parts of one variant of one live stream. See the module docs
/// for the call contract and invariants.
#[derive(Debug, Clone)]
pub struct Timeline {
    pub(crate) config: HlsConfig,
    pub(crate) variant: Variant,
    /// Complete segments still kept, oldest first; the newest `window` are listed.
    pub(crate) kept: VecDeque<Segment>,
    /// The segment being produced, if any.
    pub(crate) open: Option<Segment>,
    /// The msn the next `start_segment` returns.
    pub(crate) next_msn: u64,
    /// The msn of the first segment.
    pub(crate) first_msn: u64,
    /// Segments are named by the caller (`start_named_segment`), not by msn.
    pub(crate) named: bool,
    /// The name of the newest segment started, if any.
    pub(crate) last_name: Option<u64>,
    /// Discontinuities before the first listed segment.
    pub(crate) discontinuity_sequence: u64,
    /// `EXT-X-TARGETDURATION` in whole seconds.
    pub(crate) target_duration_s: u64,
    /// `PART-TARGET` in ms.
    pub(crate) part_target_ms: u64,
    /// `end_stream` was called.
    pub(crate) ended: bool,
    /// Bumped by every call that changes the timeline.
    pub(crate) revision: u64,
}

impl Timeline {
    /// A timeline with no segments yet. Fails if `config` is out of range
    /// ([`HlsConfig::validate`]).
    pub fn new(config: HlsConfig, variant: Variant) -> Result<Self, HlsError> {
        config.validate(variant)?;
        Ok(Self {
            config,
            variant,
            kept: VecDeque::with_capacity(config.window.saturating_add(config.keep_extra)),
            open: None,
            next_msn: 0,
            first_msn: 0,
            named: false,
            last_name: None,
            discontinuity_sequence: 0,
            target_duration_s: u64::from(config.target_duration_ms).div_ceil(1000),
            part_target_ms: u64::from(config.part_duration_ms),
            ended: false,
            revision: 0,
        })
    }

    /// A new segment begins (always at a keyframe) and becomes the segment in
    /// progress. `discontinuity` when the publisher restarted (ignored on the very
    /// first segment, which follows nothing); `wall_clock_ms` is the Unix time of its
    /// first frame. Returns its msn, which is also its name.
    ///
    /// Errors: a segment is already in progress, or the stream has ended.
    pub fn start_segment(
        &mut self,
        discontinuity: bool,
        wall_clock_ms: i64,
    ) -> Result<u64, HlsError> {
        self.start(discontinuity, wall_clock_ms, None)
    }

    /// [`start_segment`](Self::start_segment) for a segment the caller names: its URIs
    /// are made from `name` instead of its msn. Names only grow: one not above the
    /// name before is raised to that name plus one. Returns the msn.
    pub fn start_named_segment(
        &mut self,
        discontinuity: bool,
        wall_clock_ms: i64,
        name: u64,
    ) -> Result<u64, HlsError> {
        self.start(discontinuity, wall_clock_ms, Some(name))
    }

    fn start(
        &mut self,
        discontinuity: bool,
        wall_clock_ms: i64,
        name: Option<u64>,
    ) -> Result<u64, HlsError> {
        self.check_not_ended("start_segment")?;
        if self.open.is_some() {
            return Err(HlsError::Unexpected {
                call: "start_segment",
                state: "while a segment is in progress",
            });
        }
        let msn = self.next_msn;
        let name = match name {
            Some(name) => {
                self.named = true;
                match self.last_name {
                    Some(last) if name <= last => last.saturating_add(1),
                    _ => name,
                }
            }
            None => msn,
        };
        self.last_name = Some(name);
        self.open = Some(Segment {
            msn,
            name,
            duration: 0,
            discontinuity: discontinuity && !self.is_first(msn),
            wall_clock_ms,
            parts: Vec::new(),
            date_ranges: Vec::new(),
        });
        self.next_msn = msn.saturating_add(1);
        self.bump();
        Ok(msn)
    }

    /// Date ranges (ad markers) that begin with the segment in progress, listed with
    /// it; none without one.
    pub fn add_date_ranges(&mut self, ranges: Vec<DateRange>) {
        if ranges.is_empty() {
            return;
        }
        if let Some(open) = self.open.as_mut() {
            open.date_ranges.extend(ranges);
            self.bump();
        }
    }

    /// Numbers the first segment `msn` (and the ones after it from there), instead of
    /// 0: a live stream's segments are numbered from its timeline, so that two servers
    /// segmenting it number them alike.
    ///
    /// Errors: a segment was started already.
    pub fn set_first_msn(&mut self, msn: u64) -> Result<(), HlsError> {
        if self.last_name.is_some() || self.ended {
            return Err(HlsError::Unexpected {
                call: "set_first_msn",
                state: "after the first segment",
            });
        }
        self.next_msn = msn;
        self.first_msn = msn;
        Ok(())
    }

    /// Whether `msn` is the timeline's first segment (which follows nothing).
    fn is_first(&self, msn: u64) -> bool {
        msn == self.first_msn
    }

    /// A part of the segment in progress is complete (Low-Latency HLS only):
    /// `duration_ticks` at 90 kHz, `independent` when it starts with a keyframe.
    /// Returns its (msn, part index).
    ///
    /// Errors: not Low-Latency, no segment in progress, a duration outside
    /// `1..=MAX_SEGMENT_TICKS`, or more than [`MAX_PARTS_PER_SEGMENT`] parts.
    pub fn add_part(
        &mut self,
        duration_ticks: i64,
        independent: bool,
    ) -> Result<(u64, u32), HlsError> {
        self.check_not_ended("add_part")?;
        if !self.config.low_latency {
            return Err(HlsError::Unexpected {
                call: "add_part",
                state: "without low latency",
            });
        }
        let duration = checked_duration("part", duration_ticks)?;
        let Some(open) = self.open.as_mut() else {
            return Err(HlsError::Unexpected {
                call: "add_part",
                state: "with no segment in progress",
            });
        };
        let index = u32::try_from(open.parts.len()).unwrap_or(u32::MAX);
        if index >= MAX_PARTS_PER_SEGMENT {
            return Err(HlsError::TooManyParts {
                limit: MAX_PARTS_PER_SEGMENT,
            });
        }
        open.parts.push(Part {
            duration,
            independent,
        });
        let msn = open.msn;
        self.part_target_ms = self.part_target_ms.max(ticks_to_ms(duration));
        self.bump();
        Ok((msn, index))
    }

    /// The segment in progress is complete with this duration (90 kHz ticks). It is
    /// listed from now on. Returns the msn of the segments that left the kept range,
    /// oldest first, so the caller frees their bytes (at most one per call).
    ///
    /// Errors: no segment in progress, or a duration outside `1..=MAX_SEGMENT_TICKS`.
    pub fn end_segment(&mut self, duration_ticks: i64) -> Result<Vec<u64>, HlsError> {
        self.check_not_ended("end_segment")?;
        let duration = checked_duration("segment", duration_ticks)?;
        let Some(mut segment) = self.open.take() else {
            return Err(HlsError::Unexpected {
                call: "end_segment",
                state: "with no segment in progress",
            });
        };
        segment.duration = duration;
        Ok(self.push_complete(segment))
    }

    /// The stream ended: the playlist gets `EXT-X-ENDLIST` and never changes again.
    /// A segment in progress with parts is completed with the sum of their
    /// durations; one without parts is dropped. Returns the msn the caller should
    /// free (the dropped segment, and any that left the kept range). Calling it
    /// again returns nothing.
    pub fn end_stream(&mut self) -> Vec<u64> {
        if self.ended {
            return Vec::new();
        }
        let mut released = Vec::new();
        if let Some(mut segment) = self.open.take() {
            let total = segment
                .parts
                .iter()
                .fold(0u64, |sum, part| sum.saturating_add(part.duration));
            if total > 0 && total <= MAX_SEGMENT_TICKS.unsigned_abs() {
                segment.duration = total;
                released = self.push_complete(segment);
            } else {
                // Nothing follows an ended stream: the msn is not burnt, so the kept
                // range stays contiguous up to `next_msn`.
                self.next_msn = segment.msn;
                released.push(segment.msn);
            }
        }
        self.ended = true;
        self.bump();
        released
    }

    /// The media sequence number of the first listed segment (`EXT-X-MEDIA-SEQUENCE`).
    pub fn media_sequence(&self) -> u64 {
        self.listed().start
    }

    /// The msn of the listed complete segments.
    pub fn listed(&self) -> Range<u64> {
        let end = self.complete_end();
        let count = u64::try_from(self.listed_count()).unwrap_or(u64::MAX);
        end.saturating_sub(count)..end
    }

    /// The msn of the kept complete segments (listed, and the older ones still served).
    pub fn kept(&self) -> Range<u64> {
        let end = self.complete_end();
        let count = u64::try_from(self.kept.len()).unwrap_or(u64::MAX);
        end.saturating_sub(count)..end
    }

    /// The msn of the segment in progress, if any.
    pub fn in_progress(&self) -> Option<u64> {
        self.open.as_ref().map(|segment| segment.msn)
    }

    /// The msn of the kept or in-progress segment named `name` (see
    /// [`start_named_segment`](Self::start_named_segment)), if there is one.
    pub fn msn_named(&self, name: u64) -> Option<u64> {
        if let Some(open) = self.open.as_ref().filter(|s| s.name == name) {
            return Some(open.msn);
        }
        // Names grow with msn: a binary search of the kept ones.
        let index = self.kept.binary_search_by_key(&name, |s| s.name).ok()?;
        self.kept.get(index).map(|s| s.msn)
    }

    /// Discontinuities before the first listed segment (`EXT-X-DISCONTINUITY-SEQUENCE`).
    pub fn discontinuity_sequence(&self) -> u64 {
        self.discontinuity_sequence
    }

    /// `EXT-X-TARGETDURATION`, whole seconds: the configured target rounded up, raised
    /// to the rounded-up duration of the longest segment ever completed.
    pub fn target_duration_secs(&self) -> u64 {
        self.target_duration_s
    }

    /// `PART-TARGET` in ms: the configured part duration, raised to the longest part
    /// ever added.
    pub fn part_target_ms(&self) -> u64 {
        self.part_target_ms
    }

    /// How long a blocking playlist request may wait before the server gives up with
    /// 503: three target durations (draft-pantos-hls-rfc8216bis, blocking reload).
    pub fn block_limit_ms(&self) -> u64 {
        self.target_duration_s.saturating_mul(3000)
    }

    /// Whether `end_stream` was called.
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// A counter bumped by every call that changed the timeline: the playlist needs
    /// rendering again when it differs from the one last rendered.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The configuration.
    pub fn config(&self) -> &HlsConfig {
        &self.config
    }

    /// The variant.
    pub fn variant(&self) -> Variant {
        self.variant
    }

    /// The msn one past the newest complete segment.
    pub(crate) fn complete_end(&self) -> u64 {
        match &self.open {
            Some(open) => open.msn,
            None => self.next_msn,
        }
    }

    /// How many of the kept segments are listed.
    pub(crate) fn listed_count(&self) -> usize {
        self.kept.len().min(self.config.window)
    }

    /// The listed segments, oldest first.
    pub(crate) fn listed_segments(&self) -> impl DoubleEndedIterator<Item = &Segment> {
        let skip = self.kept.len().saturating_sub(self.config.window);
        self.kept.iter().skip(skip)
    }

    /// The kept segment `msn`, if kept.
    pub(crate) fn kept_segment(&self, msn: u64) -> Option<&Segment> {
        let first = self.kept.front()?.msn;
        let index = usize::try_from(msn.checked_sub(first)?).ok()?;
        self.kept.get(index)
    }

    fn push_complete(&mut self, segment: Segment) -> Vec<u64> {
        self.target_duration_s = self
            .target_duration_s
            .max(ticks_to_ms(segment.duration).div_ceil(1000));
        self.kept.push_back(segment);
        // The segment that just left the listing, if one did: its discontinuity now
        // precedes the first listed segment.
        if let Some(left) = self
            .kept
            .len()
            .checked_sub(self.config.window.saturating_add(1))
            .and_then(|index| self.kept.get(index))
        {
            if left.discontinuity {
                self.discontinuity_sequence = self.discontinuity_sequence.saturating_add(1);
            }
        }
        let mut released = Vec::new();
        while self.kept.len() > self.config.window.saturating_add(self.config.keep_extra) {
            if let Some(old) = self.kept.pop_front() {
                released.push(old.msn);
            }
        }
        self.bump();
        released
    }

    fn check_not_ended(&self, call: &'static str) -> Result<(), HlsError> {
        if self.ended {
            return Err(HlsError::Unexpected {
                call,
                state: "after end_stream",
            });
        }
        Ok(())
    }

    fn bump(&mut self) {
        self.revision = self.revision.wrapping_add(1);
    }
}

/// A duration as ticks if it is in `1..=MAX_SEGMENT_TICKS`.
fn checked_duration(what: &'static str, ticks: i64) -> Result<u64, HlsError> {
    if ticks <= 0 || ticks > MAX_SEGMENT_TICKS {
        return Err(HlsError::BadDuration { what, ticks });
    }
    Ok(ticks.unsigned_abs())
}

/// Ticks to ms, rounded to nearest: the precision every playlist duration is
/// written with (three decimals of a second).
pub(crate) fn ticks_to_ms(ticks: u64) -> u64 {
    ticks.saturating_add(TICKS_PER_MS / 2) / TICKS_PER_MS
}
