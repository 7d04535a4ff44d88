//! Ad markers: SCTE-35 cues of a stream as `EXT-X-DATERANGE` tags (RFC 8216bis
//! §4.4.5.1 and its "Mapping SCTE-35 into EXT-X-DATERANGE").
//!
//! Why here: where a cue lands is the segmenter's business (the segment that begins at
//! the splice point, cut there on purpose), and which tags it becomes is the
//! playlist's. A [`Splices`] takes the stream's cues ([`Splices::cue`]), tells the
//! caller's fragmenter where to cut, and when a segment begins
//! ([`Splices::at_segment`]) turns the cues due there into date ranges dated by that
//! segment's `EXT-X-PROGRAM-DATE-TIME`, so a player switches content exactly at a
//! segment boundary.
//!
//! The mapping:
//! - a `splice_insert` out of the network: `ID="splice-EVENT"`, `SCTE35-OUT` (the
//!   section), `PLANNED-DURATION` from its break duration;
//! - the `splice_insert` back in with the same event id: the same `ID` and
//!   `START-DATE` (tags sharing an ID must agree), `DURATION` from the out's segment
//!   to this one on the media's clock, `SCTE35-IN`;
//! - a `time_signal` with a segmentation descriptor that opens or closes a break:
//!   the same, with `ID="seg-EVENT"` and the descriptor's duration;
//! - any other command worth passing on (a `time_signal` without a break, a private
//!   command, a schedule): one tag with `SCTE35-CMD`;
//! - `splice_null` (a heartbeat), bandwidth reservations and cancellations: nothing.
//!
//! # Invariants
//! - Memory is bounded: at most [`MAX_PENDING`] cues wait for their segment and
//!   [`MAX_OPEN_BREAKS`] breaks wait for their end; the oldest go first.
//! - IDs and hex are ASCII without quotes, so no cue can inject playlist text.

use std::collections::VecDeque;
use std::fmt::Write as _;

use bytes::Bytes;
use sluice_media::ts::{CueDirection, SpliceCommand, SpliceInfo};
use sluice_media::Timestamp;

use crate::datetime::write_iso8601_ms;
use crate::render::write_seconds;

/// Cues waiting for the segment they mark.
pub const MAX_PENDING: usize = 32;
/// Breaks (outs) remembered until their in.
pub const MAX_OPEN_BREAKS: usize = 64;

/// Which SCTE-35 attribute carries the section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scte35Attribute {
    /// `SCTE35-OUT`: a break starts.
    Out,
    /// `SCTE35-IN`: the break ends.
    In,
    /// `SCTE35-CMD`: any other command.
    Cmd,
}

impl Scte35Attribute {
    fn name(self) -> &'static str {
        match self {
            Scte35Attribute::Out => "SCTE35-OUT",
            Scte35Attribute::In => "SCTE35-IN",
            Scte35Attribute::Cmd => "SCTE35-CMD",
        }
    }
}

/// One `EXT-X-DATERANGE` tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DateRange {
    /// `ID`: shared by the tags of one break.
    pub id: String,
    /// `START-DATE`, Unix ms.
    pub start_ms: i64,
    /// `DURATION` in ms, once the break ended.
    pub duration_ms: Option<u64>,
    /// `PLANNED-DURATION` in ms, as the out announced it.
    pub planned_duration_ms: Option<u64>,
    /// Which attribute carries `section`.
    pub attribute: Scte35Attribute,
    /// The splice info section, whole, as received.
    pub section: Bytes,
}

impl DateRange {
    /// Appends the tag and its line end to `out`.
    pub fn render(&self, out: &mut String) {
        out.push_str("#EXT-X-DATERANGE:ID=\"");
        out.push_str(&self.id);
        out.push_str("\",START-DATE=\"");
        write_iso8601_ms(out, self.start_ms);
        out.push('"');
        if let Some(ms) = self.duration_ms {
            out.push_str(",DURATION=");
            write_seconds(out, ms);
        }
        if let Some(ms) = self.planned_duration_ms {
            out.push_str(",PLANNED-DURATION=");
            write_seconds(out, ms);
        }
        let _ = write!(out, ",{}=0x", self.attribute.name());
        for byte in &self.section {
            let _ = write!(out, "{byte:02X}");
        }
        out.push('\n');
    }
}

