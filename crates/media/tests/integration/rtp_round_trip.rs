//! Packetize frames, depacketize the packets, get the same frames back: every codec,
//! every packetization mode (single, aggregation, fragmentation), across sequence and
//! timestamp wraparound, and with packets lost or reordered on the way.

use bytes::{Bytes, BytesMut};
use sluice_media::codec::{AacConfig, AvcConfig, HevcConfig, OpusConfig};
use sluice_media::rtp::{
    rtcp, AacParams, DepacketizedFrame, JitterBuffer, PacketizedFrame, RtpCodec, RtpDepacketizer,
    RtpFrame, RtpPacket, RtpPacketizer, DEFAULT_MTU,
};
use sluice_media::{Frame, MediaKind, Track, TrackConfig};

const AVCC_720P: &[u8] = include_bytes!("../data/x264_720p.avcC");
const HVCC_1080P: &[u8] = include_bytes!("../data/x265_1080p.hvcC");

fn h264_track() -> Track {
    Track::new(TrackConfig::H264(
        AvcConfig::parse(Bytes::from_static(AVCC_720P)).expect("avcC"),
    ))
}

fn h265_track() -> Track {
    Track::new(TrackConfig::H265(
        HevcConfig::parse(Bytes::from_static(HVCC_1080P)).expect("hvcC"),
    ))
}

fn aac_track() -> Track {
    Track::new(TrackConfig::Aac(
        AacConfig::parse(Bytes::from_static(&[0x11, 0x90])).expect("ASC"),
    ))
}

/// Length-prefixed NAL units.
fn lp(nals: &[Vec<u8>]) -> Bytes {
    let mut out = Vec::new();
    for n in nals {
        out.extend_from_slice(&(n.len() as u32).to_be_bytes());
        out.extend_from_slice(n);
    }
    Bytes::from(out)
}

/// A NAL unit of `len` bytes with header `header` and a recognisable body.
fn nal(header: &[u8], len: usize) -> Vec<u8> {
    let mut v = header.to_vec();
    v.extend((0..len - header.len()).map(|i| (i * 7 + 3) as u8));
    v
}

fn video(pts: i64, keyframe: bool, payload: Bytes) -> Frame {
    Frame {
        kind: MediaKind::Video,
        dts: pts,
        pts,
        keyframe,
        payload,
    }
}

fn audio(pts: i64, payload: Bytes) -> Frame {
    Frame {
        kind: MediaKind::Audio,
        dts: pts,
        pts,
        keyframe: true,
        payload,
    }
}

fn packetize(p: &mut RtpPacketizer, f: &Frame) -> PacketizedFrame {
    let mut out = RtpFrame::new();
    p.packetize(f, &mut out).expect("packetizes");
    out.freeze().expect("some packets")
}

fn feed(
    d: &mut RtpDepacketizer,
    packets: impl IntoIterator<Item = Bytes>,
) -> Vec<DepacketizedFrame> {
    let mut frames = Vec::new();
    for p in packets {
        d.push(&p).expect("valid packet");
        while let Some(f) = d.poll() {
            frames.push(f);
        }
    }
    frames
}

fn nal_types_h264(payload: &Bytes) -> Vec<u8> {
    sluice_media::codec::nal_units(payload, 4)
        .map(|n| n.expect("nal")[0] & 0x1f)
        .collect()
}

