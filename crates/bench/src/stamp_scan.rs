//! Finds the bench publisher's wall-clock stamps (`crate::stamp`) in HLS segment
//! bodies as their bytes arrive, so HLS players measure publish-to-play delay too.
//!
//! The SEI NAL unit is the same bytes in every container: `06 05 18` + our UUID + the
//! escaped time. fMP4 keeps NAL units whole inside `mdat`, so the body is searched as
//! one byte stream. MPEG-TS cuts a PES into 184-byte payloads and interleaves PIDs, so
//! a stamp can straddle two packets of its PID with audio packets between them: TS
//! bodies are searched per PID over the packets' payloads.
//!
//! Cheap on purpose (a player scans every media byte): a SIMD substring search over
//! the data in place; only the last [`TAIL`] bytes of each stream are copied, to
//! find a stamp cut by a read or packet boundary. No allocation per byte or packet.

use crate::stamp::{unescape, UUID};
use memchr::memmem;
use std::sync::LazyLock;

/// SEI header (type 6), payload type 5, payload size 24, then our UUID.
const PATTERN_LEN: usize = 3 + 16;
/// The pattern and the time with its worst-case emulation-prevention bytes.
const TAIL: usize = PATTERN_LEN + 8 + 4;
/// MPEG-TS packet size and sync byte.
const TS_PACKET: usize = 188;
const TS_SYNC: u8 = 0x47;
/// PIDs followed per segment (video, audio, tables); packets of others are skipped.
const MAX_PIDS: usize = 8;

static FINDER: LazyLock<memmem::Finder<'static>> = LazyLock::new(|| {
    let mut p = [0u8; PATTERN_LEN];
    p[..3].copy_from_slice(&[0x06, 0x05, 0x18]);
    p[3..].copy_from_slice(&UUID);
    memmem::Finder::new(&p).into_owned()
});

/// The time after the pattern at `at` in `data`, if all its bytes are there.
fn time_at(data: &[u8], at: usize) -> Option<u64> {
    let mut t = [0u8; 8];
    // The UUID ends in 0x01: no zeros carry into the time.
    (unescape(data.get(at + PATTERN_LEN..)?, &mut t) == t.len()).then(|| u64::from_be_bytes(t))
}

/// Stamps in one byte stream fed in pieces; each stamp is reported once.
#[derive(Debug, Clone)]
struct Search {
    tail: [u8; TAIL],
    tail_len: usize,
}

impl Default for Search {
    fn default() -> Self {
        Search {
            tail: [0; TAIL],
            tail_len: 0,
        }
    }
}

impl Search {
    fn reset(&mut self) {
        self.tail_len = 0;
    }

    fn feed(&mut self, data: &[u8], found: &mut Vec<u64>) {
        // Stamps that start in the tail: only those that needed new bytes are new.
        if self.tail_len > 0 {
            let mut joint = [0u8; 2 * TAIL];
            let more = data.len().min(TAIL);
            joint[..self.tail_len].copy_from_slice(&self.tail[..self.tail_len]);
            joint[self.tail_len..self.tail_len + more].copy_from_slice(&data[..more]);
            let joint = &joint[..self.tail_len + more];
            let mut from = 0;
            while let Some(i) = FINDER.find(&joint[from..]) {
                let at = from + i;
                if at >= self.tail_len {
                    break; // starts in `data`: found below
                }
                // Whole inside the old bytes: reported when they came.
                if time_at(&joint[..self.tail_len], at).is_none() {
                    if let Some(t) = time_at(joint, at) {
                        found.push(t);
                    }
                }
                from = at + 1;
            }
        }
        for at in FINDER.find_iter(data) {
            if let Some(t) = time_at(data, at) {
                found.push(t);
            }
        }
        // Keep the last TAIL bytes of everything seen.
        if data.len() >= TAIL {
            self.tail.copy_from_slice(&data[data.len() - TAIL..]);
            self.tail_len = TAIL;
        } else {
            let keep = (TAIL - data.len()).min(self.tail_len);
            self.tail
                .copy_within(self.tail_len - keep..self.tail_len, 0);
            self.tail[keep..keep + data.len()].copy_from_slice(data);
            self.tail_len = keep + data.len();
        }
    }
}

