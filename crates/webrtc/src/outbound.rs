//! A viewer's outgoing media, once DTLS has given us its keys: each of the stream's
//! shared RTP packets gets this viewer's header (payload type, SSRC, a sequence of
//! its own) and its SRTP, straight into the caller's batch of datagrams. A NACKed
//! sequence number maps back to the stream packet it carried, which the server finds
//! in the stream's shared history: a viewer keeps no packets of its own.

use crate::rtcp::SenderInfo;
use crate::srtp::{Context, SrtpError};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::ops::Range;
use std::time::Instant;

/// Datagrams for one batched send, their bytes in one reused buffer.
#[derive(Debug, Default)]
pub struct Datagrams {
    bytes: Vec<u8>,
    list: Vec<(SocketAddr, Range<usize>)>,
}

impl Datagrams {
    pub fn push(&mut self, to: SocketAddr, datagram: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(datagram);
        self.list.push((to, start..self.bytes.len()));
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = (SocketAddr, &[u8])> + '_ {
        self.list
            .iter()
            .map(|(to, r)| (*to, self.bytes.get(r.clone()).unwrap_or_default()))
    }

    /// Each datagram's destination and where its bytes lie (see [`Datagrams::bytes`]).
    pub fn entries(&self) -> &[(SocketAddr, Range<usize>)] {
        &self.list
    }

    pub fn bytes(&self, range: &Range<usize>) -> &[u8] {
        self.bytes.get(range.clone()).unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn clear(&mut self) {
        self.bytes.clear();
        self.list.clear();
    }

    /// Writes one datagram to `to` with `write`, which appends it to the buffer; one
    /// that fails leaves nothing behind.
    fn write<E>(
        &mut self,
        to: SocketAddr,
        write: impl FnOnce(&mut Vec<u8>, usize) -> Result<(), E>,
    ) -> Result<(), E> {
        let start = self.bytes.len();
        match write(&mut self.bytes, start) {
            Ok(()) => {
                self.list.push((to, start..self.bytes.len()));
                Ok(())
            }
            Err(e) => {
                self.bytes.truncate(start);
                Err(e)
            }
        }
    }
}

/// The stream packet behind one of a viewer's sequence numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamPacket {
    /// The SSRC and sequence number of the stream's RTP form.
    pub ssrc: u32,
    pub seq: u16,
}

/// A NACKed packet to send again, once found in the stream's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resend {
    pub video: bool,
    /// The viewer's SRTP index of the packet.
    pub index: u64,
    pub packet: StreamPacket,
}

/// From `from` on, a viewer's index `i` carries the stream's sequence number
/// `i - delta` (mod 2^16) of `ssrc`: a new run starts where the viewer skipped ahead or
/// the stream's SSRC changed.
#[derive(Debug, Clone, Copy)]
struct Run {
    from: u64,
    ssrc: u32,
    delta: u16,
}

/// Runs kept for NACKs: skips are rare, and older runs hold packets long gone.
const RUNS: usize = 8;

/// How far back a NACK may reach, in packets: beyond it the history has nothing.
const RESEND_REACH: u64 = 2048;

/// One outgoing track of a viewer: video or audio.
#[derive(Debug)]
pub struct Track {
    ssrc: u32,
    pt: u8,
    /// RTP clock rate, for sender reports.
    clock: u32,
    /// The header extension block every packet carries (the MID, when negotiated).
    extension: Vec<u8>,
    /// The next SRTP index: rollover count and sequence number.
    next: u64,
    runs: VecDeque<Run>,
    /// The timestamp of the last packet sent, and when.
    last: Option<(u32, Instant)>,
    packets: u32,
    octets: u32,
}

impl Track {
    /// A track sending as `ssrc` with payload type `pt`, its sequence numbers from
    /// `first_seq`; `mid` is `(extension id, MID)` when the viewer takes the MID
    /// header extension (RFC 8843 §15).
    pub fn new(ssrc: u32, pt: u8, clock: u32, first_seq: u16, mid: Option<(u8, &str)>) -> Track {
        let mut extension = Vec::new();
        if let Some((id, mid)) = mid {
            let mid = mid.as_bytes();
            // One-byte header elements (RFC 8285 §4.2) hold 1 to 16 bytes.
            if (1..=14).contains(&id) && (1..=16).contains(&mid.len()) {
                let words = (1 + mid.len()).div_ceil(4);
                extension.extend_from_slice(&[0xbe, 0xde]);
                extension.extend_from_slice(&(words as u16).to_be_bytes());
                extension.push(id << 4 | (mid.len() - 1) as u8);
                extension.extend_from_slice(mid);
                extension.resize(4 + 4 * words, 0);
            }
        }
        Track {
            ssrc,
            pt,
            clock,
            extension,
            next: u64::from(first_seq),
            runs: VecDeque::new(),
            last: None,
            packets: 0,
            octets: 0,
        }
    }