#[test]
fn h264_keyframe_gets_parameter_sets_stap_a_and_fu_a() {
    let track = h264_track();
    let TrackConfig::H264(cfg) = &track.config else {
        unreachable!()
    };
    let mut p = RtpPacketizer::new(&track, 96, 0x1234, DEFAULT_MTU).expect("packetizer");
    let sei = nal(&[0x06], 40);
    let idr = nal(&[0x65], 5000);
    let aud = vec![0x09, 0xf0];
    let frame = video(3000, true, lp(&[aud, sei.clone(), idr.clone()]));
    let pf = packetize(&mut p, &frame);

    let packets: Vec<Bytes> = pf.packets().collect();
    // STAP-A with SPS, PPS, SEI; then FU-A fragments of the 5000-byte IDR.
    assert_eq!(packets.len(), 1 + 5000_usize.div_ceil(DEFAULT_MTU - 2));
    let parsed: Vec<RtpPacket<'_>> = packets
        .iter()
        .map(|b| RtpPacket::parse(b).expect("rtp"))
        .collect();
    assert_eq!(parsed[0].payload[0] & 0x1f, 24, "STAP-A first");
    assert_eq!(
        parsed[0].payload[0] & 0x60,
        0x60,
        "NRI is the highest aggregated"
    );
    for (i, pk) in parsed.iter().enumerate() {
        assert_eq!(pk.header.payload_type, 96);
        assert_eq!(pk.header.ssrc, 0x1234);
        assert_eq!(pk.header.sequence, i as u16);
        assert_eq!(pk.header.timestamp, 3000);
        assert_eq!(
            pk.header.marker,
            i + 1 == parsed.len(),
            "marker on the last only"
        );
        assert!(pk.payload.len() <= DEFAULT_MTU);
    }
    let fus = &parsed[1..];
    for (i, pk) in fus.iter().enumerate() {
        assert_eq!(pk.payload[0], 0x60 | 28, "FU indicator keeps F/NRI");
        let start = pk.payload[1] & 0x80 != 0;
        let end = pk.payload[1] & 0x40 != 0;
        assert_eq!(start, i == 0);
        assert_eq!(end, i + 1 == fus.len());
        assert_eq!(pk.payload[1] & 0x1f, 5);
    }

    let mut d = RtpDepacketizer::for_track(&track).expect("depacketizer");
    let out = feed(&mut d, packets);
    assert_eq!(out.len(), 1);
    let f = &out[0];
    assert!(f.keyframe);
    assert_eq!(f.timestamp, 3000);
    assert_eq!(f.pts, 3000);
    assert_eq!(f.parameter_sets, None, "same sets as the track's");
    assert_eq!(
        f.payload,
        lp(&[cfg.sps[0].to_vec(), cfg.pps[0].to_vec(), sei, idr]),
        "AUD dropped, SPS/PPS inserted, bytes identical"
    );
    let sent = (1 + 5000_usize.div_ceil(DEFAULT_MTU - 2)) as u16;
    assert_eq!(p.next_seq(), sent);
    assert_eq!(p.packet_count(), u32::from(sent));
}

#[test]
fn h264_small_nals_share_stap_a_packets_up_to_the_budget() {
    let track = h264_track();
    let mut p = RtpPacketizer::new(&track, 96, 1, 200).expect("packetizer");
    let nals: Vec<Vec<u8>> = (0..10).map(|i| nal(&[0x41], 50 + i)).collect();
    let frame = video(0, false, lp(&nals));
    let pf = packetize(&mut p, &frame);
    let packets: Vec<Bytes> = pf.packets().collect();
    // 1 + (2 + 50) + (2 + 51) + (2 + 52) = 160; a fourth would pass 200.
    assert_eq!(packets.len(), 4);
    for (i, pk) in packets.iter().enumerate() {
        let rtp = RtpPacket::parse(pk).expect("rtp");
        assert!(rtp.payload.len() <= 200);
        let want = if i < 3 { 24 } else { 1 };
        assert_eq!(
            rtp.payload[0] & 0x1f,
            want,
            "three STAP-A of 3, then one single NAL"
        );
    }
    let mut d = RtpDepacketizer::new(RtpCodec::H264, 90_000, AacParams::HBR).expect("d");
    let out = feed(&mut d, packets);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].payload, frame.payload);
    assert!(!out[0].keyframe);
    assert_eq!(nal_types_h264(&out[0].payload), vec![1; 10]);
}

