//! The Enhanced RTMP (v1, v2) header wrappers shared by audio and video tag bodies.
//!
//! After the first byte (`IsExHeader`/`SoundFormat 9`, frame type, packet type), an
//! Enhanced body may carry `ModEx` modifiers (skipped: the only one defined, a
//! nanosecond timestamp offset, is below what Sluice carries) and a multitrack wrapper.
//! Of multitrack bodies we accept the one-track form: track 0 is the stream, other
//! track ids are passed over. Many-track bodies are `Unsupported` (a publisher only
//! sends them to a server that announced multitrack support, which Sluice does not).

use super::{fourcc_at, u8_at, FlvError};

/// `PacketType` value of a ModEx modifier, for audio and video.
pub(super) const PACKET_MOD_EX: u8 = 7;
/// `AvMultitrackType.OneTrack`.
const MULTITRACK_ONE_TRACK: u8 = 0;

/// The FourCC and packet type of an Enhanced body, and where its payload starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ExHeader {
    /// The packet type after any ModEx.
    pub(super) packet_type: u8,
    /// The codec.
    pub(super) fourcc: [u8; 4],
    /// Offset of the packet payload in the body.
    pub(super) payload_at: usize,
    /// False for a multitrack body of a track other than 0, which callers pass over.
    pub(super) main_track: bool,
}

/// Skips ModEx modifiers starting at `*pos`, given the packet type from the first
/// byte; returns the real packet type and leaves `*pos` after the modifiers.
pub(super) fn skip_mod_ex(body: &[u8], first: u8, pos: &mut usize) -> Result<u8, FlvError> {
    const WHAT: &str = "Enhanced RTMP ModEx";
    let mut packet_type = first;
    // Each round consumes at least 2 bytes, so this ends within the body.
    while packet_type == PACKET_MOD_EX {
        let mut size = usize::from(u8_at(body, *pos, WHAT)?) + 1;
        *pos += 1;
        if size == 256 {
            let hi = u8_at(body, *pos, WHAT)?;
            let lo = u8_at(body, *pos + 1, WHAT)?;
            size = usize::from(u16::from_be_bytes([hi, lo])) + 1;
            *pos += 2;
        }
        *pos = pos
            .checked_add(size)
            .filter(|&p| p < body.len())
            .ok_or(FlvError::Truncated { what: WHAT })?;
        // High nibble: the ModEx type; low nibble: the next packet type.
        packet_type = u8_at(body, *pos, WHAT)? & 0x0f;
        *pos += 1;
    }
    Ok(packet_type)
}

/// Reads the FourCC (and multitrack wrapper, if `packet_type == multitrack`) at `pos`.
pub(super) fn read_fourcc(
    body: &[u8],
    packet_type: u8,
    multitrack: u8,
    pos: usize,
) -> Result<ExHeader, FlvError> {
    const WHAT: &str = "Enhanced RTMP header";
    if packet_type != multitrack {
        return Ok(ExHeader {
            packet_type,
            fourcc: fourcc_at(body, pos, WHAT)?,
            payload_at: pos + 4,
            main_track: true,
        });
    }
    let b = u8_at(body, pos, WHAT)?;
    if b >> 4 != MULTITRACK_ONE_TRACK {
        return Err(FlvError::Unsupported {
            what: "multitrack body with several tracks",
        });
    }
    let packet_type = b & 0x0f;
    if packet_type == multitrack || packet_type == PACKET_MOD_EX {
        return Err(FlvError::Malformed {
            what: "multitrack packet type",
        });
    }
    let fourcc = fourcc_at(body, pos + 1, WHAT)?;
    let track_id = u8_at(body, pos + 5, WHAT)?;
    Ok(ExHeader {
        packet_type,
        fourcc,
        payload_at: pos + 6,
        main_track: track_id == 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mod_ex_is_skipped() {
        // ModEx: size 3 (2+1), data, then (type 0 << 4 | packet type 1), then FourCC.
        let body = [0x97, 2, 0, 0, 0, 0x01, b'h', b'v', b'c', b'1'];
        let mut pos = 1;
        assert_eq!(skip_mod_ex(&body, 7, &mut pos), Ok(1));
        assert_eq!(pos, 6);
        let h = read_fourcc(&body, 1, 6, pos);
        assert_eq!(h.map(|h| (h.fourcc, h.payload_at)), Ok((*b"hvc1", 10)));
    }

    #[test]
    fn mod_ex_cut_short_is_an_error() {
        let mut pos = 1;
        assert!(skip_mod_ex(&[0x97, 0xff], 7, &mut pos).is_err());
        let mut pos = 1;
        assert!(skip_mod_ex(&[0x97, 0x05, 0, 0], 7, &mut pos).is_err());
    }

    #[test]
    fn one_track_multitrack_is_unwrapped() {
        let body = [0x96, 0x01, b'a', b'v', b'0', b'1', 0, 0xaa];
        let h = read_fourcc(&body, 6, 6, 1);
        assert_eq!(
            h,
            Ok(ExHeader {
                packet_type: 1,
                fourcc: *b"av01",
                payload_at: 7,
                main_track: true
            })
        );
        let other = [0x96, 0x01, b'a', b'v', b'0', b'1', 3, 0xaa];
        assert_eq!(
            read_fourcc(&other, 6, 6, 1).map(|h| h.main_track),
            Ok(false)
        );
        let many = [0x96, 0x11, b'a', b'v', b'0', b'1', 0, 0, 0, 1, 0xaa];
        assert!(matches!(
            read_fourcc(&many, 6, 6, 1),
            Err(FlvError::Unsupported { .. })
        ));
    }
}
