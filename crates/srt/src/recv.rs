//! The receiving half of a connection: packets back in order, losses reported,
//! acknowledgements sent, and a hole given up on when waiting for it longer would
//! make what follows later than the agreed latency.
//!
//! Why not srt-runtime's `Receiver` and `TsbpdScheduler`: its receiver cannot be told
//! to skip a packet the sender gave up on (that call is crate-private), so a lost
//! packet would be reported forever; and a server does not play out, so holding
//! every packet to its delivery time only adds latency. Here a packet is delivered
//! as soon as everything before it is, and a hole waits at most the latency, counted
//! from the arrival of the first packet after it.
//!
//! # Invariants
//! - `slots[i]` is sequence number `next + i`; the window never spans more than
//!   `window` packets, so one connection holds at most that many payloads.
//! - Missing slots between `next` and the highest arrival are the loss list.

use crate::control::{self, Rtt};
use crate::wire::seq;
use bytes::Bytes;
use srt_runtime::packet::{AckCif, LossListEntry};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// A full ACK every 10 ms, a light one every 64 packets between them (SRT's rules).
const FULL_ACK_PERIOD: Duration = Duration::from_millis(10);
const LIGHT_ACK_PACKETS: u32 = 64;
/// Full ACKs remembered for their ACKACK (the round-trip measurement).
const ACKS_KEPT: usize = 64;

#[derive(Debug)]
enum Slot {
    Missing,
    /// The sender said it will not send it (a drop request): skipped.
    Dropped,
    Held(Bytes, Instant),
}

/// Counters of the receiving half.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RecvStats {
    pub packets: u64,
    pub bytes: u64,
    pub retransmitted: u64,
    /// Packets never received in time and skipped.
    pub lost: u64,
    pub duplicates: u64,
    /// Packets too far ahead of the window, or too old.
    pub outside: u64,
}

#[derive(Debug)]
pub struct Receiver {
    /// The peer's socket id: our control packets' destination.
    peer: u32,
    next: u32,
    slots: VecDeque<Slot>,
    window: usize,
    latency: Duration,
    delivered: VecDeque<Bytes>,
    /// Control packets to send.
    out: Vec<Vec<u8>>,
    rtt: Rtt,
    last_full_ack: Option<Instant>,
    /// The ack point of the last full ACK: an unchanged one is not repeated.
    last_acked: Option<u32>,
    packets_since_ack: u32,
    ack_number: u32,
    acks: VecDeque<(u32, Instant)>,
    last_nak: Option<Instant>,
    /// Packets and bytes in the current second, for the ACK's receive rates.
    rate: (Instant, u32, u64),
    rates: (u32, u32),
    pub stats: RecvStats,
}

impl Receiver {
    pub fn new(peer: u32, isn: u32, window: u32, latency: Duration, now: Instant) -> Receiver {
        Receiver {
            peer,
            next: isn & crate::wire::SEQ_MASK,
            slots: VecDeque::new(),
            window: window.clamp(32, 1 << 16) as usize,
            latency,
            delivered: VecDeque::new(),
            out: Vec::new(),
            rtt: Rtt::default(),
            last_full_ack: None,
            last_acked: None,
            packets_since_ack: 0,
            ack_number: 0,
            acks: VecDeque::new(),
            last_nak: None,
            rate: (now, 0, 0),
            rates: (0, 0),
            stats: RecvStats::default(),
        }
    }

    pub fn rtt(&self) -> Rtt {
        self.rtt
    }