#[test]
fn h264_single_nal_packets_and_in_band_parameter_set_changes() {
    let track = h264_track();
    let TrackConfig::H264(cfg) = &track.config else {
        unreachable!()
    };
    let mut p = RtpPacketizer::new(&track, 96, 1, 64).expect("packetizer");
    // Exactly at the budget: single NAL packets, no aggregation possible.
    let a = nal(&[0x65], 64);
    let frame = video(
        0,
        true,
        lp(&[cfg.sps[0].to_vec(), cfg.pps[0].to_vec(), a.clone()]),
    );
    let pf = packetize(&mut p, &frame);
    // SPS is bigger than 64 bytes? Either way the round trip must hold.
    let mut d = RtpDepacketizer::new(RtpCodec::H264, 90_000, AacParams::HBR).expect("d");
    let out = feed(&mut d, pf.packets());
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].payload, frame.payload);
    let sets = out[0].parameter_sets.clone().expect("first sets are news");
    assert_eq!(
        (sets.sps.clone(), sets.pps.clone()),
        (cfg.sps.clone(), cfg.pps.clone())
    );
    assert_eq!(
        sets.to_config(RtpCodec::H264).ok(),
        Some(TrackConfig::H264(cfg.clone()))
    );
    // The same sets again are not news.
    let pf = packetize(&mut p, &video(3000, true, frame.payload.clone()));
    let out = feed(&mut d, pf.packets());
    assert_eq!(out[0].parameter_sets, None);
}

#[test]
fn h265_aggregation_and_fragmentation_round_trip() {
    let track = h265_track();
    let TrackConfig::H265(cfg) = &track.config else {
        unreachable!()
    };
    let mut p = RtpPacketizer::new(&track, 97, 9, DEFAULT_MTU).expect("packetizer");
    // IDR_W_RADL (19), layer 0, TID 1; then a 4000-byte one.
    let small = nal(&[19 << 1, 1], 30);
    let big = nal(&[19 << 1, 1], 4000);
    let aud = vec![35 << 1, 1, 0x50];
    let frame = video(9000, true, lp(&[aud, small.clone(), big.clone()]));
    let pf = packetize(&mut p, &frame);
    let packets: Vec<Bytes> = pf.packets().collect();
    let parsed: Vec<RtpPacket<'_>> = packets
        .iter()
        .map(|b| RtpPacket::parse(b).expect("rtp"))
        .collect();
    assert_eq!(
        (parsed[0].payload[0] >> 1) & 0x3f,
        48,
        "AP of VPS, SPS, PPS, small IDR"
    );
    let fus = &parsed[1..];
    assert_eq!(fus.len(), 3998_usize.div_ceil(DEFAULT_MTU - 3));
    for (i, pk) in fus.iter().enumerate() {
        assert_eq!((pk.payload[0] >> 1) & 0x3f, 49);
        assert_eq!(pk.payload[1], 1, "layer id and TID kept");
        assert_eq!(pk.payload[2] & 0x80 != 0, i == 0);
        assert_eq!(pk.payload[2] & 0x40 != 0, i + 1 == fus.len());
        assert_eq!(pk.payload[2] & 0x3f, 19);
        assert_eq!(pk.header.marker, i + 1 == fus.len());
    }
    let mut d = RtpDepacketizer::for_track(&track).expect("d");
    let out = feed(&mut d, packets);
    assert_eq!(out.len(), 1);
    assert!(out[0].keyframe);
    assert_eq!(
        out[0].payload,
        lp(&[
            cfg.vps[0].to_vec(),
            cfg.sps[0].to_vec(),
            cfg.pps[0].to_vec(),
            small,
            big
        ])
    );
    // A non-IRAP frame (TRAIL_R = 1).
    let trail = nal(&[1 << 1, 1], 2000);
    let pf = packetize(
        &mut p,
        &video(12000, false, lp(std::slice::from_ref(&trail))),
    );
    let out = feed(&mut d, pf.packets());
    assert!(!out[0].keyframe);
    assert_eq!(out[0].payload, lp(&[trail]));
}

