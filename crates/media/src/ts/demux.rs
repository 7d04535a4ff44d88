//! [`TsDemuxer`]: MPEG-TS bytes in, tracks and frames out, for SRT (and UDP) ingest.
//!
//! Why: SRT publishers (ffmpeg/libsrt, OBS, hardware encoders) send MPEG-TS in
//! datagrams of 188-byte packets. The hub wants what every other ingest gives it: a
//! [`Track`] with the decoder configuration, then [`Frame`]s in the canonical form
//! (length-prefixed NAL units, raw AAC, bare Opus packets) on the 90 kHz clock.
//!
//! - `packet`: the packet header and adaptation field; continuity counters.
//! - `section`: PSI sections over packets, their CRC, the PAT and the PMT.
//! - `pes`: PES packets over packets, and their headers (PTS, DTS).
//! - `clock`: 33-bit timestamps unwrapped and rebased to the program's start.
//! - `video`, `adts`, `opus`: access units to frames, and the tracks they imply.
//!
//! The call contract and what is read are on [`TsDemuxer`].
//!
//! # Invariants
//! - No input panics or grows memory without bound: partial input is at most one
//!   packet, a PES at most [`MAX_VIDEO_PES_LEN`] or
//!   [`MAX_AUDIO_PES_LEN`], a PSI section 1024 bytes, the output queue
//!   [`MAX_QUEUED_OUTPUTS`] entries (whose payloads came from the bytes pushed since
//!   the last drain).
//! - Packet boundaries do not depend on how the input was split: while in sync, a
//!   sync byte where a packet should start is taken; while searching, a sync byte
//!   counts only with another 188 bytes later.
//! - A PES with a continuity gap inside is dropped, never emitted with a hole.

mod adts;
mod clock;
mod opus;
mod packet;
mod pes;
mod section;
mod video;

use std::collections::VecDeque;

use bytes::Bytes;

use self::adts::AdtsStream;
use self::clock::{Clock, StreamClock};
use self::opus::OpusStream;
use self::packet::{Continuity, Counter, TsPacket};
use self::pes::{Pes, PesAssembler, PesHeader};
use self::section::{pat_programs, pmt_streams, Es, Section, SectionReader, StreamCodec};
use self::video::{VideoCodec, VideoStream};
use super::packet::{PACKET_LEN, SYNC_BYTE};
use super::scte35::{SpliceInfo, MAX_SECTION_LEN as SCTE35_MAX_SECTION_LEN};
use super::PROGRAM_NUMBER;
use crate::codec::OpusConfig;
use crate::{Frame, Timestamp, Track};

/// Largest video PES we reassemble: a 4K keyframe at a high bit rate is a few MiB;
/// more is a peer making us buffer.
pub const MAX_VIDEO_PES_LEN: usize = 16 << 20;
/// Largest audio PES we reassemble: the most a 16-bit `PES_packet_length` can say.
/// Encoders put a few frames (tens of milliseconds, a few KiB) in each.
pub const MAX_AUDIO_PES_LEN: usize = 64 << 10;
/// Most outputs queued between two drains. One 1316-byte datagram yields at most a
/// few hundred (Opus packets of a few bytes each), so a caller that drains after
/// every push never reaches it.
pub const MAX_QUEUED_OUTPUTS: usize = 1024;
/// PID of the program association table.
const PAT_PID: u16 = 0;
/// PID of null packets.
const NULL_PID: u16 = 0x1fff;

/// One output of the demuxer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Demuxed {
    /// A track's configuration, new or changed, valid for the frames of its kind from
    /// this time (the DTS of the first frame that uses it) on.
    Track(Timestamp, Track),
    /// One access unit. Its kind says which track it belongs to.
    Frame(Frame),
    /// An SCTE-35 cue of the program, in the order it arrived (usually seconds before
    /// the splice it announces).
    Cue(Cue),
}

/// An SCTE-35 cue placed on the program's timeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cue {
    /// When it splices, on the frames' clock: the splice time the cue names, or, for
    /// an immediate splice or a cue without a time, the last DTS seen when it arrived.
    pub at: Timestamp,
    /// The section, decoded and whole.
    pub info: SpliceInfo,
}

