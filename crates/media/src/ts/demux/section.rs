//! PSI read back: sections reassembled from packets, their CRC, and the PAT and PMT
//! (ISO/IEC 13818-1 §2.4.4).
//!
//! Why: the PAT names the PID of the program map, and the program map names the PIDs
//! and codecs of the elementary streams; nothing else in a transport stream says which
//! PID carries what.
//!
//! # Invariants
//! - A section is at most [`MAX_SECTION_LEN`] bytes; a longer one is dropped unread.
//! - A section whose CRC does not check is never interpreted.

use super::super::psi::crc32_mpeg2;
use super::super::{STREAM_TYPE_AAC_ADTS, STREAM_TYPE_H264, STREAM_TYPE_H265};

/// Largest section we reassemble: `section_length` of PSI tables is at most 1021
/// (§2.4.4.5), plus the 3 bytes before it.
pub(super) const MAX_SECTION_LEN: usize = 1024;
/// `table_id` of a program association section.
const TABLE_ID_PAT: u8 = 0x00;
/// `table_id` of a program map section.
const TABLE_ID_PMT: u8 = 0x02;
/// `stream_type` of PES private data, which carries Opus (with a registration descriptor).
const STREAM_TYPE_PRIVATE_PES: u8 = 0x06;
/// `registration_descriptor` tag (§2.6.8).
const TAG_REGISTRATION: u8 = 0x05;
/// DVB `extension_descriptor` tag (ETSI EN 300 468 §6.2.16).
const TAG_DVB_EXTENSION: u8 = 0x7f;
/// DVB extension tag of the provisional Opus descriptor (ETSI TS 102 366 draft, as
/// ffmpeg writes it): one byte, `channel_config_code`.
const EXT_TAG_OPUS: u8 = 0x80;

/// `stream_type` of SCTE-35 splice info sections (SCTE 35 §8.1).
const STREAM_TYPE_SCTE35: u8 = 0x86;

/// Reassembles the sections of one PSI PID from its packets' payloads.
#[derive(Debug)]
pub(super) struct SectionReader {
    /// The section being gathered, from its `table_id` on.
    buf: Vec<u8>,
    /// Longest section taken; a longer one is dropped unread.
    max: usize,
}

impl Default for SectionReader {
    fn default() -> Self {
        SectionReader::with_max(MAX_SECTION_LEN)
    }
}

impl SectionReader {
    /// A reader of sections up to `max` bytes (SCTE-35 allows 4096, PSI 1024).
    pub(super) fn with_max(max: usize) -> SectionReader {
        SectionReader {
            buf: Vec::new(),
            max,
        }
    }

    /// Takes the payload of the next packet of the PID and appends every section it
    /// completes to `done`. Returns false when something malformed was dropped: a
    /// pointer field past the payload, or a section longer than the reader's maximum.
    pub(super) fn push(
        &mut self,
        unit_start: bool,
        payload: &[u8],
        done: &mut Vec<Vec<u8>>,
    ) -> bool {
        if !unit_start {
            if self.buf.is_empty() {
                return true; // waiting for a section to start
            }
            self.buf.extend_from_slice(payload);
            return self.complete(done);
        }
        // pointer_field: how many bytes finish the section in progress.
        let Some((&pointer, rest)) = payload.split_first() else {
            self.reset();
            return false;
        };
        let Some((tail, mut data)) = rest.split_at_checked(usize::from(pointer)) else {
            self.reset();
            return false;
        };
        let mut ok = true;
        if !self.buf.is_empty() {
            self.buf.extend_from_slice(tail);
            ok = self.complete(done);
            // Whatever is not complete by now lost its end.
            self.reset();
        }
        // New sections, back to back, until stuffing (0xff) or the end of the packet.
        while let Some(&table_id) = data.first() {
            if table_id == 0xff {
                break;
            }
            match section_len(data) {
                Some(len) if len > self.max => return false,
                Some(len) if len <= data.len() => {
                    let (section, after) = data.split_at(len);
                    done.push(section.to_vec());
                    data = after;
                }
                // It goes on in the next packets.
                _ => {
                    self.buf.extend_from_slice(data);
                    break;
                }
            }
        }
        ok
    }

