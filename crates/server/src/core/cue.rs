//! SCTE-35 cues placed on a stream's timeline: what a TS input's splicer marked, for
//! the taps that act on them (HLS's `EXT-X-DATERANGE`) and for operators (the API).
//!
//! Why not packets in the ring: no player protocol carries them yet, and a ring packet
//! is something every player path must step over. A stream keeps its newest
//! [`KEPT`] cues instead, so a tap that starts late (HLS at its first request) still
//! cuts at a splice point the ring's media reaches.

use sluice_media::ts::{CueDirection, SpliceCommand, SpliceInfo};
use sluice_media::{Frame, Timestamp};
use std::collections::VecDeque;
use std::sync::Arc;

/// Cues a stream keeps: a feed's splicer sends a few a minute, and a late tap needs
/// only those of the ring's span.
pub const KEPT: usize = 16;

/// One cue on a stream's timeline.
#[derive(Debug)]
pub struct StreamCue {
    /// When it splices, 90 kHz ticks on the stream's timeline (the frames' clock).
    pub at: Timestamp,
    /// When it arrived, Unix ms.
    pub received_ms: i64,
    /// The section, decoded and whole.
    pub info: SpliceInfo,
}

impl StreamCue {
    /// Where it splices, ms on the stream's timeline.
    pub fn at_ms(&self) -> i64 {
        Frame::ms_from_ticks(self.at)
    }

    /// The command's name, as SCTE-35 spells it.
    pub fn command(&self) -> &'static str {
        match self.info.command {
            SpliceCommand::Null => "splice_null",
            SpliceCommand::Schedule => "splice_schedule",
            SpliceCommand::Insert(_) => "splice_insert",
            SpliceCommand::TimeSignal { .. } => "time_signal",
            SpliceCommand::BandwidthReservation => "bandwidth_reservation",
            SpliceCommand::Private { .. } => "private_command",
            SpliceCommand::Unknown(_) => "unknown",
        }
    }

    /// "out" (a break starts), "in" (it ends), or `None`.
    pub fn direction(&self) -> Option<&'static str> {
        self.info.direction().map(|d| match d {
            CueDirection::Out => "out",
            CueDirection::In => "in",
        })
    }

    /// The event id of a `splice_insert` or of the first segmentation descriptor.
    pub fn event_id(&self) -> Option<u32> {
        match self.info.command {
            SpliceCommand::Insert(i) => Some(i.event_id),
            _ => self.info.segmentations.first().map(|s| s.event_id),
        }
    }
}

/// A stream's newest cues, oldest first.
#[derive(Debug, Default)]
pub struct Cues(VecDeque<Arc<StreamCue>>);

impl Cues {
    pub fn push(&mut self, cue: Arc<StreamCue>) {
        if self.0.len() == KEPT {
            self.0.pop_front();
        }
        self.0.push_back(cue);
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<StreamCue>> {
        self.0.iter()
    }
}