/// Counters for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DemuxStats {
    /// Transport packets read.
    pub packets: u64,
    /// Packets ignored as malformed, marked with `transport_error_indicator`, or scrambled.
    pub bad_packets: u64,
    /// Times a packet boundary held no sync byte and we searched for one.
    pub sync_losses: u64,
    /// Bytes skipped outside packets (garbage while searching for sync).
    pub skipped_bytes: u64,
    /// Continuity counter gaps on the PIDs we read: packets lost.
    pub continuity_errors: u64,
    /// PSI sections dropped: bad CRC, too long, or malformed.
    pub bad_sections: u64,
    /// PES packets dropped: lost packets inside, too large, an unreadable header, or no
    /// timestamp to give them.
    pub pes_dropped: u64,
    /// Tracks emitted.
    pub tracks: u64,
    /// Frames emitted.
    pub frames: u64,
    /// Access units dropped as malformed or cut short.
    pub frames_dropped: u64,
    /// Frames dropped because no configuration was known yet (video before its first
    /// parameter sets).
    pub frames_without_config: u64,
    /// Frames (with the track before them, if any) dropped because the output queue
    /// was full.
    pub outputs_dropped: u64,
    /// SCTE-35 cues emitted.
    pub cues: u64,
    /// SCTE-35 sections dropped: malformed, encrypted, arrived before any media time
    /// to place them on, or no room in the output queue.
    pub cues_dropped: u64,
}

/// The output queue and the counters, which the stream parsers write into.
#[derive(Debug, Default)]
struct Outputs {
    queue: VecDeque<Demuxed>,
    stats: DemuxStats,
}

impl Outputs {
    /// Queues `track`, if any, then `frame`. Returns false, queueing neither, when the
    /// queue has no room for both.
    fn frame(&mut self, track: Option<(Timestamp, Track)>, frame: Frame) -> bool {
        let needed = 1 + usize::from(track.is_some());
        if self.queue.len().saturating_add(needed) > MAX_QUEUED_OUTPUTS {
            self.stats.outputs_dropped += 1;
            return false;
        }
        if let Some((at, track)) = track {
            self.queue.push_back(Demuxed::Track(at, track));
            self.stats.tracks += 1;
        }
        self.queue.push_back(Demuxed::Frame(frame));
        self.stats.frames += 1;
        true
    }

    fn cue(&mut self, cue: Cue) {
        if self.queue.len() >= MAX_QUEUED_OUTPUTS {
            self.stats.cues_dropped += 1;
            return;
        }
        self.queue.push_back(Demuxed::Cue(cue));
        self.stats.cues += 1;
    }
}

/// The codec half of an elementary stream.
#[derive(Debug)]
enum Codec {
    Video(VideoStream),
    Aac(AdtsStream),
    Opus(OpusStream),
}

/// One elementary stream we demux: its PID and codec, PES reassembly, clock and parser.
#[derive(Debug)]
struct Stream {
    es: Es,
    counter: Counter,
    pes: PesAssembler,
    clock: StreamClock,
    codec: Codec,
}

impl Stream {
    fn new(es: Es) -> Option<Stream> {
        let (codec, max_len) = match es.codec {
            StreamCodec::H264 => (
                Codec::Video(VideoStream::new(VideoCodec::H264)),
                MAX_VIDEO_PES_LEN,
            ),
            StreamCodec::H265 => (
                Codec::Video(VideoStream::new(VideoCodec::H265)),
                MAX_VIDEO_PES_LEN,
            ),
            StreamCodec::Aac => (Codec::Aac(AdtsStream::default()), MAX_AUDIO_PES_LEN),
            StreamCodec::Opus { channels } => (
                Codec::Opus(OpusStream::new(OpusConfig::new(channels).ok()?)),
                MAX_AUDIO_PES_LEN,
            ),
        };
        Some(Stream {
            es,
            counter: Counter::default(),
            pes: PesAssembler::new(max_len),
            clock: StreamClock::default(),
            codec,
        })
    }

    /// One packet of the stream's PID.
    fn packet(&mut self, p: &TsPacket<'_>, clock: &mut Clock, out: &mut Outputs) {
        match self.counter.check(p) {
            Continuity::InOrder => {}
            Continuity::Duplicate => return,
            Continuity::Gap => {
                out.stats.continuity_errors += 1;
                if self.pes.lose().is_some() {
                    out.stats.pes_dropped += 1;
                }
            }
        }
        let Some(payload) = p.payload else {
            return;
        };
        if p.unit_start {
            if let Some(pes) = self.pes.start() {
                self.deliver(pes, clock, out);
            }
        }
        match self.pes.append(payload) {
            Ok(Some(pes)) => self.deliver(pes, clock, out),
            Ok(None) => {}
            Err(_) => out.stats.pes_dropped += 1,
        }
    }

    /// End of input: the PES in progress is complete.
    fn finish(&mut self, clock: &mut Clock, out: &mut Outputs) {
        if let Some(pes) = self.pes.finish() {
            self.deliver(pes, clock, out);
        }
        if let Codec::Aac(a) = &mut self.codec {
            a.finish(out);
        }
    }