    /// Hands out the section in progress if it is whole; what follows it in the same
    /// packet is stuffing (a new section would have started a packet of its own).
    fn complete(&mut self, done: &mut Vec<Vec<u8>>) -> bool {
        match section_len(&self.buf) {
            Some(len) if len > self.max => {
                self.reset();
                false
            }
            Some(len) if len <= self.buf.len() => {
                self.buf.truncate(len);
                done.push(std::mem::take(&mut self.buf));
                true
            }
            _ => true,
        }
    }

    /// Drops the section in progress (after a continuity error, or a new table PID).
    pub(super) fn reset(&mut self) {
        self.buf.clear();
    }
}

/// The whole length of the section at the start of `data`, once its first 3 bytes are there.
fn section_len(data: &[u8]) -> Option<usize> {
    let &[_, hi, lo] = data.get(..3)? else {
        return None;
    };
    Some(3 + usize::from(u16::from_be_bytes([hi & 0x0f, lo])))
}

/// A long-form section whose CRC checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Section<'a> {
    /// `table_id`.
    pub(super) table_id: u8,
    /// `transport_stream_id` (PAT) or `program_number` (PMT).
    pub(super) id: u16,
    /// `version_number`.
    pub(super) version: u8,
    /// `current_next_indicator`: the table applies now, not later.
    pub(super) current: bool,
    /// What follows `last_section_number`, without the CRC.
    pub(super) body: &'a [u8],
}

impl<'a> Section<'a> {
    /// Checks and splits a whole section. `None` when it is short, lacks
    /// `section_syntax_indicator`, or its CRC-32 does not check.
    pub(super) fn parse(s: &'a [u8]) -> Option<Section<'a>> {
        let &[table_id, b1, _, id_hi, id_lo, b5, _, _] = s.get(..8)? else {
            return None;
        };
        if b1 & 0x80 == 0 || section_len(s) != Some(s.len()) || crc32_mpeg2(s) != 0 {
            return None;
        }
        let body = s.get(8..s.len().checked_sub(4)?)?;
        Some(Section {
            table_id,
            id: u16::from_be_bytes([id_hi, id_lo]),
            version: (b5 >> 1) & 0x1f,
            current: b5 & 1 != 0,
            body,
        })
    }
}

/// The programs of a PAT section, `(program_number, PMT PID)`, network PID excluded.
pub(super) fn pat_programs<'a>(s: &Section<'a>) -> impl Iterator<Item = (u16, u16)> + 'a {
    let body = if s.table_id == TABLE_ID_PAT {
        s.body
    } else {
        &[]
    };
    body.chunks_exact(4).filter_map(|e| {
        let &[n_hi, n_lo, p_hi, p_lo] = e else {
            return None;
        };
        let number = u16::from_be_bytes([n_hi, n_lo]);
        (number != 0).then_some((number, u16::from_be_bytes([p_hi & 0x1f, p_lo])))
    })
}

/// The codec of an elementary stream we can demux.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StreamCodec {
    /// `stream_type` 0x1b.
    H264,
    /// `stream_type` 0x24.
    H265,
    /// `stream_type` 0x0f: AAC in ADTS.
    Aac,
    /// `stream_type` 0x06 registered as "Opus", with its channel count.
    Opus {
        /// 1 to 8.
        channels: u8,
    },
}

impl StreamCodec {
    fn is_video(self) -> bool {
        matches!(self, StreamCodec::H264 | StreamCodec::H265)
    }
}

/// One elementary stream picked from the PMT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Es {
    /// The PID of its PES packets.
    pub(super) pid: u16,
    /// What it carries.
    pub(super) codec: StreamCodec,
}

/// What we take from a PMT: its first video and first audio stream that we can demux.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Pmt {
    /// The first H.264 or H.265 stream.
    pub(super) video: Option<Es>,
    /// The first AAC or Opus stream.
    pub(super) audio: Option<Es>,
    /// The PID of the first SCTE-35 cue stream.
    pub(super) cues: Option<u16>,
}

