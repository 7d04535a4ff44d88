//! The RTCP a server sending to a viewer needs (RFC 3550, RFC 4585, RFC 5104): what
//! a viewer's compound packets ask for (retransmissions, keyframes, its leaving), and
//! the sender reports, SDES and BYE we send it. Plain RTCP only: SRTCP is `srtp`'s.

/// What a viewer's RTCP asks of us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Feedback {
    /// Generic NACK (RFC 4585 §6.2.1): these sequence numbers of `ssrc` are missing.
    Nack { ssrc: u32, lost: Vec<u16> },
    /// Picture loss (PLI) or a full intra request (FIR) for `ssrc`.
    Keyframe { ssrc: u32 },
    /// The viewer leaves (BYE).
    Bye,
}

/// Sequence numbers one NACK packet may name, at most: more is not a viewer asking
/// for retransmission but one asking for the stream again.
const MAX_NACKED: usize = 256;

const SR: u8 = 200;
const SDES: u8 = 202;
const BYE: u8 = 203;
const RTPFB: u8 = 205;
const PSFB: u8 = 206;

/// The feedback in a compound RTCP packet, in order. Malformed parts end the walk;
/// what came before them stands.
pub fn feedback(compound: &[u8]) -> Vec<Feedback> {
    let mut found = Vec::new();
    let mut rest = compound;
    while let [first, pt, l0, l1, ..] = *rest {
        if first >> 6 != 2 {
            break;
        }
        let fmt = first & 0x1f;
        let len = 4 * (usize::from(u16::from_be_bytes([l0, l1])) + 1);
        let (Some(packet), Some(after)) = (rest.get(..len), rest.get(len..)) else {
            break;
        };
        rest = after;
        let media_ssrc = packet
            .get(8..12)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_be_bytes);
        match (pt, fmt, media_ssrc) {
            (RTPFB, 1, Some(ssrc)) => {
                let mut lost = Vec::new();
                for fci in packet.get(12..).unwrap_or_default().chunks_exact(4) {
                    let &[p0, p1, b0, b1] = fci else {
                        continue;
                    };
                    let pid = u16::from_be_bytes([p0, p1]);
                    let blp = u16::from_be_bytes([b0, b1]);
                    lost.push(pid);
                    lost.extend(
                        (0..16u16)
                            .filter(|b| blp & (1 << b) != 0)
                            .map(|b| pid.wrapping_add(b + 1)),
                    );
                    if lost.len() >= MAX_NACKED {
                        lost.truncate(MAX_NACKED);
                        break;
                    }
                }
                if !lost.is_empty() {
                    found.push(Feedback::Nack { ssrc, lost });
                }
            }
            (PSFB, 1, Some(ssrc)) => found.push(Feedback::Keyframe { ssrc }),
            // FIR names its target in the FCI; the media SSRC field is unused.
            (PSFB, 4, Some(_)) => {
                if let Some(b) = packet.get(12..16).and_then(|b| b.try_into().ok()) {
                    found.push(Feedback::Keyframe {
                        ssrc: u32::from_be_bytes(b),
                    });
                }
            }
            (BYE, _, _) => found.push(Feedback::Bye),
            _ => {}
        }
    }
    found
}

/// What a sender report says of one sending SSRC.
#[derive(Debug, Clone, Copy)]
pub struct SenderInfo {
    pub ssrc: u32,
    /// Wall-clock time as NTP (seconds since 1900 in 32.32 fixed point).
    pub ntp: u64,
    /// The RTP timestamp that corresponds to `ntp`.
    pub rtp_time: u32,
    pub packets: u32,
    pub octets: u32,
}

/// Appends a sender report with no reception blocks (RFC 3550 §6.4.1).
pub fn write_sender_report(out: &mut Vec<u8>, info: &SenderInfo) {
    out.extend_from_slice(&[0x80, SR, 0, 6]);
    out.extend_from_slice(&info.ssrc.to_be_bytes());
    out.extend_from_slice(&info.ntp.to_be_bytes());
    out.extend_from_slice(&info.rtp_time.to_be_bytes());
    out.extend_from_slice(&info.packets.to_be_bytes());
    out.extend_from_slice(&info.octets.to_be_bytes());
}

