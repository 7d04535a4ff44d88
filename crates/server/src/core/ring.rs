//! The frame ring: the recent packets of one stream, shared by every player on every worker.
//!
//! Why: players never own queues of media, so a slow player cannot grow memory. Each
//! worker mirrors the ring's `Arc<Packet>`s once per frame, and each player holds a
//! cursor (`core::cursor::Cursor`) into that mirror; a push relay holds one into the
//! ring itself. The ring keeps packets from a keyframe on, bounded by time and bytes,
//! and so is also the GOP cache new players start from.
//!
//! # Invariants
//! - Positions are `u64` and never wrap; `first..next` is readable.
//! - After a trim, `first` is a key packet (or the ring is empty), so a player that
//!   lagged out of the ring can always be moved to a key packet.
//! - `start` is the newest key packet that comes after the current decoder
//!   configuration; a new player starts there, or waits while it is `None`.

use crate::core::packet::Packet;
use std::collections::VecDeque;
use std::sync::Arc;

/// Bounds of one ring.
#[derive(Debug, Clone, Copy)]
pub struct RingLimits {
    /// Media time kept, in ms (at least the current GOP is kept regardless).
    pub max_ms: i64,
    /// Payload bytes kept; past this even the current GOP is dropped.
    pub max_bytes: usize,
}

#[derive(Debug)]
pub struct Ring {
    packets: VecDeque<Arc<Packet>>,
    first: u64,
    bytes: usize,
    /// Positions of the key packets in the ring, oldest first.
    keys: VecDeque<u64>,
    start: Option<u64>,
    limits: RingLimits,
}

impl Ring {
    pub fn new(limits: RingLimits) -> Self {
        Ring {
            packets: VecDeque::new(),
            first: 0,
            bytes: 0,
            keys: VecDeque::new(),
            start: None,
            limits,
        }
    }

    /// Position of the oldest packet kept.
    pub fn first(&self) -> u64 {
        self.first
    }

    /// Position the next packet will get.
    pub fn next(&self) -> u64 {
        self.first + self.packets.len() as u64
    }

    /// Where a new player starts, if anywhere yet.
    pub fn start(&self) -> Option<u64> {
        self.start
    }

    /// The oldest key packet kept: where a consumer that wants all the ring holds
    /// starts.
    pub fn oldest_key(&self) -> Option<u64> {
        self.keys.front().copied()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.packets.len()
    }

    /// Forget the start point: the decoder configuration changed, so new players must
    /// wait for a keyframe made with the new one.
    pub fn reset_start(&mut self) {
        self.start = None;
    }

    /// Appends a packet, then trims to the limits.
    pub fn push(&mut self, packet: Arc<Packet>) {
        let pos = self.next();
        if packet.key {
            self.keys.push_back(pos);
            self.start = Some(pos);
        }
        self.bytes += packet.size();
        self.packets.push_back(packet);
        self.trim();
    }

    fn trim(&mut self) {
        loop {
            let span = match (self.packets.front(), self.packets.back()) {
                (Some(a), Some(b)) => b.ts_ms.saturating_sub(a.ts_ms),
                _ => return,
            };
            let over_time = span > self.limits.max_ms;
            let over_bytes = self.bytes > self.limits.max_bytes;
            if !over_time && !over_bytes {
                return;
            }
            // Drop whole GOPs from the front, keeping the newest one for new players.
            let cut = match self.keys.iter().find(|&&k| k > self.first) {
                Some(&k) => k,
                // One GOP (or none) left: keep it unless it alone breaks the byte bound.
                None if over_bytes => self.next(),
                None if self.keys.is_empty() => self.first + 1,
                None => return,
            };
            self.drop_before(cut);
        }
    }

    fn drop_before(&mut self, cut: u64) {
        while self.first < cut {
            match self.packets.pop_front() {
                Some(p) => self.bytes -= p.size(),
                None => break,
            }
            self.first += 1;
        }
        while self.keys.front().is_some_and(|&k| k < self.first) {
            self.keys.pop_front();
        }
        if self.start.is_some_and(|s| s < self.first) {
            self.start = None;
        }
    }

    /// The packet at `pos`, if still kept.
    pub fn get(&self, pos: u64) -> Option<&Arc<Packet>> {
        let i = pos.checked_sub(self.first)?;
        self.packets.get(usize::try_from(i).ok()?)
    }

    /// Appends the packets from `from` on to `out` and returns the position of the
    /// first one appended (later than `from` when `from` left the ring).
    pub fn copy_since(&self, from: u64, out: &mut VecDeque<Arc<Packet>>) -> u64 {
        let from = from.max(self.first);
        let skip = usize::try_from(from - self.first).unwrap_or(usize::MAX);
        out.extend(self.packets.iter().skip(skip).cloned());
        from
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::packet::Payload;
    use bytes::Bytes;

    fn pkt(ts: i64, key: bool, len: usize) -> Arc<Packet> {
        Packet::new(Payload::Metadata(Bytes::from(vec![0u8; len])), ts, key)
    }

    fn limits(max_ms: i64, max_bytes: usize) -> RingLimits {
        RingLimits { max_ms, max_bytes }
    }

    #[test]
    fn keeps_whole_gops_within_the_time_bound() {
        let mut ring = Ring::new(limits(3000, 1 << 30));
        // 2 s GOPs at 25 fps for 10 s.
        for i in 0..250i64 {
            ring.push(pkt(i * 40, i % 50 == 0, 10));
        }
        let first = ring.get(ring.first()).unwrap();
        assert!(first.key, "ring starts at a keyframe");
        assert!(ring.next() - ring.first() <= 150);
        assert_eq!(ring.start(), Some(200));
    }

    #[test]
    fn the_current_gop_is_kept_past_the_time_bound() {
        let mut ring = Ring::new(limits(100, 1 << 30));
        for i in 0..20i64 {
            ring.push(pkt(i * 40, i == 0, 10));
        }
        assert_eq!(ring.first(), 0);
        assert_eq!(ring.len(), 20);
    }

    #[test]
    fn the_byte_bound_holds_even_inside_one_gop() {
        let mut ring = Ring::new(limits(1 << 40, 1000));
        for i in 0..100i64 {
            ring.push(pkt(i, i == 0, 100));
        }
        assert!(ring.bytes() <= 1000);
        assert_eq!(ring.start(), None, "the start keyframe was dropped");
    }

    #[test]
    fn without_keys_the_ring_is_still_bounded() {
        let mut ring = Ring::new(limits(500, 1 << 30));
        for i in 0..1000i64 {
            ring.push(pkt(i * 10, false, 1));
        }
        assert!(ring.len() <= 52);
    }

    #[test]
    fn copy_since_clamps_to_the_oldest_packet() {
        let mut ring = Ring::new(limits(1000, 1 << 30));
        for i in 0..100i64 {
            ring.push(pkt(i * 40, i % 10 == 0, 1));
        }
        let mut out = VecDeque::new();
        let got = ring.copy_since(0, &mut out);
        assert_eq!(got, ring.first());
        assert_eq!(out.len() as u64, ring.next() - ring.first());
        out.clear();
        assert_eq!(ring.copy_since(ring.next(), &mut out), ring.next());
        assert!(out.is_empty());
    }
}
