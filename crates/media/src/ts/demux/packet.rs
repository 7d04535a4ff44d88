//! The 4-byte transport packet header and its adaptation field, read back
//! (ISO/IEC 13818-1 §2.4.3.2, §2.4.3.4), and the continuity counter check.
//!
//! Why its own file: everything above it sees a packet as a PID, a start flag and a
//! payload; only this file knows where the payload begins.

use super::super::packet::{PACKET_LEN, SYNC_BYTE};

/// One transport packet, parsed. The payload borrows from the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TsPacket<'a> {
    /// The packet identifier (13 bits).
    pub(super) pid: u16,
    /// `transport_error_indicator`: a receiver upstream saw an uncorrectable error.
    pub(super) error: bool,
    /// `payload_unit_start_indicator`: a PES or a section starts in this packet.
    pub(super) unit_start: bool,
    /// `transport_scrambling_control` is not 0: the payload is encrypted.
    pub(super) scrambled: bool,
    /// `continuity_counter`.
    pub(super) cc: u8,
    /// `discontinuity_indicator` of the adaptation field: the counter may jump here.
    pub(super) discontinuity: bool,
    /// The bytes after the adaptation field; `None` for a packet without payload.
    pub(super) payload: Option<&'a [u8]>,
}

impl<'a> TsPacket<'a> {
    /// Parses a 188-byte packet. `None` for anything else, a missing sync byte, the
    /// reserved `adaptation_field_control` 00, or an adaptation field longer than the
    /// packet has room for.
    pub(super) fn parse(p: &'a [u8]) -> Option<TsPacket<'a>> {
        if p.len() != PACKET_LEN {
            return None;
        }
        let &[sync, b1, b2, b3] = p.get(..4)? else {
            return None;
        };
        if sync != SYNC_BYTE {
            return None;
        }
        let has_adaptation = b3 & 0x20 != 0;
        let has_payload = b3 & 0x10 != 0;
        if !has_adaptation && !has_payload {
            return None;
        }
        let mut discontinuity = false;
        let mut payload_start = 4;
        if has_adaptation {
            let len = usize::from(*p.get(4)?);
            // Without payload the field fills the packet (183 bytes); with payload it
            // leaves at least one byte for it.
            let max = if has_payload { 182 } else { 183 };
            if len > max {
                return None;
            }
            if len > 0 {
                discontinuity = p.get(5).is_some_and(|flags| flags & 0x80 != 0);
            }
            payload_start = 5 + len;
        }
        Some(TsPacket {
            pid: u16::from_be_bytes([b1 & 0x1f, b2]),
            error: b1 & 0x80 != 0,
            unit_start: b1 & 0x40 != 0,
            scrambled: b3 & 0xc0 != 0,
            cc: b3 & 0x0f,
            discontinuity,
            payload: if has_payload {
                p.get(payload_start..)
            } else {
                None
            },
        })
    }
}

/// What the continuity counter says about a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Continuity {
    /// The next packet of the PID (or the first, or one after a signalled discontinuity).
    InOrder,
    /// The same counter as the packet before: a repeated packet, whose payload is not
    /// used a second time (§2.4.3.3).
    Duplicate,
    /// Packets are missing.
    Gap,
}

/// The continuity counter of one PID, and the payload of its last packet, which a
/// duplicate must repeat.
#[derive(Debug, Clone)]
pub(super) struct Counter {
    last: Option<u8>,
    payload: [u8; PACKET_LEN],
    payload_len: usize,
}

impl Default for Counter {
    fn default() -> Self {
        Counter {
            last: None,
            payload: [0; PACKET_LEN],
            payload_len: 0,
        }
    }
}

impl Counter {
    /// Checks `packet` against the previous packet of its PID and remembers it.
    /// Packets without payload do not advance the counter and are always in order. A
    /// packet with the previous counter is a duplicate only if its payload is the same
    /// too; otherwise (a restarted source, say) the counter jumped.
    pub(super) fn check(&mut self, packet: &TsPacket<'_>) -> Continuity {
        let Some(payload) = packet.payload else {
            return Continuity::InOrder;
        };
        let result = match self.last {
            _ if packet.discontinuity => Continuity::InOrder,
            None => Continuity::InOrder,
            Some(last) if last == packet.cc => {
                if self.payload.get(..self.payload_len) == Some(payload) {
                    return Continuity::Duplicate;
                }
                Continuity::Gap
            }
            Some(last) if (last + 1) & 0x0f == packet.cc => Continuity::InOrder,
            Some(_) => Continuity::Gap,
        };
        self.last = Some(packet.cc);
        // A payload is at most 184 bytes: it always fits.
        if let Some(dst) = self.payload.get_mut(..payload.len()) {
            dst.copy_from_slice(payload);
            self.payload_len = payload.len();
        }
        result
    }

