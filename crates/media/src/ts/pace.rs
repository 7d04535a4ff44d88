//! [`Pacer`]: MPEG-TS packets out as datagrams at the times their PCR says, at the
//! stream's own rate or at a constant mux rate filled with null packets.
//!
//! Why: a stream's TS arrives a frame (or a GOP, at a start) at a time; sent like that,
//! a 4 Mbit/s stream leaves in bursts that overflow the buffers of IPTV encoders and
//! set-top boxes and the queues of multicast switches. Real senders space every packet
//! by the stream's clock: the PCR says when its packet is due, and the packets between
//! two PCRs are spread evenly over the gap (the way a decoder's buffer model sees
//! them). A constant rate (CBR) is what many IPTV receivers and modulators need: every
//! slot of the rate carries a packet, null packets (PID 0x1FFF) where the stream has
//! none due, and the PCRs are rewritten to each packet's place on the wire (its byte
//! position at the rate), as a remultiplexer does, so a receiver's clock recovery sees
//! exactly the rate.
//!
//! Call contract (sans-IO, time is an input): [`Pacer::push`] the stream's TS bytes as
//! they come; then [`Pacer::poll_datagram`] until `None`, and wake again at
//! [`Pacer::poll_timeout`]. Packets are held until the next PCR (their spacing needs
//! it), so output runs one PCR gap (100 ms with our muxer) behind input.
//!
//! # Invariants
//! - A datagram is exactly `packets` TS packets in CBR mode (and in VBR, except the
//!   last one after [`Pacer::finish`]); a TS packet is never split.
//! - Memory is bounded: at most [`MAX_QUEUED`] packets are held; [`Pacer::push`] takes
//!   what fits and says how much.
//! - A PCR that goes backwards or jumps more than [`MAX_PCR_STEP`] (a new publisher, a
//!   discontinuity) starts a new clock epoch: its packets follow the previous ones at
//!   once, never a sleep for the jump nor a burst for it. A datagram more than
//!   [`MAX_LATE`] late (the source ran slow, the caller was stalled) re-anchors the
//!   clock to now rather than bursting to catch up. Both are counted.
//! - In CBR, stream packets that cannot fit the rate are sent anyway in extra datagrams
//!   and counted as overflow; nothing is dropped silently.
//! - Nothing panics on any input: bytes that are not whole TS packets are counted and
//!   skipped; all clock arithmetic is checked or saturating.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// A TS packet's length.
const PACKET: usize = 188;
/// Bits per TS packet: the unit of a constant-rate slot.
const PACKET_BITS: u128 = (PACKET * 8) as u128;
/// The PCR clock: 27 MHz.
const PCR_HZ: u128 = 27_000_000;
/// The PCR wraps at 2^33 periods of 90 kHz, each 300 ticks of 27 MHz.
const PCR_WRAP: u64 = (1 << 33) * 300;
/// The RTP clock of MP2T (RFC 2250): 90 kHz.
const RTP_HZ: u128 = 90_000;
/// Offset of the PCR's adaptation field flags byte, and of the PCR itself.
const AF_FLAGS: usize = 5;
const PCR_AT: usize = 6;

/// Most packets held: at 40 Mbit/s about a second, at 4 Mbit/s some twelve (a GOP cache
/// handed over at a push's start fits). 6 MiB.
pub const MAX_QUEUED: usize = 32_768;
/// Most packets held waiting for the next PCR: past it they are spaced at the last known
/// rate and the next PCR starts a new epoch (a stream without PCR on its PCR PID).
pub const MAX_UNSTAMPED: usize = 16_384;
/// Largest forward step between two PCRs taken as continuous (27 MHz ticks): one second;
/// our muxer sends one at least every 100 ms, a broadcaster every 40 ms.
pub const MAX_PCR_STEP: u64 = 27_000_000;
/// A datagram due longer ago than this re-anchors the clock instead of going out in a
/// burst with the ones after it.
pub const MAX_LATE: Duration = Duration::from_millis(500);
/// How far behind its rate slots a CBR stream's packets may run before they go out in
/// extra datagrams (counted as overflow): a decoder buffer's worth of jitter.
pub const CBR_MAX_LAG: Duration = Duration::from_millis(200);