#[test]
fn lost_packet_inside_fu_drops_that_frame_only() {
    let track = h264_track();
    let mut p = RtpPacketizer::new(&track, 96, 1, DEFAULT_MTU).expect("packetizer");
    let mut d = RtpDepacketizer::for_track(&track).expect("d");
    let f1 = video(0, false, lp(&[nal(&[0x41], 6000)]));
    let f2 = video(3000, false, lp(&[nal(&[0x41], 6000)]));
    let mut packets: Vec<Bytes> = packetize(&mut p, &f1).packets().collect();
    packets.remove(2);
    assert!(
        feed(&mut d, packets).is_empty(),
        "corrupted frame never emitted"
    );
    let out = feed(&mut d, packetize(&mut p, &f2).packets());
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].payload, f2.payload);
    let s = d.stats();
    assert_eq!((s.frames, s.frames_dropped, s.lost), (1, 1, 1));

    // Losing the last fragment (with the marker): the frame ends at the next
    // timestamp, incomplete, and is dropped; the next frame still comes out.
    let mut packets: Vec<Bytes> = packetize(&mut p, &f1).packets().collect();
    packets.pop();
    assert!(feed(&mut d, packets).is_empty());
    let f3 = video(6000, false, lp(&[nal(&[0x41], 100)]));
    let f4 = video(9000, false, lp(&[nal(&[0x41], 100)]));
    let out = feed(
        &mut d,
        packetize(&mut p, &f3)
            .packets()
            .chain(packetize(&mut p, &f4).packets()),
    );
    // f3 follows the gap (its head could have been lost): dropped too. f4 is fine.
    assert_eq!(out.iter().map(|f| f.pts).collect::<Vec<_>>(), vec![9000]);
}

#[test]
fn fu_without_start_is_an_error_and_drops_the_frame() {
    let mut d = RtpDepacketizer::new(RtpCodec::H264, 90_000, AacParams::HBR).expect("d");
    let mut pkt = BytesMut::new();
    RtpPacket::write(
        &sluice_media::rtp::RtpHeader {
            marker: true,
            payload_type: 96,
            sequence: 1,
            timestamp: 5,
            ssrc: 1,
        },
        &[],
        None,
        &[0x7c, 0x45, 1, 2, 3],
        0,
        &mut pkt,
    )
    .expect("write");
    assert!(d.push(&pkt).is_err());
    assert!(d.poll().is_none());
    assert_eq!(d.stats().frames_dropped, 1);
}

#[test]
fn sequence_and_timestamps_wrap_and_continue_across_frames() {
    let track = h264_track();
    let mut p = RtpPacketizer::new(&track, 96, 1, DEFAULT_MTU).expect("packetizer");
    p.set_start(65_534, u32::MAX - 4000);
    let mut d = RtpDepacketizer::for_track(&track).expect("d");
    let mut seqs = Vec::new();
    let mut out = Vec::new();
    for i in 0..4i64 {
        let f = video(i * 3000, false, lp(&[nal(&[0x41], 2000)]));
        let pf = packetize(&mut p, &f);
        seqs.extend(
            pf.packets()
                .map(|b| RtpPacket::parse(&b).expect("rtp").header.sequence),
        );
        out.extend(feed(&mut d, pf.packets()));
    }
    let expect: Vec<u16> = (0..8u16).map(|i| 65_534u16.wrapping_add(i)).collect();
    assert_eq!(seqs, expect);
    assert_eq!(out.len(), 4);
    let ts: Vec<u32> = out.iter().map(|f| f.timestamp).collect();
    assert_eq!(ts, vec![u32::MAX - 4000, u32::MAX - 1000, 1999, 4999]);
    for w in out.windows(2) {
        assert_eq!(w[1].extended_timestamp - w[0].extended_timestamp, 3000);
        assert_eq!(w[1].pts - w[0].pts, 3000);
    }
    assert_eq!(
        p.rtp_timestamp(-3000),
        u32::MAX - 7000,
        "negative pts wraps too"
    );
}

