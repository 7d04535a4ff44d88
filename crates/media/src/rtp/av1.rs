//! AV1 over RTP (AOM "RTP Payload Format for AV1" v1.0): OBU elements behind a
//! one-byte aggregation header.
//!
//! Why this shape: the payload format sends OBUs without their `obu_size` (receivers
//! learn sizes from the element lengths), so every OBU header goes out with
//! `obu_has_size_field` cleared and its size removed (§4.5: "SHOULD be set to zero in
//! all OBUs"). Temporal delimiters and tile list OBUs are dropped (§5). OBUs are
//! aggregated while they fit the budget and fragmented when they do not; an element
//! is preceded by its LEB128 length except the last when the packet has at most three
//! (W = the element count), which saves a few bytes on the common one-OBU packet.
//!
//! Key frames: N=1 on the first packet of a temporal unit that starts a coded video
//! sequence (a key frame with a sequence header). A key frame without an in-band
//! sequence header gets the one from the track's `av1C` in front, so a viewer joining
//! there can decode.
//!
//! # Invariants
//! - A temporal unit whose OBUs do not parse writes nothing; checking happens before
//!   the first packet.
//! - Packets are planned by walking the OBUs twice (measure, then write); nothing is
//!   allocated per frame.
//! - Every payload is at most `mtu` bytes; Z=1 exactly when the packet continues an
//!   OBU, Y=1 exactly when the next one does.

use super::packetizer::PacketWriter;
use super::RtpError;
use crate::codec::{
    av1_obus, leb128_len, write_leb128, CodecError, Obu, AV1_OBU_SEQUENCE_HEADER,
    AV1_OBU_TEMPORAL_DELIMITER, AV1_OBU_TILE_LIST,
};
use bytes::{BufMut, BytesMut};

/// Aggregation header bits.
const Z: u8 = 0x80;
const Y: u8 = 0x40;
const N: u8 = 0x08;
/// W counts up to three elements; more and every element has a length.
const MAX_W: usize = 3;
/// Least room worth starting a fragment in at the end of a packet: with less, the OBU
/// starts the next packet instead of leaving a sliver here.
const MIN_FRAGMENT_ROOM: usize = 8;

/// Writes the packets of one temporal unit. `config`: the `configOBUs` of the track's
/// `av1C`, whose sequence header goes in front of a key frame that has none.
pub(super) fn packetize(
    tu: &[u8],
    keyframe: bool,
    config: Option<&[u8]>,
    mtu: usize,
    w: &mut PacketWriter<'_>,
) -> Result<(), RtpError> {
    let mut has_sequence_header = false;
    let mut sendable = 0usize;
    for obu in av1_obus(tu) {
        let obu = obu.map_err(rtp_error)?;
        if sent(&obu) {
            sendable += 1;
            has_sequence_header |= obu.obu_type == AV1_OBU_SEQUENCE_HEADER;
        }
    }
    if sendable == 0 {
        return Err(RtpError::Malformed {
            what: "AV1 temporal unit without OBUs to send",
        });
    }
    let config = config
        .filter(|c| keyframe && !has_sequence_header && sequence_headers(c).next().is_some())
        .unwrap_or_default();
    let starts_sequence = keyframe && (has_sequence_header || !config.is_empty());
    let elements = sequence_headers(config).chain(elements(tu));
    let room = mtu.saturating_sub(1);
    let mut cursor = Cursor::new(elements);
    let mut first = true;
    while !cursor.done() {
        let start = cursor.clone();
        let z = cursor.offset > 0;
        let (mut count, mut total, mut last) = (0usize, 0usize, 0usize);
        cursor.fill(room, |_, _, len| {
            count += 1;
            total += leb128_len(len) + len;
            last = len;
        });
        let y = cursor.offset > 0;
        let w_count = if count <= MAX_W { count } else { 0 };
        let len = 1 + total - if w_count > 0 { leb128_len(last) } else { 0 };
        // `w_count` is at most 3.
        let mut header = (w_count as u8) << 4;
        header |= if z { Z } else { 0 } | if y { Y } else { 0 };
        header |= if first && starts_sequence { N } else { 0 };
        w.packet(cursor.done(), len, |buf| {
            buf.put_u8(header);
            let mut replay = start;
            let mut i = 0;
            replay.fill(room, |element, from, len| {
                i += 1;
                if w_count == 0 || i < count {
                    let mut leb = [0u8; 10];
                    let n = write_leb128(len, &mut leb);
                    buf.put_slice(leb.get(..n).unwrap_or_default());
                }
                element.write(from, len, buf);
            });
        });
        first = false;
    }
    Ok(())
}

