//! Program-specific information: the PAT and PMT sections (ISO/IEC 13818-1 §2.4.4).
//!
//! Why: a demuxer finds the streams of a segment only through these two tables, so
//! every HLS segment starts with them. Both are built once, when the muxer is made;
//! writing them is a copy plus the continuity counter.
//!
//! # Invariants
//! - Our PAT and PMT fit one packet: at most two elementary streams and a cue stream,
//!   with at most SCTE-35's registration descriptor.

use super::packet::{PACKET_LEN, SYNC_BYTE};
use super::{PMT_PID, PROGRAM_NUMBER};
use bytes::{BufMut, BytesMut};

/// `table_id` of a program association section.
const TABLE_ID_PAT: u8 = 0x00;
/// `table_id` of a program map section.
const TABLE_ID_PMT: u8 = 0x02;
/// `transport_stream_id` in the PAT; one stream, so any value does.
const TRANSPORT_STREAM_ID: u16 = 1;

/// One elementary stream as the PMT lists it.
#[derive(Debug, Clone, Copy)]
pub(super) struct PmtStream {
    /// `stream_type` (0x1b H.264, ...).
    pub(super) stream_type: u8,
    /// The PID its PES packets travel on.
    pub(super) pid: u16,
}

/// The PAT section: program [`PROGRAM_NUMBER`] on [`PMT_PID`].
pub(super) fn pat_section() -> Vec<u8> {
    let mut body = Vec::with_capacity(4);
    body.extend_from_slice(&PROGRAM_NUMBER.to_be_bytes());
    body.extend_from_slice(&pid13(PMT_PID));
    section(TABLE_ID_PAT, TRANSPORT_STREAM_ID, &body, 0)
}

/// The PMT section of our one program, with up to two streams (and an SCTE-35 one).
pub(super) fn pmt_section(pcr_pid: u16, streams: &[PmtStream]) -> Vec<u8> {
    pmt_section_versioned(pcr_pid, streams, 0)
}

/// [`pmt_section`] with `version` (5 bits): a PMT that changes mid-stream (a cue PID
/// added) must say so. With a stream of type [`STREAM_TYPE_SCTE35`], the program
/// carries SCTE-35's registration descriptor ("CUEI", SCTE-35 §8.1).
pub(super) fn pmt_section_versioned(pcr_pid: u16, streams: &[PmtStream], version: u8) -> Vec<u8> {
    let mut body = Vec::with_capacity(10 + 5 * streams.len());
    body.extend_from_slice(&pid13(pcr_pid));
    if streams.iter().any(|s| s.stream_type == STREAM_TYPE_SCTE35) {
        // reserved, program_info_length = 6: registration_descriptor "CUEI".
        body.extend_from_slice(&[0xf0, 0x06, 0x05, 0x04, b'C', b'U', b'E', b'I']);
    } else {
        body.extend_from_slice(&[0xf0, 0x00]); // reserved, program_info_length = 0
    }
    for s in streams {
        body.push(s.stream_type);
        body.extend_from_slice(&pid13(s.pid));
        body.extend_from_slice(&[0xf0, 0x00]); // reserved, ES_info_length = 0
    }
    section(TABLE_ID_PMT, PROGRAM_NUMBER, &body, version)
}

/// `stream_type` of SCTE-35 cue sections.
pub(super) const STREAM_TYPE_SCTE35: u8 = 0x86;

/// A long-form section: header, `body`, CRC. `id` is the `transport_stream_id` (PAT)
/// or `program_number` (PMT). Version `version`, current, section 0 of 0.
fn section(table_id: u8, id: u16, body: &[u8], version: u8) -> Vec<u8> {
    // After section_length: id (2), version (1), section numbers (2), body, CRC (4).
    // Our bodies are a few dozen bytes, far below the 12-bit limit.
    let section_length = (5 + body.len() + 4) as u16;
    let mut s = Vec::with_capacity(3 + usize::from(section_length));
    s.push(table_id);
    // section_syntax_indicator = 1, '0', reserved '11', 12-bit length.
    s.extend_from_slice(&(0xb000 | (section_length & 0x0fff)).to_be_bytes());
    s.extend_from_slice(&id.to_be_bytes());
    // reserved '11', version_number, current_next_indicator 1.
    s.push(0xc1 | (version & 0x1f) << 1);
    s.extend_from_slice(&[0, 0]); // section_number, last_section_number
    s.extend_from_slice(body);
    let crc = crc32_mpeg2(&s);
    s.extend_from_slice(&crc.to_be_bytes());
    s
}