    /// Hands a whole PES to the codec parser with its rebased times.
    fn deliver(&mut self, pes: Pes, clock: &mut Clock, out: &mut Outputs) {
        let Some(header) = PesHeader::parse(&pes.data) else {
            out.stats.pes_dropped += 1;
            return;
        };
        let times = match header.pts {
            Some(pts) => Some(clock.times(&mut self.clock, pts, header.dts)),
            // Encoders may leave out timestamps (at most 700 ms apart, §2.7.4): the
            // PES follows the one before.
            None => match &self.codec {
                Codec::Video(v) => v.guess_dts(),
                Codec::Aac(a) => a.next_pts(),
                Codec::Opus(o) => o.next_pts(),
            }
            .map(|t| (t, t)),
        };
        let Some((pts, dts)) = times else {
            out.stats.pes_dropped += 1;
            return;
        };
        let data: Bytes = pes.data.freeze();
        let es = data.slice(header.payload_offset.min(data.len())..);
        match &mut self.codec {
            Codec::Video(v) => v.access_unit(&es, pts, dts, out),
            Codec::Aac(a) => a.pes(es, pts, pes.after_loss, out),
            Codec::Opus(o) => o.pes(es, pts, out),
        }
    }
}

/// A PSI table's PID: its section reader and counter.
#[derive(Debug, Default)]
struct Table {
    counter: Counter,
    reader: SectionReader,
}

impl Table {
    /// Takes a packet of the table's PID; the sections it completes go to `done`.
    /// Returns false when something malformed was dropped.
    fn packet(
        &mut self,
        p: &TsPacket<'_>,
        stats: &mut DemuxStats,
        done: &mut Vec<Vec<u8>>,
    ) -> bool {
        match self.counter.check(p) {
            Continuity::InOrder => {}
            Continuity::Duplicate => return true,
            Continuity::Gap => {
                stats.continuity_errors += 1;
                self.reader.reset();
            }
        }
        match p.payload {
            Some(payload) => self.reader.push(p.unit_start, payload, done),
            None => true,
        }
    }

    fn reset(&mut self) {
        self.counter.reset();
        self.reader.reset();
    }
}

/// Demuxes one MPEG-TS program into tracks and frames.
///
/// # Call contract
/// [`push`](Self::push) bytes as they arrive, in any pieces, then drain
/// [`poll`](Self::poll) to `None`; call [`finish`](Self::finish) at the end of input
/// (and drain again) to get the last video frame, whose end is otherwise only known
/// when the next one starts. Nothing here returns an error: whatever is malformed is
/// skipped and counted in [`DemuxStats`]. The same bytes give the same outputs however
/// they are split across pushes.
///
/// # What is read
/// One program: the one [`for_program`](Self::for_program) names, else number 1 if the
/// PAT lists it, else the first listed. From its PMT, the
/// first video stream (H.264, H.265) and the first audio stream (AAC in ADTS, or Opus
/// registered as such), and the first SCTE-35 cue stream (type 0x86); other streams
/// (MP3, AC-3, subtitles, data) are ignored. A new
/// PMT version is read again, and a stream whose PID or codec changes starts over.
/// Video frames are one PES each; audio PES are split into their frames.
///
/// # Outputs
/// A [`Demuxed::Track`] comes before the first frame of its kind and again before the
/// first frame that needs a changed configuration (new parameter sets, another AAC
/// configuration). Video before its first parameter sets is dropped (counted in
/// [`DemuxStats::frames_without_config`]). Times of all streams share one base: the
/// program's first DTS is 0, and 33-bit wrap-arounds are unwrapped. A [`Demuxed::Cue`]
/// comes when its section is whole, placed on that timeline.
#[derive(Debug)]
pub struct TsDemuxer {
    /// Bytes not yet decided on between pushes: the start of a packet, at most 188 bytes.
    carry: Vec<u8>,
    /// Whether packet boundaries are known: the last packet was followed by a sync byte.
    locked: bool,
    pat: Table,
    pmt: Table,
    /// `(program_number, PMT PID)` of the program we demux.
    program: Option<(u16, u16)>,
    /// The program number asked for ([`TsDemuxer::for_program`]); `None` picks one.
    wanted: Option<u16>,
    /// `version_number` of the PMT in force.
    pmt_version: Option<u8>,
    video: Option<Stream>,
    audio: Option<Stream>,
    clock: Clock,
    /// The program's SCTE-35 PID, if its PMT names one, and its sections.
    cues: Option<(u16, Table)>,
    /// Reused list of the sections one packet completes.
    sections: Vec<Vec<u8>>,
    out: Outputs,
}

