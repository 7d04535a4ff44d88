//! PES packets reassembled from transport packets, and their headers read back
//! (ISO/IEC 13818-1 §2.4.3.6).
//!
//! Why: a PES carries one access unit (or, for audio, a few) with its timestamps, cut
//! into 184-byte pieces. It ends where `PES_packet_length` says, or, when that is 0
//! (video over 64 KiB), where the next PES of the PID starts.
//!
//! # Invariants
//! - A PES never grows past the assembler's limit: one that would is dropped whole.
//! - A PES with a continuity gap inside is dropped whole, never handed out with a hole.

use bytes::BytesMut;

use super::super::packet::TIMESTAMP_MODULUS;

/// A whole PES packet, header included.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Pes {
    /// The bytes from the `packet_start_code_prefix` on.
    pub(super) data: BytesMut,
    /// Data of this PID was lost since the PES handed out before this one: an access
    /// unit spread over both cannot be completed.
    pub(super) after_loss: bool,
}

/// Why a PES in progress was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dropped {
    /// It grew past the limit.
    TooLarge,
    /// A continuity gap (lost packets) inside it.
    Gap,
}

/// Gathers the PES packets of one PID.
#[derive(Debug)]
pub(super) struct PesAssembler {
    buf: BytesMut,
    /// A PES is being gathered (from a unit start on, and not yet dropped or done).
    active: bool,
    /// Its total length from `PES_packet_length`, once the 6 bytes are in.
    expected: Option<usize>,
    max_len: usize,
    after_loss: bool,
}

impl PesAssembler {
    /// An assembler for PES packets of at most `max_len` bytes.
    pub(super) fn new(max_len: usize) -> Self {
        PesAssembler {
            buf: BytesMut::new(),
            active: false,
            expected: None,
            max_len,
            after_loss: false,
        }
    }

    /// A unit start: hands out the PES before it, if any, and begins a new one.
    pub(super) fn start(&mut self) -> Option<Pes> {
        let done = self.take();
        self.active = true;
        done
    }

    /// Appends the payload of a packet of the PID. Returns the PES it completes when
    /// its nonzero `PES_packet_length` is reached, or [`Dropped::TooLarge`] when the PES
    /// would outgrow the limit. Without a PES in progress the payload is ignored (the
    /// rest of a PES whose start we missed or dropped).
    pub(super) fn append(&mut self, payload: &[u8]) -> Result<Option<Pes>, Dropped> {
        if !self.active {
            return Ok(None);
        }
        let len = self.buf.len().saturating_add(payload.len());
        if len > self.max_len {
            self.drop_current();
            return Err(Dropped::TooLarge);
        }
        self.buf.extend_from_slice(payload);
        if self.expected.is_none() {
            if let Some(&[0, 0, 1, _, hi, lo]) = self.buf.get(..6) {
                let n = usize::from(u16::from_be_bytes([hi, lo]));
                self.expected = (n > 0).then_some(6 + n);
            }
        }
        match self.expected {
            Some(expected) if self.buf.len() >= expected => {
                self.buf.truncate(expected);
                Ok(self.take())
            }
            _ => Ok(None),
        }
    }

    /// Notes lost packets: the PES in progress is dropped. Returns whether there was one.
    pub(super) fn lose(&mut self) -> Option<Dropped> {
        self.after_loss = true;
        let had = self.active;
        self.drop_current();
        had.then_some(Dropped::Gap)
    }

    /// The PES in progress, ended here (end of input, or a PES without a length at
    /// the end of its stream).
    pub(super) fn finish(&mut self) -> Option<Pes> {
        self.take()
    }

    fn drop_current(&mut self) {
        self.buf.clear();
        self.active = false;
        self.expected = None;
    }

    fn take(&mut self) -> Option<Pes> {
        if !self.active || self.buf.is_empty() {
            self.drop_current();
            return None;
        }
        self.active = false;
        self.expected = None;
        let data = self.buf.split();
        Some(Pes {
            data,
            after_loss: std::mem::take(&mut self.after_loss),
        })
    }
}

/// The header of a PES packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PesHeader {
    /// The 33-bit PTS, if present.
    pub(super) pts: Option<u64>,
    /// The 33-bit DTS, if present (only together with a PTS).
    pub(super) dts: Option<u64>,
    /// Where the elementary stream data starts.
    pub(super) payload_offset: usize,
}

impl PesHeader {
    /// Reads the header of `pes`. `None` without the start code prefix, with a
    /// header that runs past the data, or with an MPEG-1 style header.
    pub(super) fn parse(pes: &[u8]) -> Option<PesHeader> {
        let &[0, 0, 1, stream_id, _, _] = pes.get(..6)? else {
            return None;
        };
        // Streams without the optional header (§2.4.3.7, table 2-21's list).
        if matches!(
            stream_id,
            0xbc | 0xbe | 0xbf | 0xf0 | 0xf1 | 0xf2 | 0xf8 | 0xff
        ) {
            return Some(PesHeader {
                pts: None,
                dts: None,
                payload_offset: 6,
            });
        }
        let &[marker, flags, header_len] = pes.get(6..9)? else {
            return None;
        };
        if marker & 0xc0 != 0x80 {
            return None;
        }
        let payload_offset = 9 + usize::from(header_len);
        if pes.len() < payload_offset {
            return None;
        }
        let fields = pes.get(9..payload_offset)?;
        let (pts, dts) = match flags >> 6 {
            0b10 => (Some(timestamp(fields.get(..5)?)?), None),
            0b11 => (
                Some(timestamp(fields.get(..5)?)?),
                Some(timestamp(fields.get(5..10)?)?),
            ),
            _ => (None, None),
        };
        Some(PesHeader {
            pts,
            dts,
            payload_offset,
        })
    }
}

