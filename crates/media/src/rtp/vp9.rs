//! VP9 over RTP (RFC 9628), non-flexible mode, one spatial and one temporal layer.
//!
//! Why this descriptor: I=1 with a 15-bit picture ID (M=1) lets receivers tell
//! pictures apart, and P says whether a frame needs earlier pictures, which is how
//! browsers and GStreamer find where to start. On the first packet of a key frame V=1
//! carries the scalability structure with the picture size (N_S=0, Y=1, G=0), read
//! from the key frame's uncompressed header; when that header cannot be read, V=0.
//! No layer indices (L=0): a stream from RTMP has one layer.
//!
//! Superframes (a chunk of several frames and an index of their sizes, VP9 Annex B,
//! typically a hidden alt-ref frame and the frame shown) go out whole, index included,
//! as the one frame of their picture: B on the first packet, E and the marker bit on
//! the last. They cannot go as separate frames: receivers (libwebrtc, GStreamer) take
//! a B bit without layer indices as the start of a new picture and drop the frames
//! before it, and a hidden frame sent as a picture of its own carries the timestamp of
//! the frame it precedes, which receivers that order pictures by timestamp refuse.
//! Every VP9 decoder reads the index. P and the SS describe the first frame of the
//! chunk, the one a decoder starts with; a chunk whose index does not add up is one
//! plain frame, and only its first bytes are read.
//!
//! # Invariants
//! - Every packet is a 3-byte descriptor (8 with the SS) and at least one byte of the
//!   chunk, at most `mtu` bytes in all.

use super::packetizer::PacketWriter;
use super::vp8::PICTURE_ID_MASK;
use super::RtpError;
use crate::codec::{vp9_frame_header, vp9_frames};
use bytes::BufMut;

/// I|P|L|F|B|E|V|Z, then M and the 15-bit picture ID.
const DESCRIPTOR_LEN: usize = 3;
/// N_S|Y|G, then width and height of the one spatial layer.
const SS_LEN: usize = 5;
/// I: a picture ID follows.
const I: u8 = 0x80;
/// P: inter-picture predicted.
const P: u8 = 0x40;
/// B: start of a frame.
const B: u8 = 0x08;
/// E: end of a frame.
const E: u8 = 0x04;
/// V: a scalability structure follows.
const V: u8 = 0x02;
/// M: the picture ID is 15 bits.
const M: u8 = 0x80;
/// SS first byte: N_S = 0 (one spatial layer), Y = 1 (sizes follow), G = 0.
const SS_ONE_LAYER_WITH_SIZE: u8 = 0x10;