    /// A data packet's payload (already decrypted), with the wire timestamp `ts` for
    /// our control packets.
    pub fn packet(
        &mut self,
        sequence: u32,
        retransmitted: bool,
        payload: Bytes,
        now: Instant,
        ts: u32,
    ) {
        let offset = seq::diff(sequence, self.next);
        if offset < 0 {
            self.stats.duplicates += 1;
            return;
        }
        let offset = offset as usize;
        if offset >= self.window {
            self.stats.outside += 1;
            return;
        }
        self.stats.packets += 1;
        self.stats.bytes += payload.len() as u64;
        self.stats.retransmitted += u64::from(retransmitted);
        self.count_rate(payload.len(), now);
        self.packets_since_ack += 1;
        if offset >= self.slots.len() {
            // Beyond the highest so far: what lies between is lost, reported now.
            let first_lost = self.slots.len();
            if offset > first_lost {
                let a = seq::add(self.next, first_lost as u32);
                let b = seq::add(self.next, offset as u32 - 1);
                let entry = if a == b {
                    LossListEntry::Single(a)
                } else {
                    LossListEntry::Range(a, b)
                };
                self.out.extend(control::naks(self.peer, ts, &[entry]));
                self.last_nak = Some(now);
            }
            self.slots.resize_with(offset + 1, || Slot::Missing);
        }
        match self.slots.get_mut(offset) {
            Some(slot @ Slot::Missing) => *slot = Slot::Held(payload, now),
            _ => self.stats.duplicates += 1,
        }
        self.release(now);
    }

    /// The sender gave up on `first..=last`.
    pub fn dropped(&mut self, first: u32, last: u32, now: Instant) {
        let from = seq::diff(first, self.next).max(0) as usize;
        let to = seq::diff(last, self.next);
        if to < 0 {
            return;
        }
        let Some(last) = self.slots.len().checked_sub(1) else {
            return;
        };
        let to = (to as usize).min(last);
        if from > to {
            return;
        }
        for slot in self.slots.range_mut(from..=to) {
            if matches!(slot, Slot::Missing) {
                *slot = Slot::Dropped;
            }
        }
        self.release(now);
    }

    /// Delivers what is in order; gives up holes the latency no longer waits for.
    fn release(&mut self, now: Instant) {
        loop {
            match self.slots.front() {
                Some(Slot::Held(..)) | Some(Slot::Dropped) => {
                    if let Some(Slot::Held(payload, _)) = self.slots.pop_front() {
                        self.delivered.push_back(payload);
                    }
                    self.next = seq::next(self.next);
                }
                Some(Slot::Missing) => {
                    let late = self.slots.iter().find_map(|s| match s {
                        Slot::Held(_, at) => Some(*at),
                        _ => None,
                    });
                    match late {
                        Some(at) if now.saturating_duration_since(at) >= self.latency => {
                            while let Some(Slot::Missing) = self.slots.front() {
                                self.slots.pop_front();
                                self.stats.lost += 1;
                                self.next = seq::next(self.next);
                            }
                        }
                        _ => return,
                    }
                }
                None => return,
            }
        }
    }

    fn count_rate(&mut self, len: usize, now: Instant) {
        let (since, packets, bytes) = &mut self.rate;
        if now.saturating_duration_since(*since) >= Duration::from_secs(1) {
            self.rates = (*packets, u32::try_from(*bytes).unwrap_or(u32::MAX));
            *since = now;
            *packets = 0;
            *bytes = 0;
        }
        *packets += 1;
        *bytes += len as u64;
    }

    /// Payloads in order.
    pub fn poll_data(&mut self) -> Option<Bytes> {
        self.delivered.pop_front()
    }

    /// Control packets to send.
    pub fn take_out(&mut self, into: &mut Vec<Vec<u8>>) {
        into.append(&mut self.out);
    }

    /// The answer to one of our full ACKs: a round-trip sample.
    pub fn ackack(&mut self, number: u32, now: Instant) {
        if let Some(i) = self.acks.iter().position(|(n, _)| *n == number) {
            if let Some((_, sent)) = self.acks.get(i) {
                self.rtt.sample(now.saturating_duration_since(*sent));
            }
            self.acks.drain(..=i);
        }
    }