/// Appends an SDES packet with one CNAME item for `ssrc` (RFC 3550 §6.5). A CNAME
/// longer than an item holds is cut.
pub fn write_sdes(out: &mut Vec<u8>, ssrc: u32, cname: &str) {
    let cname = cname.as_bytes().get(..255).unwrap_or(cname.as_bytes());
    // SSRC, CNAME item (type, length, text), then a null item padded to 32 bits.
    let chunk = 4 + 2 + cname.len();
    let padded = (chunk + 1).div_ceil(4) * 4;
    out.extend_from_slice(&[0x81, SDES]);
    out.extend_from_slice(&((padded / 4) as u16).to_be_bytes());
    out.extend_from_slice(&ssrc.to_be_bytes());
    out.extend_from_slice(&[1, cname.len() as u8]);
    out.extend_from_slice(cname);
    out.resize(out.len() + padded - chunk, 0);
}

/// Appends a BYE for `ssrc`.
pub fn write_bye(out: &mut Vec<u8>, ssrc: u32) {
    out.extend_from_slice(&[0x81, BYE, 0, 1]);
    out.extend_from_slice(&ssrc.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compound_packet_gives_its_nacks_keyframe_requests_and_bye() {
        let mut c = Vec::new();
        // Receiver report, no blocks.
        c.extend_from_slice(&[0x80, 201, 0, 1, 0, 0, 0, 9]);
        // NACK of 100, and 102 and 116 (bits 1 and 15).
        c.extend_from_slice(&[0x81, RTPFB, 0, 3, 0, 0, 0, 9, 0, 0, 0, 7]);
        c.extend_from_slice(&[0, 100, 0x80, 0x02]);
        // PLI of 7.
        c.extend_from_slice(&[0x81, PSFB, 0, 2, 0, 0, 0, 9, 0, 0, 0, 7]);
        // FIR of 8.
        c.extend_from_slice(&[
            0x84, PSFB, 0, 4, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 8, 1, 0, 0, 0,
        ]);
        write_bye(&mut c, 9);
        assert_eq!(
            feedback(&c),
            [
                Feedback::Nack {
                    ssrc: 7,
                    lost: vec![100, 102, 116]
                },
                Feedback::Keyframe { ssrc: 7 },
                Feedback::Keyframe { ssrc: 8 },
                Feedback::Bye,
            ]
        );
    }

    #[test]
    fn a_truncated_or_foreign_packet_ends_the_walk() {
        let mut c = vec![0x81, PSFB, 0, 2, 0, 0, 0, 9, 0, 0, 0, 7];
        c.extend_from_slice(&[0x81, PSFB, 0, 9, 0, 0]);
        assert_eq!(feedback(&c), [Feedback::Keyframe { ssrc: 7 }]);
        assert!(feedback(&[0x00, PSFB, 0, 2, 0, 0, 0, 9, 0, 0, 0, 7]).is_empty());
        assert!(feedback(&[]).is_empty());
    }

    #[test]
    fn a_nack_storm_is_cut() {
        let mut c = vec![0x81, RTPFB, 0, 0, 0, 0, 0, 9, 0, 0, 0, 7];
        for i in 0..100u16 {
            c.extend_from_slice(&(i * 17).to_be_bytes());
            c.extend_from_slice(&[0xff, 0xff]);
        }
        let words = (c.len() / 4 - 1) as u16;
        c[2..4].copy_from_slice(&words.to_be_bytes());
        let [Feedback::Nack { lost, .. }] = &feedback(&c)[..] else {
            panic!()
        };
        assert_eq!(lost.len(), MAX_NACKED);
    }

    #[test]
    fn reports_are_whole_words_with_their_lengths() {
        let mut out = Vec::new();
        write_sender_report(
            &mut out,
            &SenderInfo {
                ssrc: 1,
                ntp: 2,
                rtp_time: 3,
                packets: 4,
                octets: 5,
            },
        );
        assert_eq!(out.len(), 28);
        for cname in ["", "abc", "abcd", "sluice-0123456789"] {
            let mut sdes = Vec::new();
            write_sdes(&mut sdes, 1, cname);
            assert_eq!(sdes.len() % 4, 0);
            let words = u16::from_be_bytes([sdes[2], sdes[3]]) as usize;
            assert_eq!(4 * (words + 1), sdes.len());
            assert_eq!(sdes[8], 1);
            assert_eq!(sdes[9] as usize, cname.len());
            assert_eq!(*sdes.last().unwrap(), 0);
        }
    }
}
