//! MPEG-TS over RTP (RFC 2250 §2, `MP2T`): datagrams in, TS bytes out in sequence order.
//!
//! Why: encoders and IPTV head-ends send TS in RTP over UDP (ffmpeg's `rtp_mpegts`,
//! multicast contribution feeds) so that the receiver can put reordered packets back
//! and count the lost ones, which plain TS over UDP cannot tell apart from a
//! continuity error. The payload is whole 188-byte TS packets; the RTP timestamp is not
//! needed (the TS carries its own clock), only the sequence number.
//!
//! Call contract: [`Mp2tReceiver::push`] each datagram, then drain
//! [`Mp2tReceiver::pop`] to `None`. While [`Mp2tReceiver::waiting`] says packets are
//! held behind a hole, the caller calls [`Mp2tReceiver::skip_missing`] when it has
//! waited long enough (its reorder window): time is the caller's, never read here.
//!
//! # Invariants
//! - Memory is the jitter buffer's fixed capacity ([`MP2T_REORDER_CAPACITY`] packets).
//! - A datagram that is not RTP, or whose payload is not TS, is counted and dropped;
//!   nothing panics on any input.
//! - A new SSRC (the sender restarted) starts a new sequence: what was held of the old
//!   one is released first, in order.

use super::header::{RtpHeader, RtpPacket};
use super::jitter::{JitterBuffer, JitterStats};
use super::RtpError;
use bytes::Bytes;

/// Packets held at most while waiting for a missing one: at 4 Mbit/s (seven TS
/// packets per datagram, about 380 datagrams a second) some 170 ms.
pub const MP2T_REORDER_CAPACITY: usize = 64;
/// Later packets after which a missing one is given up without waiting for the timer.
pub const MP2T_REORDER_PACKETS: usize = 32;
/// The MPEG-TS sync byte every payload starts with.
const SYNC_BYTE: u8 = 0x47;

/// Counters for logs and metrics, over every SSRC seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Mp2tStats {
    /// Datagrams given to `push`.
    pub datagrams: u64,
    /// Datagrams dropped for not being RTP (no version 2 header, bad padding).
    pub not_rtp: u64,
    /// RTP packets dropped for a payload that does not start with a TS sync byte.
    pub not_ts: u64,
    /// Times the sender's SSRC changed.
    pub new_sources: u64,
    /// Sequence numbers given up on: packets lost (or later than the reorder window).
    pub lost: u64,
    /// Packets that arrived after a later one and were put back in their place.
    pub reordered: u64,
    /// Packets dropped for arriving after their place was given up.
    pub late: u64,
    /// Packets dropped as copies of one already held.
    pub duplicates: u64,
}

/// RTP/MP2T datagrams to TS payloads in sequence order. See the module docs.
#[derive(Debug)]
pub struct Mp2tReceiver {
    jitter: JitterBuffer,
    ssrc: Option<u32>,
    stats: Mp2tStats,
    /// What the buffers of earlier SSRCs counted.
    before: JitterStats,
}

impl Default for Mp2tReceiver {
    fn default() -> Self {
        Self::new()
    }
}

impl Mp2tReceiver {
    /// A receiver that has seen nothing.
    pub fn new() -> Self {
        Mp2tReceiver {
            jitter: JitterBuffer::new(MP2T_REORDER_CAPACITY, MP2T_REORDER_PACKETS),
            ssrc: None,
            stats: Mp2tStats::default(),
            before: JitterStats::default(),
        }
    }

    /// Takes one datagram. An error says why it was dropped (also counted).
    pub fn push(&mut self, datagram: Bytes) -> Result<(), RtpError> {
        self.stats.datagrams += 1;
        let packet = match RtpPacket::parse(&datagram) {
            Ok(p) => p,
            Err(e) => {
                self.stats.not_rtp += 1;
                return Err(e);
            }
        };
        if packet.payload.first() != Some(&SYNC_BYTE) {
            self.stats.not_ts += 1;
            return Err(RtpError::Malformed {
                what: "MP2T payload",
            });
        }
        let ssrc = packet.header.ssrc;
        if self.ssrc.is_some_and(|s| s != ssrc) {
            self.stats.new_sources += 1;
            self.restart();
        }
        self.ssrc = Some(ssrc);
        self.jitter.push(datagram)
    }