    /// Acknowledgements and repeated loss reports that are due.
    pub fn tick(&mut self, now: Instant, ts: u32) {
        self.release(now);
        let full_due = self
            .last_full_ack
            .is_none_or(|at| now.saturating_duration_since(at) >= FULL_ACK_PERIOD);
        let changed = self.last_acked != Some(self.next);
        if full_due && (changed || self.packets_since_ack > 0) {
            self.ack_number = self.ack_number.wrapping_add(1).max(1);
            let cif = AckCif::Full {
                last_ack_seq: self.next,
                rtt_us: Rtt::us(self.rtt.rtt),
                rtt_var_us: Rtt::us(self.rtt.var),
                avail_buf_size: (self.window - self.slots.len()).max(2) as u32,
                pkt_recv_rate: self.rates.0,
                est_link_capacity: self.rates.0,
                recv_rate_bps: self.rates.1,
            };
            self.out
                .push(control::ack(self.peer, ts, self.ack_number, cif));
            if self.acks.len() == ACKS_KEPT {
                self.acks.pop_front();
            }
            self.acks.push_back((self.ack_number, now));
            self.last_full_ack = Some(now);
            self.last_acked = Some(self.next);
            self.packets_since_ack = 0;
        } else if self.packets_since_ack >= LIGHT_ACK_PACKETS {
            let cif = AckCif::Light {
                last_ack_seq: self.next,
            };
            self.out.push(control::ack(self.peer, ts, 0, cif));
            self.packets_since_ack = 0;
        }
        let nak_due = self
            .last_nak
            .is_none_or(|at| now.saturating_duration_since(at) >= self.rtt.nak_interval());
        if nak_due {
            let losses = self.losses();
            if !losses.is_empty() {
                self.out.extend(control::naks(self.peer, ts, &losses));
                self.last_nak = Some(now);
            }
        }
    }

    /// The loss list: runs of missing slots.
    fn losses(&self) -> Vec<LossListEntry> {
        let mut out = Vec::new();
        let mut run: Option<(usize, usize)> = None;
        for (i, slot) in self.slots.iter().enumerate() {
            if matches!(slot, Slot::Missing) {
                run = Some(run.map_or((i, i), |(a, _)| (a, i)));
            } else if let Some((a, b)) = run.take() {
                out.push(self.entry(a, b));
            }
        }
        // The last slot is always held: a run never ends the window.
        if let Some((a, b)) = run {
            out.push(self.entry(a, b));
        }
        out
    }

    fn entry(&self, a: usize, b: usize) -> LossListEntry {
        let (a, b) = (seq::add(self.next, a as u32), seq::add(self.next, b as u32));
        if a == b {
            LossListEntry::Single(a)
        } else {
            LossListEntry::Range(a, b)
        }
    }

