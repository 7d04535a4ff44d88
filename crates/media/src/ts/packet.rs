//! Transport packets (ISO/IEC 13818-1 §2.4.3) and PES headers (§2.4.3.6).
//!
//! Why: a PES packet is cut into 188-byte transport packets; the first can carry the
//! PCR and the random access flag in its adaptation field, the last pads itself with
//! adaptation-field stuffing so the next PES starts a fresh packet.
//!
//! # Invariants
//! - [`write_pes`] writes exactly `PACKET_LEN * n` bytes, n >= 1, and moves the
//!   continuity counter on by n.
//! - The PES data is gathered from its pieces straight into the output buffer.

use bytes::{BufMut, Bytes, BytesMut};

/// Size of every transport packet.
pub const PACKET_LEN: usize = 188;
/// The first byte of every packet.
pub(super) const SYNC_BYTE: u8 = 0x47;
/// Bytes after the 4-byte packet header.
const PACKET_PAYLOAD_LEN: usize = PACKET_LEN - 4;
/// The 33-bit range of PTS, DTS and PCR base.
pub(super) const TIMESTAMP_MODULUS: i64 = 1 << 33;
/// Adaptation field with a PCR: length byte, flags byte, 6 bytes of PCR.
const AF_PCR_LEN: usize = 8;
/// Adaptation field with flags only: length byte, flags byte.
const AF_FLAGS_LEN: usize = 2;
/// Largest PES header we write: 6 fixed bytes, 3 bytes of flags, PTS and DTS.
pub(super) const MAX_PES_HEADER_LEN: usize = 6 + 3 + 10;

/// What the adaptation field of the first packet of a PES says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Adaptation {
    /// A PCR base (33 bits, 90 kHz); the 27 MHz extension is always 0.
    pub(super) pcr: Option<u64>,
    /// `random_access_indicator`: a decoder can start at this PES.
    pub(super) random_access: bool,
}

impl Adaptation {
    /// Bytes of the adaptation field before any stuffing; 0 when none is needed.
    fn len(self) -> usize {
        if self.pcr.is_some() {
            AF_PCR_LEN
        } else if self.random_access {
            AF_FLAGS_LEN
        } else {
            0
        }
    }
}

/// Maps a signed 90 kHz time to the 33-bit clock (two's complement modulo 2^33).
pub(super) fn clock33(t: i64) -> u64 {
    // `rem_euclid` by a positive modulus is in 0..2^33, which fits u64.
    t.rem_euclid(TIMESTAMP_MODULUS) as u64
}

/// A PES header for `stream_id` with `pts` and, if given, `dts` (both 33-bit), for
/// `payload_len` bytes of elementary stream data. `PES_packet_length` is 0
/// ("unbounded") when the packet is longer than 16 bits can say; only video may do that.
/// Returns the header bytes and their count.
pub(super) fn pes_header(
    stream_id: u8,
    pts: u64,
    dts: Option<u64>,
    payload_len: usize,
) -> ([u8; MAX_PES_HEADER_LEN], usize) {
    let mut h = [0u8; MAX_PES_HEADER_LEN];
    let header_data_len: u8 = if dts.is_some() { 10 } else { 5 };
    let packet_len = payload_len
        .checked_add(3 + usize::from(header_data_len))
        .and_then(|n| u16::try_from(n).ok())
        .unwrap_or(0);
    h[..4].copy_from_slice(&[0, 0, 1, stream_id]);
    h[4..6].copy_from_slice(&packet_len.to_be_bytes());
    h[6] = 0x84; // '10', not scrambled, data_alignment_indicator = 1
    h[7] = if dts.is_some() { 0xc0 } else { 0x80 }; // PTS_DTS_flags
    h[8] = header_data_len;
    match dts {
        Some(dts) => {
            h[9..14].copy_from_slice(&timestamp(0b0011, pts));
            h[14..19].copy_from_slice(&timestamp(0b0001, dts));
        }
        None => h[9..14].copy_from_slice(&timestamp(0b0010, pts)),
    }
    (h, 9 + usize::from(header_data_len))
}

