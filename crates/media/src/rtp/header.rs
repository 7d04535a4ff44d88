//! The RTP fixed header (RFC 3550 §5.1), CSRC list, header extension (§5.3.1) and padding.
//!
//! Why its own file: packetizer, depacketizer and jitter buffer all read or write it,
//! and it is the first thing a hostile packet hits, so it is parsed in one checked place.

use super::RtpError;
use bytes::{BufMut, BytesMut};

/// Length of the fixed header, without CSRCs or extension.
pub const RTP_HEADER_LEN: usize = 12;
/// The only RTP version.
const VERSION: u8 = 2;

/// The fields of the fixed header that the data path uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RtpHeader {
    /// The marker bit: last packet of a video frame, last fragment of an AAC AU.
    pub marker: bool,
    /// Payload type (7 bits).
    pub payload_type: u8,
    /// Sequence number; wraps at 2^16.
    pub sequence: u16,
    /// Timestamp on the codec clock; wraps at 2^32.
    pub timestamp: u32,
    /// Synchronization source.
    pub ssrc: u32,
}

impl RtpHeader {
    /// Appends the 12-byte fixed header: version 2, no padding, no extension, no CSRC.
    pub fn write(&self, out: &mut BytesMut) {
        out.put_slice(&self.to_bytes());
    }

    /// The 12-byte fixed header: version 2, no padding, no extension, no CSRC.
    pub fn to_bytes(&self) -> [u8; RTP_HEADER_LEN] {
        let s = self.sequence.to_be_bytes();
        let t = self.timestamp.to_be_bytes();
        let c = self.ssrc.to_be_bytes();
        [
            VERSION << 6,
            (u8::from(self.marker) << 7) | (self.payload_type & 0x7f),
            s[0],
            s[1],
            t[0],
            t[1],
            t[2],
            t[3],
            c[0],
            c[1],
            c[2],
            c[3],
        ]
    }
}

/// A header extension (RFC 3550 §5.3.1): a profile-defined 16-bit value and data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpExtension<'a> {
    /// The 16 "defined by profile" bits (0xBEDE for RFC 8285 one-byte headers).
    pub profile: u16,
    /// The extension data, a multiple of 4 bytes.
    pub data: &'a [u8],
}

/// One parsed RTP packet, borrowing the bytes it was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpPacket<'a> {
    /// The fixed header.
    pub header: RtpHeader,
    /// The CSRC list, 4 bytes per entry (see [`RtpPacket::csrcs`]).
    pub csrc_bytes: &'a [u8],
    /// The header extension, when the X bit is set.
    pub extension: Option<RtpExtension<'a>>,
    /// The payload, without padding.
    pub payload: &'a [u8],
    /// Padding bytes removed from the end (0 when the P bit is clear).
    pub padding: u8,
}

impl<'a> RtpPacket<'a> {
    /// Parses one RTP packet (no interleave header).
    pub fn parse(data: &'a [u8]) -> Result<Self, RtpError> {
        let Some(&[b0, b1, s0, s1, t0, t1, t2, t3, c0, c1, c2, c3]) = data.get(..RTP_HEADER_LEN)
        else {
            return Err(RtpError::Truncated { what: "RTP header" });
        };
        if b0 >> 6 != VERSION {
            return Err(RtpError::Malformed {
                what: "RTP version",
            });
        }
        let has_padding = b0 & 0x20 != 0;
        let has_extension = b0 & 0x10 != 0;
        let csrc_len = usize::from(b0 & 0x0f) * 4;
        let header = RtpHeader {
            marker: b1 & 0x80 != 0,
            payload_type: b1 & 0x7f,
            sequence: u16::from_be_bytes([s0, s1]),
            timestamp: u32::from_be_bytes([t0, t1, t2, t3]),
            ssrc: u32::from_be_bytes([c0, c1, c2, c3]),
        };
        let rest = data.get(RTP_HEADER_LEN..).unwrap_or_default();
        let Some((csrc_bytes, mut rest)) = rest.split_at_checked(csrc_len) else {
            return Err(RtpError::Truncated {
                what: "RTP CSRC list",
            });
        };
        let mut extension = None;
        if has_extension {
            let Some(&[p0, p1, l0, l1]) = rest.get(..4) else {
                return Err(RtpError::Truncated {
                    what: "RTP header extension",
                });
            };
            let len = usize::from(u16::from_be_bytes([l0, l1])) * 4;
            let Some(ext) = rest.get(4..4 + len) else {
                return Err(RtpError::Truncated {
                    what: "RTP header extension",
                });
            };
            extension = Some(RtpExtension {
                profile: u16::from_be_bytes([p0, p1]),
                data: ext,
            });
            rest = rest.get(4 + len..).unwrap_or_default();
        }
        let mut padding = 0;
        if has_padding {
            // The last octet counts the padding, itself included (RFC 3550 §5.1).
            let count = rest.last().copied().unwrap_or(0);
            let keep = rest.len().checked_sub(usize::from(count));
            match keep {
                Some(keep) if count > 0 => {
                    rest = rest.get(..keep).unwrap_or_default();
                    padding = count;
                }
                _ => {
                    return Err(RtpError::Malformed {
                        what: "RTP padding",
                    })
                }
            }
        }
        Ok(RtpPacket {
            header,
            csrc_bytes,
            extension,
            payload: rest,
            padding,
        })
    }

