//! The sending half of a connection: payloads numbered and stamped, kept until
//! acknowledged for retransmission, sent at a bounded pace, and given up on once the
//! receiver could no longer use them.
//!
//! Why its own: a server sends the same stream to many players, so a kept payload is
//! a reference to the stream's shared bytes (`Bytes`), never a copy; and the send
//! buffer is contiguous in sequence numbers, so a loss report finds a packet by
//! subtraction. (srt-runtime's `Sender` copies every payload into its buffer.)
//!
//! # Invariants
//! - `sent[i]` has sequence number `base + i`; it holds at most `MAX_KEPT` packets.
//! - A packet's wire timestamp is set when it is first sent and kept on retransmission
//!   (the receiver schedules by it).
//! - Never more than the peer's flow window of packets are unacknowledged: a new
//!   packet goes out only while `sent.len() < window` (the window the handshake
//!   announced, then the available buffer of each full ACK, as libsrt's sender does).

use crate::control::{self, Rtt};
use crate::wire::{seq, DataHeader, KeyParity, MSGNO_MASK};
use bytes::Bytes;
use srt_runtime::packet::{AckCif, LossListEntry, NakPacket};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Packets kept for retransmission at most (about 11 MB of 1316-byte payloads:
/// seconds of a high-rate stream; the payloads are shared, so this is references).
const MAX_KEPT: usize = 8192;
/// Packets sent per call at most: a burst (a new player's start from the GOP cache)
/// goes out over several milliseconds instead of overflowing the receiver's socket.
pub const BURST: usize = 32;
/// Between bursts.
pub const PACE: Duration = Duration::from_millis(1);
/// A packet is given up on this long after its latency has passed (libsrt's
/// sender-side drop keeps a second too).
const DROP_AFTER_LATENCY: Duration = Duration::from_secs(1);

/// A peer's window as this side keeps it: at least one packet (else nothing could
/// ever be sent to learn a new one), at most what is kept for retransmission.
fn clamp_window(packets: u32) -> usize {
    (packets as usize).clamp(1, MAX_KEPT)
}

#[derive(Debug)]
struct Sent {
    msgno: u32,
    timestamp: u32,
    first_sent: Instant,
    payload: Bytes,
    queued: bool,
}

/// Counters of the sending half.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SendStats {
    pub packets: u64,
    pub bytes: u64,
    pub retransmitted: u64,
    /// Packets given up on before they were acknowledged.
    pub dropped: u64,
}

/// One data packet to send: its header and its payload (shared).
#[derive(Debug, Clone)]
pub struct DataOut {
    pub header: [u8; crate::wire::HEADER_LEN],
    pub payload: Bytes,
}

#[derive(Debug)]
pub struct Sender {
    peer: u32,
    base: u32,
    sent: VecDeque<Sent>,
    /// Payloads not yet sent.
    waiting: VecDeque<Bytes>,
    /// Sequence numbers to send again, oldest first.
    again: VecDeque<u32>,
    next_msgno: u32,
    key: KeyParity,
    latency: Duration,
    rtt: Rtt,
    /// Packets the peer can take beyond its ack point: its flow window, then the
    /// available buffer its last full ACK reported.
    window: usize,
    /// Control packets to send.
    out: Vec<Vec<u8>>,
    pub stats: SendStats,
}

impl Sender {
    /// A sender to `peer`, whose flow window (from the handshake) is `window` packets.
    pub fn new(peer: u32, isn: u32, latency: Duration, key: KeyParity, window: u32) -> Sender {
        Sender {
            peer,
            base: isn & crate::wire::SEQ_MASK,
            sent: VecDeque::new(),
            waiting: VecDeque::new(),
            again: VecDeque::new(),
            next_msgno: 1,
            key,
            latency,
            rtt: Rtt::default(),
            window: clamp_window(window),
            out: Vec::new(),
            stats: SendStats::default(),
        }
    }

    pub fn rtt(&self) -> Rtt {
        self.rtt
    }

    /// Payloads waiting to be sent for the first time.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Queues a payload (encrypted already, when the connection is).
    pub fn push(&mut self, payload: Bytes) {
        self.waiting.push_back(payload);
    }