/// A 33-bit timestamp in the PES form: 4-bit prefix, then 3 + 15 + 15 bits each
/// followed by a marker bit.
fn timestamp(prefix: u8, t: u64) -> [u8; 5] {
    [
        (prefix << 4) | (((t >> 30) & 0x07) as u8) << 1 | 1,
        (t >> 22) as u8,
        (((t >> 15) & 0x7f) as u8) << 1 | 1,
        (t >> 7) as u8,
        ((t & 0x7f) as u8) << 1 | 1,
    ]
}

/// The number of packets [`write_pes`] writes for `len` bytes of PES data.
fn packet_count(len: usize, first: Adaptation) -> usize {
    let first_room = PACKET_PAYLOAD_LEN - first.len();
    match len.checked_sub(first_room) {
        None | Some(0) => 1,
        Some(rest) => 1 + rest.div_ceil(PACKET_PAYLOAD_LEN),
    }
}

/// Writes one PES packet — `header` followed by `pieces` — as transport packets on
/// `pid`, the first with `first`'s adaptation field, the last stuffed to 188 bytes.
pub(super) fn write_pes(
    out: &mut BytesMut,
    pid: u16,
    cc: &mut u8,
    first: Adaptation,
    header: &[u8],
    pieces: &[Bytes],
) {
    let total = pieces
        .iter()
        .fold(header.len(), |n, p| n.saturating_add(p.len()));
    out.reserve(packet_count(total, first).saturating_mul(PACKET_LEN));
    let mut data = Gather {
        current: header,
        rest: pieces.iter(),
    };
    let mut remaining = total;
    let mut adaptation = Some(first);
    loop {
        let af = adaptation.take();
        let af_len = af.map_or(0, Adaptation::len);
        let room = PACKET_PAYLOAD_LEN - af_len;
        let take = remaining.min(room);
        let stuffing = room - take;
        let unit_start = af.is_some();
        out.put_u8(SYNC_BYTE);
        out.put_u16(if unit_start { 0x4000 } else { 0 } | (pid & 0x1fff));
        let has_af = af_len > 0 || stuffing > 0;
        out.put_u8(if has_af { 0x30 } else { 0x10 } | (*cc & 0x0f));
        *cc = cc.wrapping_add(1) & 0x0f;
        if has_af {
            write_adaptation(out, af.unwrap_or_default(), stuffing);
        }
        data.copy_to(out, take);
        remaining -= take;
        if remaining == 0 {
            return;
        }
    }
}

/// Writes an adaptation field with `af`'s content followed by `stuffing` bytes of 0xff,
/// `af.len() + stuffing` bytes in all (at least 1).
fn write_adaptation(out: &mut BytesMut, af: Adaptation, stuffing: usize) {
    let len = af.len() + stuffing;
    // At most 184 bytes, so the length byte (which does not count itself) fits.
    out.put_u8((len - 1) as u8);
    if len == 1 {
        return;
    }
    let mut flags = 0u8;
    if af.random_access {
        flags |= 0x40;
    }
    if af.pcr.is_some() {
        flags |= 0x10;
    }
    out.put_u8(flags);
    if let Some(base) = af.pcr {
        // program_clock_reference_base (33), reserved (6), extension (9) = 0.
        let v = (base & 0x1_ffff_ffff) << 15 | 0x7e00;
        out.put_slice(&v.to_be_bytes()[2..]);
    }
    let fill = len - af.len().max(AF_FLAGS_LEN);
    out.put_bytes(0xff, fill);
}

/// A cursor over the header and pieces of one PES, copying out in packet-sized runs.
struct Gather<'a> {
    current: &'a [u8],
    rest: std::slice::Iter<'a, Bytes>,
}

