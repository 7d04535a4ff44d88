//! Test helpers for the payload formats: packetize frames, read the packets back, and
//! check what every video payload format promises.

use super::{RtpFrame, RtpHeader, RtpPacket, RtpPacketizer};
use crate::{Frame, MediaKind, Track};
use bytes::Bytes;

/// One packet as a receiver sees it.
pub(super) struct Sent {
    pub(super) header: RtpHeader,
    pub(super) payload: Vec<u8>,
}

/// A video frame at `pts`.
pub(super) fn video(payload: Vec<u8>, keyframe: bool, pts: i64) -> Frame {
    Frame {
        kind: MediaKind::Video,
        dts: pts,
        pts,
        keyframe,
        payload: Bytes::from(payload),
    }
}

/// Packetizes `frames` one after the other with a payload budget of `mtu`; the packets
/// of each frame, parsed back.
pub(super) fn send(track: &Track, mtu: usize, frames: &[Frame]) -> Vec<Vec<Sent>> {
    let mut p = RtpPacketizer::new(track, 100, 0x1234, mtu).expect("packetizer");
    p.set_start(65_530, 7);
    let mut out = RtpFrame::new();
    frames
        .iter()
        .map(|f| {
            p.packetize(f, &mut out).expect("packetize");
            let frozen = out.freeze().expect("packets");
            assert_eq!(frozen.keyframe, f.keyframe, "keyframe comes from the frame");
            frozen
                .packets()
                .map(|b| {
                    let pkt = RtpPacket::parse(&b).expect("RTP packet");
                    Sent {
                        header: pkt.header,
                        payload: pkt.payload.to_vec(),
                    }
                })
                .collect()
        })
        .collect()
}

/// Marker bit only on the last packet of each frame, one timestamp per frame, sequence
/// numbers one apart across frames, every payload within `mtu`.
pub(super) fn check_video_packets(frames: &[Vec<Sent>], mtu: usize) {
    let mut seq = None;
    for packets in frames {
        assert!(!packets.is_empty());
        let ts = packets.first().map(|p| p.header.timestamp);
        for (i, p) in packets.iter().enumerate() {
            assert_eq!(
                p.header.marker,
                i + 1 == packets.len(),
                "marker on the last only"
            );
            assert_eq!(Some(p.header.timestamp), ts);
            assert!(p.payload.len() <= mtu, "{} > {mtu}", p.payload.len());
            if let Some(prev) = seq {
                assert_eq!(p.header.sequence, u16::wrapping_add(prev, 1));
            }
            seq = Some(p.header.sequence);
        }
    }
}

/// Deterministic filler bytes.
pub(super) fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}