/// A cue waiting for its segment.
#[derive(Debug, Clone)]
struct Pending {
    at: Timestamp,
    info: SpliceInfo,
}

/// A stream's cues on their way to date ranges; see the module docs.
#[derive(Debug, Clone, Default)]
pub struct Splices {
    pending: VecDeque<Pending>,
    /// Outs not yet closed: their ID, `START-DATE` and the decode time of the
    /// segment they began.
    open: VecDeque<(String, i64, Timestamp)>,
}

/// What a cue becomes: its ID, direction and planned duration (90 kHz ticks), or
/// `None` when nothing is passed on.
fn mapping(info: &SpliceInfo) -> Option<(String, Scte35Attribute, Option<u64>)> {
    let direction = |d: Option<CueDirection>| match d {
        Some(CueDirection::Out) => Scte35Attribute::Out,
        Some(CueDirection::In) => Scte35Attribute::In,
        None => Scte35Attribute::Cmd,
    };
    match info.command {
        SpliceCommand::Null | SpliceCommand::BandwidthReservation => None,
        SpliceCommand::Insert(i) if i.cancel => None,
        SpliceCommand::Insert(i) => Some((
            format!("splice-{}", i.event_id),
            direction(info.direction()),
            info.duration(),
        )),
        SpliceCommand::TimeSignal { .. } => {
            let marks = info.segmentations.iter().find(|s| s.direction().is_some());
            match marks {
                Some(s) => Some((
                    format!("seg-{}", s.event_id),
                    direction(s.direction()),
                    s.duration,
                )),
                None if !info.segmentations.is_empty()
                    && info.segmentations.iter().all(|s| s.cancel) =>
                {
                    None
                }
                None => Some((String::new(), Scte35Attribute::Cmd, None)),
            }
        }
        SpliceCommand::Schedule | SpliceCommand::Private { .. } | SpliceCommand::Unknown(_) => {
            Some((String::new(), Scte35Attribute::Cmd, None))
        }
    }
}

/// Ticks at 90 kHz in ms.
fn ticks_ms(ticks: u64) -> u64 {
    ticks / 90
}

impl Splices {
    /// A cue that splices at `at` (on the frames' clock): returns where the caller's
    /// fragmenter must cut (`Some(at)`), or `None` for a cue that becomes no tag.
    pub fn cue(&mut self, at: Timestamp, info: SpliceInfo) -> Option<Timestamp> {
        mapping(&info)?;
        if self.pending.len() == MAX_PENDING {
            self.pending.pop_front();
        }
        self.pending.push_back(Pending { at, info });
        Some(at)
    }

