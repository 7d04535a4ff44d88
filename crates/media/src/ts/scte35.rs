//! [`SpliceInfo`]: an SCTE-35 `splice_info_section` read from a TS input's cue PID
//! (stream type 0x86), for ad insertion downstream.
//!
//! Why: broadcast feeds mark ad breaks with SCTE-35 cues. An HLS output carries them
//! as `EXT-X-DATERANGE` with the section's bytes in hex (`SCTE35-OUT`, `SCTE35-IN`,
//! `SCTE35-CMD`), and needs to know when the splice happens and which way (out of the
//! network feed into a break, or back in). So the section is kept whole (`raw`) and
//! only what placing the cue needs is decoded: the command (`splice_insert`,
//! `time_signal`), its splice time and break duration, and the segmentation
//! descriptors that give a `time_signal` its meaning.
//!
//! # Invariants
//! - Any bytes give a section or a [`Scte35Error`], never a panic: every read is
//!   bounds-checked, and a field that runs past its enclosing length is an error.
//! - The CRC is checked before anything is decoded.
//! - Memory is bounded by the section: at most [`MAX_SECTION_LEN`] bytes are kept,
//!   and the descriptors decoded are at most one per 11 bytes of it.
//! - Encrypted sections are refused ([`Scte35Error::Encrypted`]): no key is ever held.

use bytes::Bytes;

use super::psi::crc32_mpeg2;

/// `table_id` of a splice info section.
pub const SPLICE_INFO_TABLE_ID: u8 = 0xfc;
/// Longest section: a 12-bit `section_length` after the 3-byte header.
pub const MAX_SECTION_LEN: usize = 3 + 0xfff;
/// Identifier of the descriptors SCTE-35 defines ("CUEI").
const CUEI: u32 = 0x4355_4549;
/// The 33-bit PTS range.
const PTS_MASK: u64 = (1 << 33) - 1;

/// Why a section could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Scte35Error {
    /// Not a splice info section (another `table_id`).
    #[error("not an SCTE-35 section (table_id {0:#04x})")]
    TableId(u8),
    /// `section_length` disagrees with the bytes given.
    #[error("SCTE-35 section length does not match")]
    Length,
    /// The CRC over the section does not check.
    #[error("SCTE-35 section CRC mismatch")]
    Crc,
    /// A field runs past the end of what encloses it.
    #[error("SCTE-35 section truncated in {0}")]
    Truncated(&'static str),
    /// `encrypted_packet` is set: the command cannot be read without its key.
    #[error("SCTE-35 section is encrypted")]
    Encrypted,
    /// A `protocol_version` other than 0.
    #[error("SCTE-35 protocol version {0} unknown")]
    Version(u8),
}

/// Which way a cue splices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CueDirection {
    /// Out of the network feed: a break starts (`SCTE35-OUT`).
    Out,
    /// Back into the network feed: the break ends (`SCTE35-IN`).
    In,
}

/// A `break_duration()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakDuration {
    /// The splicer returns to the network by itself when the duration ends.
    pub auto_return: bool,
    /// Length of the break, 90 kHz ticks.
    pub ticks: u64,
}

/// A `splice_insert()` command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpliceInsert {
    /// Identifies the splice event (an out and its in share it).
    pub event_id: u32,
    /// A previously sent event of this id is cancelled; nothing else is set.
    pub cancel: bool,
    /// Out of the network (a break starts), else back in.
    pub out_of_network: bool,
    /// Splice at once, at the next opportunity, rather than at `pts`.
    pub immediate: bool,
    /// The program's splice time (before `pts_adjustment`), when given.
    pub pts: Option<u64>,
    /// The break's length, when given.
    pub duration: Option<BreakDuration>,
    /// `unique_program_id`.
    pub unique_program_id: u16,
    /// `avail_num` of `avails_expected`.
    pub avail_num: u8,
    /// `avails_expected`.
    pub avails_expected: u8,
}