    /// The contributing sources.
    pub fn csrcs(&self) -> impl Iterator<Item = u32> + 'a {
        self.csrc_bytes
            .chunks_exact(4)
            .filter_map(|c| c.try_into().ok().map(u32::from_be_bytes))
    }

    /// Appends a full packet: header, CSRCs, extension, payload and `padding` bytes of
    /// padding (0 for none). Fails when more than 15 CSRCs are given or the extension
    /// data is not a multiple of 4 bytes or longer than the format can say.
    pub fn write(
        header: &RtpHeader,
        csrcs: &[u32],
        extension: Option<RtpExtension<'_>>,
        payload: &[u8],
        padding: u8,
        out: &mut BytesMut,
    ) -> Result<(), RtpError> {
        let cc = u8::try_from(csrcs.len())
            .ok()
            .filter(|&n| n <= 15)
            .ok_or(RtpError::TooLarge {
                what: "CSRC list",
                len: csrcs.len(),
                limit: 15,
            })?;
        let ext_words = match &extension {
            Some(e) if e.data.len() & 3 != 0 => {
                return Err(RtpError::Malformed {
                    what: "RTP header extension length",
                })
            }
            Some(e) => Some(
                u16::try_from(e.data.len() / 4).map_err(|_| RtpError::TooLarge {
                    what: "RTP header extension",
                    len: e.data.len(),
                    limit: usize::from(u16::MAX) * 4,
                })?,
            ),
            None => None,
        };
        let mut fixed = header.to_bytes();
        fixed[0] = (VERSION << 6)
            | if padding > 0 { 0x20 } else { 0 }
            | if extension.is_some() { 0x10 } else { 0 }
            | cc;
        out.put_slice(&fixed);
        for c in csrcs {
            out.put_u32(*c);
        }
        if let (Some(e), Some(words)) = (extension, ext_words) {
            out.put_u16(e.profile);
            out.put_u16(words);
            out.put_slice(e.data);
        }
        out.put_slice(payload);
        if padding > 0 {
            out.put_bytes(0, usize::from(padding) - 1);
            out.put_u8(padding);
        }
        Ok(())
    }
}

/// The sequence number of a packet without parsing the rest, for the jitter buffer.
pub(crate) fn peek_sequence(data: &[u8]) -> Result<u16, RtpError> {
    match data.get(..4) {
        Some(&[b0, _, s0, s1]) if b0 >> 6 == VERSION => Ok(u16::from_be_bytes([s0, s1])),
        Some(_) => Err(RtpError::Malformed {
            what: "RTP version",
        }),
        None => Err(RtpError::Truncated { what: "RTP header" }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_with_csrc_extension_and_padding() {
        let h = RtpHeader {
            marker: true,
            payload_type: 96,
            sequence: 0xfffe,
            timestamp: 0xdead_beef,
            ssrc: 7,
        };
        let ext = RtpExtension {
            profile: 0xbede,
            data: &[1, 2, 3, 4],
        };
        let mut out = BytesMut::new();
        RtpPacket::write(&h, &[10, 11], Some(ext), b"payload", 3, &mut out).expect("valid");
        let p = RtpPacket::parse(&out).expect("parses");
        assert_eq!(p.header, h);
        assert_eq!(p.csrcs().collect::<Vec<_>>(), vec![10, 11]);
        assert_eq!(p.extension, Some(ext));
        assert_eq!(p.payload, b"payload");
        assert_eq!(p.padding, 3);
    }

    #[test]
    fn lying_lengths_are_errors() {
        // CSRC count 15 with no CSRC bytes.
        assert!(RtpPacket::parse(&[0x8f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
        // Padding count larger than the payload.
        assert!(RtpPacket::parse(&[0xa0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 9]).is_err());
        // Padding count 0.
        assert!(RtpPacket::parse(&[0xa0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]).is_err());
        // Extension longer than the packet.
        assert!(RtpPacket::parse(&[0x90, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]).is_err());
        // Version 1.
        assert!(RtpPacket::parse(&[0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
    }
}