    /// A segment begins at `dts`, dated `wall_clock_ms` (its program date time), and
    /// is media sequence number `msn`: the date ranges of the cues due by then, in
    /// the order they came.
    pub fn at_segment(&mut self, dts: Timestamp, wall_clock_ms: i64, msn: u64) -> Vec<DateRange> {
        let mut ranges = Vec::new();
        let mut n = 0usize;
        while let Some(cue) = self.pending.front() {
            if cue.at > dts {
                break;
            }
            let Some(Pending { info, .. }) = self.pending.pop_front() else {
                break;
            };
            let Some((id, attribute, planned)) = mapping(&info) else {
                continue;
            };
            let planned_duration_ms = planned.map(ticks_ms);
            let range = match attribute {
                Scte35Attribute::Out => {
                    self.open.retain(|(open, ..)| *open != id);
                    if self.open.len() == MAX_OPEN_BREAKS {
                        self.open.pop_front();
                    }
                    self.open.push_back((id.clone(), wall_clock_ms, dts));
                    DateRange {
                        id,
                        start_ms: wall_clock_ms,
                        duration_ms: None,
                        planned_duration_ms,
                        attribute,
                        section: info.raw,
                    }
                }
                Scte35Attribute::In => {
                    let opened = self.open.iter().position(|(open, ..)| *open == id);
                    let started = opened.and_then(|i| self.open.remove(i));
                    // The break's length on the media's clock, as the segments' own
                    // durations add up: wall clocks of arrival jitter.
                    let length =
                        |from: Timestamp| ticks_ms(dts.saturating_sub(from).unsigned_abs());
                    DateRange {
                        id,
                        start_ms: started.as_ref().map_or(wall_clock_ms, |o| o.1),
                        duration_ms: started.as_ref().map(|o| length(o.2)),
                        planned_duration_ms: None,
                        attribute,
                        section: info.raw,
                    }
                }
                Scte35Attribute::Cmd => {
                    // No event ties it to another tag: named by where it is.
                    let id = format!("cmd-{msn}-{n}");
                    n += 1;
                    DateRange {
                        id,
                        start_ms: wall_clock_ms,
                        duration_ms: None,
                        planned_duration_ms,
                        attribute,
                        section: info.raw,
                    }
                }
            };
            ranges.push(range);
        }
        ranges
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use sluice_media::ts::crc32_mpeg2;

    /// A `splice_insert` of event `id` at `pts` (immediate when `None`), out of the
    /// network when `out`, with a break of `duration` ticks when given.
    pub(crate) fn insert(
        id: u32,
        out: bool,
        pts: Option<u64>,
        duration: Option<u64>,
    ) -> SpliceInfo {
        let mut cmd = id.to_be_bytes().to_vec();
        cmd.push(0x7f);
        let flags = (u8::from(out) << 7)
            | 0x40
            | (u8::from(duration.is_some()) << 5)
            | (u8::from(pts.is_none()) << 4)
            | 0x0f;
        cmd.push(flags);
        if let Some(pts) = pts {
            cmd.push(0xfe | ((pts >> 32) as u8 & 1));
            cmd.extend_from_slice(&(pts as u32).to_be_bytes());
        }
        if let Some(d) = duration {
            cmd.push(0xfe | ((d >> 32) as u8 & 1));
            cmd.extend_from_slice(&(d as u32).to_be_bytes());
        }
        cmd.extend_from_slice(&[0, 1, 0, 0]);
        section(0x05, &cmd, &[])
    }

    fn section(kind: u8, cmd: &[u8], descriptors: &[u8]) -> SpliceInfo {
        // Header: table, length, version, pts_adjustment 0, cw_index, tier 0xfff.
        let mut s = vec![0xfc, 0x30, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xf0, 0, kind];
        s[11] = 0xf0 | (cmd.len() >> 8) as u8;
        s[12] = cmd.len() as u8;
        s.extend_from_slice(cmd);
        s.extend_from_slice(&(descriptors.len() as u16).to_be_bytes());
        s.extend_from_slice(descriptors);
        let len = s.len() - 3 + 4;
        s[1] = 0x30 | (len >> 8) as u8;
        s[2] = len as u8;
        let crc = crc32_mpeg2(&s);
        s.extend_from_slice(&crc.to_be_bytes());
        SpliceInfo::parse(Bytes::from(s)).expect("section")
    }

    fn render(ranges: &[DateRange]) -> String {
        let mut out = String::new();
        for r in ranges {
            r.render(&mut out);
        }
        out
    }

    #[test]
    fn an_out_and_its_in_share_id_and_start_and_the_in_has_the_duration() {
        let mut s = Splices::default();
        let out = insert(7, true, Some(450_000), Some(30 * 90_000));
        let back = insert(7, false, Some(450_000 + 30 * 90_000), None);
        assert_eq!(s.cue(450_000, out.clone()), Some(450_000));
        assert_eq!(s.cue(450_000 + 2_700_000, back.clone()), Some(3_150_000));
        assert!(s.at_segment(449_999, 1_000, 3).is_empty(), "not due yet");
        let first = s.at_segment(450_000, 1_764_000_000_000, 4);
        let hex = |i: &SpliceInfo| i.raw.iter().map(|b| format!("{b:02X}")).collect::<String>();
        assert_eq!(
            render(&first),
            format!(
                "#EXT-X-DATERANGE:ID=\"splice-7\",START-DATE=\"2025-11-24T16:00:00.000Z\",\
                 PLANNED-DURATION=30.000,SCTE35-OUT=0x{}\n",
                hex(&out)
            )
        );
        let second = s.at_segment(3_240_000, 1_764_000_031_500, 9);
        assert_eq!(
            render(&second),
            format!(
                "#EXT-X-DATERANGE:ID=\"splice-7\",START-DATE=\"2025-11-24T16:00:00.000Z\",\
                 DURATION=31.000,SCTE35-IN=0x{}\n",
                hex(&back)
            )
        );
        assert!(s.open.is_empty());
    }

    #[test]
    fn an_in_without_its_out_starts_where_it_is() {
        let mut s = Splices::default();
        s.cue(0, insert(9, false, None, None));
        let r = s.at_segment(0, 5_000, 0);
        assert_eq!((r[0].start_ms, r[0].duration_ms), (5_000, None));
        assert_eq!(r[0].attribute, Scte35Attribute::In);
    }

    #[test]
    fn heartbeats_and_cancels_become_nothing_and_other_commands_cmd() {
        let mut s = Splices::default();
        assert_eq!(s.cue(0, section(0x00, &[], &[])), None);
        let mut cancel = 1u32.to_be_bytes().to_vec();
        cancel.push(0xff);
        assert_eq!(s.cue(0, section(0x05, &cancel, &[])), None);
        // A time_signal without segmentation descriptors.
        assert_eq!(
            s.cue(90, section(0x06, &[0xfe, 0, 0, 0, 90], &[])),
            Some(90)
        );
        let r = s.at_segment(90, 0, 2);
        assert_eq!(r.len(), 1);
        assert_eq!(
            (r[0].id.as_str(), r[0].attribute),
            ("cmd-2-0", Scte35Attribute::Cmd)
        );
    }

    #[test]
    fn a_time_signal_break_takes_its_descriptor_id_and_duration() {
        // segmentation_descriptor: CUEI, event 0x1234, duration 10 s, type 0x34
        // (provider placement opportunity start), no UPID.
        let mut d = vec![
            0x02, 0, 0x43, 0x55, 0x45, 0x49, 0, 0, 0x12, 0x34, 0x7f, 0xff,
        ];
        d.push(0);
        d.extend_from_slice(&(900_000u32).to_be_bytes());
        d.extend_from_slice(&[0x00, 0x00, 0x34, 0, 0]);
        d[1] = (d.len() - 2) as u8;
        let info = section(0x06, &[0xfe, 0, 0, 0, 0], &d);
        let mut s = Splices::default();
        s.cue(0, info);
        let r = s.at_segment(0, 0, 0);
        assert_eq!(r[0].id, "seg-4660");
        assert_eq!(r[0].attribute, Scte35Attribute::Out);
        assert_eq!(r[0].planned_duration_ms, Some(10_000));
    }

    #[test]
    fn waiting_cues_and_open_breaks_are_bounded() {
        let mut s = Splices::default();
        for id in 0..1000 {
            s.cue(i64::from(id), insert(id, true, None, None));
        }
        assert_eq!(s.pending.len(), MAX_PENDING);
        let r = s.at_segment(i64::MAX, 0, 0);
        assert_eq!(r.len(), MAX_PENDING);
        for id in 0..1000 {
            s.cue(0, insert(id, true, None, None));
            s.at_segment(0, 0, 0);
        }
        assert_eq!(s.open.len(), MAX_OPEN_BREAKS);
    }
}