/// Writes the packets of one VP9 chunk (a frame or a superframe) as one picture with
/// `picture_id`. An empty chunk is an error and writes nothing.
pub(super) fn packetize(
    chunk: &[u8],
    picture_id: u16,
    mtu: usize,
    w: &mut PacketWriter<'_>,
) -> Result<(), RtpError> {
    let Some(first) = vp9_frames(chunk).next() else {
        return Err(RtpError::Malformed {
            what: "empty VP9 frame",
        });
    };
    let header = vp9_frame_header(first).ok();
    // A frame we cannot read is sent as inter: no receiver starts on it.
    let keyframe = header.is_some_and(|h| h.keyframe);
    let ss = header.and_then(|h| h.size).and_then(|(width, height)| {
        Some((u16::try_from(width).ok()?, u16::try_from(height).ok()?))
    });
    let id = (picture_id & PICTURE_ID_MASK) | (u16::from(M) << 8);
    let p = if keyframe { 0 } else { P };
    let mut rest = chunk;
    let mut first = true;
    while first || !rest.is_empty() {
        let ss = ss.filter(|_| first && keyframe);
        let head = DESCRIPTOR_LEN + if ss.is_some() { SS_LEN } else { 0 };
        // MIN_MTU leaves room for the descriptor and the SS.
        let take = rest.len().min(mtu.saturating_sub(head).max(1));
        let (piece, tail) = rest.split_at(take);
        let end = tail.is_empty();
        let flags = I
            | p
            | if first { B } else { 0 }
            | if end { E } else { 0 }
            | if ss.is_some() { V } else { 0 };
        w.packet(end, head + piece.len(), |buf| {
            buf.put_u8(flags);
            buf.put_u16(id);
            if let Some((width, height)) = ss {
                buf.put_u8(SS_ONE_LAYER_WITH_SIZE);
                buf.put_u16(width);
                buf.put_u16(height);
            }
            buf.put_slice(piece);
        });
        rest = tail;
        first = false;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::{bytes, check_video_packets, send, video, Sent};
    use super::*;
    use crate::{Track, TrackConfig};
    use bytes::Bytes;

    fn track() -> Track {
        Track::new(TrackConfig::Vp9 {
            record: Bytes::new(),
        })
    }

    /// A profile 0 key frame of `w` x `h` (shown, BT.601), `len` bytes in all.
    fn key_frame(w: u16, h: u16, len: usize) -> Vec<u8> {
        let mut v = vec![0b1000_0010, 0x49, 0x83, 0x42];
        let bits = (1u64 << 33) | (u64::from(w - 1) << 16) | u64::from(h - 1);
        v.extend_from_slice(&(bits << 4).to_be_bytes()[3..]);
        v.extend(bytes(len - v.len(), 9));
        v
    }

    /// A profile 0 inter frame, shown or hidden, `len` bytes in all.
    fn inter_frame(shown: bool, len: usize) -> Vec<u8> {
        let mut v = bytes(len, 3);
        v[0] = if shown { 0b1000_0110 } else { 0b1000_0100 };
        v
    }

    /// Appends a superframe index with 2-byte sizes.
    fn superframe(frames: &[&[u8]]) -> Vec<u8> {
        let marker = 0xc8 | (frames.len() as u8 - 1);
        let mut v: Vec<u8> = frames.concat();
        v.push(marker);
        for f in frames {
            v.extend_from_slice(&(f.len() as u16).to_le_bytes());
        }
        v.push(marker);
        v
    }

    /// What a receiver reads from one RFC 9628 descriptor.
    #[derive(Debug, Default)]
    struct Descriptor {
        inter: bool,
        begin: bool,
        end: bool,
        picture_id: Option<u16>,
        size: Option<(u16, u16)>,
    }

    fn descriptor(p: &[u8]) -> (Descriptor, &[u8]) {
        let b0 = p[0];
        let (i, pb, l, f, v) = (
            b0 & 0x80 != 0,
            b0 & 0x40 != 0,
            b0 & 0x20 != 0,
            b0 & 0x10 != 0,
            b0 & 0x02 != 0,
        );
        let mut d = Descriptor {
            inter: pb,
            begin: b0 & 0x08 != 0,
            end: b0 & 0x04 != 0,
            ..Descriptor::default()
        };
        let mut at = 1;
        if i {
            if p[at] & 0x80 != 0 {
                d.picture_id = Some(u16::from_be_bytes([p[at] & 0x7f, p[at + 1]]));
                at += 2;
            } else {
                d.picture_id = Some(u16::from(p[at]));
                at += 1;
            }
        }
        if l {
            at += if f { 1 } else { 2 };
        }
        if f && pb {
            while p[at] & 1 != 0 {
                at += 1;
            }
            at += 1;
        }
        if v {
            let (n_s, y, g) = (
                usize::from(p[at] >> 5),
                p[at] & 0x10 != 0,
                p[at] & 0x08 != 0,
            );
            at += 1;
            if y {
                d.size = Some((
                    u16::from_be_bytes([p[at], p[at + 1]]),
                    u16::from_be_bytes([p[at + 2], p[at + 3]]),
                ));
                at += 4 * (n_s + 1);
            }
            if g {
                let n_g = p[at];
                at += 1;
                for _ in 0..n_g {
                    let r = usize::from((p[at] >> 2) & 3);
                    at += 1 + r;
                }
            }
        }
        (d, &p[at..])
    }

    /// The one frame of a picture (B on its first packet, E on its last), with the
    /// descriptor of its first packet.
    fn picture(packets: &[Sent]) -> (Descriptor, Vec<u8>) {
        let (first, _) = descriptor(&packets[0].payload);
        let mut data = Vec::new();
        for (i, p) in packets.iter().enumerate() {
            let (d, payload) = descriptor(&p.payload);
            assert!(d.picture_id.is_some(), "I=1");
            assert_eq!(d.picture_id, first.picture_id, "one picture ID per picture");
            assert_eq!(d.begin, i == 0, "B on the first packet only");
            assert_eq!(d.end, i + 1 == packets.len(), "E on the last packet only");
            assert_eq!(d.inter, first.inter, "P is the same in all packets");
            assert!(i == 0 || d.size.is_none(), "SS only on the first packet");
            assert!(!payload.is_empty());
            data.extend_from_slice(payload);
        }
        (first, data)
    }

    #[test]
    fn frames_and_superframes_reassemble() {
        let mtu = 200;
        let key = key_frame(1280, 720, 1000);
        let small = inter_frame(true, 40);
        let exact = inter_frame(true, mtu - DESCRIPTOR_LEN);
        let hidden_then_shown = superframe(&[&inter_frame(false, 700), &inter_frame(true, 30)]);
        let key_then_hidden = superframe(&[&key_frame(640, 360, 300), &inter_frame(false, 90)]);
        let frames = vec![
            video(key.clone(), true, 0),
            video(small.clone(), false, 3000),
            video(exact.clone(), false, 6000),
            video(hidden_then_shown.clone(), false, 9000),
            video(key_then_hidden.clone(), true, 12_000),
        ];
        let sent = send(&track(), mtu, &frames);
        check_video_packets(&sent, mtu);
        let pictures: Vec<_> = sent.iter().map(|p| picture(p)).collect();
        // Superframes go whole, index included.
        let want = [key, small, exact, hidden_then_shown, key_then_hidden];
        for ((_, got), want) in pictures.iter().zip(&want) {
            assert_eq!(got, want);
        }
        // Key frames: P=0 and the SS with their size; the others P=1 and no SS.
        let described: Vec<_> = pictures.iter().map(|(d, _)| (d.inter, d.size)).collect();
        assert_eq!(
            described,
            vec![
                (false, Some((1280, 720))),
                (true, None),
                (true, None),
                (true, None),
                (false, Some((640, 360))),
            ]
        );
        assert_eq!(sent[1].len(), 1);
        assert_eq!(
            sent[2].len(),
            1,
            "a frame of exactly the budget fits one packet"
        );
        assert!(sent[0].len() > 5);
        // Picture IDs grow by one per picture.
        let ids: Vec<u16> = pictures
            .iter()
            .map(|(d, _)| d.picture_id.expect("id"))
            .collect();
        assert_eq!(ids, vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn unreadable_key_frame_has_no_ss_and_bad_index_is_plain_data() {
        let mtu = 100;
        // Says key frame but the sync code is wrong: sent as inter, no SS.
        let mut broken = key_frame(64, 64, 150);
        broken[1] = 0;
        // A superframe index whose sizes point past the end.
        let mut past_end = inter_frame(true, 20);
        past_end.extend_from_slice(&[0xc9, 0xff, 0x7f, 0x05, 0x00, 0xc9]);
        let frames = vec![
            video(broken.clone(), true, 0),
            video(past_end.clone(), false, 3000),
        ];
        let sent = send(&track(), mtu, &frames);
        check_video_packets(&sent, mtu);
        let (d, data) = picture(&sent[0]);
        assert!(d.inter && d.size.is_none());
        assert_eq!(data, broken);
        assert_eq!(picture(&sent[1]).1, past_end);
    }
}