fn rtp_error(e: CodecError) -> RtpError {
    match e {
        CodecError::Truncated { what } => RtpError::Truncated { what },
        CodecError::Malformed { what } => RtpError::Malformed { what },
        _ => RtpError::Malformed { what: "AV1 OBU" },
    }
}

/// Whether an OBU goes out over RTP (§5: no temporal delimiters, no tile lists).
fn sent(obu: &Obu<'_>) -> bool {
    obu.obu_type != AV1_OBU_TEMPORAL_DELIMITER && obu.obu_type != AV1_OBU_TILE_LIST
}

/// The OBUs of `data` that go out, as elements. Stops at the first OBU that does not
/// parse (`packetize` checked the frame; a bad `av1C` just ends early).
fn elements(data: &[u8]) -> impl Iterator<Item = Element<'_>> + Clone {
    av1_obus(data)
        .map_while(Result::ok)
        .filter(sent)
        .map(Element::new)
}

/// The sequence header OBUs of `config`.
fn sequence_headers(config: &[u8]) -> impl Iterator<Item = Element<'_>> + Clone {
    elements(config).filter(|e| e.obu_type == AV1_OBU_SEQUENCE_HEADER)
}

/// One OBU as sent: its header without the size flag, then its payload.
#[derive(Debug, Clone, Copy)]
struct Element<'a> {
    obu_type: u8,
    header: [u8; 2],
    header_len: usize,
    payload: &'a [u8],
}

impl<'a> Element<'a> {
    fn new(obu: Obu<'a>) -> Self {
        let (header, header_len) = obu.header_without_size();
        Element {
            obu_type: obu.obu_type,
            header,
            header_len: header_len.min(2),
            payload: obu.payload,
        }
    }

    fn len(&self) -> usize {
        self.header_len + self.payload.len()
    }

    /// Appends bytes `from..from + len` of the element.
    fn write(&self, from: usize, len: usize, buf: &mut BytesMut) {
        let end = from + len;
        let h = self.header_len;
        if from < h {
            buf.put_slice(self.header.get(from..end.min(h)).unwrap_or_default());
        }
        if end > h {
            let body = self.payload.get(from.saturating_sub(h)..end - h);
            buf.put_slice(body.unwrap_or_default());
        }
    }
}

/// Where packetizing stands: the element being sent and how much of it went out.
#[derive(Clone)]
struct Cursor<'a, I> {
    elements: I,
    current: Option<Element<'a>>,
    offset: usize,
}

impl<'a, I: Iterator<Item = Element<'a>> + Clone> Cursor<'a, I> {
    fn new(mut elements: I) -> Self {
        let current = elements.next();
        Cursor {
            elements,
            current,
            offset: 0,
        }
    }

    fn done(&self) -> bool {
        self.current.is_none()
    }

    /// Takes the elements (whole, or a fragment at the end) of one packet with `room`
    /// bytes after the aggregation header and calls `piece(element, from, len)` for
    /// each. Elements are counted with their length field, except one that ends the
    /// packet as its first, second or third element (W leaves its length out). Always
    /// takes something when not done.
    fn fill(&mut self, mut room: usize, mut piece: impl FnMut(&Element<'a>, usize, usize)) {
        let mut pieces = 0;
        while let Some(element) = self.current {
            let left = element.len() - self.offset;
            let whole = leb128_len(left) + left;
            let may_end_unsized = pieces < MAX_W;
            if whole <= room || (may_end_unsized && left <= room) {
                piece(&element, self.offset, left);
                self.current = self.elements.next();
                self.offset = 0;
                if whole > room {
                    return;
                }
                room -= whole;
                pieces += 1;
                continue;
            }
            if pieces == 0 || room >= MIN_FRAGMENT_ROOM {
                let take = if may_end_unsized {
                    room
                } else {
                    fragment_len(room)
                };
                piece(&element, self.offset, take);
                self.offset += take;
            }
            return;
        }
    }
}