    /// The sequence number the next new packet gets.
    pub fn next_seq(&self) -> u32 {
        seq::add(
            self.base,
            self.sent.len() as u32 + self.waiting.len() as u32,
        )
    }

    /// An acknowledgement: what is before its ack point is freed; a full one is
    /// answered (ACKACK) and carries the round trip.
    pub fn ack(&mut self, number: u32, cif: &AckCif, ts: u32) {
        let (point, rtt) = match *cif {
            AckCif::Full {
                last_ack_seq,
                rtt_us,
                rtt_var_us,
                avail_buf_size,
                ..
            } => {
                // An ACK older than the ack point (reordered) says nothing new.
                if seq::diff(last_ack_seq, self.base) >= 0 {
                    self.window = clamp_window(avail_buf_size);
                }
                (last_ack_seq, Some((rtt_us, rtt_var_us)))
            }
            AckCif::Small {
                last_ack_seq,
                rtt_us,
                rtt_var_us,
                ..
            } => (last_ack_seq, Some((rtt_us, rtt_var_us))),
            AckCif::Light { last_ack_seq } => (last_ack_seq, None),
            _ => return,
        };
        if matches!(cif, AckCif::Full { .. }) {
            self.out.push(control::ackack(self.peer, ts, number));
        }
        if let Some((rtt, var)) = rtt {
            self.rtt = Rtt {
                rtt: Duration::from_micros(u64::from(rtt)),
                var: Duration::from_micros(u64::from(var)),
            };
        }
        let n = seq::diff(point, self.base);
        if n > 0 {
            let n = (n as usize).min(self.sent.len());
            self.sent.drain(..n);
            self.base = seq::add(self.base, n as u32);
        }
    }

    /// A loss report: what we still have goes again; what we gave up on is said
    /// with a drop request, so that the receiver stops waiting for it.
    pub fn nak(&mut self, nak: &NakPacket<'_>, ts: u32) {
        for entry in nak.entries().take(MAX_KEPT) {
            let Ok(entry) = entry else { break };
            let (a, b) = match entry {
                LossListEntry::Single(a) => (a, a),
                LossListEntry::Range(a, b) => (a, b),
                _ => continue,
            };
            if seq::diff(b, a) < 0 {
                continue;
            }
            if seq::lt(a, self.base) {
                let last_gone = if seq::lt(b, self.base) {
                    b
                } else {
                    seq::add(self.base, crate::wire::SEQ_MASK)
                };
                self.out.push(control::dropreq(self.peer, ts, a, last_gone));
            }
            let from = seq::diff(a, self.base).max(0) as usize;
            let to = seq::diff(b, self.base);
            if to < 0 {
                continue;
            }
            let to = (to as usize).min(self.sent.len().saturating_sub(1));
            for i in from..=to {
                if let Some(s) = self.sent.get_mut(i) {
                    if !s.queued {
                        s.queued = true;
                        self.again.push_back(seq::add(self.base, i as u32));
                    }
                }
            }
        }
    }

    /// Gives up on packets the receiver can no longer use.
    fn expire(&mut self, now: Instant) {
        let keep = self.latency + DROP_AFTER_LATENCY;
        let mut n = 0;
        while let Some(s) = self.sent.get(n) {
            let old = now.saturating_duration_since(s.first_sent) > keep;
            if !old && self.sent.len() - n <= MAX_KEPT {
                break;
            }
            n += 1;
        }
        if n > 0 {
            self.sent.drain(..n);
            self.base = seq::add(self.base, n as u32);
            self.stats.dropped += n as u64;
        }
    }