#[test]
fn aac_single_batched_and_fragmented_access_units() {
    let track = aac_track();
    let mut p = RtpPacketizer::new(&track, 98, 2, DEFAULT_MTU).expect("packetizer");
    assert_eq!(p.clock_rate(), 48_000);
    // 1024 samples at 48 kHz = 1920 ticks of 90 kHz.
    let aus: Vec<Frame> = (0..5)
        .map(|i| audio(i * 1920, Bytes::from(nal(&[0x21], 200 + i as usize))))
        .collect();
    let mut out = RtpFrame::new();
    p.packetize_batch(&aus, None, &mut out).expect("batch");
    let pf = out.freeze().expect("packets");
    assert_eq!(pf.spans.len(), 1, "five AUs of ~200 bytes share one packet");
    let rtp_bytes = pf.packet(0).expect("packet");
    let rtp = RtpPacket::parse(&rtp_bytes).expect("rtp");
    assert_eq!(&rtp.payload[..2], &[0, 80], "AU-headers-length 5 x 16 bits");
    assert_eq!(
        u16::from_be_bytes([rtp.payload[2], rtp.payload[3]]) >> 3,
        200
    );
    assert!(rtp.header.marker);

    let mut d = RtpDepacketizer::for_track(&track).expect("d");
    let got = feed(&mut d, pf.packets());
    assert_eq!(got.len(), 5);
    for (i, (g, f)) in got.iter().zip(&aus).enumerate() {
        assert_eq!(g.payload, f.payload);
        assert_eq!(g.timestamp, 1024 * i as u32);
        assert_eq!(g.pts, f.pts);
        assert!(g.keyframe);
    }

    // A 5000-byte AU in fragments, each with the full AU-size; marker on the last.
    let big = audio(5 * 1920, Bytes::from(nal(&[0x21], 5000)));
    let pf = packetize(&mut p, &big);
    let packets: Vec<Bytes> = pf.packets().collect();
    assert_eq!(packets.len(), 5000_usize.div_ceil(DEFAULT_MTU - 4));
    for (i, b) in packets.iter().enumerate() {
        let r = RtpPacket::parse(b).expect("rtp");
        assert_eq!(u16::from_be_bytes([r.payload[2], r.payload[3]]) >> 3, 5000);
        assert_eq!(r.header.marker, i + 1 == packets.len());
    }
    let got = feed(&mut d, packets.clone());
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload, big.payload);
    assert_eq!(got[0].timestamp, 5 * 1024);

    // A lost middle fragment drops that AU; the next AU is fine.
    let big2 = audio(6 * 1920, Bytes::from(nal(&[0x21], 5000)));
    let mut packets: Vec<Bytes> = packetize(&mut p, &big2).packets().collect();
    packets.remove(1);
    assert!(feed(&mut d, packets).is_empty());
    let small = audio(7 * 1920, Bytes::from(nal(&[0x21], 10)));
    let got = feed(&mut d, packetize(&mut p, &small).packets());
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload, small.payload);
    assert_eq!(d.stats().frames_dropped, 1);

    // Too big for a 13-bit AU-size.
    let mut out = RtpFrame::new();
    assert!(p
        .packetize(&audio(0, Bytes::from(vec![0u8; 9000])), &mut out)
        .is_err());
    assert!(out.is_empty(), "nothing written on error");
}

#[test]
fn opus_and_g711_pass_through() {
    let opus = Track::new(TrackConfig::Opus(OpusConfig::stereo_48k()));
    let mut p = RtpPacketizer::new(&opus, 111, 3, DEFAULT_MTU).expect("packetizer");
    let mut d = RtpDepacketizer::for_track(&opus).expect("d");
    for i in 0..3 {
        let f = audio(i * 1800, Bytes::from(nal(&[0xfc], 120)));
        let pf = packetize(&mut p, &f);
        assert_eq!(pf.spans.len(), 1);
        assert_eq!(pf.timestamp, (i * 960) as u32, "20 ms at 48 kHz");
        let got = feed(&mut d, pf.packets());
        assert_eq!(got[0].payload, f.payload);
        assert_eq!(got[0].pts, f.pts);
    }

    let pcma = Track::new(TrackConfig::Pcma { channels: 1 });
    let mut p = RtpPacketizer::new(&pcma, 8, 4, 100).expect("packetizer");
    let f = audio(900, Bytes::from(nal(&[0xd5], 250)));
    let pf = packetize(&mut p, &f);
    assert_eq!(pf.spans.len(), 3, "250 samples in 100-byte packets");
    let ts: Vec<u32> = pf
        .packets()
        .map(|b| RtpPacket::parse(&b).expect("rtp").header.timestamp)
        .collect();
    assert_eq!(ts, vec![80, 180, 280]);
    let mut d = RtpDepacketizer::for_track(&pcma).expect("d");
    let got = feed(&mut d, pf.packets());
    let joined: Vec<u8> = got.iter().flat_map(|g| g.payload.to_vec()).collect();
    assert_eq!(joined, f.payload.to_vec());
}