/// The null packet of a constant-rate stream: PID 0x1FFF, payload only, stuffing.
const NULL_HEADER: [u8; 4] = [0x47, 0x1f, 0xff, 0x10];

/// How the pacer sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PaceConfig {
    /// TS packets per datagram (1 to 7 on an Ethernet path).
    pub packets: usize,
    /// A constant rate in bits per second, filled with null packets; `None`: the
    /// stream's own rate, paced by its PCR.
    pub bitrate: Option<u64>,
}

/// What the pacer did, for logs and metrics; counts only grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PaceStats {
    /// Datagrams given out.
    pub datagrams: u64,
    /// Stream packets given out (not null packets).
    pub packets: u64,
    /// Null packets inserted to hold the constant rate.
    pub null_packets: u64,
    /// Stream packets sent beyond the constant rate, which the rate could not carry.
    pub overflow_packets: u64,
    /// New clock epochs: a PCR that went back or jumped, or a stream without PCRs.
    pub discontinuities: u64,
    /// Times the clock was re-anchored to now because output ran late.
    pub reanchors: u64,
    /// Input bytes skipped for not being whole TS packets.
    pub skipped_bytes: u64,
}

/// One datagram given out by [`Pacer::poll_datagram`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paced {
    /// When it was due.
    pub due: Instant,
    /// Its time on a 90 kHz clock from the pacer's first datagram (RTP's timestamp):
    /// the time its first packet was due.
    pub time_90k: u64,
    /// TS packets written.
    pub packets: usize,
}

/// When a packet is due on its epoch's clock: the epoch and its PCR (27 MHz, unwrapped
/// within the epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    epoch: u64,
    pcr: u64,
}

#[derive(Debug, Clone)]
struct Queued {
    packet: [u8; PACKET],
    /// `None` until the next PCR says when it is due.
    stamp: Option<Stamp>,
    /// Carries a PCR (rewritten in CBR).
    has_pcr: bool,
}

/// An epoch's clock on the caller's: PCR `pcr` is due at `at`.
#[derive(Debug, Clone, Copy)]
struct Clock {
    epoch: u64,
    pcr: u64,
    at: Instant,
    /// The first PCR of this epoch has not been rewritten yet (CBR marks the jump).
    fresh: bool,
}

/// The constant rate's slots: slot `k` is due at `start + k` packet times.
#[derive(Debug, Clone, Copy)]
struct Slots {
    start: Instant,
    next: u64,
}

/// TS in, paced datagrams out. See the module docs.
#[derive(Debug)]
pub struct Pacer {
    config: PaceConfig,
    queue: VecDeque<Queued>,
    /// The first `stamped` packets of `queue` have their stamp.
    stamped: usize,
    /// The last PCR read (unwrapped in its epoch) and its raw value, which the packets
    /// after it wait on.
    last_pcr: Option<(u64, u64)>,
    /// The PID whose PCRs pace the stream.
    pcr_pid: Option<u16>,
    /// Ticks per packet of the last PCR gap: spaces packets that have no PCR after them.
    ticks_per_packet: u64,
    epoch: u64,
    clock: Option<Clock>,
    slots: Option<Slots>,
    /// When the first datagram was due: RTP time 0.
    origin: Option<Instant>,
    /// When the last datagram was due: a new epoch starts no earlier.
    last_due: Option<Instant>,
    /// The latest `now` given: what `poll_timeout` answers when a datagram is ready
    /// but its epoch not yet anchored.
    last_now: Option<Instant>,
    stats: PaceStats,
}

impl Pacer {
    /// A pacer; `config.packets` is clamped to 1..=7 (the URL parser checks it).
    pub fn new(config: PaceConfig) -> Pacer {
        Pacer {
            config: PaceConfig {
                packets: config.packets.clamp(1, super::MAX_PACKETS_PER_DATAGRAM),
                bitrate: config.bitrate.map(|b| b.max(1)),
            },
            queue: VecDeque::new(),
            stamped: 0,
            last_pcr: None,
            pcr_pid: None,
            ticks_per_packet: 0,
            epoch: 0,
            clock: None,
            slots: None,
            origin: None,
            last_due: None,
            last_now: None,
            stats: PaceStats::default(),
        }
    }

