//! Frames of any bytes into the VP8, VP9 and AV1 packetizers: never a panic, every
//! payload within the budget, the marker bit on the last packet of each frame only,
//! sequence numbers one apart, and a refused frame writes nothing.
//!
//! Input: the first byte picks the codec (low 2 bits) and the budget (the rest), the
//! second the key frame flags (bit `i % 8` for frame `i`); then frames, each behind a
//! 2-byte big-endian length. For AV1 the first of those is the `av1C` record.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use sluice_media::rtp::{RtpFrame, RtpPacket, RtpPacketizer};
use sluice_media::{Frame, MediaKind, Track, TrackConfig};

fn chunks(mut rest: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let (len, tail) = rest.split_first_chunk::<2>()?;
        let len = usize::from(u16::from_be_bytes(*len)).min(tail.len());
        let (chunk, tail) = tail.split_at(len);
        rest = tail;
        Some(chunk)
    })
}

fuzz_target!(|data: &[u8]| {
    let [which, flags, rest @ ..] = data else {
        return;
    };
    let mut frames = chunks(rest);
    let config = match which & 3 {
        0 => TrackConfig::Vp8 {
            record: Bytes::new(),
        },
        1 => TrackConfig::Vp9 {
            record: Bytes::new(),
        },
        _ => TrackConfig::Av1 {
            record: Bytes::copy_from_slice(frames.next().unwrap_or_default()),
        },
    };
    let mtu = 64 + usize::from(which >> 2) * 37;
    let Ok(mut p) = RtpPacketizer::new(&Track::new(config), 100, 1, mtu) else {
        return;
    };
    p.set_start(65_535, 0);
    let mut out = RtpFrame::new();
    for (i, payload) in frames.enumerate() {
        let frame = Frame {
            kind: MediaKind::Video,
            dts: i as i64 * 3000,
            pts: i as i64 * 3000,
            keyframe: flags & (1 << (i % 8)) != 0,
            payload: Bytes::copy_from_slice(payload),
        };
        let seq = p.next_seq();
        if p.packetize(&frame, &mut out).is_err() {
            assert!(out.is_empty() && out.as_bytes().is_empty());
            assert_eq!(
                p.next_seq(),
                seq,
                "a refused frame takes no sequence number"
            );
            continue;
        }
        let packets: Vec<_> = out.packets().map(|b| b.to_vec()).collect();
        assert!(!packets.is_empty());
        for (j, bytes) in packets.iter().enumerate() {
            let pkt = RtpPacket::parse(bytes).expect("our packets parse");
            assert!(pkt.payload.len() <= p.mtu());
            assert_eq!(pkt.header.marker, j + 1 == packets.len());
            assert_eq!(pkt.header.sequence, seq.wrapping_add(j as u16));
        }
        let frozen = out.freeze().expect("packets");
        assert_eq!(frozen.keyframe, frame.keyframe);
    }
});