#[test]
fn interleaved_frame_is_one_contiguous_tcp_write() {
    let track = h264_track();
    let mut p = RtpPacketizer::new(&track, 96, 1, DEFAULT_MTU).expect("packetizer");
    let f = video(0, true, lp(&[nal(&[0x65], 4000)]));
    let mut out = RtpFrame::new();
    p.packetize_interleaved(&f, 2, &mut out)
        .expect("packetizes");
    let pf = out.freeze().expect("packets");
    assert!(pf.keyframe);
    assert_eq!(pf.first_seq, 0);
    // Walk the buffer as an RTSP client would: $ channel length packet, repeated.
    let mut rest = &pf.data[..];
    let mut n = 0;
    while !rest.is_empty() {
        assert_eq!(rest[0], b'$');
        assert_eq!(rest[1], 2);
        let len = u16::from_be_bytes([rest[2], rest[3]]) as usize;
        let pkt = &rest[4..4 + len];
        assert_eq!(pkt, &pf.packet(n).expect("span")[..]);
        assert_eq!(pf.spans[n].framed().start + 4, pf.spans[n].start);
        rest = &rest[4 + len..];
        n += 1;
    }
    assert_eq!(n, pf.spans.len());
    let moved = pf.with_channel(6);
    assert_eq!(moved.data[1], 6);
    assert_eq!(
        moved.packets().collect::<Vec<_>>(),
        pf.packets().collect::<Vec<_>>()
    );
    // The frame keeps its sequence numbers: a UDP player sends the same packets.
    let udp = p.next_seq();
    assert_eq!(udp as usize, pf.spans.len());
}

#[test]
fn wrong_kind_and_broken_payload_write_nothing() {
    let track = h264_track();
    let mut p = RtpPacketizer::new(&track, 96, 1, DEFAULT_MTU).expect("packetizer");
    let mut out = RtpFrame::new();
    assert!(p
        .packetize(&audio(0, Bytes::from_static(b"x")), &mut out)
        .is_err());
    assert!(p
        .packetize(
            &video(0, false, Bytes::from_static(&[0, 0, 0, 9, 1])),
            &mut out
        )
        .is_err());
    assert!(p
        .packetize(&video(0, false, Bytes::new()), &mut out)
        .is_err());
    assert!(out.is_empty());
    assert_eq!(p.next_seq(), 0, "no sequence number consumed");
    let mp3 = Track::new(TrackConfig::Mp3 {
        sample_rate: 44_100,
        channels: 2,
    });
    assert!(RtpPacketizer::new(&mp3, 96, 1, DEFAULT_MTU).is_err());
}