    pub fn ssrc(&self) -> u32 {
        self.ssrc
    }

    /// Sends the stream's packet `packet` (its timestamp, marker and payload) to `to`.
    #[allow(clippy::too_many_arguments)]
    pub fn send(
        &mut self,
        packet: StreamPacket,
        timestamp: u32,
        marker: bool,
        payload: &[u8],
        now: Instant,
        srtp: &Context,
        to: SocketAddr,
        out: &mut Datagrams,
    ) -> Result<(), SrtpError> {
        let index = self.next;
        self.next += 1;
        let delta = (index as u16).wrapping_sub(packet.seq);
        let same_run = self
            .runs
            .back()
            .is_some_and(|r| r.ssrc == packet.ssrc && r.delta == delta);
        if !same_run {
            if self.runs.len() == RUNS {
                self.runs.pop_front();
            }
            self.runs.push_back(Run {
                from: index,
                ssrc: packet.ssrc,
                delta,
            });
        }
        self.last = Some((timestamp, now));
        self.packets = self.packets.wrapping_add(1);
        self.octets = self.octets.wrapping_add(payload.len() as u32);
        self.resend(index, timestamp, marker, payload, srtp, to, out)
    }

    /// Sends the packet the viewer knows as `index` (again, when it was NACKed: the
    /// same header and payload give the same bytes).
    #[allow(clippy::too_many_arguments)]
    pub fn resend(
        &self,
        index: u64,
        timestamp: u32,
        marker: bool,
        payload: &[u8],
        srtp: &Context,
        to: SocketAddr,
        out: &mut Datagrams,
    ) -> Result<(), SrtpError> {
        out.write(to, |buf, start| {
            let x = if self.extension.is_empty() { 0 } else { 0x10 };
            buf.extend_from_slice(&[0x80 | x, u8::from(marker) << 7 | (self.pt & 0x7f)]);
            buf.extend_from_slice(&(index as u16).to_be_bytes());
            buf.extend_from_slice(&timestamp.to_be_bytes());
            buf.extend_from_slice(&self.ssrc.to_be_bytes());
            buf.extend_from_slice(&self.extension);
            let header = 12 + self.extension.len();
            buf.extend_from_slice(payload);
            srtp.protect_rtp(buf, start, header, index)
        })
    }

    /// The stream packet behind the viewer's sequence number `seq`, if it is recent.
    pub fn nacked(&self, seq: u16) -> Option<(u64, StreamPacket)> {
        let newest = self.next.checked_sub(1)?;
        let mut index = (newest & !0xffff) | u64::from(seq);
        if index > newest {
            index = index.checked_sub(0x1_0000)?;
        }
        if newest - index >= RESEND_REACH {
            return None;
        }
        let run = self.runs.iter().rev().find(|r| r.from <= index)?;
        let packet = StreamPacket {
            ssrc: run.ssrc,
            seq: (index as u16).wrapping_sub(run.delta),
        };
        Some((index, packet))
    }

    /// What a sender report says of this track at `now`, wall-clock time `ntp`; `None`
    /// before its first packet.
    pub fn report(&self, now: Instant, ntp: u64) -> Option<SenderInfo> {
        let (timestamp, at) = self.last?;
        let elapsed = now.saturating_duration_since(at);
        let ticks = elapsed.as_micros() as u64 * u64::from(self.clock) / 1_000_000;
        Some(SenderInfo {
            ssrc: self.ssrc,
            ntp,
            rtp_time: timestamp.wrapping_add(ticks as u32),
            packets: self.packets,
            octets: self.octets,
        })
    }
}

