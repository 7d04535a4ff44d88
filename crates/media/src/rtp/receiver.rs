//! One received RTP track, sans-IO: packets in (in order over TCP, in any order over
//! UDP), decoder configurations and whole frames out, on a timeline that starts at 0.
//!
//! Why here: every ingest of RTP (RTSP publishers today; relays pulling from cameras
//! next) needs the same three things around the depacketizer: a jitter buffer for
//! datagrams that arrive out of order, a bound on how long a hole is waited for, and
//! the random start of the track's RTP clock taken off. Time is an input.
//!
//! # Invariants
//! - A packet waits in the jitter buffer at most `max_delay` for the ones before it;
//!   then the hole is given up on (the frame it belonged to is dropped by the
//!   depacketizer, never passed on broken).
//! - Frames come out in decode order, timestamps relative to the track's first frame.

use super::{JitterBuffer, RtpDepacketizer, RtpError, JITTER_CAPACITY, JITTER_MAX_WAIT};
use crate::{Frame, Timestamp, Track};
use bytes::Bytes;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// What a receiver gives out.
#[derive(Debug, Clone, PartialEq)]
pub enum Received {
    /// The track's decoder configuration changed (parameter sets in band), at this time.
    Track(Timestamp, Track),
    /// A whole frame.
    Frame(Frame),
}

/// One RTP track being received.
#[derive(Debug)]
pub struct RtpReceiver {
    depacketizer: RtpDepacketizer,
    /// Puts datagrams back in order (packets over TCP need none).
    jitter: JitterBuffer,
    /// Since when the jitter buffer holds packets it does not release.
    waiting_since: Option<Instant>,
    max_delay: Duration,
    /// The first frame's time: the RTP clock starts at a random value.
    base: Option<Timestamp>,
    /// The first frame's RTP timestamp, as sent.
    first_rtp: Option<u32>,
    out: VecDeque<Received>,
}

impl RtpReceiver {
    /// A receiver around `depacketizer` that waits at most `max_delay` for a lost
    /// datagram.
    pub fn new(depacketizer: RtpDepacketizer, max_delay: Duration) -> Self {
        RtpReceiver {
            depacketizer,
            jitter: JitterBuffer::new(JITTER_CAPACITY, JITTER_MAX_WAIT),
            waiting_since: None,
            max_delay,
            base: None,
            first_rtp: None,
            out: VecDeque::new(),
        }
    }

    /// The RTP timestamp of the frame given out at time 0: where a sender report's
    /// (NTP, RTP) pair places this track's timeline on the sender's wall clock.
    pub fn first_rtp_timestamp(&self) -> Option<u32> {
        self.first_rtp
    }

    /// A packet that arrived in order (interleaved on TCP). A bad packet drops its
    /// frame; the track goes on.
    pub fn push_in_order(&mut self, packet: &[u8]) -> Result<(), RtpError> {
        let pushed = self.depacketizer.push(packet);
        self.drain_frames();
        pushed
    }

    /// A datagram that arrived at `now`: reordered, then depacketized as far as the
    /// packets before it are here.
    pub fn push_datagram(&mut self, packet: Bytes, now: Instant) -> Result<(), RtpError> {
        let pushed = self.jitter.push(packet);
        self.handle_timeout(now);
        pushed
    }

    /// Releases what the jitter buffer can give, and gives up on a hole older than
    /// `max_delay` (a sender that puts few packets out, such as AAC aggregated a few
    /// frames per packet, is not held back longer than that).
    pub fn handle_timeout(&mut self, now: Instant) {
        if self
            .waiting_since
            .is_some_and(|w| now.saturating_duration_since(w) >= self.max_delay)
        {
            self.jitter.skip_missing();
            self.waiting_since = None;
        }
        while let Some(p) = self.jitter.pop() {
            // A bad packet drops its frame; the depacketizer counts it.
            let _ = self.depacketizer.push(&p);
            self.drain_frames();
        }
        if self.jitter.is_empty() {
            self.waiting_since = None;
        } else {
            self.waiting_since.get_or_insert(now);
        }
    }