/// Reads a PMT section. `None` when it is not a PMT or its loops run past its end.
/// `reserved` are PIDs that cannot carry a stream (PAT, PMT, null).
pub(super) fn pmt_streams(s: &Section<'_>, reserved: &[u16]) -> Option<Pmt> {
    if s.table_id != TABLE_ID_PMT {
        return None;
    }
    // PCR_PID (2 bytes), then program_info_length and the program descriptors.
    let &[_, _, i_hi, i_lo] = s.body.get(..4)? else {
        return None;
    };
    let info_len = usize::from(u16::from_be_bytes([i_hi & 0x0f, i_lo]));
    let mut rest = s.body.get(4usize.checked_add(info_len)?..)?;
    let mut pmt = Pmt::default();
    while !rest.is_empty() {
        let &[stream_type, p_hi, p_lo, e_hi, e_lo] = rest.get(..5)? else {
            return None;
        };
        let pid = u16::from_be_bytes([p_hi & 0x1f, p_lo]);
        let es_info_len = usize::from(u16::from_be_bytes([e_hi & 0x0f, e_lo]));
        let end = 5usize.checked_add(es_info_len)?;
        let descriptors = rest.get(5..end)?;
        rest = rest.get(end..)?;
        if reserved.contains(&pid) {
            continue;
        }
        if stream_type == STREAM_TYPE_SCTE35 {
            pmt.cues = pmt.cues.or(Some(pid));
            continue;
        }
        let Some(codec) = codec(stream_type, descriptors) else {
            continue;
        };
        let slot = if codec.is_video() {
            &mut pmt.video
        } else {
            &mut pmt.audio
        };
        if slot.is_none() {
            *slot = Some(Es { pid, codec });
        }
    }
    Some(pmt)
}

/// The codec of a stream from its `stream_type` and ES descriptors, if we demux it.
fn codec(stream_type: u8, descriptors: &[u8]) -> Option<StreamCodec> {
    match stream_type {
        STREAM_TYPE_H264 => Some(StreamCodec::H264),
        STREAM_TYPE_H265 => Some(StreamCodec::H265),
        STREAM_TYPE_AAC_ADTS => Some(StreamCodec::Aac),
        STREAM_TYPE_PRIVATE_PES => {
            let mut opus = false;
            let mut channels = 2;
            for (tag, data) in descriptor_list(descriptors) {
                match (tag, data) {
                    (TAG_REGISTRATION, [b'O', b'p', b'u', b's', ..]) => opus = true,
                    (TAG_DVB_EXTENSION, &[EXT_TAG_OPUS, code, ..]) => {
                        // channel_config_code: 1..=8 channels in the Vorbis order;
                        // 0 is dual mono, which decodes as two channels. Larger codes
                        // need a mapping table we do not read.
                        channels = match code {
                            0 => 2,
                            1..=8 => code,
                            _ => return None,
                        };
                    }
                    _ => {}
                }
            }
            opus.then_some(StreamCodec::Opus { channels })
        }
        _ => None,
    }
}

/// The `(tag, data)` of each descriptor of a loop, ending at the first one cut short.
fn descriptor_list(mut d: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    std::iter::from_fn(move || {
        let (&tag, rest) = d.split_first()?;
        let (&len, rest) = rest.split_first()?;
        let (data, rest) = rest.split_at_checked(usize::from(len))?;
        d = rest;
        Some((tag, data))
    })
}

#[cfg(test)]
mod tests {
    use super::super::super::psi::{pat_section, pmt_section, PmtStream};
    use super::*;

    /// A long-form section with `body` and a correct CRC.
    fn section(table_id: u8, id: u16, version: u8, body: &[u8]) -> Vec<u8> {
        let len = (5 + body.len() + 4) as u16;
        let mut s = vec![table_id];
        s.extend_from_slice(&(0xb000 | len).to_be_bytes());
        s.extend_from_slice(&id.to_be_bytes());
        s.push(0xc1 | (version << 1));
        s.extend_from_slice(&[0, 0]);
        s.extend_from_slice(body);
        let crc = crc32_mpeg2(&s);
        s.extend_from_slice(&crc.to_be_bytes());
        s
    }