/// A 33-bit timestamp in its 5-byte PES form (marker bits not checked).
fn timestamp(b: &[u8]) -> Option<u64> {
    let &[b0, b1, b2, b3, b4] = b else {
        return None;
    };
    let t = (u64::from(b0 & 0x0e) << 29)
        | (u64::from(b1) << 22)
        | (u64::from(b2 & 0xfe) << 14)
        | (u64::from(b3) << 7)
        | (u64::from(b4) >> 1);
    // At most 33 bits by construction; the mask says so.
    Some(t & (TIMESTAMP_MODULUS as u64 - 1))
}

#[cfg(test)]
mod tests {
    use super::super::super::packet::pes_header;
    use super::*;

    #[test]
    fn headers_read_back() {
        let (h, n) = pes_header(0xe0, 0x1_2345_6789, Some(0x1_ffff_ffff), 10);
        assert_eq!(
            PesHeader::parse(&h[..n]),
            Some(PesHeader {
                pts: Some(0x1_2345_6789),
                dts: Some(0x1_ffff_ffff),
                payload_offset: 19
            })
        );
        let (h, n) = pes_header(0xc0, 5, None, 10);
        assert_eq!(
            PesHeader::parse(&h[..n]),
            Some(PesHeader {
                pts: Some(5),
                dts: None,
                payload_offset: 14
            })
        );
        // Cut short, or not a PES at all.
        assert_eq!(PesHeader::parse(&h[..n - 1]), None);
        assert_eq!(PesHeader::parse(&[0, 0, 2, 0xe0, 0, 0, 0x80, 0, 0]), None);
        assert_eq!(PesHeader::parse(&[0, 0, 1, 0xe0, 0, 0, 0x40, 0, 0]), None);
        // No timestamps.
        let h = PesHeader::parse(&[0, 0, 1, 0xe0, 0, 0, 0x80, 0, 0, 0xaa]);
        assert_eq!(h.map(|h| (h.pts, h.payload_offset)), Some((None, 9)));
        // PTS flag set but no room for it in the header.
        assert_eq!(
            PesHeader::parse(&[0, 0, 1, 0xe0, 0, 0, 0x80, 0x80, 2, 1, 2]),
            None
        );
        // Padding stream: no optional header.
        let h = PesHeader::parse(&[0, 0, 1, 0xbe, 0, 0]);
        assert_eq!(h.map(|h| h.payload_offset), Some(6));
    }

    #[test]
    fn unbounded_pes_ends_at_next_unit_start() {
        let mut a = PesAssembler::new(1000);
        let start = [0, 0, 1, 0xe0, 0, 0, 0x80, 0, 0, 1, 2];
        assert!(a.start().is_none());
        assert_eq!(a.append(&start).ok(), Some(None));
        assert_eq!(a.append(&[3, 4]).ok(), Some(None));
        let done = a.start().expect("complete");
        assert_eq!(&done.data[..], &[&start[..], &[3, 4]].concat()[..]);
        assert!(!done.after_loss);
        assert_eq!(a.append(&start).ok(), Some(None));
        assert_eq!(a.finish().map(|p| p.data.len()), Some(start.len()));
        assert!(a.finish().is_none());
    }

    #[test]
    fn bounded_pes_ends_at_its_length() {
        let mut a = PesAssembler::new(1000);
        // PES_packet_length 7: 3 header bytes, 4 of data, spread over two packets.
        assert!(a.start().is_none());
        assert_eq!(
            a.append(&[0, 0, 1, 0xc0, 0, 7, 0x80, 0, 0, 1]).ok(),
            Some(None)
        );
        let done = a.append(&[2, 3, 4, 0xff, 0xff]).ok().flatten();
        assert_eq!(
            done.map(|p| p.data.to_vec()),
            Some(vec![0, 0, 1, 0xc0, 0, 7, 0x80, 0, 0, 1, 2, 3, 4])
        );
        // What follows without a unit start is not a PES.
        assert_eq!(a.append(&[1, 2, 3]).ok(), Some(None));
        assert!(a.finish().is_none());
        // An unbounded PES, then a bounded one whole in one packet: both come out.
        let p = [0, 0, 1, 0xc0, 0, 4, 0x80, 0, 0, 9];
        a.start();
        let _ = a.append(&[0, 0, 1, 0xe0, 0, 0, 0x80, 0, 0, 7]);
        assert!(a.start().is_some());
        assert!(a.append(&p).ok().flatten().is_some());
        assert!(a.start().is_none());
    }

    #[test]
    fn size_limit_and_loss_drop_the_pes() {
        let mut a = PesAssembler::new(20);
        let start = [0, 0, 1, 0xe0, 0, 0, 0x80, 0, 0, 1, 2];
        a.start();
        assert_eq!(a.append(&start).ok(), Some(None));
        assert_eq!(a.append(&[0; 10]).err(), Some(Dropped::TooLarge));
        assert_eq!(a.append(&[0; 2]).ok(), Some(None));
        assert!(a.finish().is_none());
        a.start();
        let _ = a.append(&start);
        assert_eq!(a.lose(), Some(Dropped::Gap));
        assert_eq!(a.lose(), None);
        assert!(a.start().is_none());
        let _ = a.append(&start);
        let done = a.finish().expect("the PES after the loss");
        assert!(done.after_loss);
    }
}
