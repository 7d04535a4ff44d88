//! Arbitrary bytes into every RTP, RTCP and SDP parser: an answer or an error, never a
//! panic. Inputs start with valid-looking RTP headers and payload headers (STAP-A,
//! FU-A, AP, FU, AU headers) so the fuzzing reaches the reassembly paths. And one
//! property the other way: random frames survive packetize + depacketize.

use bytes::Bytes;
use proptest::prelude::*;
use sluice_media::rtp::{
    rtcp, AacParams, JitterBuffer, RtpCodec, RtpDepacketizer, RtpFrame, RtpPacket, RtpPacketizer,
};
use sluice_media::sdp::parse_sdp;
use sluice_media::{Frame, MediaKind, Track, TrackConfig};

const PAYLOAD_PREFIXES: &[&[u8]] = &[
    b"",
    b"\x18\x00\x05",         // STAP-A, size 5
    b"\x18\xff\xff",         // STAP-A, lying size
    b"\x7c\x85",             // FU-A start, IDR
    b"\x7c\x05",             // FU-A middle
    b"\x7c\x45",             // FU-A end
    b"\x7c\xc5",             // FU-A start and end
    b"\x60\x01\x00\x10",     // H.265 AP
    b"\x62\x01\x93",         // H.265 FU start, IDR_W_RADL
    b"\x62\x01\x53",         // H.265 FU end
    b"\x00\x10\x00\x08",     // one AU header, size 1
    b"\x00\x10\xff\xf8",     // one AU header, size 8191 (a fragment)
    b"\x00\x20\x00\x08\x00", // two AU headers, second cut
    b"\xff\xff",             // AU-headers-length past the end
    b"\x65",
    b"\x67\x64",
];

fn rtp_packet() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<u8>(),
        any::<bool>(),
        0u16..8,
        0u32..4,
        proptest::sample::select(PAYLOAD_PREFIXES),
        proptest::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(flags, marker, seq, ts, prefix, rest)| {
            // Mostly version 2, sometimes with X/P/CC bits set by `flags`.
            let b0 = if flags & 0x80 != 0 {
                flags
            } else {
                0x80 | (flags & 0x3f)
            };
            let mut v = vec![b0, u8::from(marker) << 7 | 96, 0, seq as u8];
            v.extend_from_slice(&(ts * 3000).to_be_bytes());
            v.extend_from_slice(&[0, 0, 0, 1]);
            v.extend_from_slice(prefix);
            v.extend_from_slice(&rest);
            v
        })
}

fn codec() -> impl Strategy<Value = RtpCodec> {
    proptest::sample::select(vec![
        RtpCodec::H264,
        RtpCodec::H265,
        RtpCodec::Aac,
        RtpCodec::Opus,
        RtpCodec::Pcma,
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn depacketizers_never_panic(c in codec(), packets in proptest::collection::vec(rtp_packet(), 0..24)) {
        let aac = AacParams { cts_delta_length: 2, dts_delta_length: 1, ..AacParams::HBR };
        for params in [AacParams::HBR, aac] {
            let mut d = RtpDepacketizer::new(c, 90_000, params).expect("valid params");
            let mut j = JitterBuffer::new(8, 2);
            for p in &packets {
                let _ = d.push(p);
                while let Some(f) = d.poll() {
                    prop_assert!(!f.payload.is_empty());
                    prop_assert!(f.payload.len() <= sluice_media::rtp::MAX_FRAME_LEN);
                }
                let _ = j.push(Bytes::from(p.clone()));
                while j.pop().is_some() {}
            }
            d.finish();
            while d.poll().is_some() {}
        }
    }

    #[test]
    fn rtp_and_rtcp_parsers_never_panic(data in proptest::collection::vec(any::<u8>(), 0..128)) {
        if let Ok(p) = RtpPacket::parse(&data) {
            prop_assert!(p.payload.len() <= data.len());
            let _ = p.csrcs().count();
        }
        for r in rtcp::parse_compound(&data) {
            let _ = r;
        }
        let mut rtcp_like = vec![0x81, 200, 0, 6];
        rtcp_like.extend_from_slice(&data);
        let _ = rtcp::parse_compound(&rtcp_like).count();
    }

    #[test]
    fn sdp_parser_never_panics(
        lines in proptest::collection::vec(
            (proptest::sample::select(vec![
                "m=video 0 RTP/AVP 96", "m=audio 0 RTP/AVP 97", "a=rtpmap:96 H264/90000",
                "a=rtpmap:96 H265/90000", "a=rtpmap:97 MPEG4-GENERIC/44100/2", "a=rtpmap:97 opus/48000/2",
                "a=fmtp:96 sprop-parameter-sets=", "a=fmtp:96 sprop-vps=", "a=fmtp:97 config=",
                "a=fmtp:97 sizelength=", "a=control:", "v=", "a=",
            ]), "[ -~]{0,40}"),
            0..16,
        )
    ) {
        let text: String = lines.iter().map(|(a, b)| format!("{a}{b}\r\n")).collect();
        let _ = parse_sdp(text.as_bytes());
    }

    #[test]
    fn random_video_frames_round_trip(
        h265 in any::<bool>(),
        mtu in 64usize..1500,
        sizes in proptest::collection::vec(3usize..5000, 1..8),
        key in any::<bool>(),
    ) {
        let (track, first) = if h265 {
            let c = sluice_media::codec::HevcConfig::parse(Bytes::from_static(include_bytes!("../data/x265_1080p.hvcC"))).expect("hvcC");
            (Track::new(TrackConfig::H265(c)), [1u8 << 1, 1])
        } else {
            let c = sluice_media::codec::AvcConfig::parse(Bytes::from_static(include_bytes!("../data/x264_720p.avcC"))).expect("avcC");
            (Track::new(TrackConfig::H264(c)), [0x41, 0])
        };
        let mut payload = Vec::new();
        for (i, s) in sizes.iter().enumerate() {
            payload.extend_from_slice(&(*s as u32).to_be_bytes());
            payload.extend_from_slice(&first);
            payload.extend((2..*s).map(|b| (b * 31 + i) as u8));
        }
        let frame = Frame { kind: MediaKind::Video, dts: 0, pts: 0, keyframe: key, payload: Bytes::from(payload) };
        let mut p = RtpPacketizer::new(&track, 96, 1, mtu).expect("packetizer");
        p.set_insert_parameter_sets(false);
        let mut out = RtpFrame::new();
        p.packetize(&frame, &mut out).expect("packetizes");
        let mut d = RtpDepacketizer::for_track(&track).expect("depacketizer");
        for pkt in out.packets() {
            prop_assert!(RtpPacket::parse(pkt).expect("rtp").payload.len() <= mtu);
            d.push(pkt).expect("valid");
        }
        let got = d.poll().expect("one frame");
        prop_assert!(got.payload == frame.payload);
        prop_assert!(d.poll().is_none());
    }
}