/// What a segment body turned out to be, from its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Unknown,
    /// fMP4 (or anything that is not TS): one byte stream.
    Stream,
    Ts,
    /// Lost TS sync: the rest of the body is ignored.
    Lost,
}

/// Stamps found in HLS segment (or part) bodies; [`SegmentStamps::start`] before each
/// body, [`SegmentStamps::feed`] with its bytes in order.
#[derive(Debug, Clone)]
pub(crate) struct SegmentStamps {
    kind: Kind,
    stream: Search,
    /// A TS packet cut by a read.
    packet: [u8; TS_PACKET],
    packet_len: usize,
    pids: [(u16, Search); MAX_PIDS],
    pid_count: usize,
    /// Stamps found since the caller last took them.
    pub found: Vec<u64>,
}

impl Default for SegmentStamps {
    fn default() -> Self {
        SegmentStamps {
            kind: Kind::Unknown,
            stream: Search::default(),
            packet: [0; TS_PACKET],
            packet_len: 0,
            pids: Default::default(),
            pid_count: 0,
            found: Vec::with_capacity(64),
        }
    }
}

impl SegmentStamps {
    /// A new body begins (TS continuity across segments is not needed: each segment
    /// starts with a keyframe's PES).
    pub(crate) fn start(&mut self) {
        self.kind = Kind::Unknown;
        self.stream.reset();
        self.packet_len = 0;
        self.pid_count = 0;
    }

    pub(crate) fn feed(&mut self, mut data: &[u8]) {
        if self.kind == Kind::Unknown {
            let Some(&first) = data.first() else {
                return;
            };
            self.kind = if first == TS_SYNC {
                Kind::Ts
            } else {
                Kind::Stream
            };
        }
        match self.kind {
            Kind::Stream => self.stream.feed(data, &mut self.found),
            Kind::Ts => {
                if self.packet_len > 0 {
                    let n = data.len().min(TS_PACKET - self.packet_len);
                    self.packet[self.packet_len..self.packet_len + n].copy_from_slice(&data[..n]);
                    self.packet_len += n;
                    data = &data[n..];
                    if self.packet_len < TS_PACKET {
                        return;
                    }
                    self.packet_len = 0;
                    let packet = self.packet;
                    self.ts_packet(&packet);
                }
                let mut packets = data.chunks_exact(TS_PACKET);
                for p in &mut packets {
                    self.ts_packet(p);
                }
                let rest = packets.remainder();
                self.packet[..rest.len()].copy_from_slice(rest);
                self.packet_len = rest.len();
            }
            Kind::Unknown | Kind::Lost => {}
        }
    }