#[test]
fn jitter_buffer_reorders_and_skips_after_its_bound() {
    let track = h264_track();
    let mut p = RtpPacketizer::new(&track, 96, 1, DEFAULT_MTU).expect("packetizer");
    p.set_start(65_530, 0);
    let frames: Vec<Frame> = (0..6)
        .map(|i| video(i * 3000, false, lp(&[nal(&[0x41], 3000)])))
        .collect();
    let mut all: Vec<Bytes> = Vec::new();
    for f in &frames {
        all.extend(packetize(&mut p, f).packets());
    }
    // Shuffle within windows of 4 (deterministic), crossing the sequence wrap.
    let mut shuffled = all.clone();
    for chunk in shuffled.chunks_mut(4) {
        chunk.reverse();
    }
    let mut j = JitterBuffer::new(64, 8);
    let mut d = RtpDepacketizer::for_track(&track).expect("d");
    let mut got = Vec::new();
    let mut released = Vec::new();
    for pkt in shuffled {
        j.push(pkt).expect("rtp");
        while let Some(p) = j.pop() {
            released.push(p.clone());
            d.push(&p).expect("valid");
            while let Some(f) = d.poll() {
                got.push(f);
            }
        }
    }
    assert!(released == all, "in order again");
    assert_eq!(got.len(), 6);
    for (g, f) in got.iter().zip(&frames) {
        assert!(g.payload == f.payload);
    }

    // One packet never arrives: released after 8 later ones, its frame dropped.
    let more: Vec<Bytes> = (6..10)
        .flat_map(|i| {
            packetize(&mut p, &video(i * 3000, false, lp(&[nal(&[0x41], 3000)])))
                .packets()
                .collect::<Vec<_>>()
        })
        .collect();
    let mut out = Vec::new();
    for (i, pkt) in more.iter().enumerate() {
        if i == 1 {
            continue; // lost: frame 6's second packet
        }
        j.push(pkt.clone()).expect("rtp");
        let before = out.len();
        while let Some(p) = j.pop() {
            out.push(p);
        }
        if i < 10 {
            assert_eq!(
                out.len(),
                if i == 0 { 1 } else { before },
                "waiting for the hole at {i}"
            );
        }
    }
    assert_eq!(out.len(), more.len() - 1);
    assert_eq!(j.stats().skipped, 1);
    // A packet older than what was released is late.
    j.push(more[1].clone()).expect("rtp");
    assert!(j.pop().is_none());
    assert_eq!(j.stats().late, 1);
}

#[test]
fn jitter_buffer_restarts_on_a_jump_and_skip_missing_works() {
    let pkt = |seq: u16| {
        let mut b = BytesMut::new();
        sluice_media::rtp::RtpHeader {
            marker: false,
            payload_type: 0,
            sequence: seq,
            timestamp: 0,
            ssrc: 0,
        }
        .write(&mut b);
        b.freeze()
    };
    let seq_of = |b: &Bytes| RtpPacket::parse(b).expect("rtp").header.sequence;
    let mut j = JitterBuffer::new(16, 8);
    j.push(pkt(10)).expect("ok");
    assert!(
        j.pop().is_none(),
        "at the start, waits for reordered packets"
    );
    j.push(pkt(9)).expect("ok");
    assert_eq!(j.skip_missing(), 0);
    assert_eq!(
        j.pop().map(|b| seq_of(&b)),
        Some(9),
        "an earlier first packet moved the start"
    );
    assert_eq!(j.pop().map(|b| seq_of(&b)), Some(10));
    j.push(pkt(12)).expect("ok");
    assert!(j.pop().is_none());
    assert_eq!(j.skip_missing(), 1);
    assert_eq!(j.pop().map(|b| seq_of(&b)), Some(12));
    // A jump far ahead: released in order, then the new numbering.
    j.push(pkt(14)).expect("ok");
    j.push(pkt(40_000)).expect("ok");
    let order: Vec<u16> = std::iter::from_fn(|| j.pop()).map(|b| seq_of(&b)).collect();
    assert_eq!(order, vec![14, 40_000]);
    j.push(pkt(40_000)).expect("ok");
    assert_eq!(j.stats().late, 1, "duplicate of a released packet");
    assert!(j.push(Bytes::from_static(b"\x00\x00")).is_err());
}