impl SpliceInsert {
    /// A program splice of event `event_id` (not cancelled), out of the network when
    /// `out`, at `pts` (immediate when `None`), with a break of `duration` ticks that
    /// returns by itself: what a cue that did not come as a section (an RTMP
    /// `onCuePoint`) becomes.
    pub fn program(event_id: u32, out: bool, pts: Option<u64>, duration: Option<u64>) -> Self {
        SpliceInsert {
            event_id,
            cancel: false,
            out_of_network: out,
            immediate: pts.is_none(),
            pts: pts.map(|p| p & PTS_MASK),
            duration: duration.map(|ticks| BreakDuration {
                auto_return: true,
                ticks: ticks & PTS_MASK,
            }),
            unique_program_id: 0,
            avail_num: 0,
            avails_expected: 0,
        }
    }

    /// The whole `splice_info_section` of this command (no adjustment, all tiers, no
    /// descriptors), CRC included: it parses back to this command.
    pub fn section(&self) -> SpliceInfo {
        let mut cmd = Vec::with_capacity(20);
        cmd.extend_from_slice(&self.event_id.to_be_bytes());
        cmd.push(if self.cancel { 0xff } else { 0x7f });
        if !self.cancel {
            let timed = self.pts.is_some() && !self.immediate;
            cmd.push(
                u8::from(self.out_of_network) << 7
                    | 0x40
                    | u8::from(self.duration.is_some()) << 5
                    | u8::from(self.immediate) << 4
                    | 0x0f,
            );
            if timed {
                time_bytes(&mut cmd, 0xfe, self.pts.unwrap_or_default());
            } else if !self.immediate {
                cmd.push(0x7f); // time_specified_flag 0
            }
            if let Some(d) = self.duration {
                time_bytes(&mut cmd, 0x7e | u8::from(d.auto_return) << 7, d.ticks);
            }
            cmd.extend_from_slice(&self.unique_program_id.to_be_bytes());
            cmd.push(self.avail_num);
            cmd.push(self.avails_expected);
        }
        // table, length (below), version 0, no adjustment, cw_index, tier 0xfff.
        let mut s = vec![SPLICE_INFO_TABLE_ID, 0, 0, 0, 0, 0, 0, 0, 0, 0xff];
        let v = (0xfffu32 << 12) | cmd.len() as u32;
        s.extend_from_slice(v.to_be_bytes().get(1..).unwrap_or_default());
        s.push(0x05);
        s.extend_from_slice(&cmd);
        s.extend_from_slice(&[0, 0]); // no descriptors
        let len = s.len() - 3 + 4;
        if let Some(l) = s.get_mut(1..3) {
            l.copy_from_slice(&(0x3000 | len as u16).to_be_bytes());
        }
        let crc = crc32_mpeg2(&s);
        s.extend_from_slice(&crc.to_be_bytes());
        let raw = Bytes::from(s);
        SpliceInfo {
            pts_adjustment: 0,
            tier: 0xfff,
            command: SpliceCommand::Insert(*self),
            segmentations: Vec::new(),
            raw,
        }
    }
}

/// A 33-bit time behind 7 bits of `flags` (the top bit a flag, the rest reserved).
fn time_bytes(out: &mut Vec<u8>, flags: u8, t: u64) {
    out.push((flags & 0xfe) | ((t >> 32) as u8 & 1));
    out.extend_from_slice(&(t as u32).to_be_bytes());
}

/// The command of a section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpliceCommand {
    /// `splice_null()`: a heartbeat.
    Null,
    /// `splice_schedule()`: splices planned by wall clock (not decoded).
    Schedule,
    /// `splice_insert()`.
    Insert(SpliceInsert),
    /// `time_signal()`: a time, given meaning by its segmentation descriptors.
    TimeSignal {
        /// The splice time (before `pts_adjustment`), when given.
        pts: Option<u64>,
    },
    /// `bandwidth_reservation()`.
    BandwidthReservation,
    /// `private_command()` with its identifier.
    Private {
        /// The command's owner (a registered format identifier).
        identifier: u32,
    },
    /// A command type this version of SCTE-35 does not define.
    Unknown(u8),
}