/// `time` as NTP's 32.32 fixed point (seconds since 1900).
pub fn ntp(time: std::time::SystemTime) -> u64 {
    const NTP_UNIX_OFFSET: u64 = 2_208_988_800;
    let since = time
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = since.as_secs() + NTP_UNIX_OFFSET;
    let frac = (u64::from(since.subsec_nanos()) << 32) / 1_000_000_000;
    secs << 32 | frac
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::srtp::{Profile, Session};

    fn keys() -> (Session, Session) {
        let m: Vec<u8> = (0..56).collect();
        (
            Session::new(Profile::AeadAes128Gcm, &m, false).unwrap(),
            Session::new(Profile::AeadAes128Gcm, &m, true).unwrap(),
        )
    }

    fn to() -> SocketAddr {
        "127.0.0.1:9".parse().unwrap()
    }

    #[test]
    fn packets_get_the_viewers_header_and_decrypt_on_the_other_side() {
        let (server, client) = keys();
        let mut track = Track::new(0x1234, 102, 90_000, 65_534, Some((4, "0")));
        let mut out = Datagrams::default();
        let now = Instant::now();
        for seq in 10..13u16 {
            let p = StreamPacket { ssrc: 7, seq };
            track
                .send(p, 900, seq == 12, b"frame", now, &server.tx, to(), &mut out)
                .unwrap();
        }
        assert_eq!(out.len(), 3);
        let mut plain = Vec::new();
        for (i, (dest, d)) in out.iter().enumerate() {
            assert_eq!(dest, to());
            // The third crosses the sequence number's wrap: rollover count 1.
            let index = 65_534 + i as u64;
            client.rx.unprotect_rtp(d, 20, index, &mut plain).unwrap();
            assert_eq!(plain[0], 0x90);
            assert_eq!(plain[1], u8::from(i == 2) << 7 | 102);
            assert_eq!(u16::from_be_bytes([plain[2], plain[3]]), index as u16);
            assert_eq!(&plain[8..12], &0x1234u32.to_be_bytes());
            assert_eq!(&plain[12..20], &[0xbe, 0xde, 0, 1, 0x40, b'0', 0, 0]);
            assert_eq!(&plain[20..], b"frame");
        }
    }

    #[test]
    fn a_nack_finds_the_stream_packet_across_skips_and_wraps() {
        let (server, _) = keys();
        let mut track = Track::new(1, 96, 90_000, 65_530, None);
        let mut out = Datagrams::default();
        let now = Instant::now();
        let mut send = |ssrc, seq| {
            let p = StreamPacket { ssrc, seq };
            track
                .send(p, 0, false, b"x", now, &server.tx, to(), &mut out)
                .unwrap();
        };
        // Stream packets 100..110, then a skip to 500..510, then a new publisher.
        (100..110).for_each(|s| send(7, s));
        (500..510).for_each(|s| send(7, s));
        (0..10).for_each(|s| send(8, s));
        let at = |seq: u16| track.nacked(seq).map(|(_, p)| (p.ssrc, p.seq));
        assert_eq!(at(65_530), Some((7, 100)));
        assert_eq!(at(65_535), Some((7, 105)));
        assert_eq!(at(3), Some((7, 109)));
        assert_eq!(at(4), Some((7, 500)));
        assert_eq!(at(14), Some((8, 0)));
        assert_eq!(track.nacked(3).unwrap().0, 65_536 + 3);
        // Not sent yet, or long before the first packet.
        assert_eq!(at(24), None);
        assert_eq!(at(60_000), None);
    }

    #[test]
    fn the_report_runs_the_clock_on_from_the_last_packet() {
        let (server, _) = keys();
        let mut track = Track::new(1, 96, 90_000, 0, None);
        let now = Instant::now();
        assert!(track.report(now, 0).is_none());
        let mut out = Datagrams::default();
        let p = StreamPacket { ssrc: 1, seq: 0 };
        track
            .send(p, 1000, true, b"abc", now, &server.tx, to(), &mut out)
            .unwrap();
        let r = track
            .report(now + std::time::Duration::from_millis(100), 5)
            .unwrap();
        assert_eq!(r.rtp_time, 1000 + 9000);
        assert_eq!((r.packets, r.octets, r.ntp), (1, 3, 5));
    }

    #[test]
    fn ntp_counts_from_1900() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(1500);
        assert_eq!(ntp(t), (2_208_988_801u64 << 32) | (1 << 31));
    }
}