impl Gather<'_> {
    /// Copies the next `n` bytes (or all that is left, if fewer) into `out`.
    fn copy_to(&mut self, out: &mut BytesMut, mut n: usize) {
        while n > 0 {
            if self.current.is_empty() {
                match self.rest.next() {
                    Some(piece) => self.current = piece,
                    None => return,
                }
                continue;
            }
            let take = n.min(self.current.len());
            let Some((now, later)) = self.current.split_at_checked(take) else {
                return;
            };
            out.put_slice(now);
            self.current = later;
            n -= take;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamp_bits() {
        // The PES form of PTS 0x1_2345_6789 with prefix 0010.
        let t = 0x1_2345_6789_u64;
        let b = timestamp(0b0010, t);
        let back = (u64::from(b[0] & 0x0e) << 29)
            | (u64::from(b[1]) << 22)
            | (u64::from(b[2] & 0xfe) << 14)
            | (u64::from(b[3]) << 7)
            | (u64::from(b[4]) >> 1);
        assert_eq!(back, t);
        assert_eq!(b[0] >> 4, 0b0010);
        assert_eq!(b[0] & 1 & b[2] & b[4], 1);
    }

    #[test]
    fn clock_wraps_negative_times() {
        assert_eq!(clock33(0), 0);
        assert_eq!(clock33(-1), (1 << 33) - 1);
        assert_eq!(clock33(1 << 33), 0);
        assert_eq!(clock33(i64::MIN), 0);
    }

    #[test]
    fn small_pes_is_one_stuffed_packet() {
        for (af, len) in [
            (Adaptation::default(), 0),
            (Adaptation::default(), 183),
            (Adaptation::default(), 184),
            (
                Adaptation {
                    pcr: Some(7),
                    random_access: true,
                },
                176,
            ),
            (
                Adaptation {
                    pcr: None,
                    random_access: true,
                },
                181,
            ),
        ] {
            let mut out = BytesMut::new();
            let mut cc = 3;
            let body = Bytes::from(vec![0xab; len]);
            write_pes(&mut out, 0x100, &mut cc, af, &[], &[body]);
            assert_eq!(out.len(), PACKET_LEN, "{af:?} {len}");
            assert_eq!(cc, 4);
            assert!(out.ends_with(&vec![0xab; len]), "{af:?} {len}");
        }
    }

    #[test]
    fn one_byte_stuffing_is_a_bare_length() {
        let mut out = BytesMut::new();
        let mut cc = 0;
        write_pes(
            &mut out,
            0x101,
            &mut cc,
            Adaptation::default(),
            &[1; 183],
            &[],
        );
        assert_eq!(&out[..5], &[0x47, 0x41, 0x01, 0x30, 0x00]);
        assert_eq!(out.len(), PACKET_LEN);
    }

    #[test]
    fn pcr_field() {
        let mut out = BytesMut::new();
        let mut cc = 0;
        let af = Adaptation {
            pcr: Some(0x1_ffff_ffff),
            random_access: true,
        };
        write_pes(&mut out, 0x100, &mut cc, af, &[1; 300], &[]);
        assert_eq!(out.len(), 2 * PACKET_LEN);
        assert_eq!(&out[4..12], &[7, 0x50, 0xff, 0xff, 0xff, 0xff, 0xfe, 0x00]);
        assert_eq!(out[PACKET_LEN + 3], 0x31); // second packet stuffed, cc 1
    }

    #[test]
    fn packet_counts() {
        let none = Adaptation::default();
        assert_eq!(packet_count(0, none), 1);
        assert_eq!(packet_count(184, none), 1);
        assert_eq!(packet_count(185, none), 2);
        assert_eq!(packet_count(368, none), 2);
        let pcr = Adaptation {
            pcr: Some(0),
            random_access: true,
        };
        assert_eq!(packet_count(176, pcr), 1);
        assert_eq!(packet_count(177, pcr), 2);
    }
}