impl Default for TsDemuxer {
    fn default() -> Self {
        Self::new()
    }
}

impl TsDemuxer {
    /// A demuxer that has seen nothing yet.
    pub fn new() -> Self {
        TsDemuxer {
            carry: Vec::with_capacity(2 * PACKET_LEN),
            locked: false,
            pat: Table::default(),
            pmt: Table::default(),
            program: None,
            wanted: None,
            pmt_version: None,
            video: None,
            audio: None,
            clock: Clock::default(),
            cues: None,
            sections: Vec::new(),
            out: Outputs::default(),
        }
    }

    /// A demuxer of program `number` only, for a multi-program TS (a broadcast mux):
    /// until the PAT lists it, nothing comes out.
    pub fn for_program(number: u16) -> Self {
        TsDemuxer {
            wanted: Some(number),
            ..Self::new()
        }
    }

    /// Takes the next bytes of the stream: whole packets normally (an SRT datagram is
    /// seven), but any split works; the partial packet at the end waits for the rest.
    /// After bytes that are not packets, the demuxer finds the packets again: a sync
    /// byte followed 188 bytes later by another.
    pub fn push(&mut self, mut bytes: &[u8]) {
        // First complete the carried start of a packet, a bounded piece at a time.
        while !self.carry.is_empty() && !bytes.is_empty() {
            let old = self.carry.len();
            let take = bytes.len().min((2 * PACKET_LEN).saturating_sub(old));
            let Some((head, tail)) = bytes.split_at_checked(take) else {
                return;
            };
            let mut carry = std::mem::take(&mut self.carry);
            carry.extend_from_slice(head);
            let used = self.scan(&carry, false);
            if let Some(past) = used.checked_sub(old) {
                // Everything carried is decided; go on in `bytes` itself.
                bytes = bytes.get(past..).unwrap_or_default();
                carry.clear();
            } else {
                carry.drain(..used.min(carry.len()));
                bytes = tail;
            }
            self.carry = carry;
        }
        if self.carry.is_empty() {
            let used = self.scan(bytes, false);
            self.carry
                .extend_from_slice(bytes.get(used..).unwrap_or_default());
        }
    }

    /// The next track or frame, if any. Drain to `None` after each push.
    pub fn poll(&mut self) -> Option<Demuxed> {
        self.out.queue.pop_front()
    }