    /// When held datagrams are given up on, if any are held.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.waiting_since.map(|w| w + self.max_delay)
    }

    /// The next configuration or frame.
    pub fn poll(&mut self) -> Option<Received> {
        self.out.pop_front()
    }

    fn drain_frames(&mut self) {
        while let Some(f) = self.depacketizer.poll() {
            let codec = self.depacketizer.codec();
            let base = *self.base.get_or_insert(f.pts);
            self.first_rtp.get_or_insert(f.timestamp);
            if let Some(config) = f
                .parameter_sets
                .as_ref()
                .and_then(|s| s.to_config(codec).ok())
            {
                self.out
                    .push_back(Received::Track(f.pts - base, Track::new(config)));
            }
            let mut frame = f.into_frame();
            frame.dts -= base;
            frame.pts -= base;
            self.out.push_back(Received::Frame(frame));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::AvcConfig;
    use crate::rtp::{RtpFrame, RtpPacketizer};
    use crate::{MediaKind, TrackConfig};

    fn track() -> Track {
        let sps = Bytes::from_static(&[0x67, 0x42, 0xc0, 0x1e, 0xd9, 0x00, 0xa0, 0x47, 0xfe, 0xc8]);
        let pps = Bytes::from_static(&[0x68, 0xce, 0x3c, 0x80]);
        Track::new(TrackConfig::H264(
            AvcConfig::from_parameter_sets(&[sps], &[pps]).expect("avcC"),
        ))
    }

    /// The RTP packets of frames `0..n` (each of two packets: 3000-byte NAL units, MTU
    /// 1500), starting at an arbitrary RTP time.
    fn packets(n: i64) -> Vec<Bytes> {
        let track = track();
        let mut p = RtpPacketizer::new(&track, 96, 7, 1500).expect("packetizer");
        p.set_start(100, 123_456);
        let mut out = Vec::new();
        let mut nal = vec![0u8; 3004];
        nal[..4].copy_from_slice(&3000u32.to_be_bytes());
        nal[4] = 0x41;
        for i in 0..n {
            let frame = Frame {
                kind: MediaKind::Video,
                dts: i * 3600,
                pts: i * 3600,
                keyframe: false,
                payload: Bytes::from(nal.clone()),
            };
            let mut f = RtpFrame::new();
            p.packetize(&frame, &mut f).expect("packetize");
            out.extend(f.packets().map(Bytes::copy_from_slice));
        }
        out
    }

    fn frames(r: &mut RtpReceiver) -> Vec<Timestamp> {
        std::iter::from_fn(|| r.poll())
            .filter_map(|x| match x {
                Received::Frame(f) => Some(f.dts),
                Received::Track(..) => None,
            })
            .collect()
    }

    fn receiver() -> RtpReceiver {
        let d = RtpDepacketizer::for_track(&track()).expect("depacketizer");
        RtpReceiver::new(d, Duration::from_millis(50))
    }

    #[test]
    fn in_order_packets_become_frames_from_time_zero() {
        let mut r = receiver();
        for p in packets(4) {
            r.push_in_order(&p).expect("packet");
        }
        assert_eq!(frames(&mut r), [0, 3600, 7200, 10800]);
        assert_eq!(r.poll_timeout(), None);
    }

    #[test]
    fn datagrams_out_of_order_are_put_back_in_order() {
        let mut r = receiver();
        let now = Instant::now();
        let mut p = packets(4);
        p.swap(2, 3);
        p.swap(4, 6);
        for d in p {
            r.push_datagram(d, now).expect("packet");
        }
        // The first packets wait for any reordered around them, at most `max_delay`.
        assert_eq!(frames(&mut r), Vec::<Timestamp>::new());
        let due = r.poll_timeout().expect("a deadline while packets are held");
        assert_eq!(due, now + Duration::from_millis(50));
        r.handle_timeout(due);
        assert_eq!(frames(&mut r), [0, 3600, 7200, 10800]);
        assert_eq!(r.poll_timeout(), None);
    }

    #[test]
    fn a_lost_datagram_is_waited_for_then_given_up_on() {
        let mut r = receiver();
        let now = Instant::now();
        for (i, d) in packets(5).into_iter().enumerate() {
            if i != 3 {
                r.push_datagram(d, now).expect("packet");
            }
        }
        let start = now + Duration::from_millis(50);
        r.handle_timeout(start);
        assert_eq!(frames(&mut r), [0], "the rest is held behind the hole");
        let due = r.poll_timeout().expect("waiting for the lost packet");
        assert_eq!(due, start + Duration::from_millis(50));
        r.handle_timeout(due - Duration::from_millis(1));
        assert_eq!(frames(&mut r), Vec::<Timestamp>::new());
        r.handle_timeout(due);
        // The frame with the lost packet is dropped, the ones after it go on.
        assert_eq!(frames(&mut r), [7200, 10800, 14400]);
        assert_eq!(r.poll_timeout(), None);
    }
}
