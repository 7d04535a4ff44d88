//! Opus in MPEG-TS (ETSI TS 102 366 Annex, as ffmpeg's muxer writes it): PES payloads to
//! Opus packets, timed by their TOC bytes.
//!
//! Why: each Opus packet travels behind an `opus_control_header` that gives its size
//! (Opus packets do not say their own length) and optional trims; a PES may hold
//! several, and only the first has a PES timestamp, so the others are timed by the
//! durations their TOC bytes give (RFC 6716 §3.1).
//!
//! # Invariants
//! - A packet goes out only whole, with a valid TOC; the rest of a PES after a
//!   malformed control header is dropped.
//! - The track is announced before the first frame; its channel count comes from the
//!   PMT and cannot change without a new PMT.

use bytes::Bytes;

use super::Outputs;
use crate::codec::OpusConfig;
use crate::{Frame, MediaKind, Timestamp, Track, TrackConfig};

/// Longest Opus packet duration (RFC 6716 §3.2.5): 120 ms at 90 kHz.
const MAX_PACKET_TICKS: i64 = 10_800;

/// The parts of an `opus_control_header` we need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ControlHeader {
    /// Bytes of the header itself.
    pub(super) header_len: usize,
    /// `au_size`: bytes of the Opus packet that follows.
    pub(super) au_size: usize,
}

impl ControlHeader {
    /// Reads the control header at the start of `b`. `None` when it is malformed or
    /// cut short.
    pub(super) fn parse(b: &[u8]) -> Option<ControlHeader> {
        // control_header_prefix: 11 bits of 1 (0x7fe0 in 16 bits), then
        // start_trim_flag, end_trim_flag, control_extension_flag, 2 reserved bits.
        let &[0x7f, flags] = b.get(..2)? else {
            return None;
        };
        if flags & 0xe0 != 0xe0 {
            return None;
        }
        let mut pos = 2;
        // au_size: 0xff bytes each add 255, the first other byte ends it.
        let mut au_size = 0usize;
        loop {
            let byte = *b.get(pos)?;
            pos += 1;
            au_size = au_size.checked_add(usize::from(byte))?;
            if byte != 0xff {
                break;
            }
        }
        if flags & 0x10 != 0 {
            pos += 2; // start_trim
        }
        if flags & 0x08 != 0 {
            pos += 2; // end_trim
        }
        if flags & 0x04 != 0 {
            let len = *b.get(pos)?;
            pos += 1 + usize::from(len);
        }
        if pos > b.len() {
            return None;
        }
        Some(ControlHeader {
            header_len: pos,
            au_size,
        })
    }
}

/// The duration of an Opus packet in 90 kHz ticks, from its TOC byte and, for code
/// 3, its frame count byte (RFC 6716 §3.1, §3.2.5). `None` for an empty packet, a
/// code 3 packet without frames, or more than 120 ms.
pub(super) fn packet_ticks(packet: &[u8]) -> Option<i64> {
    let toc = *packet.first()?;
    let config = toc >> 3;
    // Frame sizes in 90 kHz ticks (2.5 ms = 225): SILK 10, 20, 40, 60 ms; hybrid 10,
    // 20 ms; CELT 2.5, 5, 10, 20 ms.
    let frame: i64 = match config {
        0..=11 => match config & 3 {
            0 => 900,
            1 => 1800,
            2 => 3600,
            _ => 5400,
        },
        12..=15 => 900 << (config & 1),
        _ => 225 << (config & 3),
    };
    let frames = match toc & 3 {
        0 => 1,
        1 | 2 => 2,
        _ => i64::from(*packet.get(1)? & 0x3f),
    };
    let ticks = frame * frames;
    (1..=MAX_PACKET_TICKS).contains(&ticks).then_some(ticks)
}

/// Turns the PES payloads of one Opus stream into frames.
#[derive(Debug)]
pub(super) struct OpusStream {
    config: OpusConfig,
    announced: bool,
    /// Where the packet after the last one emitted starts.
    next_pts: Option<Timestamp>,
}

impl OpusStream {
    /// A stream whose track has `config`.
    pub(super) fn new(config: OpusConfig) -> Self {
        OpusStream {
            config,
            announced: false,
            next_pts: None,
        }
    }

    /// The time the next packet would have: for a PES without timestamps.
    pub(super) fn next_pts(&self) -> Option<Timestamp> {
        self.next_pts
    }