    /// The TS bytes of the next packet in order, if it is here or the wait for a
    /// missing one is over.
    pub fn pop(&mut self) -> Option<Bytes> {
        loop {
            let packet = self.jitter.pop()?;
            // Parsed once already in `push`; the slice is its payload.
            let Ok(p) = RtpPacket::parse(&packet) else {
                continue;
            };
            let start = p.payload.as_ptr() as usize - packet.as_ptr() as usize;
            return Some(packet.slice(start..start + p.payload.len()));
        }
    }

    /// Whether packets wait behind a missing one (or, at the start, for enough to
    /// follow): the caller's reorder timer should run.
    pub fn waiting(&self) -> bool {
        !self.jitter.is_empty()
    }

    /// Gives up on the missing packets before the next held one (the caller's reorder
    /// window passed); the following `pop` returns it. How many were given up.
    pub fn skip_missing(&mut self) -> usize {
        self.jitter.skip_missing()
    }

    /// The counters so far.
    pub fn stats(&self) -> Mp2tStats {
        let j = self.jitter.stats();
        let b = self.before;
        Mp2tStats {
            lost: b.skipped + j.skipped,
            reordered: b.reordered + j.reordered,
            late: b.late + j.late,
            duplicates: b.duplicates + j.duplicates,
            ..self.stats
        }
    }

    /// Drops the old source's buffer: what it held is lost with its numbering.
    fn restart(&mut self) {
        let j = self.jitter.stats();
        let held = self.jitter.len() as u64;
        self.before.skipped += j.skipped + held;
        self.before.reordered += j.reordered;
        self.before.late += j.late;
        self.before.duplicates += j.duplicates;
        self.jitter = JitterBuffer::new(MP2T_REORDER_CAPACITY, MP2T_REORDER_PACKETS);
    }
}

/// RTP's static payload type of MPEG-TS (RFC 3551 §6).
pub const MP2T_PAYLOAD_TYPE: u8 = 33;

/// The sending side of RFC 2250: the RTP header in front of each datagram of TS
/// packets. The SSRC and the first sequence number and timestamp are the caller's
/// (random, RFC 3550 §5.1: this crate reads no random source); the timestamp is the
/// datagram's 90 kHz transmit time (`sluice_media::ts::Paced::time_90k`).
#[derive(Debug, Clone)]
pub struct Mp2tSender {
    ssrc: u32,
    sequence: u16,
    timestamp_offset: u32,
}

impl Mp2tSender {
    /// A sender of source `ssrc`, its sequence and timestamps starting at the given
    /// (random) values.
    pub fn new(ssrc: u32, first_sequence: u16, timestamp_offset: u32) -> Self {
        Mp2tSender {
            ssrc,
            sequence: first_sequence,
            timestamp_offset,
        }
    }

