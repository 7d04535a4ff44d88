//! A small reorder buffer for RTP over UDP.
//!
//! Why: UDP reorders and loses packets; the depacketizer wants them in sequence order
//! and drops a frame with a gap. This buffer holds up to a fixed number of packets,
//! releases them in order, and waits for a missing one only while fewer than
//! `max_wait` later packets have arrived; then it skips the hole (the depacketizer sees
//! the gap and drops that frame). Counting packets rather than time keeps it sans-IO;
//! a caller wanting a time bound calls [`JitterBuffer::skip_missing`] from a timer.
//!
//! Call contract: [`JitterBuffer::push`] each received packet, then drain
//! [`JitterBuffer::pop`] to `None`.
//!
//! # Invariants
//! - Memory is the fixed slot array plus at most `capacity` released-but-undrained packets.
//! - Packets come out in increasing sequence order (mod 2^16), each at most once; a
//!   packet older than the last one released is dropped as late.
//! - At the start nothing is released until `max_wait + 1` packets are held, so packets
//!   reordered around the first one are not lost; after that only holes cause waiting.
//! - A jump of more than the capacity (a long loss burst, or the sender restarting its
//!   numbering) releases what is held, in order, and restarts at the new packet.

use super::header::peek_sequence;
use super::RtpError;
use bytes::Bytes;
use std::collections::VecDeque;

/// Default number of slots: a few frames of video at the usual packet rates.
pub const JITTER_CAPACITY: usize = 64;
/// Default number of later packets to wait for a missing one.
pub const JITTER_MAX_WAIT: usize = 16;
/// Largest capacity accepted; more is latency nobody wants from a reorder buffer.
pub const MAX_JITTER_CAPACITY: usize = 4096;

/// Counters for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JitterStats {
    /// Packets given to `push` with a readable header.
    pub pushed: u64,
    /// Packets released by `pop`.
    pub released: u64,
    /// Sequence numbers given up on (lost, or arriving after their wait).
    pub skipped: u64,
    /// Packets dropped for arriving after their turn.
    pub late: u64,
    /// Packets dropped as duplicates of one held.
    pub duplicates: u64,
    /// Packets that arrived after a later one and were put back in their place.
    pub reordered: u64,
    /// Restarts after a jump in sequence numbers.
    pub resets: u64,
    /// Released packets dropped because the caller did not drain `pop`.
    pub overflow: u64,
}

/// Puts RTP packets back in sequence order. See the module docs.
#[derive(Debug)]
pub struct JitterBuffer {
    slots: Vec<Option<Bytes>>,
    /// Slot of `next_seq`.
    head: usize,
    next_seq: Option<u16>,
    held: usize,
    /// Slots from `head` to the furthest held packet, inclusive.
    extent: usize,
    /// Whether anything was released: until then the buffer waits for `max_wait`
    /// packets, and a packet older than the first one moves the start back.
    started: bool,
    max_wait: usize,
    ready: VecDeque<Bytes>,
    stats: JitterStats,
}

impl Default for JitterBuffer {
    fn default() -> Self {
        Self::new(JITTER_CAPACITY, JITTER_MAX_WAIT)
    }
}

