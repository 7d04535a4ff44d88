//! VP8 over RTP (RFC 7741): a payload descriptor in front of each piece of a frame.
//!
//! Why this descriptor: X=1, I=1 and a 15-bit PictureID on every packet let a receiver
//! (a browser's jitter buffer) tell frames apart and see a lost frame as a gap in picture
//! IDs. We never split at partition boundaries (RFC 7741 §4.4 allows any split), so the
//! whole frame is partition 0: S=1 on its first packet only, PID=0 throughout. No
//! TL0PICIDX, TID or KEYIDX: a live stream from RTMP has one temporal layer.
//!
//! A receiver finds key frames in the VP8 payload header itself (the P bit of the first
//! byte is 0), which is the first byte of the first packet; nothing here repeats it.
//!
//! # Invariants
//! - Every packet is the 4-byte descriptor and at least one byte of the frame, at most
//!   `mtu` bytes in all.

use super::packetizer::PacketWriter;
use super::RtpError;
use bytes::BufMut;

/// PictureIDs and VP9 picture IDs are 15 bits (the M bit set).
pub(super) const PICTURE_ID_MASK: u16 = 0x7fff;
/// X|R|N|S|R|PID, X|L|T|K|RSV... and the 15-bit PictureID with M=1.
const DESCRIPTOR_LEN: usize = 4;
/// X: the extension byte follows.
const X: u8 = 0x80;
/// S: start of a partition (here: of the frame).
const S: u8 = 0x10;
/// I: the PictureID follows.
const I: u8 = 0x80;
/// M: the PictureID is 15 bits.
const M: u8 = 0x80;

/// Writes the packets of one VP8 frame with `picture_id`. An empty frame is an error
/// and writes nothing.
pub(super) fn packetize(
    frame: &[u8],
    picture_id: u16,
    mtu: usize,
    w: &mut PacketWriter<'_>,
) -> Result<(), RtpError> {
    if frame.is_empty() {
        return Err(RtpError::Malformed {
            what: "empty VP8 frame",
        });
    }
    let [id_hi, id_lo] = (picture_id & PICTURE_ID_MASK).to_be_bytes();
    // MIN_MTU leaves room for the descriptor and more.
    let chunk = mtu.saturating_sub(DESCRIPTOR_LEN).max(1);
    let count = frame.len().div_ceil(chunk);
    for (i, piece) in frame.chunks(chunk).enumerate() {
        let start = if i == 0 { S } else { 0 };
        w.packet(i + 1 == count, DESCRIPTOR_LEN + piece.len(), |buf| {
            buf.put_slice(&[X | start, I, M | id_hi, id_lo]);
            buf.put_slice(piece);
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::{bytes, check_video_packets, send, video};
    use super::*;
    use crate::{Track, TrackConfig};
    use bytes::Bytes;

    fn track() -> Track {
        Track::new(TrackConfig::Vp8 {
            record: Bytes::new(),
        })
    }

    /// Reads an RFC 7741 descriptor: (S, PID, PictureID), and the payload after it.
    fn descriptor(p: &[u8]) -> ((bool, u8, Option<u16>), &[u8]) {
        let b0 = p[0];
        let mut at = 1;
        let mut picture_id = None;
        if b0 & 0x80 != 0 {
            let ext = p[at];
            at += 1;
            if ext & 0x80 != 0 {
                if p[at] & 0x80 != 0 {
                    picture_id = Some(u16::from_be_bytes([p[at] & 0x7f, p[at + 1]]));
                    at += 2;
                } else {
                    picture_id = Some(u16::from(p[at]));
                    at += 1;
                }
            }
            if ext & 0x40 != 0 {
                at += 1; // TL0PICIDX
            }
            if ext & 0x30 != 0 {
                at += 1; // TID|Y|KEYIDX
            }
        }
        ((b0 & 0x10 != 0, b0 & 0x0f, picture_id), &p[at..])
    }

    #[test]
    fn frames_reassemble_with_growing_picture_ids() {
        let mtu = 100;
        // Keyframe (P bit 0), then inter frames: one small, one exactly a packet, several.
        let mut key = bytes(250, 1);
        key[0] &= !1;
        let sizes = [5usize, mtu - DESCRIPTOR_LEN, 1000];
        let mut frames = vec![video(key, true, 0)];
        frames.extend(sizes.iter().enumerate().map(|(i, &n)| {
            let mut f = bytes(n, i as u8);
            f[0] |= 1;
            video(f, false, 3000 * (i as i64 + 1))
        }));
        let sent = send(&track(), mtu, &frames);
        check_video_packets(&sent, mtu);
        let mut last_id = None;
        for (frame, packets) in frames.iter().zip(&sent) {
            let mut data = Vec::new();
            let mut id = None;
            for (i, p) in packets.iter().enumerate() {
                let ((s, pid, picture_id), payload) = descriptor(&p.payload);
                assert_eq!(s, i == 0, "S on the first packet only");
                assert_eq!(pid, 0);
                assert!(picture_id.is_some());
                assert!(id.is_none() || id == picture_id, "one PictureID per frame");
                id = picture_id;
                assert!(!payload.is_empty());
                data.extend_from_slice(payload);
            }
            assert_eq!(data, frame.payload);
            if let (Some(prev), Some(id)) = (last_id, id) {
                assert_eq!(id, (prev + 1) & PICTURE_ID_MASK);
            }
            last_id = id;
            // The key frame bit a receiver reads is the frame's own.
            assert_eq!(data[0] & 1 == 0, frame.keyframe);
        }
        assert_eq!(sent[1].len(), 1);
        assert_eq!(sent[2].len(), 1);
        assert_eq!(sent[3].len(), 11);
    }

    #[test]
    fn picture_id_wraps_at_15_bits() {
        let mut p = super::super::RtpPacketizer::new(&track(), 99, 1, 1200).expect("p");
        p.set_picture_id(0xffff);
        assert_eq!(p.next_picture_id(), PICTURE_ID_MASK);
        let mut out = super::super::RtpFrame::new();
        p.packetize(&video(vec![1, 2, 3], false, 0), &mut out)
            .expect("frame");
        assert_eq!(p.next_picture_id(), 0);
        let frame = out.freeze().expect("packets");
        let pkt = frame.packet(0).expect("packet");
        assert_eq!(&pkt[12..16], &[0x90, 0x80, 0xff, 0xff]);
    }

    #[test]
    fn empty_frame_writes_nothing() {
        let mut p = super::super::RtpPacketizer::new(&track(), 99, 1, 1200).expect("p");
        let mut out = super::super::RtpFrame::new();
        assert!(p.packetize(&video(Vec::new(), true, 0), &mut out).is_err());
        assert!(out.is_empty());
        assert_eq!((p.next_seq(), p.next_picture_id()), (0, 0));
    }
}