    fn ts_packet(&mut self, p: &[u8]) {
        if self.kind != Kind::Ts {
            return;
        }
        if p[0] != TS_SYNC {
            self.kind = Kind::Lost;
            return;
        }
        let pid = u16::from_be_bytes([p[1], p[2]]) & 0x1fff;
        let control = (p[3] >> 4) & 3;
        if control & 1 == 0 {
            return; // no payload
        }
        let start = if control & 2 != 0 {
            5 + usize::from(p[4])
        } else {
            4
        };
        let Some(payload) = p.get(start..) else {
            return;
        };
        let slot = match self.pids[..self.pid_count].iter().position(|s| s.0 == pid) {
            Some(i) => i,
            None if self.pid_count < MAX_PIDS => {
                self.pids[self.pid_count] = (pid, Search::default());
                self.pid_count += 1;
                self.pid_count - 1
            }
            None => return,
        };
        self.pids[slot].1.feed(payload, &mut self.found);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An H.264 access unit in Annex B with our SEI stamped `t`.
    fn annex_b(t: u64, filler: usize) -> Vec<u8> {
        let mut out = vec![0, 0, 0, 1, 0x09, 0xf0, 0, 0, 0, 1];
        crate::stamp::push_sei(&mut out, t);
        out.extend_from_slice(&[0, 0, 0, 1, 0x65]);
        out.extend((0..filler).map(|i| (i % 251) as u8 | 1));
        out
    }

    /// `es` cut into TS packets of `pid`, with an audio packet between each two.
    fn ts(es: &[u8], pid: u16) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, chunk) in es.chunks(184).enumerate() {
            let mut p = vec![
                TS_SYNC,
                (pid >> 8) as u8 | if i == 0 { 0x40 } else { 0 },
                pid as u8,
            ];
            if chunk.len() == 184 {
                p.push(0x10);
            } else {
                // Stuffing in an adaptation field, as muxers do for the last packet.
                let af = 184 - chunk.len() - 1;
                p.push(0x30);
                p.push(af as u8);
                if af > 0 {
                    p.push(0);
                    p.extend(std::iter::repeat_n(0xff, af - 1));
                }
            }
            p.extend_from_slice(chunk);
            assert_eq!(p.len(), TS_PACKET);
            out.extend_from_slice(&p);
            let mut audio = vec![TS_SYNC, 0x01, 0x01, 0x10];
            audio.extend(std::iter::repeat_n(0x5a, 184));
            out.extend_from_slice(&audio);
        }
        out
    }

    fn scan(body: &[u8], cuts: &[usize]) -> Vec<u64> {
        let mut s = SegmentStamps::default();
        s.start();
        let mut from = 0;
        for &c in cuts.iter().chain([&body.len()]) {
            let c = c.clamp(from, body.len());
            s.feed(&body[from..c]);
            from = c;
        }
        s.found
    }

    #[test]
    fn finds_stamps_in_fmp4_and_ts_across_any_cut() {
        let times = [1_763_800_000_123_456u64, 0x0000_0300_0000_0001, 7];
        let mut es = Vec::new();
        for (i, &t) in times.iter().enumerate() {
            es.extend(annex_b(t, 100 + 150 * i));
        }
        // A stamp straddling a TS packet boundary: the SEI starts 10 bytes before it.
        let mut straddle = vec![0x11; 184 - 10];
        straddle.extend(annex_b(42, 5));
        let cases = [
            (es.clone(), times.to_vec()),
            (ts(&es, 0x100), times.to_vec()),
            (ts(&straddle, 0x100), vec![42]),
        ];
        for (body, want) in cases {
            assert_eq!(scan(&body, &[]), want);
            for cut in 0..body.len().min(600) {
                assert_eq!(scan(&body, &[cut]), want, "cut at {cut}");
            }
            let every: Vec<usize> = (1..body.len()).collect();
            assert_eq!(scan(&body, &every), want, "byte by byte");
        }
    }

    #[test]
    fn another_uuid_or_a_lost_sync_finds_nothing() {
        let mut es = annex_b(5, 10);
        let at = es.windows(16).position(|w| w == UUID).unwrap();
        es[at] ^= 1;
        assert!(scan(&es, &[]).is_empty());
        // The stamp in the third video packet; a packet before it lost its sync byte.
        let mut es = vec![0x11; 400];
        es.extend(annex_b(5, 10));
        let mut body = ts(&es, 0x100);
        assert_eq!(scan(&body, &[]), vec![5]);
        body[TS_PACKET] = 0;
        assert!(scan(&body, &[]).is_empty());
    }

    proptest! {
        #[test]
        fn any_split_finds_each_stamp_once(
            times in proptest::collection::vec(any::<u64>(), 1..6),
            cuts in proptest::collection::vec(0usize..4000, 0..12),
            as_ts in any::<bool>(),
        ) {
            let mut es = Vec::new();
            for (i, &t) in times.iter().enumerate() {
                es.extend(annex_b(t, 37 * i));
            }
            let body = if as_ts { ts(&es, 0x101) } else { es };
            let mut cuts = cuts;
            cuts.sort_unstable();
            prop_assert_eq!(scan(&body, &cuts), times);
        }
    }
}