impl JitterBuffer {
    /// A buffer of `capacity` packets (2..=[`MAX_JITTER_CAPACITY`]) that waits for a missing
    /// packet until `max_wait` later ones are held (at most `capacity - 1`).
    pub fn new(capacity: usize, max_wait: usize) -> Self {
        let capacity = capacity.clamp(2, MAX_JITTER_CAPACITY);
        JitterBuffer {
            slots: vec![None; capacity],
            head: 0,
            next_seq: None,
            held: 0,
            extent: 0,
            started: false,
            max_wait: max_wait.min(capacity - 1),
            ready: VecDeque::new(),
            stats: JitterStats::default(),
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> JitterStats {
        self.stats
    }

    /// Packets held or released and not yet popped.
    pub fn len(&self) -> usize {
        self.held + self.ready.len()
    }

    /// Whether nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The sequence number the buffer waits for next.
    pub fn next_seq(&self) -> Option<u16> {
        self.next_seq
    }

    /// Takes one RTP packet. Fails only when it has no readable RTP header.
    pub fn push(&mut self, packet: Bytes) -> Result<(), RtpError> {
        let seq = peek_sequence(&packet)?;
        self.stats.pushed += 1;
        let cap = self.slots.len();
        let Some(next) = self.next_seq else {
            self.restart(seq, packet);
            return Ok(());
        };
        let ahead = usize::from(seq.wrapping_sub(next));
        if ahead >= 0x8000 {
            let behind = 0x1_0000 - ahead;
            if !self.started && behind + self.extent <= cap {
                // Reordered around the very first packet: start earlier.
                self.head = (self.head + cap - behind) % cap;
                self.next_seq = Some(seq);
                self.extent += behind;
                if let Some(slot) = self.slots.get_mut(self.head) {
                    *slot = Some(packet);
                    self.held += 1;
                    self.stats.reordered += 1;
                }
            } else if behind <= cap {
                self.stats.late += 1;
            } else {
                self.stats.resets += 1;
                self.release_all();
                self.restart(seq, packet);
            }
            return Ok(());
        }
        if ahead >= cap {
            // Everything between is lost or beyond our patience.
            self.stats.skipped += ahead.saturating_sub(self.held) as u64;
            self.stats.resets += 1;
            self.release_all();
            self.restart(seq, packet);
            return Ok(());
        }
        let idx = (self.head + ahead) % cap;
        match self.slots.get_mut(idx) {
            Some(slot @ None) => {
                *slot = Some(packet);
                self.held += 1;
                if ahead < self.extent {
                    self.stats.reordered += 1;
                }
                self.extent = self.extent.max(ahead + 1);
            }
            _ => self.stats.duplicates += 1,
        }
        Ok(())
    }

    /// The next packet in order, if it is here or the wait for a missing one is over.
    pub fn pop(&mut self) -> Option<Bytes> {
        if let Some(p) = self.ready.pop_front() {
            self.stats.released += 1;
            return Some(p);
        }
        if !self.started && self.held <= self.max_wait {
            return None;
        }
        while self.held > 0 {
            let present = matches!(self.slots.get(self.head), Some(Some(_)));
            if present {
                self.started = true;
                let p = self.take_head();
                self.stats.released += 1;
                return p;
            }
            if self.held <= self.max_wait {
                return None;
            }
            self.advance();
            self.stats.skipped += 1;
        }
        None
    }

    /// Gives up on every missing packet before the next held one (call from a timer),
    /// so the following `pop` returns it. Returns how many sequence numbers were skipped.
    pub fn skip_missing(&mut self) -> usize {
        self.started = true;
        let mut skipped = 0;
        while self.held > 0 {
            if let Some(slot) = self.slots.get(self.head) {
                if slot.is_some() {
                    break;
                }
            }
            self.advance();
            skipped += 1;
        }
        self.stats.skipped += skipped as u64;
        skipped
    }

    /// Takes the packet at the head slot (if present) and moves on by one.
    fn take_head(&mut self) -> Option<Bytes> {
        let p = self.slots.get_mut(self.head).and_then(Option::take);
        if p.is_some() {
            self.held -= 1;
        }
        self.advance();
        p
    }

    fn advance(&mut self) {
        self.extent = self.extent.saturating_sub(1);
        self.head = (self.head + 1) % self.slots.len();
        self.next_seq = self.next_seq.map(|s| s.wrapping_add(1));
    }

    /// Moves every held packet, in order, to the released queue.
    fn release_all(&mut self) {
        self.started = true;
        while self.held > 0 {
            if let Some(p) = self.take_head() {
                if self.ready.len() >= self.slots.len() {
                    self.ready.pop_front();
                    self.stats.overflow += 1;
                }
                self.ready.push_back(p);
            }
        }
    }

    fn restart(&mut self, seq: u16, packet: Bytes) {
        self.head = 0;
        self.extent = 1;
        self.next_seq = Some(seq);
        if let Some(slot) = self.slots.get_mut(0) {
            *slot = Some(packet);
            self.held = 1;
        }
    }
}
