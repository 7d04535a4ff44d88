//! The data packet header, read and written here: it is on every media packet both
//! ways, so it stays a few shifts with no allocation. Control packets, rarer and
//! richer, go through srt-runtime's codecs.

/// Bytes of every SRT header.
pub const HEADER_LEN: usize = 16;
/// Sequence numbers are 31 bits.
pub const SEQ_MASK: u32 = 0x7fff_ffff;
/// Message numbers are 26 bits.
pub const MSGNO_MASK: u32 = 0x03ff_ffff;

/// Which key encrypted a data packet (`KK`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyParity {
    None,
    Even,
    Odd,
}

impl KeyParity {
    fn bits(self) -> u32 {
        match self {
            KeyParity::None => 0,
            KeyParity::Even => 1,
            KeyParity::Odd => 2,
        }
    }
}

/// A data packet's header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHeader {
    pub seq: u32,
    pub msgno: u32,
    pub key: KeyParity,
    pub retransmitted: bool,
    pub timestamp: u32,
    pub dest: u32,
}

impl DataHeader {
    /// A solo message (`PP = 11`), as live mode sends every packet.
    pub fn write(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..4].copy_from_slice(&(self.seq & SEQ_MASK).to_be_bytes());
        let word = (0b11 << 30)
            | (self.key.bits() << 27)
            | (u32::from(self.retransmitted) << 26)
            | (self.msgno & MSGNO_MASK);
        h[4..8].copy_from_slice(&word.to_be_bytes());
        h[8..12].copy_from_slice(&self.timestamp.to_be_bytes());
        h[12..16].copy_from_slice(&self.dest.to_be_bytes());
        h
    }

    /// The header of a data packet; `None` for a control packet or a short one.
    pub fn read(packet: &[u8]) -> Option<DataHeader> {
        let word = |i: usize| {
            packet
                .get(i..i + 4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_be_bytes)
        };
        let w0 = word(0)?;
        if w0 & 0x8000_0000 != 0 {
            return None;
        }
        let w1 = word(4)?;
        let key = match (w1 >> 27) & 0b11 {
            0 => KeyParity::None,
            1 => KeyParity::Even,
            2 => KeyParity::Odd,
            // Both keys is for control packets only.
            _ => return None,
        };
        Some(DataHeader {
            seq: w0,
            msgno: w1 & MSGNO_MASK,
            key,
            retransmitted: w1 & (1 << 26) != 0,
            timestamp: word(8)?,
            dest: word(12)?,
        })
    }
}

/// Whether a packet is a control packet; its destination socket id.
pub fn peek(packet: &[u8]) -> Option<(bool, u32)> {
    let first = *packet.first()?;
    let dest = packet.get(12..16)?;
    Some((first & 0x80 != 0, u32::from_be_bytes(dest.try_into().ok()?)))
}

/// Circular sequence arithmetic on 31 bits.
pub mod seq {
    use super::SEQ_MASK;

    /// `a - b`, the shorter way round.
    pub fn diff(a: u32, b: u32) -> i32 {
        let d = a.wrapping_sub(b) & SEQ_MASK;
        if d > SEQ_MASK / 2 {
            d as i32 - (SEQ_MASK as i32) - 1
        } else {
            d as i32
        }
    }

    pub fn add(a: u32, n: u32) -> u32 {
        a.wrapping_add(n) & SEQ_MASK
    }

    pub fn next(a: u32) -> u32 {
        add(a, 1)
    }

    pub fn lt(a: u32, b: u32) -> bool {
        diff(a, b) < 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_round_trips_and_matches_srt_runtime() {
        let h = DataHeader {
            seq: 0x1234_5678,
            msgno: 77,
            key: KeyParity::Even,
            retransmitted: true,
            timestamp: 1_000_000,
            dest: 0xdead_beef,
        };
        let mut bytes = h.write().to_vec();
        bytes.extend_from_slice(&[0x47; 188]);
        assert_eq!(DataHeader::read(&bytes), Some(h));
        let theirs = srt_runtime::packet::DataPacket::parse(&bytes).unwrap();
        assert_eq!(theirs.seq_number, h.seq);
        assert_eq!(theirs.message_number, 77);
        assert!(theirs.retransmitted);
        assert_eq!(
            theirs.key_flag,
            srt_runtime::packet::EncryptionKeyField::Even
        );
        assert_eq!(theirs.position, srt_runtime::packet::PacketPosition::Solo);
        assert_eq!(peek(&bytes), Some((false, 0xdead_beef)));
        assert_eq!(DataHeader::read(&bytes[..10]), None);
    }

    #[test]
    fn sequence_numbers_wrap() {
        assert_eq!(seq::diff(0, SEQ_MASK), 1);
        assert_eq!(seq::diff(SEQ_MASK, 0), -1);
        assert_eq!(seq::next(SEQ_MASK), 0);
        assert!(seq::lt(SEQ_MASK - 5, 3));
        assert_eq!(seq::diff(100, 40), 60);
    }
}
