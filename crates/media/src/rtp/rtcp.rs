//! RTCP (RFC 3550 §6): the sender reports we send, and what players and publishers send us.
//!
//! Why: players line audio up with video through sender reports (the NTP time of an
//! RTP timestamp on each track), so the server sends one per track every few seconds.
//! Incoming RTCP (receiver reports, SDES, BYE, and the publisher's sender reports) must
//! be accepted without fuss; only a publisher's SR carries something we may use.
//!
//! # Invariants
//! - Parsing never panics; a compound packet is walked with each length checked.
//! - Report blocks are bounded by the 5-bit count, and validated against the length
//!   before anything is allocated.

use super::RtpError;
use bytes::{BufMut, BytesMut};
use std::time::Duration;

/// RTCP packet types.
const PT_SR: u8 = 200;
const PT_RR: u8 = 201;
const PT_SDES: u8 = 202;
const PT_BYE: u8 = 203;
const PT_APP: u8 = 204;
/// Seconds from the NTP epoch (1900) to the Unix epoch (1970).
const NTP_UNIX_OFFSET: u64 = 2_208_988_800;
/// A report block is six 32-bit words.
const REPORT_BLOCK_LEN: usize = 24;
/// SDES item type of the canonical name.
const SDES_CNAME: u8 = 1;

/// The NTP 32.32 fixed-point timestamp of a wall-clock time given as the time since the
/// Unix epoch (the caller reads the clock; this module never does).
pub fn ntp_timestamp(since_unix_epoch: Duration) -> u64 {
    let secs = since_unix_epoch.as_secs().wrapping_add(NTP_UNIX_OFFSET);
    let frac = (u64::from(since_unix_epoch.subsec_nanos()) << 32) / 1_000_000_000;
    (secs << 32) | frac
}

/// A sender report's sender information (RFC 3550 §6.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SenderReport {
    /// The sender's SSRC.
    pub ssrc: u32,
    /// Wall-clock time, NTP 32.32.
    pub ntp_time: u64,
    /// The RTP timestamp corresponding to `ntp_time`.
    pub rtp_timestamp: u32,
    /// Packets sent since the start.
    pub packet_count: u32,
    /// Payload octets sent since the start.
    pub octet_count: u32,
}

/// One reception report block (RFC 3550 §6.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReportBlock {
    /// The source reported on.
    pub ssrc: u32,
    /// Fraction lost since the last report, in 1/256.
    pub fraction_lost: u8,
    /// Cumulative packets lost (24-bit signed).
    pub cumulative_lost: i32,
    /// Extended highest sequence number received.
    pub highest_seq: u32,
    /// Interarrival jitter, in timestamp units.
    pub jitter: u32,
    /// Middle 32 bits of the NTP time of the last SR received.
    pub last_sr: u32,
    /// Delay since that SR, in 1/65536 s.
    pub delay_since_last_sr: u32,
}

/// One packet of an RTCP compound packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RtcpPacket {
    /// A sender report (type 200).
    SenderReport {
        /// The sender information.
        info: SenderReport,
        /// Its reception report blocks.
        reports: Vec<ReportBlock>,
    },
    /// A receiver report (type 201).
    ReceiverReport {
        /// The reporter's SSRC.
        ssrc: u32,
        /// Its reception report blocks.
        reports: Vec<ReportBlock>,
    },
    /// Source description (type 202); items are not kept.
    SourceDescription {
        /// The number of chunks (sources) described.
        chunks: u8,
    },
    /// Goodbye (type 203).
    Bye {
        /// The sources leaving.
        ssrcs: Vec<u32>,
    },
    /// Any other type (APP, feedback, XR), skipped.
    Other {
        /// The packet type.
        packet_type: u8,
    },
}

/// Iterates over the packets of a compound RTCP packet. After an error it ends.
pub fn parse_compound(data: &[u8]) -> RtcpPackets<'_> {
    RtcpPackets { rest: data }
}

/// The iterator returned by [`parse_compound`].
#[derive(Debug, Clone)]
pub struct RtcpPackets<'a> {
    rest: &'a [u8],
}