    /// What it did so far.
    pub fn stats(&self) -> PaceStats {
        self.stats
    }

    /// Packets held.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Takes the TS packets of `ts` that fit ([`MAX_QUEUED`]); returns the bytes taken
    /// (a multiple of 188 unless the rest was skipped as not TS), so the caller keeps
    /// the rest for later.
    pub fn push(&mut self, now: Instant, ts: &[u8]) -> usize {
        self.last_now = Some(now);
        let mut taken = 0;
        for chunk in ts.chunks(PACKET) {
            if chunk.len() < PACKET || chunk.first() != Some(&0x47) {
                self.stats.skipped_bytes += chunk.len() as u64;
                taken += chunk.len();
                continue;
            }
            if self.queue.len() >= MAX_QUEUED {
                break;
            }
            let mut packet = [0u8; PACKET];
            packet.copy_from_slice(chunk);
            self.take(packet);
            taken += PACKET;
        }
        taken
    }

    /// The stream ended: what is held goes out without waiting for another PCR, the
    /// last datagram short if need be (VBR).
    pub fn finish(&mut self) {
        self.stamp_rest();
        self.last_pcr = None;
    }

    /// When [`Pacer::poll_datagram`] has something next; `None`: nothing is held (and,
    /// in CBR, no rate started yet).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if let (Some(_), Some(slots)) = (self.config.bitrate, self.slots) {
            return Some(self.slot_time(slots, slots.next));
        }
        let head = self.queue.front()?.stamp?;
        if self.stamped < self.config.packets && self.last_pcr.is_some() {
            return None;
        }
        match self.clock {
            Some(c) if c.epoch == head.epoch => Some(due_on(c, head.pcr)),
            _ => self.last_now,
        }
    }

    /// Appends the next datagram's TS packets to `out` if it is due at `now`.
    pub fn poll_datagram(&mut self, now: Instant, out: &mut Vec<u8>) -> Option<Paced> {
        self.last_now = Some(now);
        let paced = match self.config.bitrate {
            None => self.poll_vbr(now, out),
            Some(rate) => self.poll_cbr(now, rate, out),
        }?;
        self.stats.datagrams += 1;
        self.last_due = Some(paced.due);
        Some(paced)
    }

    /// One packet in: a PCR on the pacing PID stamps the packets held before it.
    fn take(&mut self, packet: [u8; PACKET]) {
        let pid = u16::from_be_bytes([packet[1] & 0x1f, packet[2]]);
        let pcr = pcr_of(&packet).filter(|_| self.pcr_pid.is_none_or(|p| p == pid));
        if let Some(raw) = pcr {
            self.pcr_pid = Some(pid);
            self.on_pcr(raw);
        } else if self.queue.len() - self.stamped >= MAX_UNSTAMPED {
            // No PCR for too long: space what is held at the last rate; the next PCR
            // starts an epoch of its own.
            self.stamp_rest();
            self.last_pcr = None;
            self.pcr_pid = None;
        }
        self.queue.push_back(Queued {
            packet,
            stamp: None,
            has_pcr: pcr.is_some(),
        });
    }

    /// A PCR of `raw` ticks arrived: the packets since the last one are spread evenly
    /// over the gap; a gap that is not a step forward of at most [`MAX_PCR_STEP`]
    /// ends the epoch.
    fn on_pcr(&mut self, raw: u64) {
        let held = (self.queue.len() - self.stamped) as u64;
        match self.last_pcr {
            Some((last, last_raw)) => {
                let step = raw.wrapping_sub(last_raw).wrapping_add(PCR_WRAP) % PCR_WRAP;
                if step > 0 && step <= MAX_PCR_STEP {
                    if let Some(t) = step.checked_div(held) {
                        self.ticks_per_packet = t;
                    }
                    self.stamp_held(last, step, held);
                    self.last_pcr = Some((last + step, raw));
                    return;
                }
                // A jump: the held ones at the last rate, then a new epoch.
                self.stamp_rest();
                self.epoch += 1;
                self.stats.discontinuities += 1;
            }
            None if self.stamped < self.queue.len() || self.clock.is_some() => {
                // Packets before the epoch's first PCR (the tables) go with it; a
                // stream that had PCRs before starts a new epoch.
                if self.clock.is_some() || self.stamped > 0 {
                    self.epoch += 1;
                    self.stats.discontinuities += 1;
                }
                self.stamp_held(raw, 0, held);
            }
            None => {}
        }
        self.last_pcr = Some((raw, raw));
    }

    /// Stamps the `held` packets after `self.stamped` from `from` over `span` ticks.
    fn stamp_held(&mut self, from: u64, span: u64, held: u64) {
        let epoch = self.epoch;
        for (i, q) in self.queue.range_mut(self.stamped..).enumerate() {
            let offset = (u128::from(span) * i as u128 / u128::from(held.max(1))) as u64;
            q.stamp = Some(Stamp {
                epoch,
                pcr: from.saturating_add(offset),
            });
        }
        self.stamped = self.queue.len();
    }

    /// Stamps every held packet after the last PCR at the last known packet spacing.
    fn stamp_rest(&mut self) {
        let from = self.last_pcr.map_or(0, |(p, _)| p);
        let held = (self.queue.len() - self.stamped) as u64;
        let span = self.ticks_per_packet.saturating_mul(held);
        self.stamp_held(from, span, held);
    }

    /// The clock of `stamp`'s epoch, anchored now (after the last datagram) when it is a
    /// new one or when `stamp` is more than [`MAX_LATE`] late on it.
    fn clock_for(&mut self, now: Instant, stamp: Stamp) -> Clock {
        match self.clock {
            Some(c) if c.epoch == stamp.epoch && stamp.pcr >= c.pcr => {
                if due_on(c, stamp.pcr) + MAX_LATE >= now {
                    return c;
                }
                self.stats.reanchors += 1;
            }
            _ => {}
        }
        let at = self.last_due.map_or(now, |d| d.max(now));
        // Any new anchor moves the PCR against the position: CBR flags it.
        let fresh = self.clock.is_some();
        let c = Clock {
            epoch: stamp.epoch,
            pcr: stamp.pcr,
            at,
            fresh,
        };
        self.clock = Some(c);
        c
    }

    fn poll_vbr(&mut self, now: Instant, out: &mut Vec<u8>) -> Option<Paced> {
        let want = self.config.packets;
        let ready = self.stamped.min(want);
        // Wait for a whole datagram unless the stream finished (nothing awaits a PCR).
        if ready == 0 || (ready < want && self.last_pcr.is_some()) {
            return None;
        }
        let head = self.queue.front()?.stamp?;
        let clock = self.clock_for(now, head);
        let due = due_on(clock, head.pcr);
        if due > now {
            return None;
        }
        for q in self.queue.drain(..ready) {
            out.extend_from_slice(&q.packet);
        }
        self.stamped -= ready;
        self.stats.packets += ready as u64;
        let time_90k = self.time_90k(due);
        Some(Paced {
            due,
            time_90k,
            packets: ready,
        })
    }

    fn poll_cbr(&mut self, now: Instant, rate: u64, out: &mut Vec<u8>) -> Option<Paced> {
        let want = self.config.packets;
        let slots = match self.slots {
            Some(s) => s,
            None => {
                // The rate starts with the stream's first stamped packet.
                let head = self.queue.front()?.stamp?;
                let clock = self.clock_for(now, head);
                let s = Slots {
                    start: clock.at,
                    next: 0,
                };
                self.slots = Some(s);
                s
            }
        };
        let mut k = slots.next;
        let mut due = self.slot_time(slots, k);
        if due > now {
            return None;
        }
        if due + MAX_LATE < now {
            // The caller stalled: the missed slots are gone, not sent in a burst.
            let elapsed = now.saturating_duration_since(slots.start).as_nanos();
            k = (elapsed * u128::from(rate) / (PACKET_BITS * 1_000_000_000)) as u64;
            due = self.slot_time(slots, k);
            self.stats.reanchors += 1;
        }
        // Stream packets more than CBR_MAX_LAG behind their slot: the rate cannot carry
        // them; they go now in a datagram of their own, beside the rate.
        let overflow = self.head_due(now).is_some_and(|d| d + CBR_MAX_LAG < due);
        let mut written = 0;
        for i in 0..want {
            let slot = k + i as u64;
            let slot_at = if overflow {
                due
            } else {
                self.slot_time(slots, slot)
            };
            let take = self.head_due(now).is_some_and(|d| d <= slot_at);
            if take {
                let Some(mut q) = self.queue.pop_front() else {
                    break;
                };
                self.stamped -= 1;
                if q.has_pcr {
                    self.restamp(&mut q, slots, if overflow { k } else { slot }, rate);
                }
                out.extend_from_slice(&q.packet);
                self.stats.packets += 1;
                if overflow {
                    self.stats.overflow_packets += 1;
                }
            } else {
                out.extend_from_slice(&NULL_HEADER);
                out.resize(out.len() + PACKET - NULL_HEADER.len(), 0xff);
                self.stats.null_packets += 1;
            }
            written += 1;
        }
        if !overflow {
            self.slots = Some(Slots {
                next: k + want as u64,
                ..slots
            });
        }
        let time_90k = self.time_90k(due);
        Some(Paced {
            due,
            time_90k,
            packets: written,
        })
    }

    /// When the head packet is due, if it is stamped.
    fn head_due(&mut self, now: Instant) -> Option<Instant> {
        if self.stamped == 0 {
            return None;
        }
        let head = self.queue.front()?.stamp?;
        let clock = self.clock_for(now, head);
        Some(due_on(clock, head.pcr))
    }

    /// Rewrites `q`'s PCR to slot `slot`'s place on its epoch's clock: the position at
    /// the rate, so PCR steps are exactly bytes over the rate.
    fn restamp(&mut self, q: &mut Queued, slots: Slots, slot: u64, rate: u64) {
        let Some(clock) = self.clock else {
            return;
        };
        // Ticks from the clock's anchor to the slot (signed: the clock may be anchored
        // after the rate started).
        let slot_ticks = u128::from(slot) * PACKET_BITS * PCR_HZ / u128::from(rate);
        let anchor_ticks = ticks_between(slots.start, clock.at);
        let pcr = i128::from(clock.pcr) + slot_ticks as i128 - anchor_ticks;
        let pcr = pcr.rem_euclid(i128::from(PCR_WRAP)) as u64;
        write_pcr(&mut q.packet, pcr);
        if clock.fresh {
            // The first PCR of a new epoch: receivers must not take the jump as jitter.
            q.packet[AF_FLAGS] |= 0x80;
            if let Some(c) = &mut self.clock {
                c.fresh = false;
            }
        }
    }

    fn slot_time(&self, slots: Slots, k: u64) -> Instant {
        let rate = u128::from(self.config.bitrate.unwrap_or(1));
        let nanos = u128::from(k) * PACKET_BITS * 1_000_000_000 / rate;
        slots.start + duration_of_nanos(nanos)
    }

    fn time_90k(&mut self, due: Instant) -> u64 {
        let origin = *self.origin.get_or_insert(due);
        let nanos = due.saturating_duration_since(origin).as_nanos();
        (nanos * RTP_HZ / 1_000_000_000) as u64
    }
}