    /// The header of the next datagram, due at `time_90k` ticks of 90 kHz; the
    /// sequence number moves on by one (wrapping).
    pub fn header(&mut self, time_90k: u64) -> [u8; super::RTP_HEADER_LEN] {
        let header = RtpHeader {
            marker: false,
            payload_type: MP2T_PAYLOAD_TYPE,
            sequence: self.sequence,
            timestamp: (time_90k as u32).wrapping_add(self.timestamp_offset),
            ssrc: self.ssrc,
        };
        self.sequence = self.sequence.wrapping_add(1);
        header.to_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rtp::RtpHeader;

    /// An RTP/MP2T datagram: sequence `seq`, one TS packet whose fourth byte is `tag`.
    fn datagram(seq: u16, ssrc: u32, tag: u8) -> Bytes {
        let header = RtpHeader {
            marker: false,
            payload_type: 33,
            sequence: seq,
            timestamp: 0,
            ssrc,
        };
        let mut d = header.to_bytes().to_vec();
        let mut ts = [0u8; 188];
        ts[0] = SYNC_BYTE;
        ts[3] = tag;
        d.extend_from_slice(&ts);
        Bytes::from(d)
    }

    fn drain(r: &mut Mp2tReceiver) -> Vec<u8> {
        std::iter::from_fn(|| r.pop()).map(|p| p[3]).collect()
    }

    #[test]
    fn reordered_packets_come_out_in_order_and_are_counted() {
        let mut r = Mp2tReceiver::new();
        let mut out = Vec::new();
        for seq in [0u16, 1, 3, 2, 4, 6, 5] {
            r.push(datagram(seq, 1, seq as u8)).unwrap();
            out.extend(drain(&mut r));
        }
        r.skip_missing();
        out.extend(drain(&mut r));
        assert_eq!(out, [0, 1, 2, 3, 4, 5, 6]);
        let s = r.stats();
        assert_eq!((s.reordered, s.lost), (2, 0));
    }

    #[test]
    fn a_missing_packet_is_given_up_after_the_window_or_the_timer() {
        let mut r = Mp2tReceiver::new();
        let mut out = Vec::new();
        r.push(datagram(65_534, 7, 0)).unwrap();
        r.skip_missing();
        out.extend(drain(&mut r));
        // 65535 is lost; the sequence wraps.
        for seq in 0..3u16 {
            r.push(datagram(seq, 7, seq as u8 + 1)).unwrap();
            out.extend(drain(&mut r));
        }
        assert!(r.waiting(), "held behind the hole");
        assert_eq!(r.skip_missing(), 1);
        out.extend(drain(&mut r));
        assert_eq!(out, [0, 1, 2, 3]);
        assert_eq!(r.stats().lost, 1);
        // Without the timer: once enough later packets are held.
        for seq in 4..(5 + MP2T_REORDER_PACKETS as u16) {
            r.push(datagram(seq, 7, 0)).unwrap();
        }
        assert_eq!(drain(&mut r).len(), MP2T_REORDER_PACKETS + 1);
        assert_eq!(r.stats().lost, 2);
    }

    #[test]
    fn what_is_not_rtp_or_not_ts_is_dropped_and_counted() {
        let mut r = Mp2tReceiver::new();
        assert!(r.push(Bytes::from_static(&[0x47; 188])).is_err());
        let mut not_ts = datagram(1, 1, 0).to_vec();
        not_ts[12] = 0;
        assert!(r.push(Bytes::from(not_ts)).is_err());
        assert!(r.push(Bytes::new()).is_err());
        let s = r.stats();
        assert_eq!((s.datagrams, s.not_rtp, s.not_ts), (3, 2, 1));
        assert!(!r.waiting());
    }

    #[test]
    fn a_new_ssrc_restarts_the_numbering() {
        let mut r = Mp2tReceiver::new();
        r.push(datagram(100, 1, 1)).unwrap();
        r.skip_missing();
        assert_eq!(drain(&mut r), [1]);
        // The sender restarted with a random sequence, just behind the old one.
        r.push(datagram(90, 2, 2)).unwrap();
        r.skip_missing();
        assert_eq!(drain(&mut r), [2]);
        let s = r.stats();
        assert_eq!((s.new_sources, s.late), (1, 0));
    }
    #[test]
    fn sender_headers_count_on_and_read_back() {
        let mut tx = Mp2tSender::new(0xdead_beef, u16::MAX, u32::MAX - 10);
        let ts = [0x47u8; 188];
        let mut rx = Mp2tReceiver::new();
        for (i, time) in [0u64, 3000, 6000].into_iter().enumerate() {
            let mut d = tx.header(time).to_vec();
            d.extend_from_slice(&ts);
            let p = RtpPacket::parse(&d).unwrap();
            assert_eq!(p.header.payload_type, 33);
            assert_eq!(p.header.ssrc, 0xdead_beef);
            assert_eq!(p.header.sequence, u16::MAX.wrapping_add(i as u16));
            assert_eq!(
                p.header.timestamp,
                (time as u32).wrapping_add(u32::MAX - 10)
            );
            assert!(!p.header.marker);
            rx.push(Bytes::from(d)).unwrap();
        }
        rx.skip_missing();
        let mut n = 0;
        while let Some(payload) = rx.pop() {
            assert_eq!(payload.len(), 188);
            n += 1;
        }
        assert!(n >= 1);
    }
}