/// The largest fragment that fits `room` with its length field.
fn fragment_len(room: usize) -> usize {
    let mut take = room.saturating_sub(1);
    while take > 1 && leb128_len(take) + take > room {
        take -= 1;
    }
    take.max(1)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{bytes, check_video_packets, send, video, Sent};
    use super::super::{RtpFrame, RtpPacketizer};
    use super::*;
    use crate::codec::read_leb128;
    use crate::{Track, TrackConfig};
    use bytes::Bytes;

    const SH: u8 = AV1_OBU_SEQUENCE_HEADER;
    const TD: u8 = AV1_OBU_TEMPORAL_DELIMITER;
    const FRAME: u8 = 6;
    const METADATA: u8 = 5;

    /// An OBU with its size field (`sized`), as in FLV/MP4, or without.
    fn obu(obu_type: u8, extension: Option<u8>, payload: &[u8], sized: bool) -> Vec<u8> {
        let mut v = vec![(obu_type << 3) | if sized { 2 } else { 0 }];
        if let Some(ext) = extension {
            v[0] |= 4;
            v.push(ext);
        }
        if sized {
            let mut leb = [0u8; 10];
            let n = write_leb128(payload.len(), &mut leb);
            v.extend_from_slice(&leb[..n]);
        }
        v.extend_from_slice(payload);
        v
    }

    fn sequence_header() -> Vec<u8> {
        obu(
            SH,
            None,
            &[0x00, 0x00, 0x00, 0x4a, 0xab, 0xbf, 0xc3, 0x77],
            true,
        )
    }

    fn track() -> Track {
        let mut record = vec![0x81, 0x00, 0x0c, 0x00];
        record.extend(sequence_header());
        Track::new(TrackConfig::Av1 {
            record: Bytes::from(record),
        })
    }

    /// What a receiver rebuilds from one temporal unit's packets (§4.4, §4.5): its OBUs
    /// with size fields restored, checking the aggregation headers on the way; and
    /// whether its first packet had N=1.
    fn reassemble(packets: &[Sent]) -> (Vec<u8>, bool) {
        let mut obus: Vec<Vec<u8>> = Vec::new();
        let mut pending = false;
        let mut n_first = false;
        for (i, p) in packets.iter().enumerate() {
            let agg = p.payload[0];
            let (z, y, w, n) = (
                agg & Z != 0,
                agg & Y != 0,
                usize::from((agg >> 4) & 3),
                agg & N != 0,
            );
            assert_eq!(agg & 0x07, 0, "reserved bits");
            if i == 0 {
                n_first = n;
                assert!(!z, "a temporal unit starts with a whole OBU");
            } else {
                assert!(!n, "N on the first packet only");
            }
            assert_eq!(z, pending, "Z exactly when an OBU continues");
            let mut rest = &p.payload[1..];
            let mut elements = Vec::new();
            while !rest.is_empty() {
                let last_without_len = w != 0 && elements.len() + 1 == w;
                let len = if last_without_len {
                    rest.len()
                } else {
                    let (len, used) = read_leb128(rest).expect("element length");
                    rest = &rest[used..];
                    len as usize
                };
                elements.push(&rest[..len]);
                rest = &rest[len..];
            }
            if w != 0 {
                assert_eq!(elements.len(), w, "W counts the elements");
            }
            assert!(!elements.is_empty());
            for (j, e) in elements.iter().enumerate() {
                if j == 0 && z {
                    obus.last_mut()
                        .expect("fragment start")
                        .extend_from_slice(e);
                } else {
                    obus.push(e.to_vec());
                }
            }
            pending = y;
        }
        assert!(!pending, "the last packet ends an OBU");
        let mut tu = Vec::new();
        for o in obus {
            assert_eq!(o[0] & 2, 0, "obu_has_size_field is cleared");
            let ext = o[0] & 4 != 0;
            let header_len = if ext { 2 } else { 1 };
            let (header, payload) = o.split_at(header_len);
            let mut header = header.to_vec();
            header[0] |= 2;
            let extension = ext.then(|| header[1]);
            tu.extend(obu(header[0] >> 3, extension, payload, true));
        }
        (tu, n_first)
    }

    #[test]
    fn temporal_units_reassemble_without_delimiters() {
        let mtu = 100;
        let td = obu(TD, None, &[], true);
        let big = bytes(1000, 1);
        let key = [td.clone(), sequence_header(), obu(FRAME, None, &big, true)].concat();
        // Inter frames: one tiny OBU; several small ones with an extension header and
        // the last without a size field (as ISOBMFF allows); one OBU of exactly a packet.
        let small = [
            td.clone(),
            obu(METADATA, Some(0x08), &[1, 2], true),
            obu(FRAME, Some(0x08), &bytes(30, 2), true),
            obu(METADATA, Some(0x08), &[3], true),
            obu(FRAME, Some(0x08), &bytes(5, 3), false),
        ]
        .concat();
        let one = obu(FRAME, None, &bytes(10, 4), true);
        let exact = obu(FRAME, None, &bytes(mtu - 2, 5), true);
        let frames = vec![
            video(key.clone(), true, 0),
            video(one.clone(), false, 3000),
            video(small.clone(), false, 6000),
            video(exact.clone(), false, 9000),
        ];
        let sent = send(&track(), mtu, &frames);
        check_video_packets(&sent, mtu);
        let want = [
            [sequence_header(), obu(FRAME, None, &big, true)].concat(),
            one,
            [
                obu(METADATA, Some(0x08), &[1, 2], true),
                obu(FRAME, Some(0x08), &bytes(30, 2), true),
                obu(METADATA, Some(0x08), &[3], true),
                obu(FRAME, Some(0x08), &bytes(5, 3), true),
            ]
            .concat(),
            exact,
        ];
        for (i, (packets, want)) in sent.iter().zip(want).enumerate() {
            let (tu, n) = reassemble(packets);
            assert_eq!(tu, want, "temporal unit {i}");
            assert_eq!(n, i == 0, "N only on the key frame");
        }
        assert!(sent[0].len() > 10, "the big OBU is fragmented");
        assert_eq!(sent[1].len(), 1);
        assert_eq!(sent[2].len(), 1, "small OBUs are aggregated");
        assert_eq!(sent[3].len(), 1, "one OBU of exactly the budget fits");
    }

    #[test]
    fn key_frame_without_sequence_header_gets_the_av1c_one() {
        let mtu = 1200;
        let frame = obu(FRAME, None, &bytes(50, 6), true);
        let frames = vec![
            video(frame.clone(), true, 0),
            video(frame.clone(), false, 3000),
        ];
        let sent = send(&track(), mtu, &frames);
        let (tu, n) = reassemble(&sent[0]);
        assert_eq!(tu, [sequence_header(), frame.clone()].concat());
        assert!(n);
        let (tu, n) = reassemble(&sent[1]);
        assert_eq!(tu, frame);
        assert!(!n);
        // W=2: the sequence header has a length, the frame OBU does not.
        assert_eq!(sent[0][0].payload[0], 0x28);
        // Without a usable av1C the key frame goes alone, and starts no sequence.
        let bare = Track::new(TrackConfig::Av1 {
            record: Bytes::from_static(&[0x81, 0, 0, 0]),
        });
        let sent = send(&bare, mtu, &frames[..1]);
        assert_eq!(reassemble(&sent[0]), (frame, false));
    }

    #[test]
    fn hostile_temporal_units_write_nothing() {
        let mut p = RtpPacketizer::new(&track(), 101, 1, 1200).expect("p");
        let mut out = RtpFrame::new();
        let cases: [&[u8]; 6] = [
            &[0x0e],                                                       // extension header cut off
            &[0x32],                                                       // size field missing
            &[0x32, 0x09, 1, 2],                                           // size past the end
            &[0x32, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], // leb128 overflow
            &[0x12, 0x00], // only a temporal delimiter
            &[0xb2, 0x00], // forbidden bit
        ];
        for data in cases {
            let r = p.packetize(&video(data.to_vec(), true, 0), &mut out);
            assert!(r.is_err(), "{data:?}");
            assert!(out.is_empty(), "{data:?}");
        }
        assert_eq!(p.next_seq(), 0);
        // A valid OBU followed by garbage is refused as a whole.
        let mut data = obu(FRAME, None, &[1, 2, 3], true);
        data.extend_from_slice(&[0x32, 0x7f]);
        assert!(p.packetize(&video(data, false, 0), &mut out).is_err());
        assert!(out.is_empty());
    }

    #[test]
    fn fragments_fit_small_budgets() {
        for mtu in [64usize, 65, 127, 128, 129, 300] {
            let frames: Vec<_> = [1usize, 60, 61, 62, 126, 127, 128, 5000]
                .iter()
                .map(|&n| video(obu(FRAME, None, &bytes(n, n as u8), true), false, 0))
                .collect();
            let sent = send(&track(), mtu, &frames);
            check_video_packets(&sent, mtu);
            for (packets, f) in sent.iter().zip(&frames) {
                assert_eq!(reassemble(packets).0, f.payload, "mtu {mtu}");
            }
        }
    }
}