/// A `segmentation_descriptor()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segmentation {
    /// `segmentation_event_id`.
    pub event_id: u32,
    /// A previously sent event of this id is cancelled; nothing else is set.
    pub cancel: bool,
    /// The segment's length, 90 kHz ticks, when given.
    pub duration: Option<u64>,
    /// `segmentation_upid_type`.
    pub upid_type: u8,
    /// `segmentation_upid()` bytes (at most 255).
    pub upid: Bytes,
    /// `segmentation_type_id` (0x22 break start, 0x30 provider ad start, ...).
    pub type_id: u8,
    /// `segment_num`.
    pub segment_num: u8,
    /// `segments_expected`.
    pub segments_expected: u8,
}

impl Segmentation {
    /// The direction its type gives, for the types that open or close an ad break or
    /// a placement opportunity (a start opens, its end, the next type id, closes).
    pub fn direction(&self) -> Option<CueDirection> {
        const STARTS: [u8; 9] = [0x22, 0x30, 0x32, 0x34, 0x36, 0x38, 0x3a, 0x44, 0x46];
        if self.cancel {
            None
        } else if STARTS.contains(&self.type_id) {
            Some(CueDirection::Out)
        } else if STARTS.iter().any(|&s| s + 1 == self.type_id) {
            Some(CueDirection::In)
        } else {
            None
        }
    }
}

/// One splice info section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpliceInfo {
    /// Added to every PTS in the command, modulo 2^33.
    pub pts_adjustment: u64,
    /// `tier` (authorisation tier; 0xfff for all).
    pub tier: u16,
    /// The command.
    pub command: SpliceCommand,
    /// The segmentation descriptors, in order.
    pub segmentations: Vec<Segmentation>,
    /// The whole section, CRC included, as received: what HLS's `SCTE35-*`
    /// attributes carry.
    pub raw: Bytes,
}

impl SpliceInfo {
    /// Reads one whole section (from `table_id` to its CRC).
    pub fn parse(section: Bytes) -> Result<SpliceInfo, Scte35Error> {
        let s: &[u8] = &section;
        let mut r = Reader::new(s, "header");
        let table_id = r.u8()?;
        if table_id != SPLICE_INFO_TABLE_ID {
            return Err(Scte35Error::TableId(table_id));
        }
        let length = usize::from(r.u16()? & 0x0fff);
        if 3 + length != s.len() || length < 4 {
            return Err(Scte35Error::Length);
        }
        if crc32_mpeg2(s) != 0 {
            return Err(Scte35Error::Crc);
        }
        let version = r.u8()?;
        if version != 0 {
            return Err(Scte35Error::Version(version));
        }
        let b = r.u8()?;
        if b & 0x80 != 0 {
            return Err(Scte35Error::Encrypted);
        }
        let pts_adjustment = (u64::from(b & 1) << 32) | u64::from(r.u32()?);
        let _cw_index = r.u8()?;
        let v = r.u24()?;
        let tier = (v >> 12) as u16;
        let command_len = (v & 0xfff) as usize;
        let command_type = r.u8()?;
        // 0xfff is the legacy "unknown length": the command's own syntax ends it.
        let command_bytes = if command_len == 0xfff {
            r.rest()
        } else {
            r.take(command_len)?
        };
        let (command, used) = command(command_type, command_bytes)?;
        if command_len == 0xfff {
            r.skip(used)?;
        }
        r.what = "descriptor loop";
        let loop_len = usize::from(r.u16()?);
        let descriptors = r.take(loop_len)?;
        // What follows is the CRC, already checked; anything between is stuffing only
        // encrypted sections have.
        if r.left() != 4 {
            return Err(Scte35Error::Truncated("descriptor loop"));
        }
        let segmentations = segmentations(descriptors)?;
        Ok(SpliceInfo {
            pts_adjustment,
            tier,
            command,
            segmentations,
            raw: section,
        })
    }

    /// When the splice happens, on the program's 33-bit PTS clock (adjustment
    /// applied), if the command names a time; `None` for an immediate splice.
    pub fn splice_pts(&self) -> Option<u64> {
        let pts = self.command_pts()?;
        Some((pts + self.pts_adjustment) & PTS_MASK)
    }

    /// The command's splice time as written, before `pts_adjustment`.
    fn command_pts(&self) -> Option<u64> {
        match self.command {
            SpliceCommand::Insert(i) if !i.cancel && !i.immediate => i.pts,
            SpliceCommand::TimeSignal { pts } => pts,
            _ => None,
        }
    }