    /// End of input: the last packet is taken even without a sync byte after it, and
    /// the PES in progress on each stream is complete. More input may follow (a new
    /// stream on the same demuxer); its timestamps keep the same base.
    pub fn finish(&mut self) {
        let carry = std::mem::take(&mut self.carry);
        let used = self.scan(&carry, true);
        self.out.stats.skipped_bytes += carry.len().saturating_sub(used) as u64;
        for stream in [&mut self.video, &mut self.audio].into_iter().flatten() {
            stream.finish(&mut self.clock, &mut self.out);
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> DemuxStats {
        self.out.stats
    }

    /// Reads the packets at the start of `data` and skips garbage; returns how many
    /// bytes were decided on. Stops at a partial packet, or, while searching for sync,
    /// at a packet whose successor's first byte is not there yet (unless `at_end`).
    fn scan(&mut self, data: &[u8], at_end: bool) -> usize {
        let mut pos = 0;
        while let Some(rest) = data.get(pos..).filter(|r| !r.is_empty()) {
            if rest.first() != Some(&SYNC_BYTE) {
                if self.locked {
                    self.locked = false;
                    self.out.stats.sync_losses += 1;
                }
                let skip = rest
                    .iter()
                    .position(|&b| b == SYNC_BYTE)
                    .unwrap_or(rest.len());
                self.out.stats.skipped_bytes += skip as u64;
                pos += skip;
                continue;
            }
            let Some(packet) = rest.get(..PACKET_LEN) else {
                break;
            };
            if !self.locked {
                // A 0x47 in garbage is likely; two 188 bytes apart are not.
                match rest.get(PACKET_LEN) {
                    Some(&SYNC_BYTE) => self.locked = true,
                    Some(_) => {
                        self.out.stats.skipped_bytes += 1;
                        pos += 1;
                        continue;
                    }
                    None if at_end => {}
                    None => break,
                }
            }
            self.packet(packet);
            pos += PACKET_LEN;
        }
        pos
    }

    fn packet(&mut self, bytes: &[u8]) {
        self.out.stats.packets += 1;
        let Some(p) = TsPacket::parse(bytes).filter(|p| !p.error && !p.scrambled) else {
            self.out.stats.bad_packets += 1;
            return;
        };
        if p.pid == PAT_PID {
            self.table_packet(false, &p);
        } else if self.program.is_some_and(|(_, pid)| pid == p.pid) {
            self.table_packet(true, &p);
        } else if let Some(v) = self.video.as_mut().filter(|s| s.es.pid == p.pid) {
            v.packet(&p, &mut self.clock, &mut self.out);
        } else if let Some(a) = self.audio.as_mut().filter(|s| s.es.pid == p.pid) {
            a.packet(&p, &mut self.clock, &mut self.out);
        } else if self.cues.as_ref().is_some_and(|(pid, _)| *pid == p.pid) {
            self.cue_packet(&p);
        }
    }

    /// A packet of the program's SCTE-35 PID: each section it completes becomes a cue.
    fn cue_packet(&mut self, p: &TsPacket<'_>) {
        let Some((_, table)) = self.cues.as_mut() else {
            return;
        };
        let mut sections = std::mem::take(&mut self.sections);
        if !table.packet(p, &mut self.out.stats, &mut sections) {
            self.out.stats.cues_dropped += 1;
        }
        for section in sections.drain(..) {
            let info = match SpliceInfo::parse(Bytes::from(section)) {
                Ok(info) => info,
                Err(_) => {
                    self.out.stats.cues_dropped += 1;
                    continue;
                }
            };
            let at = match info.splice_pts() {
                Some(pts) => self.clock.place(pts),
                None => self.clock.now(),
            };
            match at {
                Some(at) => self.out.cue(Cue { at, info }),
                None => self.out.stats.cues_dropped += 1,
            }
        }
        self.sections = sections;
    }

    /// A packet of the PAT (`pmt` false) or of our program's PMT.
    fn table_packet(&mut self, pmt: bool, p: &TsPacket<'_>) {
        let table = if pmt { &mut self.pmt } else { &mut self.pat };
        let mut sections = std::mem::take(&mut self.sections);
        if !table.packet(p, &mut self.out.stats, &mut sections) {
            self.out.stats.bad_sections += 1;
        }
        for s in sections.drain(..) {
            match Section::parse(&s) {
                None => self.out.stats.bad_sections += 1,
                Some(s) if !s.current => {}
                Some(s) if pmt => self.apply_pmt(&s),
                Some(s) => self.apply_pat(&s),
            }
        }
        self.sections = sections;
    }

    /// Picks the program: the one asked for, else number 1, else the one we have, else
    /// the first.
    fn apply_pat(&mut self, s: &Section<'_>) {
        let current = self.program.map(|(number, _)| number);
        let (mut one, mut same, mut first) = (None, None, None);
        for (number, pid) in pat_programs(s) {
            if pid == PAT_PID || pid == NULL_PID {
                continue;
            }
            if let Some(wanted) = self.wanted {
                if number == wanted {
                    one = Some((number, pid));
                    break;
                }
                continue;
            }
            if number == PROGRAM_NUMBER {
                one = Some((number, pid));
                break;
            }
            if Some(number) == current {
                same = Some((number, pid));
            }
            first = first.or(Some((number, pid)));
        }
        let choice = one.or(same).or(first.filter(|_| current.is_none()));
        if choice.is_some() && choice != self.program {
            self.program = choice;
            self.pmt.reset();
            self.pmt_version = None;
        }
    }

    /// Takes the streams of a new PMT version.
    fn apply_pmt(&mut self, s: &Section<'_>) {
        let Some((number, pmt_pid)) = self.program else {
            return;
        };
        if s.id != number || self.pmt_version == Some(s.version) {
            return;
        }
        let Some(pmt) = pmt_streams(s, &[PAT_PID, pmt_pid, NULL_PID]) else {
            self.out.stats.bad_sections += 1;
            return;
        };
        self.pmt_version = Some(s.version);
        for (slot, es) in [(&mut self.video, pmt.video), (&mut self.audio, pmt.audio)] {
            if slot.as_ref().map(|s| s.es) != es {
                *slot = es.and_then(Stream::new);
            }
        }
        if self.cues.as_ref().map(|(pid, _)| *pid) != pmt.cues {
            self.cues = pmt.cues.map(|pid| {
                let table = Table {
                    counter: Counter::default(),
                    reader: SectionReader::with_max(SCTE35_MAX_SECTION_LEN),
                };
                (pid, table)
            });
        }
    }
}

#[cfg(test)]
mod tests;