    /// Up to [`BURST`] data packets to send now: retransmissions first.
    pub fn poll(&mut self, now: Instant, ts: u32, out: &mut Vec<DataOut>) {
        self.expire(now);
        let mut budget = BURST;
        while budget > 0 {
            let Some(s) = self.again.pop_front() else {
                break;
            };
            let i = seq::diff(s, self.base);
            let Some(p) = usize::try_from(i).ok().and_then(|i| self.sent.get_mut(i)) else {
                continue;
            };
            p.queued = false;
            let header = DataHeader {
                seq: s,
                msgno: p.msgno,
                key: self.key,
                retransmitted: true,
                timestamp: p.timestamp,
                dest: self.peer,
            };
            out.push(DataOut {
                header: header.write(),
                payload: p.payload.clone(),
            });
            self.stats.retransmitted += 1;
            budget -= 1;
        }
        // New packets only within the peer's window.
        while budget > 0 && self.sent.len() < self.window {
            let Some(payload) = self.waiting.pop_front() else {
                break;
            };
            let s = seq::add(self.base, self.sent.len() as u32);
            let msgno = self.next_msgno;
            self.next_msgno = (self.next_msgno + 1) & MSGNO_MASK;
            if self.next_msgno == 0 {
                self.next_msgno = 1;
            }
            let header = DataHeader {
                seq: s,
                msgno,
                key: self.key,
                retransmitted: false,
                timestamp: ts,
                dest: self.peer,
            };
            self.stats.packets += 1;
            self.stats.bytes += payload.len() as u64;
            out.push(DataOut {
                header: header.write(),
                payload: payload.clone(),
            });
            self.sent.push_back(Sent {
                msgno,
                timestamp: ts,
                first_sent: now,
                payload,
                queued: false,
            });
            budget -= 1;
        }
    }

    /// Whether `poll` has more to send now (new packets wait for an ACK while the
    /// window is full).
    pub fn has_more(&self) -> bool {
        (!self.waiting.is_empty() && self.sent.len() < self.window) || !self.again.is_empty()
    }