    fn sections(r: &mut SectionReader, unit_start: bool, payload: &[u8]) -> Vec<Vec<u8>> {
        let mut done = Vec::new();
        assert!(r.push(unit_start, payload, &mut done));
        done
    }

    #[test]
    fn our_pat_and_pmt_read_back() {
        let pat = pat_section();
        let s = Section::parse(&pat).expect("CRC checks");
        assert!(s.current);
        assert_eq!(pat_programs(&s).collect::<Vec<_>>(), vec![(1, 0x1000)]);
        let pmt = pmt_section(
            0x100,
            &[
                PmtStream {
                    stream_type: 0x0f,
                    pid: 0x101,
                },
                PmtStream {
                    stream_type: 0x1b,
                    pid: 0x100,
                },
                PmtStream {
                    stream_type: 0x24,
                    pid: 0x102,
                },
            ],
        );
        let s = Section::parse(&pmt).expect("CRC checks");
        let streams = pmt_streams(&s, &[0, 0x1000]).expect("a PMT");
        assert_eq!(
            streams.video,
            Some(Es {
                pid: 0x100,
                codec: StreamCodec::H264
            })
        );
        assert_eq!(
            streams.audio,
            Some(Es {
                pid: 0x101,
                codec: StreamCodec::Aac
            })
        );
        // A PAT is not a PMT.
        let pat = Section::parse(&pat).expect("CRC");
        assert_eq!(pmt_streams(&pat, &[]), None);
    }

    #[test]
    fn bad_crc_or_length_is_rejected() {
        let mut pat = pat_section();
        assert!(Section::parse(&pat).is_some());
        for i in 0..pat.len() {
            pat[i] ^= 0x10;
            assert!(Section::parse(&pat).is_none(), "byte {i}");
            pat[i] ^= 0x10;
        }
        assert!(Section::parse(&pat[..pat.len() - 1]).is_none());
        assert!(Section::parse(&[]).is_none());
    }

    #[test]
    fn opus_needs_its_registration_and_reads_channels() {
        // PCR PID, no program info; then stream_type 6 with descriptors.
        let es = |descriptors: &[u8]| {
            let mut body = vec![0xe1, 0x00, 0xf0, 0x00, 0x06, 0xe1, 0x01];
            body.extend_from_slice(&(0xf000 | descriptors.len() as u16).to_be_bytes());
            body.extend_from_slice(descriptors);
            let s = section(TABLE_ID_PMT, 1, 0, &body);
            let s = Section::parse(&s).expect("CRC");
            pmt_streams(&s, &[]).expect("a PMT").audio.map(|e| e.codec)
        };
        let opus = [0x05, 4, b'O', b'p', b'u', b's'];
        assert_eq!(es(&opus), Some(StreamCodec::Opus { channels: 2 }));
        let mut six = opus.to_vec();
        six.extend_from_slice(&[0x7f, 2, 0x80, 6]);
        assert_eq!(es(&six), Some(StreamCodec::Opus { channels: 6 }));
        six[9] = 0;
        assert_eq!(es(&six), Some(StreamCodec::Opus { channels: 2 }));
        six[9] = 0x81;
        assert_eq!(es(&six), None);
        // Private data registered as something else (AC-3), or not at all.
        assert_eq!(es(&[0x05, 4, b'A', b'C', b'-', b'3']), None);
        assert_eq!(es(&[]), None);
        // A descriptor running past its loop ends the loop.
        assert_eq!(es(&[0x7f, 9, 0x80]), None);
    }