impl Iterator for RtcpPackets<'_> {
    type Item = Result<RtcpPacket, RtpError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let result = parse_one(self.rest);
        match result {
            Ok((packet, used)) => {
                self.rest = self.rest.get(used..).unwrap_or_default();
                Some(Ok(packet))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

fn be32(b: &[u8], at: usize) -> Result<u32, RtpError> {
    match b.get(at..at.saturating_add(4)) {
        Some(&[a, b, c, d]) => Ok(u32::from_be_bytes([a, b, c, d])),
        _ => Err(RtpError::Truncated {
            what: "RTCP packet",
        }),
    }
}

/// Parses one packet at the start of `data`; returns it and its length.
fn parse_one(data: &[u8]) -> Result<(RtcpPacket, usize), RtpError> {
    let Some(&[b0, pt, l0, l1]) = data.get(..4) else {
        return Err(RtpError::Truncated {
            what: "RTCP header",
        });
    };
    if b0 >> 6 != 2 {
        return Err(RtpError::Malformed {
            what: "RTCP version",
        });
    }
    let count = b0 & 0x1f;
    let len = (usize::from(u16::from_be_bytes([l0, l1])) + 1) * 4;
    let Some(packet) = data.get(..len) else {
        return Err(RtpError::Truncated {
            what: "RTCP packet",
        });
    };
    let mut body = packet.get(4..).unwrap_or_default();
    if b0 & 0x20 != 0 {
        let pad = usize::from(body.last().copied().unwrap_or(0));
        if pad == 0 || pad > body.len() {
            return Err(RtpError::Malformed {
                what: "RTCP padding",
            });
        }
        body = body.get(..body.len() - pad).unwrap_or_default();
    }
    let parsed = match pt {
        PT_SR => {
            let info = SenderReport {
                ssrc: be32(body, 0)?,
                ntp_time: (u64::from(be32(body, 4)?) << 32) | u64::from(be32(body, 8)?),
                rtp_timestamp: be32(body, 12)?,
                packet_count: be32(body, 16)?,
                octet_count: be32(body, 20)?,
            };
            let reports = report_blocks(body.get(24..).unwrap_or_default(), count)?;
            RtcpPacket::SenderReport { info, reports }
        }
        PT_RR => RtcpPacket::ReceiverReport {
            ssrc: be32(body, 0)?,
            reports: report_blocks(body.get(4..).unwrap_or_default(), count)?,
        },
        PT_SDES => RtcpPacket::SourceDescription { chunks: count },
        PT_BYE => {
            let n = usize::from(count);
            if body.len() < n * 4 {
                return Err(RtpError::Truncated { what: "RTCP BYE" });
            }
            let ssrcs = (0..n)
                .map(|i| be32(body, i * 4))
                .collect::<Result<_, _>>()?;
            RtcpPacket::Bye { ssrcs }
        }
        PT_APP => RtcpPacket::Other {
            packet_type: PT_APP,
        },
        other => RtcpPacket::Other { packet_type: other },
    };
    Ok((parsed, len))
}

fn report_blocks(b: &[u8], count: u8) -> Result<Vec<ReportBlock>, RtpError> {
    let n = usize::from(count);
    if b.len() < n * REPORT_BLOCK_LEN {
        return Err(RtpError::Truncated {
            what: "RTCP report blocks",
        });
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let at = i * REPORT_BLOCK_LEN;
        let w1 = be32(b, at + 4)?;
        // 24-bit two's complement in the low bits of w1.
        let lost = ((w1 << 8) as i32) >> 8;
        out.push(ReportBlock {
            ssrc: be32(b, at)?,
            fraction_lost: (w1 >> 24) as u8,
            cumulative_lost: lost,
            highest_seq: be32(b, at + 8)?,
            jitter: be32(b, at + 12)?,
            last_sr: be32(b, at + 16)?,
            delay_since_last_sr: be32(b, at + 20)?,
        });
    }
    Ok(out)
}

fn header(out: &mut BytesMut, count: u8, packet_type: u8, words_after_header: u16) {
    out.put_u8(0x80 | (count & 0x1f));
    out.put_u8(packet_type);
    out.put_u16(words_after_header);
}

/// Appends a sender report with no report blocks (we send media; we do not report
/// on what players send, since they send none). 28 bytes.
pub fn write_sender_report(out: &mut BytesMut, sr: &SenderReport) {
    header(out, 0, PT_SR, 6);
    out.put_u32(sr.ssrc);
    out.put_u64(sr.ntp_time);
    out.put_u32(sr.rtp_timestamp);
    out.put_u32(sr.packet_count);
    out.put_u32(sr.octet_count);
}

/// Appends a receiver report (for publishers) with up to 31 blocks; more are left out.
pub fn write_receiver_report(out: &mut BytesMut, ssrc: u32, reports: &[ReportBlock]) {
    let reports = reports.get(..reports.len().min(31)).unwrap_or_default();
    // At most 1 + 31 * 6 words.
    header(
        out,
        reports.len() as u8,
        PT_RR,
        (1 + reports.len() * 6) as u16,
    );
    out.put_u32(ssrc);
    for r in reports {
        out.put_u32(r.ssrc);
        out.put_u32((u32::from(r.fraction_lost) << 24) | (r.cumulative_lost as u32 & 0x00ff_ffff));
        out.put_u32(r.highest_seq);
        out.put_u32(r.jitter);
        out.put_u32(r.last_sr);
        out.put_u32(r.delay_since_last_sr);
    }
}

/// Appends an SDES packet with one chunk: `ssrc` and its CNAME (cut to 255 bytes).
/// RFC 3550 §6.1 wants one in every compound packet, after the SR or RR.
pub fn write_sdes_cname(out: &mut BytesMut, ssrc: u32, cname: &str) {
    let name = cname.as_bytes();
    let name = name.get(..name.len().min(255)).unwrap_or_default();
    // SSRC, type, length, text, then at least one null octet up to a word boundary.
    let chunk = 4 + 2 + name.len();
    let padded = (chunk + 1).div_ceil(4) * 4;
    // At most (4 + 2 + 255 + 4) / 4 words.
    header(out, 1, PT_SDES, (padded / 4) as u16);
    out.put_u32(ssrc);
    out.put_u8(SDES_CNAME);
    out.put_u8(name.len() as u8);
    out.put_slice(name);
    out.put_bytes(0, padded - chunk);
}

/// Appends a BYE for `ssrc`.
pub fn write_bye(out: &mut BytesMut, ssrc: u32) {
    header(out, 1, PT_BYE, 1);
    out.put_u32(ssrc);
}