/// When PCR `pcr` is due on `clock` (never before its anchor).
fn due_on(clock: Clock, pcr: u64) -> Instant {
    let ticks = u128::from(pcr.saturating_sub(clock.pcr));
    clock.at + duration_of_nanos(ticks * 1000 / 27)
}

/// Signed 27 MHz ticks from `from` to `to`.
fn ticks_between(from: Instant, to: Instant) -> i128 {
    let forward = to.saturating_duration_since(from).as_nanos() as i128;
    let back = from.saturating_duration_since(to).as_nanos() as i128;
    (forward - back) * 27 / 1000
}

/// A duration of `nanos`, saturating far beyond any stream's life.
fn duration_of_nanos(nanos: u128) -> Duration {
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// The PCR (27 MHz ticks) a packet carries, if any.
pub(crate) fn pcr_of(packet: &[u8]) -> Option<u64> {
    let has_af = packet.get(3)? & 0x20 != 0;
    let af_len = *packet.get(4)?;
    if !has_af || af_len < 7 || packet.get(AF_FLAGS)? & 0x10 == 0 {
        return None;
    }
    let b: [u8; 6] = packet.get(PCR_AT..PCR_AT + 6)?.try_into().ok()?;
    let base = (u64::from(b[0]) << 25)
        | (u64::from(b[1]) << 17)
        | (u64::from(b[2]) << 9)
        | (u64::from(b[3]) << 1)
        | (u64::from(b[4]) >> 7);
    let ext = (u64::from(b[4] & 1) << 8) | u64::from(b[5]);
    Some(base * 300 + ext.min(299))
}

/// Writes `pcr` (27 MHz ticks, below the wrap) into a packet that carries a PCR.
fn write_pcr(packet: &mut [u8; PACKET], pcr: u64) {
    let (base, ext) = ((pcr / 300) & 0x1_ffff_ffff, pcr % 300);
    let v = (base << 15) | 0x7e00 | ext;
    packet[PCR_AT..PCR_AT + 6].copy_from_slice(&v.to_be_bytes()[2..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    const VIDEO: u16 = 0x100;

    /// A TS packet of `pid` with continuity counter `cc`, carrying PCR `pcr` if given.
    fn packet(pid: u16, cc: u8, pcr: Option<u64>) -> [u8; PACKET] {
        let mut p = [0xffu8; PACKET];
        p[0] = 0x47;
        p[1] = (pid >> 8) as u8 & 0x1f;
        p[2] = pid as u8;
        match pcr {
            Some(pcr) => {
                p[3] = 0x30 | (cc & 0x0f);
                p[4] = 7;
                p[5] = 0x10;
                write_pcr(&mut p, pcr);
            }
            None => p[3] = 0x10 | (cc & 0x0f),
        }
        p
    }

    /// `n` packets with a PCR of `pcr` on the first.
    fn interval(pcr: u64, n: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..n {
            out.extend_from_slice(&packet(VIDEO, i as u8, (i == 0).then_some(pcr)));
        }
        out
    }

    fn drain(p: &mut Pacer, now: Instant) -> Vec<(Paced, Vec<u8>)> {
        let mut all = Vec::new();
        loop {
            let mut out = Vec::new();
            match p.poll_datagram(now, &mut out) {
                Some(d) => all.push((d, out)),
                None => return all,
            }
        }
    }

    /// 100 ms PCR gap: 2_700_000 ticks.
    const GAP: u64 = 2_700_000;

    #[test]
    fn pcr_round_trips() {
        for pcr in [0, 1, 299, 300, 27_000_000, PCR_WRAP - 1] {
            assert_eq!(pcr_of(&packet(VIDEO, 0, Some(pcr))), Some(pcr));
        }
        assert_eq!(pcr_of(&packet(VIDEO, 0, None)), None);
        assert_eq!(pcr_of(&[0x47, 0, 0]), None);
    }

    #[test]
    fn packets_between_pcrs_are_spread_over_the_gap() {
        let t0 = Instant::now();
        let mut p = Pacer::new(PaceConfig {
            packets: 7,
            bitrate: None,
        });
        p.push(t0, &interval(1000, 70));
        // Nothing goes before the next PCR says how far apart they are.
        assert!(drain(&mut p, t0).is_empty());
        assert_eq!(p.poll_timeout(), None);
        p.push(t0, &interval(1000 + GAP, 70));
        let first = drain(&mut p, t0);
        assert_eq!(first.len(), 1, "only the first datagram is due at once");
        assert_eq!(first[0].1.len(), 7 * PACKET);
        // The second is 7/70 of 100 ms later, and so on.
        let next = p.poll_timeout().unwrap();
        assert_eq!(next - t0, Duration::from_millis(10));
        assert!(drain(&mut p, next - Duration::from_micros(1)).is_empty());
        let at_50ms = drain(&mut p, t0 + Duration::from_millis(50));
        assert_eq!(at_50ms.len(), 5);
        assert_eq!(at_50ms.last().unwrap().0.time_90k, 4500);
        let rest = drain(&mut p, t0 + Duration::from_millis(100));
        assert_eq!(rest.len(), 4);
        assert_eq!(p.stats().packets, 70);
        assert_eq!(p.queued(), 70, "the second interval waits for a third PCR");
    }

    #[test]
    fn a_pcr_jump_reanchors_instead_of_sleeping() {
        let t0 = Instant::now();
        let mut p = Pacer::new(PaceConfig {
            packets: 7,
            bitrate: None,
        });
        p.push(t0, &interval(1000, 7));
        p.push(t0, &interval(1000 + GAP, 7));
        // A new publisher: the clock jumps an hour ahead, then runs on.
        let hour = 3600 * 27_000_000;
        p.push(t0, &interval(hour, 7));
        p.push(t0, &interval(hour + GAP, 7));
        assert_eq!(drain(&mut p, t0).len(), 1);
        let t1 = t0 + Duration::from_millis(100);
        let out = drain(&mut p, t1);
        assert_eq!(
            out.len(),
            2,
            "the old epoch's last, then the new one's first at once"
        );
        assert_eq!(p.stats().discontinuities, 1);
        assert_eq!(out[1].0.due, t1);
        // And backwards.
        p.push(t1, &interval(5, 7));
        let t2 = t1 + Duration::from_millis(100);
        let out = drain(&mut p, t2);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0.due, t2);
        assert_eq!(p.stats().discontinuities, 2);
        assert!(p.poll_timeout().is_none());
    }

    #[test]
    fn late_output_reanchors_instead_of_bursting() {
        let t0 = Instant::now();
        let mut p = Pacer::new(PaceConfig {
            packets: 7,
            bitrate: None,
        });
        for i in 0..20 {
            p.push(t0, &interval(i * GAP, 7));
        }
        assert_eq!(drain(&mut p, t0).len(), 1);
        // The caller stalls for two seconds: the next datagram re-anchors; the ones
        // after it keep their spacing from there.
        let late = t0 + Duration::from_secs(2);
        assert_eq!(drain(&mut p, late).len(), 1);
        assert_eq!(p.stats().reanchors, 1);
        assert_eq!(p.poll_timeout(), Some(late + Duration::from_millis(100)));
    }

    #[test]
    fn a_stream_without_pcrs_is_bounded() {
        let t0 = Instant::now();
        let mut p = Pacer::new(PaceConfig {
            packets: 7,
            bitrate: None,
        });
        let plain = packet(VIDEO, 0, None);
        let mut taken = 0;
        for _ in 0..MAX_QUEUED + 10 {
            taken += p.push(t0, &plain);
        }
        assert_eq!(taken, MAX_QUEUED * PACKET, "the queue's bound holds");
        assert!(!drain(&mut p, t0).is_empty(), "the held ones go out");
        // Not TS: counted and skipped.
        assert_eq!(p.push(t0, &[0u8; 200]), 200);
        assert_eq!(p.stats().skipped_bytes, 200);
    }

    #[test]
    fn finish_flushes_a_short_last_datagram() {
        let t0 = Instant::now();
        let mut p = Pacer::new(PaceConfig {
            packets: 7,
            bitrate: None,
        });
        p.push(t0, &interval(0, 3));
        assert!(drain(&mut p, t0).is_empty());
        p.finish();
        let out = drain(&mut p, t0);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0.packets, 3);
    }

    /// A CBR pacer at 4 Mbit/s fed 1 Mbit/s of content over `secs`: every datagram
    /// whole, nulls fill, PCRs at the position's time.
    #[test]
    fn cbr_fills_with_nulls_and_restamps_pcr_to_the_position() {
        let rate = 4_000_000u64;
        let t0 = Instant::now();
        let mut p = Pacer::new(PaceConfig {
            packets: 7,
            bitrate: Some(rate),
        });
        // 1 Mbit/s: 66.5 packets per 100 ms; 67 with a PCR every 100 ms.
        for i in 0..30 {
            p.push(t0, &interval(1_000_000 + i * GAP, 67));
        }
        let mut wire = Vec::new();
        let mut now = t0;
        while now < t0 + Duration::from_secs(2) {
            for (d, bytes) in drain(&mut p, now) {
                assert_eq!(bytes.len(), 7 * PACKET);
                assert_eq!(d.packets, 7);
                wire.extend_from_slice(&bytes);
            }
            now = p.poll_timeout().unwrap();
        }
        let s = p.stats();
        assert!(s.null_packets > 2 * s.packets, "{s:?}");
        assert_eq!(s.overflow_packets, 0);
        // Two seconds at 4 Mbit/s, to within a datagram.
        let expected = 2 * rate as usize / 8;
        assert!(
            wire.len().abs_diff(expected) <= 7 * PACKET,
            "{}",
            wire.len()
        );
        // Every PCR's step is the bytes between them at the rate.
        let pcrs: Vec<(usize, u64)> = wire
            .chunks(PACKET)
            .enumerate()
            .filter_map(|(i, pk)| pcr_of(pk).map(|pcr| (i, pcr)))
            .collect();
        assert!(pcrs.len() >= 15);
        for w in pcrs.windows(2) {
            let ((i, a), (j, b)) = (w[0], w[1]);
            let bits = ((j - i) * PACKET * 8) as u128;
            let want = (bits * PCR_HZ / u128::from(rate)) as u64;
            assert!((b - a).abs_diff(want) <= 1, "{} vs {want}", b - a);
        }
        // Nulls are PID 0x1FFF.
        let nulls = wire
            .chunks(PACKET)
            .filter(|pk| pk[1] & 0x1f == 0x1f && pk[2] == 0xff)
            .count();
        assert_eq!(nulls as u64, s.null_packets);
    }

    #[test]
    fn cbr_overflow_is_counted_and_sent() {
        let t0 = Instant::now();
        let mut p = Pacer::new(PaceConfig {
            packets: 7,
            bitrate: Some(MIN_RATE_FOR_TEST),
        });
        // 700 packets every 100 ms is 10.5 Mbit/s: ten times the rate.
        let mut sent = 0;
        let mut now = t0;
        for i in 0..10 {
            p.push(now, &interval(i * GAP, 700));
            let end = now + Duration::from_millis(100);
            while now < end {
                sent += drain(&mut p, now)
                    .iter()
                    .map(|d| d.0.packets)
                    .sum::<usize>();
                let next = now + Duration::from_millis(1);
                now = p.poll_timeout().map_or(next, |t| t.max(next));
            }
        }
        let s = p.stats();
        assert!(s.overflow_packets > 3000, "{s:?}");
        assert_eq!(sent as u64, s.packets + s.null_packets);
        assert!(p.queued() < MAX_QUEUED);
    }

    const MIN_RATE_FOR_TEST: u64 = 1_000_000;

    #[test]
    fn cbr_marks_a_new_epoch_discontinuous() {
        let t0 = Instant::now();
        let mut p = Pacer::new(PaceConfig {
            packets: 7,
            bitrate: Some(2_000_000),
        });
        p.push(t0, &interval(0, 7));
        p.push(t0, &interval(GAP, 7));
        p.push(t0, &interval(PCR_WRAP / 2, 7));
        p.push(t0, &interval(PCR_WRAP / 2 + GAP, 7));
        let mut flags = Vec::new();
        let mut now = t0;
        while now < t0 + Duration::from_millis(300) {
            for (_, bytes) in drain(&mut p, now) {
                for pk in bytes.chunks(PACKET) {
                    if pcr_of(pk).is_some() {
                        flags.push(pk[AF_FLAGS] & 0x80 != 0);
                    }
                }
            }
            now = p.poll_timeout().unwrap();
        }
        assert_eq!(flags, [false, false, true]);
    }
}