    /// Forgets the counter (a new stream on this PID).
    pub(super) fn reset(&mut self) {
        self.last = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(header: [u8; 4], rest: &[u8]) -> Vec<u8> {
        let mut p = header.to_vec();
        p.extend_from_slice(rest);
        p.resize(PACKET_LEN, 0xff);
        p
    }

    #[test]
    fn header_fields() {
        let p = packet([0x47, 0x41, 0x00, 0x17], &[]);
        let pk = TsPacket::parse(&p).expect("valid");
        assert_eq!(pk.pid, 0x100);
        assert!(pk.unit_start && !pk.error && !pk.scrambled);
        assert_eq!(pk.cc, 7);
        assert_eq!(pk.payload.map(<[u8]>::len), Some(184));

        let p = packet([0x47, 0x9f, 0xff, 0xd0], &[]);
        let pk = TsPacket::parse(&p).expect("valid");
        assert_eq!(pk.pid, 0x1fff);
        assert!(pk.error && pk.scrambled && !pk.unit_start);
    }

    #[test]
    fn adaptation_field_is_skipped() {
        // 7 bytes of adaptation field (flags with discontinuity and random access).
        let p = packet([0x47, 0x01, 0x00, 0x35], &[7, 0xc0, 1, 2, 3, 4, 5, 6, 0xab]);
        let pk = TsPacket::parse(&p).expect("valid");
        assert!(pk.discontinuity);
        assert_eq!(pk.payload.and_then(<[u8]>::first), Some(&0xab));
        assert_eq!(pk.payload.map(<[u8]>::len), Some(184 - 8));
        // Adaptation field only, filling the packet.
        let p = packet([0x47, 0x01, 0x00, 0x20], &[183]);
        assert_eq!(TsPacket::parse(&p).map(|p| p.payload), Some(None));
        // Zero-length field: only the length byte.
        let p = packet([0x47, 0x01, 0x00, 0x30], &[0, 0x11]);
        let pk = TsPacket::parse(&p).expect("valid");
        assert_eq!(pk.payload.and_then(<[u8]>::first), Some(&0x11));
        assert!(!pk.discontinuity);
    }

    #[test]
    fn malformed_packets() {
        // Adaptation field too long for the payload to follow, or for the packet.
        assert!(TsPacket::parse(&packet([0x47, 0, 0, 0x30], &[183])).is_none());
        assert!(TsPacket::parse(&packet([0x47, 0, 0, 0x20], &[184])).is_none());
        assert!(TsPacket::parse(&packet([0x47, 0, 0, 0x30], &[255])).is_none());
        // Reserved adaptation_field_control, wrong sync byte, wrong size.
        assert!(TsPacket::parse(&packet([0x47, 0, 0, 0x00], &[])).is_none());
        assert!(TsPacket::parse(&packet([0x48, 0, 0, 0x10], &[])).is_none());
        assert!(TsPacket::parse(&[0x47, 0, 0, 0x10]).is_none());
        let p = packet([0x47, 0, 0, 0x10], &[]);
        assert!(TsPacket::parse(&p[..187]).is_none());
    }

    #[test]
    fn continuity() {
        let mut c = Counter::default();
        let mut check = |cc: u8, afc: u8, rest: &[u8]| {
            let p = packet([0x47, 0x01, 0x00, afc | cc], rest);
            c.check(&TsPacket::parse(&p).expect("valid"))
        };
        assert_eq!(check(14, 0x10, &[]), Continuity::InOrder);
        assert_eq!(check(15, 0x10, &[]), Continuity::InOrder);
        assert_eq!(check(0, 0x10, &[]), Continuity::InOrder); // wraps
        assert_eq!(check(0, 0x10, &[]), Continuity::Duplicate);
        // The same counter with another payload is no duplicate.
        assert_eq!(check(0, 0x10, &[1]), Continuity::Gap);
        assert_eq!(check(1, 0x10, &[]), Continuity::InOrder);
        assert_eq!(check(1, 0x10, &[]), Continuity::Duplicate);
        assert_eq!(check(2, 0x10, &[]), Continuity::InOrder);
        // No payload: the counter does not move, whatever it says.
        assert_eq!(check(9, 0x20, &[183]), Continuity::InOrder);
        assert_eq!(check(3, 0x10, &[]), Continuity::InOrder);
        assert_eq!(check(5, 0x10, &[]), Continuity::Gap);
        assert_eq!(check(6, 0x10, &[]), Continuity::InOrder);
        // A signalled discontinuity.
        assert_eq!(check(9, 0x30, &[1, 0x80]), Continuity::InOrder);
        assert_eq!(check(10, 0x10, &[]), Continuity::InOrder);
    }
}