    #[test]
    fn pmt_loops_running_past_the_end_are_rejected() {
        // ES_info_length says 16 bytes, only 2 follow.
        let body = [0xe1, 0x00, 0xf0, 0x00, 0x1b, 0xe1, 0x00, 0xf0, 0x10, 1, 2];
        let s = section(TABLE_ID_PMT, 1, 0, &body);
        assert_eq!(pmt_streams(&Section::parse(&s).expect("CRC"), &[]), None);
        // program_info_length past the end.
        let body = [0xe1, 0x00, 0xff, 0xff];
        let s = section(TABLE_ID_PMT, 1, 0, &body);
        assert_eq!(pmt_streams(&Section::parse(&s).expect("CRC"), &[]), None);
        // Streams on reserved PIDs are skipped; the next one is taken.
        let body = [
            0xe1, 0x00, 0xf0, 0x00, 0x1b, 0xf0, 0x00, 0xf0, 0x00, 0x24, 0xe2, 0x00, 0xf0, 0x00,
        ];
        let s = section(TABLE_ID_PMT, 1, 0, &body);
        let pmt = pmt_streams(&Section::parse(&s).expect("CRC"), &[0x1000]).expect("PMT");
        assert_eq!(
            pmt.video,
            Some(Es {
                pid: 0x200,
                codec: StreamCodec::H265
            })
        );
    }

    #[test]
    fn pat_lists_programs_but_not_the_network_pid() {
        let body = [0, 0, 0xe0, 0x10, 0, 5, 0xe1, 0x00, 0, 1, 0xe2, 0x00];
        let s = section(TABLE_ID_PAT, 1, 3, &body);
        let s = Section::parse(&s).expect("CRC");
        assert_eq!(s.version, 3);
        assert_eq!(
            pat_programs(&s).collect::<Vec<_>>(),
            vec![(5, 0x100), (1, 0x200)]
        );
    }

    #[test]
    fn sections_span_packets_and_share_them() {
        // A 600-byte PMT-like section across four payloads, the pointer field saying
        // where it ends in the packet that starts the next one.
        let big = section(TABLE_ID_PMT, 1, 0, &[0xab; 588]);
        assert_eq!(big.len(), 600);
        let small = pat_section();
        let mut r = SectionReader::default();
        let mut first = vec![0u8];
        first.extend_from_slice(&big[..183]);
        assert!(sections(&mut r, true, &first).is_empty());
        assert!(sections(&mut r, false, &big[183..367]).is_empty());
        assert!(sections(&mut r, false, &big[367..551]).is_empty());
        // The last 49 bytes, then two small sections back to back, then stuffing.
        let mut last = vec![49u8];
        last.extend_from_slice(&big[551..]);
        last.extend_from_slice(&small);
        last.extend_from_slice(&small);
        last.extend_from_slice(&[0xff; 20]);
        let done = sections(&mut r, true, &last);
        assert_eq!(done, vec![big.clone(), small.clone(), small.clone()]);
        // A section whose header is split over two packets.
        let mut a = vec![0u8];
        a.extend_from_slice(&small[..2]);
        assert!(sections(&mut r, true, &a).is_empty());
        let mut b = small[2..].to_vec();
        b.extend_from_slice(&[0xff; 5]);
        assert_eq!(sections(&mut r, false, &b), vec![small.clone()]);
        // Without a start, continuation packets are ignored.
        let mut r = SectionReader::default();
        assert!(sections(&mut r, false, &small).is_empty());
    }

    #[test]
    fn malformed_sections_are_dropped() {
        let mut r = SectionReader::default();
        let mut done = Vec::new();
        // Pointer field past the payload.
        assert!(!r.push(true, &[200, 1, 2], &mut done));
        assert!(!r.push(true, &[], &mut done));
        // section_length over the limit.
        assert!(!r.push(true, &[0, 0x02, 0xbf, 0xff, 0, 0], &mut done));
        let mut start = vec![0, 0x02, 0xb3, 0xff];
        start.resize(184, 0);
        // 1023 + 3 bytes: over the limit as well, found once the length is read.
        assert!(!r.push(true, &start, &mut done));
        assert!(done.is_empty());
        // A started section that a new unit start cuts short is dropped silently.
        let small = pat_section();
        let mut part = vec![0u8];
        part.extend_from_slice(&small[..10]);
        assert!(r.push(true, &part, &mut done));
        let mut next = vec![0u8];
        next.extend_from_slice(&small);
        assert!(r.push(true, &next, &mut done));
        assert_eq!(done, vec![small]);
    }
}