    /// The section for a stream whose clock differs from the one it came with: its
    /// `pts_adjustment` set so that it splices at `pts` (33-bit), the CRC made anew, the
    /// rest unchanged; as received when it names no splice time. What a remultiplexer
    /// does with a cue (SCTE-35 §9.2: `pts_adjustment` is for exactly this).
    pub fn retimed(&self, pts: u64) -> Bytes {
        let (Some(command_pts), Some(header)) = (self.command_pts(), self.raw.get(..9)) else {
            return self.raw.clone();
        };
        let adjustment = pts.wrapping_sub(command_pts) & PTS_MASK;
        let mut out = Vec::with_capacity(self.raw.len());
        out.extend_from_slice(header);
        // encrypted_packet (0: we refuse encrypted sections), encryption_algorithm and
        // the adjustment's top bit, then its 32 low bits.
        if let Some(b) = out.get_mut(4) {
            *b = (*b & 0xfe) | (adjustment >> 32) as u8;
        }
        if let Some(low) = out.get_mut(5..9) {
            low.copy_from_slice(&(adjustment as u32).to_be_bytes());
        }
        let body_end = self.raw.len().saturating_sub(4);
        out.extend_from_slice(self.raw.get(9..body_end).unwrap_or_default());
        let crc = crc32_mpeg2(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        Bytes::from(out)
    }

    /// Which way the cue splices: a `splice_insert`'s `out_of_network_indicator`, or
    /// the first segmentation descriptor with a direction.
    pub fn direction(&self) -> Option<CueDirection> {
        match self.command {
            SpliceCommand::Insert(i) if i.cancel => None,
            SpliceCommand::Insert(i) if i.out_of_network => Some(CueDirection::Out),
            SpliceCommand::Insert(_) => Some(CueDirection::In),
            _ => self.segmentations.iter().find_map(Segmentation::direction),
        }
    }

    /// The planned break length in 90 kHz ticks: a `splice_insert`'s break duration,
    /// else the opening segmentation descriptor's duration.
    pub fn duration(&self) -> Option<u64> {
        match self.command {
            SpliceCommand::Insert(i) => i.duration.map(|d| d.ticks),
            _ => self
                .segmentations
                .iter()
                .find(|s| s.direction() == Some(CueDirection::Out))
                .and_then(|s| s.duration),
        }
    }
}

/// Decodes a command; returns it and the bytes it took.
fn command(kind: u8, bytes: &[u8]) -> Result<(SpliceCommand, usize), Scte35Error> {
    let mut r = Reader::new(bytes, "splice command");
    let command = match kind {
        0x00 => SpliceCommand::Null,
        0x04 => {
            // Not decoded: planned splices by UTC are for the splicer, not for HLS.
            r.skip(bytes.len())?;
            SpliceCommand::Schedule
        }
        0x05 => SpliceCommand::Insert(splice_insert(&mut r)?),
        0x06 => SpliceCommand::TimeSignal {
            pts: splice_time(&mut r)?,
        },
        0x07 => SpliceCommand::BandwidthReservation,
        0xff => {
            let identifier = r.u32()?;
            r.skip(r.left())?;
            SpliceCommand::Private { identifier }
        }
        other => {
            r.skip(bytes.len())?;
            SpliceCommand::Unknown(other)
        }
    };
    Ok((command, r.at))
}

fn splice_insert(r: &mut Reader<'_>) -> Result<SpliceInsert, Scte35Error> {
    r.what = "splice_insert";
    let event_id = r.u32()?;
    let cancel = r.u8()? & 0x80 != 0;
    let mut insert = SpliceInsert {
        event_id,
        cancel,
        out_of_network: false,
        immediate: false,
        pts: None,
        duration: None,
        unique_program_id: 0,
        avail_num: 0,
        avails_expected: 0,
    };
    if cancel {
        return Ok(insert);
    }
    let flags = r.u8()?;
    insert.out_of_network = flags & 0x80 != 0;
    let program_splice = flags & 0x40 != 0;
    let has_duration = flags & 0x20 != 0;
    insert.immediate = flags & 0x10 != 0;
    if program_splice && !insert.immediate {
        insert.pts = splice_time(r)?;
    }
    if !program_splice {
        // Per-component splices: their times are skipped; the first gives the time.
        let components = r.u8()?;
        for _ in 0..components {
            let _tag = r.u8()?;
            if !insert.immediate {
                let pts = splice_time(r)?;
                insert.pts = insert.pts.or(pts);
            }
        }
    }
    if has_duration {
        let b = r.u8()?;
        insert.duration = Some(BreakDuration {
            auto_return: b & 0x80 != 0,
            ticks: (u64::from(b & 1) << 32) | u64::from(r.u32()?),
        });
    }
    insert.unique_program_id = r.u16()?;
    insert.avail_num = r.u8()?;
    insert.avails_expected = r.u8()?;
    Ok(insert)
}

/// A `splice_time()`: the PTS when `time_specified_flag` is set.
fn splice_time(r: &mut Reader<'_>) -> Result<Option<u64>, Scte35Error> {
    let b = r.u8()?;
    if b & 0x80 == 0 {
        return Ok(None);
    }
    Ok(Some((u64::from(b & 1) << 32) | u64::from(r.u32()?)))
}

/// The segmentation descriptors of a descriptor loop (others are skipped).
fn segmentations(mut d: &[u8]) -> Result<Vec<Segmentation>, Scte35Error> {
    let mut out = Vec::new();
    while !d.is_empty() {
        let mut r = Reader::new(d, "splice descriptor");
        let tag = r.u8()?;
        let len = usize::from(r.u8()?);
        let body = r.take(len)?;
        d = r.rest();
        let mut r = Reader::new(body, "splice descriptor");
        if r.u32()? != CUEI || tag != 0x02 {
            continue;
        }
        r.what = "segmentation_descriptor";
        out.push(segmentation(&mut r)?);
    }
    Ok(out)
}

fn segmentation(r: &mut Reader<'_>) -> Result<Segmentation, Scte35Error> {
    let event_id = r.u32()?;
    let cancel = r.u8()? & 0x80 != 0;
    let mut seg = Segmentation {
        event_id,
        cancel,
        duration: None,
        upid_type: 0,
        upid: Bytes::new(),
        type_id: 0,
        segment_num: 0,
        segments_expected: 0,
    };
    if cancel {
        return Ok(seg);
    }
    let flags = r.u8()?;
    let program = flags & 0x80 != 0;
    let has_duration = flags & 0x40 != 0;
    if !program {
        let components = r.u8()?;
        // component_tag, 7 reserved bits and a 33-bit pts_offset: 6 bytes each.
        r.skip(usize::from(components) * 6)?;
    }
    if has_duration {
        let hi = u64::from(r.u8()?);
        seg.duration = Some((hi << 32) | u64::from(r.u32()?));
    }
    seg.upid_type = r.u8()?;
    let upid_len = usize::from(r.u8()?);
    seg.upid = Bytes::copy_from_slice(r.take(upid_len)?);
    seg.type_id = r.u8()?;
    seg.segment_num = r.u8()?;
    seg.segments_expected = r.u8()?;
    // sub_segment_num and sub_segments_expected may follow (types 0x34, 0x36, ...);
    // they place nothing, so they are left unread.
    Ok(seg)
}

/// Big-endian reads over a slice; running past its end is [`Scte35Error::Truncated`]
/// naming the structure being read.
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(data: &'a [u8], what: &'static str) -> Reader<'a> {
        Reader { data, at: 0, what }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Scte35Error> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or(Scte35Error::Truncated(self.what))?;
        let out = self
            .data
            .get(self.at..end)
            .ok_or(Scte35Error::Truncated(self.what))?;
        self.at = end;
        Ok(out)
    }

    fn skip(&mut self, n: usize) -> Result<(), Scte35Error> {
        self.take(n).map(drop)
    }

    fn left(&self) -> usize {
        self.data.len().saturating_sub(self.at)
    }

    fn rest(&self) -> &'a [u8] {
        self.data.get(self.at..).unwrap_or_default()
    }

    fn u8(&mut self) -> Result<u8, Scte35Error> {
        Ok(self.take(1)?.first().copied().unwrap_or_default())
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Scte35Error> {
        self.take(N)?
            .try_into()
            .map_err(|_| Scte35Error::Truncated(self.what))
    }

    fn u16(&mut self) -> Result<u16, Scte35Error> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    fn u24(&mut self) -> Result<u32, Scte35Error> {
        let [a, b, c] = self.array()?;
        Ok(u32::from_be_bytes([0, a, b, c]))
    }

    fn u32(&mut self) -> Result<u32, Scte35Error> {
        Ok(u32::from_be_bytes(self.array()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A section around `command` and `descriptors`, with its CRC.
    fn section(pts_adjustment: u64, kind: u8, command: &[u8], descriptors: &[u8]) -> Bytes {
        let mut s = vec![SPLICE_INFO_TABLE_ID, 0, 0, 0];
        s.push((pts_adjustment >> 32) as u8 & 1);
        s.extend_from_slice(&(pts_adjustment as u32).to_be_bytes());
        s.push(0); // cw_index
        let v = (0xfffu32 << 12) | command.len() as u32;
        s.extend_from_slice(&v.to_be_bytes()[1..]);
        s.push(kind);
        s.extend_from_slice(command);
        s.extend_from_slice(&(descriptors.len() as u16).to_be_bytes());
        s.extend_from_slice(descriptors);
        let len = s.len() - 3 + 4;
        s[1] = 0x30 | (len >> 8) as u8;
        s[2] = len as u8;
        let crc = crc32_mpeg2(&s);
        s.extend_from_slice(&crc.to_be_bytes());
        Bytes::from(s)
    }

    fn time(pts: u64) -> [u8; 5] {
        let mut t = [0xfe | (pts >> 32) as u8 & 1, 0, 0, 0, 0];
        t[1..].copy_from_slice(&(pts as u32).to_be_bytes());
        t
    }

    #[test]
    fn a_made_splice_insert_parses_back_to_itself() {
        for insert in [
            SpliceInsert::program(5, true, Some(495_000), Some(270_000)),
            SpliceInsert::program(5, false, None, None),
            SpliceInsert::program(u32::MAX, true, Some(1 << 34), None),
        ] {
            let made = insert.section();
            let parsed = SpliceInfo::parse(made.raw.clone()).expect("parses");
            assert_eq!(parsed, made);
            assert_eq!(parsed.command, SpliceCommand::Insert(insert));
        }
        let out = SpliceInsert::program(5, true, Some(495_000), Some(270_000)).section();
        assert_eq!(out.splice_pts(), Some(495_000));
        assert_eq!(out.duration(), Some(270_000));
        assert_eq!(out.direction(), Some(CueDirection::Out));
    }

    #[test]
    fn a_splice_insert_out_with_a_break_duration() {
        // event 0x4800008f, out of network, program splice at PTS 0x07369c02e, 60 s
        let mut cmd = vec![0x48, 0, 0, 0x8f, 0x7f, 0xef];
        cmd.extend_from_slice(&time(0x0_7369_c02e));
        cmd.extend_from_slice(&[0xfe, 0x00, 0x52, 0x65, 0xc0]); // auto return, 5 400 000
        cmd.extend_from_slice(&[0, 0, 0, 0]);
        let raw = section(0, 0x05, &cmd, &[]);
        let info = SpliceInfo::parse(raw.clone()).unwrap();
        let SpliceCommand::Insert(i) = info.command else {
            panic!("{:?}", info.command)
        };
        assert_eq!(i.event_id, 0x4800_008f);
        assert!(i.out_of_network && !i.immediate && !i.cancel);
        assert_eq!(
            i.duration,
            Some(BreakDuration {
                auto_return: true,
                ticks: 5_400_000
            })
        );
        assert_eq!(info.splice_pts(), Some(0x0_7369_c02e));
        assert_eq!(info.direction(), Some(CueDirection::Out));
        assert_eq!(info.duration(), Some(5_400_000));
        assert_eq!(info.raw, raw);
    }

    #[test]
    fn the_splice_insert_example_of_the_standard() {
        // SCTE 35's own splice_insert example (base64
        // "/DAvAAAAAAAA///wFAVIAACPf+/+c2nALv4AUsz1AAAAAAAKAAhDVUVJAAABNWLbowo=").
        let raw: &[u8] = &[
            0xfc, 0x30, 0x2f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xf0, 0x14, 0x05,
            0x48, 0x00, 0x00, 0x8f, 0x7f, 0xef, 0xfe, 0x73, 0x69, 0xc0, 0x2e, 0xfe, 0x00, 0x52,
            0xcc, 0xf5, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x08, 0x43, 0x55, 0x45, 0x49,
            0x00, 0x00, 0x01, 0x35, 0x62, 0xdb, 0xa3, 0x0a,
        ];
        let info = SpliceInfo::parse(Bytes::from_static(raw)).unwrap();
        let SpliceCommand::Insert(i) = info.command else {
            panic!("{:?}", info.command)
        };
        assert_eq!(i.event_id, 0x4800_008f);
        assert_eq!(info.tier, 0xfff);
        assert_eq!(info.splice_pts(), Some(0x0_7369_c02e));
        assert_eq!(info.duration(), Some(0x52_ccf5)); // 60.293 s
        assert_eq!(info.direction(), Some(CueDirection::Out));
        // Its avail_descriptor is not a segmentation descriptor.
        assert!(info.segmentations.is_empty());
    }

    fn hex(text: &str) -> Bytes {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect::<Vec<u8>>()
            .into()
    }

    #[test]
    fn the_time_signal_examples_of_the_standard() {
        // A placement opportunity start (type 0x34) with a 4-minute-ish duration and a
        // TI UPID, then a program end (0x11), each a time_signal.
        let start = SpliceInfo::parse(hex(
            "fc3034000000000000fffff00506fe72bd0050001e021c435545494800008e7fcf\
             0001a599b00808000000002ca0a18a3402009ac9d17e",
        ))
        .unwrap();
        assert_eq!(start.splice_pts(), Some(0x0_72bd_0050));
        assert_eq!(start.direction(), Some(CueDirection::Out));
        assert_eq!(start.duration(), Some(0x1a5_99b0));
        let s = &start.segmentations[0];
        assert_eq!(
            (s.event_id, s.type_id, s.upid_type),
            (0x4800_008e, 0x34, 0x08)
        );
        let end = SpliceInfo::parse(hex(
            "fc302f000000000000fffff00506fe746290a000190217435545494800008e7f9f\
             0808000000002ca0a18a350200a9cc6758",
        ))
        .unwrap();
        assert_eq!(end.segmentations[0].type_id, 0x35);
        assert_eq!(end.direction(), Some(CueDirection::In));
        assert_eq!(end.splice_pts(), Some(0x0_7462_90a0));
    }

    #[test]
    fn pts_adjustment_wraps_at_33_bits() {
        let mut cmd = vec![0, 0, 0, 1, 0x7f, 0x4f]; // in, program splice at a time
        cmd.extend_from_slice(&time((1 << 33) - 10));
        cmd.extend_from_slice(&[0, 1, 0, 0]);
        let info = SpliceInfo::parse(section(20, 0x05, &cmd, &[])).unwrap();
        assert_eq!(info.splice_pts(), Some(10));
        assert_eq!(info.direction(), Some(CueDirection::In));
        assert_eq!(info.duration(), None);
    }

    #[test]
    fn a_time_signal_takes_its_meaning_from_segmentation_descriptors() {
        // segmentation_descriptor: CUEI, event 1, program, with duration 30 s,
        // UPID type 0x08 of 8 bytes, type 0x34 (provider placement start), 1 of 1,
        // then the sub-segment fields the 2016 edition added.
        let mut d = vec![0x02, 0, b'C', b'U', b'E', b'I', 0, 0, 0, 1, 0x7f, 0xc0];
        d.extend_from_slice(&[0x00, 0x00, 0x29, 0x32, 0xe0]); // 2 700 000
        d.extend_from_slice(&[0x08, 8, 0, 0, 0, 0, 0x2c, 0xa0, 0xa1, 0x8a]);
        d.extend_from_slice(&[0x34, 1, 1, 0, 0]);
        d[1] = (d.len() - 2) as u8;
        // An avail_descriptor before it is skipped.
        let mut loop_ = vec![0x00, 8, b'C', b'U', b'E', b'I', 0, 0, 0, 9];
        loop_.extend_from_slice(&d);
        let info = SpliceInfo::parse(section(0, 0x06, &time(900_000), &loop_)).unwrap();
        assert_eq!(
            info.command,
            SpliceCommand::TimeSignal { pts: Some(900_000) }
        );
        assert_eq!(info.segmentations.len(), 1);
        let s = &info.segmentations[0];
        assert_eq!((s.event_id, s.type_id, s.upid_type), (1, 0x34, 0x08));
        assert_eq!(s.upid.len(), 8);
        assert_eq!(info.direction(), Some(CueDirection::Out));
        assert_eq!(info.duration(), Some(2_700_000));
        assert_eq!(info.splice_pts(), Some(900_000));
    }

    #[test]
    fn the_end_of_a_placement_closes_it() {
        let mut d = vec![0x02, 0, b'C', b'U', b'E', b'I', 0, 0, 0, 1, 0x7f, 0x80];
        d.extend_from_slice(&[0x00, 0, 0x35, 1, 1]);
        d[1] = (d.len() - 2) as u8;
        let info = SpliceInfo::parse(section(0, 0x06, &time(1), &d)).unwrap();
        assert_eq!(info.direction(), Some(CueDirection::In));
    }

    #[test]
    fn immediate_null_and_cancelled_cues_place_nothing() {
        let info = SpliceInfo::parse(section(0, 0x00, &[], &[])).unwrap();
        assert_eq!(
            (info.command, info.splice_pts()),
            (SpliceCommand::Null, None)
        );
        let cancel = SpliceInfo::parse(section(0, 0x05, &[0, 0, 0, 7, 0xff], &[])).unwrap();
        assert_eq!((cancel.direction(), cancel.splice_pts()), (None, None));
        let immediate = [0, 0, 0, 7, 0x7f, 0xdf, 0, 0, 0, 0];
        let info = SpliceInfo::parse(section(0, 0x05, &immediate, &[])).unwrap();
        assert_eq!(info.direction(), Some(CueDirection::Out));
        assert_eq!(info.splice_pts(), None);
    }

    #[test]
    fn bad_sections_are_errors() {
        let good = section(0, 0x06, &time(1), &[]);
        let mut crc = good.to_vec();
        crc[8] ^= 1;
        assert_eq!(SpliceInfo::parse(crc.into()), Err(Scte35Error::Crc));
        assert_eq!(
            SpliceInfo::parse(good.slice(..good.len() - 1)),
            Err(Scte35Error::Length)
        );
        let mut other = good.to_vec();
        other[0] = 0x02;
        assert_eq!(
            SpliceInfo::parse(other.into()),
            Err(Scte35Error::TableId(2))
        );
        assert!(SpliceInfo::parse(Bytes::new()).is_err());
        // A command shorter than its syntax.
        let short = section(0, 0x05, &[0, 0, 0, 1, 0x7f, 0xef, 0xfe], &[]);
        assert_eq!(
            SpliceInfo::parse(short),
            Err(Scte35Error::Truncated("splice_insert"))
        );
        // A descriptor that claims more than the loop holds.
        let long = section(0, 0x06, &time(1), &[0x02, 40, b'C', b'U', b'E', b'I']);
        assert_eq!(
            SpliceInfo::parse(long),
            Err(Scte35Error::Truncated("splice descriptor"))
        );
        // Encrypted.
        let mut enc = section(0, 0x00, &[], &[]).to_vec();
        enc[4] |= 0x80;
        let n = enc.len() - 4;
        let crc = crc32_mpeg2(&enc[..n]);
        enc[n..].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(SpliceInfo::parse(enc.into()), Err(Scte35Error::Encrypted));
    }

    #[test]
    fn a_command_of_unknown_length_ends_by_its_syntax() {
        let mut s = section(0, 0x06, &time(77), &[]).to_vec();
        // splice_command_length 0xfff (legacy): the command's syntax gives its end.
        s[11] |= 0x0f;
        s[12] = 0xff;
        let n = s.len() - 4;
        let crc = crc32_mpeg2(&s[..n]);
        s[n..].copy_from_slice(&crc.to_be_bytes());
        let info = SpliceInfo::parse(s.into()).unwrap();
        assert_eq!(info.splice_pts(), Some(77));
    }
}