    /// When `tick` has something to do next.
    pub fn next_timeout(&self, now: Instant) -> Option<Instant> {
        let mut at = None;
        if self.last_acked != Some(self.next) || self.packets_since_ack > 0 {
            at = Some(self.last_full_ack.map_or(now, |t| t + FULL_ACK_PERIOD));
        }
        if matches!(self.slots.front(), Some(Slot::Missing)) {
            let hole = self.slots.iter().find_map(|s| match s {
                Slot::Held(_, t) => Some(*t + self.latency),
                _ => None,
            });
            let nak = self.last_nak.map_or(now, |t| t + self.rtt.nak_interval());
            at = [at, Some(nak), hole].into_iter().flatten().min();
        }
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use srt_runtime::packet::ControlPacket;

    fn b(n: u8) -> Bytes {
        Bytes::from(vec![n; 4])
    }

    fn drain(r: &mut Receiver) -> Vec<u8> {
        std::iter::from_fn(|| r.poll_data()).map(|p| p[0]).collect()
    }

    fn naks(r: &mut Receiver) -> Vec<Vec<LossListEntry>> {
        let mut out = Vec::new();
        r.take_out(&mut out);
        out.iter()
            .filter_map(|p| match ControlPacket::parse(p).ok()? {
                ControlPacket::Nak(n) => Some(n.entries().filter_map(Result::ok).collect()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn in_order_packets_are_delivered_at_once() {
        let now = Instant::now();
        let mut r = Receiver::new(9, 100, 8192, Duration::from_millis(120), now);
        for i in 0..3 {
            r.packet(100 + i, false, b(i as u8), now, 0);
        }
        assert_eq!(drain(&mut r), [0, 1, 2]);
        assert!(naks(&mut r).is_empty());
    }

    #[test]
    fn a_hole_is_reported_filled_and_delivered_in_order() {
        let now = Instant::now();
        let mut r = Receiver::new(9, 100, 8192, Duration::from_millis(120), now);
        r.packet(100, false, b(0), now, 0);
        r.packet(103, false, b(3), now, 0);
        assert_eq!(drain(&mut r), [0]);
        assert_eq!(naks(&mut r), [vec![LossListEntry::Range(101, 102)]]);
        r.packet(102, true, b(2), now, 0);
        r.packet(101, true, b(1), now, 0);
        assert_eq!(drain(&mut r), [1, 2, 3]);
        assert_eq!(r.stats.retransmitted, 2);
        r.packet(101, true, b(1), now, 0);
        assert_eq!(r.stats.duplicates, 1);
    }

    #[test]
    fn a_hole_is_given_up_after_the_latency_and_repeated_until_then() {
        let t0 = Instant::now();
        let latency = Duration::from_millis(120);
        let mut r = Receiver::new(9, 5, 8192, latency, t0);
        r.packet(5, false, b(5), t0, 0);
        r.packet(7, false, b(7), t0, 0);
        naks(&mut r);
        r.tick(t0 + Duration::from_millis(30), 0);
        // Repeated once the interval (RTT + 4 RTTVar = 300 ms at first) has passed;
        // not before.
        assert!(naks(&mut r).is_empty());
        assert_eq!(drain(&mut r), [5]);
        r.tick(t0 + latency, 0);
        assert_eq!(drain(&mut r), [7]);
        assert_eq!(r.stats.lost, 1);
        r.packet(6, true, b(6), t0 + latency, 0);
        assert!(drain(&mut r).is_empty());
    }

    #[test]
    fn a_drop_request_skips_without_waiting() {
        let now = Instant::now();
        let mut r = Receiver::new(9, 0, 8192, Duration::from_secs(1), now);
        r.packet(3, false, b(3), now, 0);
        r.dropped(0, 2, now);
        assert_eq!(drain(&mut r), [3]);
        assert_eq!(r.stats.lost, 0);
    }

    #[test]
    fn a_drop_request_before_anything_arrived_is_harmless() {
        // Found by the connection fuzz target: an empty window.
        let now = Instant::now();
        let mut r = Receiver::new(9, 0, 64, Duration::from_secs(1), now);
        r.dropped(0, 5, now);
        r.dropped(5, 0, now);
        r.packet(2, false, b(2), now, 0);
        r.dropped(7, 9, now);
        r.dropped(0, 1, now);
        assert_eq!(drain(&mut r), [2]);
    }

    #[test]
    fn packets_outside_the_window_take_no_room() {
        let now = Instant::now();
        let mut r = Receiver::new(9, 0, 64, Duration::from_secs(1), now);
        r.packet(1_000_000, false, b(1), now, 0);
        r.packet(64, false, b(1), now, 0);
        assert_eq!(r.stats.outside, 2);
        assert!(r.slots.is_empty());
        // Around the wrap of the sequence space.
        let mut r = Receiver::new(9, crate::wire::SEQ_MASK, 64, Duration::from_secs(1), now);
        r.packet(crate::wire::SEQ_MASK, false, b(1), now, 0);
        r.packet(0, false, b(2), now, 0);
        assert_eq!(drain(&mut r), [1, 2]);
    }

    #[test]
    fn acks_carry_the_ack_point_and_ackacks_measure_the_round_trip() {
        let t0 = Instant::now();
        let mut r = Receiver::new(9, 0, 8192, Duration::from_secs(1), t0);
        r.packet(0, false, b(0), t0, 0);
        r.tick(t0, 0);
        let mut out = Vec::new();
        r.take_out(&mut out);
        let Ok(ControlPacket::Ack(ack)) = ControlPacket::parse(&out[0]) else {
            panic!("an ACK")
        };
        assert!(matches!(
            ack.cif,
            AckCif::Full {
                last_ack_seq: 1,
                ..
            }
        ));
        r.ackack(ack.ack_number, t0 + Duration::from_millis(20));
        assert!(r.rtt().rtt < Duration::from_millis(100));
        // Nothing new: no ACK again.
        r.tick(t0 + Duration::from_millis(50), 0);
        let mut out = Vec::new();
        r.take_out(&mut out);
        assert!(out.is_empty());
    }
}