#[test]
fn rtcp_sender_report_layout_and_compound_parse() {
    let track = aac_track();
    let mut p = RtpPacketizer::new(&track, 98, 0xa1b2c3d4, DEFAULT_MTU).expect("packetizer");
    p.set_start(0, 1000);
    let _ = packetize(&mut p, &audio(0, Bytes::from_static(&[1, 2, 3])));
    let ntp = rtcp::ntp_timestamp(std::time::Duration::new(1_700_000_000, 500_000_000));
    assert_eq!(ntp >> 32, 1_700_000_000 + 2_208_988_800);
    assert_eq!(ntp & 0xffff_ffff, 0x8000_0000);
    let sr = p.sender_report(ntp, 90_000);
    let mut out = BytesMut::new();
    rtcp::write_sender_report(&mut out, &sr);
    assert_eq!(out.len(), 28);
    assert_eq!(&out[..4], &[0x80, 200, 0, 6]);
    assert_eq!(&out[4..8], &0xa1b2c3d4u32.to_be_bytes());
    assert_eq!(&out[8..16], &ntp.to_be_bytes());
    assert_eq!(&out[16..20], &(1000u32 + 48_000).to_be_bytes());
    assert_eq!(&out[20..24], &1u32.to_be_bytes());
    assert_eq!(
        &out[24..28],
        &7u32.to_be_bytes(),
        "4 header bytes + 3 payload"
    );
    rtcp::write_sdes_cname(&mut out, 0xa1b2c3d4, "sluice");
    assert_eq!(out.len() % 4, 0);
    rtcp::write_receiver_report(
        &mut out,
        5,
        &[rtcp::ReportBlock {
            ssrc: 9,
            fraction_lost: 3,
            cumulative_lost: -2,
            highest_seq: 70_000,
            ..Default::default()
        }],
    );
    rtcp::write_bye(&mut out, 0xa1b2c3d4);
    let parsed: Vec<_> = rtcp::parse_compound(&out)
        .collect::<Result<_, _>>()
        .expect("parses");
    assert_eq!(parsed.len(), 4);
    assert_eq!(
        parsed[0],
        rtcp::RtcpPacket::SenderReport {
            info: sr,
            reports: vec![]
        }
    );
    assert_eq!(parsed[1], rtcp::RtcpPacket::SourceDescription { chunks: 1 });
    match &parsed[2] {
        rtcp::RtcpPacket::ReceiverReport { ssrc: 5, reports } => {
            assert_eq!(reports[0].cumulative_lost, -2);
            assert_eq!(reports[0].fraction_lost, 3);
            assert_eq!(reports[0].highest_seq, 70_000);
        }
        other => panic!("expected RR, got {other:?}"),
    }
    assert_eq!(
        parsed[3],
        rtcp::RtcpPacket::Bye {
            ssrcs: vec![0xa1b2c3d4]
        }
    );
    // A length that lies: an error, then the iterator ends.
    let lying = [0x81, 201, 0, 9, 0, 0, 0, 1];
    let r: Vec<_> = rtcp::parse_compound(&lying).collect();
    assert_eq!(r.len(), 1);
    assert!(r[0].is_err());
}

/// An RTP packet of AAC (`AacParams::HBR`): one AU header of `size`, then `data`.
fn aac_rtp(seq: u16, ts: u32, marker: bool, size: u16, data: &[u8]) -> Bytes {
    let mut p = vec![0x80, 97 | if marker { 0x80 } else { 0 }];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&ts.to_be_bytes());
    p.extend_from_slice(&7u32.to_be_bytes());
    p.extend_from_slice(&16u16.to_be_bytes());
    p.extend_from_slice(&(size << 3).to_be_bytes());
    p.extend_from_slice(data);
    Bytes::from(p)
}

#[test]
fn an_empty_aac_access_unit_is_never_a_frame() {
    // Found by the rtp_depacketize fuzz target: an AU of size 0 after a fragment
    // begun came out as an empty frame.
    let mut d = RtpDepacketizer::for_track(&aac_track()).expect("d");
    let got = feed(
        &mut d,
        [
            aac_rtp(1, 1000, false, 100, &[0x21; 10]),
            aac_rtp(2, 2000, true, 0, &[]),
            aac_rtp(3, 3000, true, 0, &[]),
            aac_rtp(4, 4000, true, 4, &[0x21; 4]),
        ],
    );
    assert!(got.iter().all(|f| !f.payload.is_empty()), "{got:?}");
    assert_eq!(got.len(), 1, "the whole AU after them");
}