    /// Splits one PES payload into Opus packets, the first at `pts`.
    pub(super) fn pes(&mut self, es: Bytes, pts: Timestamp, out: &mut Outputs) {
        let mut pos = 0;
        let mut t = pts;
        while let Some(rest) = es.get(pos..).filter(|r| !r.is_empty()) {
            let Some(h) = ControlHeader::parse(rest) else {
                out.stats.frames_dropped += 1;
                break;
            };
            let Some(end) = h
                .header_len
                .checked_add(h.au_size)
                .filter(|&end| end <= rest.len())
            else {
                out.stats.frames_dropped += 1;
                break;
            };
            let start = pos + h.header_len;
            pos += end;
            // In range: `pos <= es.len()`, checked just above.
            let packet = es.slice(start..pos);
            let Some(ticks) = packet_ticks(&packet) else {
                out.stats.frames_dropped += 1;
                continue;
            };
            let track =
                (!self.announced).then(|| (t, Track::new(TrackConfig::Opus(self.config.clone()))));
            let frame = Frame {
                kind: MediaKind::Audio,
                dts: t,
                pts: t,
                keyframe: true,
                payload: packet,
            };
            if out.frame(track, frame) {
                self.announced = true;
            }
            t = t.saturating_add(ticks);
        }
        self.next_pts = Some(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ts::demux::Demuxed;

    #[test]
    fn control_headers() {
        assert_eq!(
            ControlHeader::parse(&[0x7f, 0xe0, 0x05, 1, 2, 3, 4, 5]),
            Some(ControlHeader {
                header_len: 3,
                au_size: 5
            })
        );
        // 255 + 255 + 10 bytes, with start and end trims and a 2-byte extension.
        let h = [0x7f, 0xfc, 0xff, 0xff, 10, 0, 1, 0, 2, 2, 0xaa, 0xbb, 0xcc];
        assert_eq!(
            ControlHeader::parse(&h),
            Some(ControlHeader {
                header_len: 12,
                au_size: 520
            })
        );
        // Cut short anywhere, or a wrong prefix.
        for n in 0..12 {
            assert_eq!(ControlHeader::parse(&h[..n]), None, "{n}");
        }
        assert_eq!(ControlHeader::parse(&[0x7f, 0xc0, 1, 0]), None);
        assert_eq!(ControlHeader::parse(&[0x7e, 0xe0, 1, 0]), None);
        assert_eq!(ControlHeader::parse(&[0x7f, 0xe0, 0xff]), None);
    }

    #[test]
    fn toc_durations() {
        assert_eq!(packet_ticks(&[0xfc]), Some(1800)); // CELT FB 20 ms, one frame
        assert_eq!(packet_ticks(&[0xe0]), Some(225)); // CELT 2.5 ms
        assert_eq!(packet_ticks(&[0x09]), Some(3600)); // SILK 20 ms, two frames
        assert_eq!(packet_ticks(&[0x0b, 0x83]), Some(5400)); // SILK 20 ms x 3 (VBR)
        assert_eq!(packet_ticks(&[0x0b, 0x06]), Some(10_800)); // 120 ms, the most
        assert_eq!(packet_ticks(&[0x60]), Some(900)); // hybrid 10 ms
        assert_eq!(packet_ticks(&[0x78]), Some(1800)); // hybrid FB 20 ms
        assert_eq!(packet_ticks(&[0x1b, 0x03]), None); // SILK 60 ms x 3 = 180 ms
        assert_eq!(packet_ticks(&[0x03, 0x00]), None); // code 3, no frames
        assert_eq!(packet_ticks(&[0x03]), None);
        assert_eq!(packet_ticks(&[]), None);
    }

    #[test]
    fn several_packets_in_one_pes() {
        let mut es = Vec::new();
        for i in 0..3u8 {
            es.extend_from_slice(&[0x7f, 0xe0, 4, 0xfc, i, i, i]);
        }
        // With a start trim on the last one.
        es.extend_from_slice(&[0x7f, 0xf0, 2, 0x00, 0x50, 0xfc, 9]);
        let mut s = OpusStream::new(OpusConfig::stereo_48k());
        let mut out = Outputs::default();
        s.pes(Bytes::from(es), 1000, &mut out);
        let got: Vec<Demuxed> = out.queue.drain(..).collect();
        assert!(
            matches!(&got[0], Demuxed::Track(1000, t) if t.config == TrackConfig::Opus(OpusConfig::stereo_48k()))
        );
        let frames: Vec<(Timestamp, Vec<u8>)> = got[1..]
            .iter()
            .map(|d| match d {
                Demuxed::Frame(f) => (f.pts, f.payload.to_vec()),
                other => panic!("one track, then frames: {other:?}"),
            })
            .collect();
        assert_eq!(
            frames,
            vec![
                (1000, vec![0xfc, 0, 0, 0]),
                (2800, vec![0xfc, 1, 1, 1]),
                (4600, vec![0xfc, 2, 2, 2]),
                (6400, vec![0xfc, 9]),
            ]
        );
        assert_eq!(s.next_pts(), Some(8200));
        // A packet cut short, then garbage: dropped and counted, no more tracks.
        s.pes(Bytes::from_static(&[0x7f, 0xe0, 9, 0xfc]), 9000, &mut out);
        s.pes(Bytes::from_static(&[1, 2, 3]), 9000, &mut out);
        assert!(out.queue.is_empty());
        assert_eq!(out.stats.frames_dropped, 2);
    }
}