    /// Control packets to send.
    pub fn take_out(&mut self, into: &mut Vec<Vec<u8>>) {
        into.append(&mut self.out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use srt_runtime::packet::ControlPacket;

    fn nak_of(entries: &[LossListEntry]) -> Vec<u8> {
        control::naks(1, 0, entries).remove(0)
    }

    fn seqs(out: &[DataOut]) -> Vec<(u32, bool)> {
        out.iter()
            .map(|d| {
                let h = DataHeader::read(&d.header).unwrap();
                (h.seq, h.retransmitted)
            })
            .collect()
    }

    #[test]
    fn packets_are_numbered_kept_and_sent_again_when_lost() {
        let now = Instant::now();
        let mut s = Sender::new(7, 1000, Duration::from_millis(120), KeyParity::None, 8192);
        for i in 0..5u8 {
            s.push(Bytes::from(vec![i; 188]));
        }
        let mut out = Vec::new();
        s.poll(now, 10, &mut out);
        assert_eq!(
            seqs(&out),
            (1000..1005).map(|s| (s, false)).collect::<Vec<_>>()
        );
        let bytes = nak_of(&[
            LossListEntry::Single(1001),
            LossListEntry::Range(1003, 1004),
        ]);
        let Ok(ControlPacket::Nak(nak)) = ControlPacket::parse(&bytes) else {
            panic!()
        };
        s.nak(&nak, 0);
        s.nak(&nak, 0);
        out.clear();
        s.poll(now, 20, &mut out);
        assert_eq!(seqs(&out), [(1001, true), (1003, true), (1004, true)]);
        // The original timestamp stays.
        assert_eq!(DataHeader::read(&out[0].header).unwrap().timestamp, 10);
        assert_eq!(out[0].payload[0], 1);
    }

    #[test]
    fn acknowledged_packets_are_freed_and_a_loss_of_them_is_a_drop_request() {
        let now = Instant::now();
        let mut s = Sender::new(7, 0, Duration::from_millis(120), KeyParity::None, 8192);
        for _ in 0..4 {
            s.push(Bytes::from_static(&[0x47; 188]));
        }
        s.poll(now, 0, &mut Vec::new());
        s.ack(
            5,
            &AckCif::Full {
                last_ack_seq: 3,
                rtt_us: 20_000,
                rtt_var_us: 5_000,
                avail_buf_size: 8000,
                pkt_recv_rate: 0,
                est_link_capacity: 0,
                recv_rate_bps: 0,
            },
            0,
        );
        assert_eq!(s.sent.len(), 1);
        assert_eq!(s.rtt().rtt, Duration::from_millis(20));
        let bytes = nak_of(&[LossListEntry::Range(1, 3)]);
        let Ok(ControlPacket::Nak(nak)) = ControlPacket::parse(&bytes) else {
            panic!()
        };
        s.nak(&nak, 0);
        let mut ctl = Vec::new();
        s.take_out(&mut ctl);
        let kinds: Vec<_> = ctl
            .iter()
            .map(|c| ControlPacket::parse(c).unwrap())
            .collect();
        assert!(matches!(kinds[0], ControlPacket::AckAck(ref a) if a.ack_number == 5));
        assert!(
            matches!(kinds[1], ControlPacket::DropReq(ref d) if d.first_seq == 1 && d.last_seq == 2)
        );
        let mut out = Vec::new();
        s.poll(now, 0, &mut out);
        assert_eq!(seqs(&out), [(3, true)]);
    }

    fn full_ack(last_ack_seq: u32, avail_buf_size: u32) -> AckCif {
        AckCif::Full {
            last_ack_seq,
            rtt_us: 20_000,
            rtt_var_us: 5_000,
            avail_buf_size,
            pkt_recv_rate: 0,
            est_link_capacity: 0,
            recv_rate_bps: 0,
        }
    }

    #[test]
    fn no_more_packets_are_unacknowledged_than_the_peers_window() {
        let now = Instant::now();
        // The handshake's window: 4 packets.
        let mut s = Sender::new(7, 0, Duration::from_millis(120), KeyParity::None, 4);
        for _ in 0..20 {
            s.push(Bytes::from_static(&[0x47; 188]));
        }
        let mut out = Vec::new();
        s.poll(now, 0, &mut out);
        assert_eq!(seqs(&out), (0..4).map(|s| (s, false)).collect::<Vec<_>>());
        assert!(!s.has_more(), "a full window waits for an ACK");
        out.clear();
        s.poll(now + PACE, 0, &mut out);
        assert!(out.is_empty());
        // Two acknowledged, and the receiver has room for 3 beyond its ack point.
        s.ack(1, &full_ack(2, 3), 0);
        assert!(s.has_more());
        s.poll(now + PACE * 2, 0, &mut out);
        assert_eq!(seqs(&out), [(4, false)]);
        // A light ACK frees packets but keeps the window the last full one gave.
        out.clear();
        s.ack(0, &AckCif::Light { last_ack_seq: 5 }, 0);
        s.poll(now + PACE * 3, 0, &mut out);
        assert_eq!(seqs(&out), [(5, false), (6, false), (7, false)]);
        // A reordered older ACK does not widen it.
        out.clear();
        s.ack(2, &full_ack(1, 100), 0);
        s.poll(now + PACE * 4, 0, &mut out);
        assert!(out.is_empty());
        // Retransmissions of what is in flight are not held by it.
        let bytes = nak_of(&[LossListEntry::Single(6)]);
        let Ok(ControlPacket::Nak(nak)) = ControlPacket::parse(&bytes) else {
            panic!()
        };
        s.nak(&nak, 0);
        s.poll(now + PACE * 5, 0, &mut out);
        assert_eq!(seqs(&out), [(6, true)]);
    }

    #[test]
    fn a_burst_is_paced_and_old_packets_are_given_up() {
        let t0 = Instant::now();
        let mut s = Sender::new(7, 0, Duration::from_millis(100), KeyParity::None, 8192);
        for _ in 0..(BURST + 5) {
            s.push(Bytes::from_static(&[0x47; 188]));
        }
        let mut out = Vec::new();
        s.poll(t0, 0, &mut out);
        assert_eq!(out.len(), BURST);
        assert!(s.has_more());
        out.clear();
        s.poll(t0 + PACE, 0, &mut out);
        assert_eq!(out.len(), 5);
        s.poll(t0 + Duration::from_secs(2), 0, &mut Vec::new());
        assert_eq!(s.sent.len(), 0);
        assert_eq!(s.stats.dropped, (BURST + 5) as u64);
        assert_eq!(s.next_seq(), (BURST + 5) as u32);
    }
}