/// A PID behind three reserved '1' bits.
fn pid13(pid: u16) -> [u8; 2] {
    (0xe000 | (pid & 0x1fff)).to_be_bytes()
}

/// Writes `section` of any length (up to a section's 4 KiB) on `pid`: the first packet
/// starts the unit (pointer field 0), the rest continue it, the last is filled with
/// 0xff. Our PAT and PMT take one packet; an SCTE-35 section with descriptors can take
/// more.
pub(super) fn write_section(out: &mut BytesMut, pid: u16, cc: &mut u8, section: &[u8]) {
    let mut rest = section;
    let mut first = true;
    loop {
        let start = out.len();
        out.reserve(PACKET_LEN);
        out.put_u8(SYNC_BYTE);
        out.put_u16(if first { 0x4000 } else { 0 } | (pid & 0x1fff));
        out.put_u8(0x10 | (*cc & 0x0f)); // payload only
        *cc = cc.wrapping_add(1) & 0x0f;
        if first {
            out.put_u8(0); // pointer_field
        }
        let room = PACKET_LEN - (out.len() - start);
        let (now, later) = rest.split_at(rest.len().min(room));
        out.extend_from_slice(now);
        out.put_bytes(0xff, room - now.len());
        rest = later;
        first = false;
        if rest.is_empty() {
            return;
        }
    }
}

/// CRC-32 of MPEG-2 sections (ISO/IEC 13818-1 Annex A): polynomial 0x04c11db7, initial
/// value all ones, no reflection, no final xor. A section followed by its CRC sums to 0.
pub fn crc32_mpeg2(data: &[u8]) -> u32 {
    data.iter().fold(0xffff_ffff_u32, |crc, &b| {
        let index = usize::from(((crc >> 24) as u8) ^ b);
        (crc << 8) ^ CRC_TABLE.get(index).copied().unwrap_or(0)
    })
}

/// The byte-at-a-time table of [`crc32_mpeg2`].
const CRC_TABLE: [u32; 256] = crc_table();

// Built at compile time, `i < 256`: an out-of-bounds index would not compile.
#[allow(clippy::indexing_slicing)]
const fn crc_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u32) << 24;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000_0000 != 0 {
                (crc << 1) ^ 0x04c1_1db7
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_of_known_pat() {
        // The PAT ffmpeg writes (tsid 1, program 1 on PID 0x1000) ends in 2a b1 04 b2.
        let pat = pat_section();
        assert_eq!(
            pat,
            [
                0x00, 0xb0, 0x0d, 0x00, 0x01, 0xc1, 0x00, 0x00, 0x00, 0x01, 0xf0, 0x00, 0x2a, 0xb1,
                0x04, 0xb2
            ]
        );
        assert_eq!(crc32_mpeg2(&pat), 0);
    }

    #[test]
    fn pmt_lists_streams_and_checks() {
        let pmt = pmt_section(
            0x100,
            &[
                PmtStream {
                    stream_type: 0x1b,
                    pid: 0x100,
                },
                PmtStream {
                    stream_type: 0x0f,
                    pid: 0x101,
                },
            ],
        );
        assert_eq!(pmt.len(), 3 + 9 + 10 + 4);
        assert_eq!(&pmt[8..10], &[0xe1, 0x00]); // PCR PID
        assert_eq!(&pmt[12..17], &[0x1b, 0xe1, 0x00, 0xf0, 0x00]);
        assert_eq!(crc32_mpeg2(&pmt), 0);
    }

    #[test]
    fn section_packet_is_filled() {
        let mut out = BytesMut::new();
        let mut cc = 15;
        write_section(&mut out, 0, &mut cc, &pat_section());
        assert_eq!(out.len(), PACKET_LEN);
        assert_eq!(&out[..5], &[0x47, 0x40, 0x00, 0x1f, 0x00]);
        assert_eq!(cc, 0);
        assert!(out[5 + 16..].iter().all(|&b| b == 0xff));
    }
}
