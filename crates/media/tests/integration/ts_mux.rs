//! The MPEG-TS muxer, checked by an independent demuxer (`mpeg2ts-reader`) and, when it
//! is installed, by ffprobe.
//!
//! Video tracks use the x264/x265 records in `data/` with synthetic slice NAL units;
//! audio is AAC-LC 44.1 kHz stereo or MP3 with synthetic frames.

use crate::common::{ffprobe, ffprobe_present, temp_file};
use bytes::{Bytes, BytesMut};
use mpeg2ts_reader::demultiplex::{
    self, DemuxContext, FilterChangeset, FilterRequest, NullPacketFilter, PatPacketFilter,
    PmtPacketFilter,
};
use mpeg2ts_reader::packet::Packet;
use mpeg2ts_reader::pes::{self, ElementaryStreamConsumer, PesContents, PtsDts};
use mpeg2ts_reader::{packet_filter_switch, psi};
use proptest::prelude::*;
use sluice_media::codec::{AacConfig, AvcConfig, HevcConfig};
use sluice_media::ts::{
    TsError, TsMuxer, AUDIO_PID, PACKET_LEN, PCR_LEAD, PMT_PID, TIMESTAMP_OFFSET, VIDEO_PID,
};
use sluice_media::{Frame, MediaKind, Track, TrackConfig};
use std::collections::BTreeMap;

const AVCC_720P: &[u8] = include_bytes!("../data/x264_720p.avcC");
const HVCC_1080P: &[u8] = include_bytes!("../data/x265_1080p.hvcC");

// ---- what we feed the muxer ----

fn h264_track() -> Track {
    let c = AvcConfig::parse(Bytes::from_static(AVCC_720P)).expect("valid avcC");
    Track::new(TrackConfig::H264(c))
}

fn h265_track() -> Track {
    let c = HevcConfig::parse(Bytes::from_static(HVCC_1080P)).expect("valid hvcC");
    Track::new(TrackConfig::H265(c))
}

fn aac_track() -> Track {
    // AAC-LC, 44.1 kHz, stereo.
    let c = AacConfig::parse(Bytes::from_static(&[0x12, 0x10])).expect("valid ASC");
    Track::new(TrackConfig::Aac(c))
}

fn mp3_track(sample_rate: u32) -> Track {
    Track::new(TrackConfig::Mp3 {
        sample_rate,
        channels: 2,
    })
}

/// A NAL unit: `header` bytes, then `len` filler bytes that never form a start code.
fn nal(header: &[u8], len: usize, seed: u8) -> Vec<u8> {
    let mut n = header.to_vec();
    n.extend((0..len).map(|i| 0x80 | (i as u8).wrapping_add(seed)));
    n
}

/// A length-prefixed (4-byte) payload of `nals`.
fn length_prefixed(nals: &[Vec<u8>]) -> Bytes {
    let mut out = Vec::new();
    for n in nals {
        out.extend_from_slice(&(n.len() as u32).to_be_bytes());
        out.extend_from_slice(n);
    }
    Bytes::from(out)
}

/// The Annex-B access unit we expect: our AUD, then `nals`, each behind 00 00 00 01.
fn annex_b(aud: &[u8], nals: &[&[u8]]) -> Vec<u8> {
    let mut out = vec![0, 0, 0, 1];
    out.extend_from_slice(aud);
    for n in nals {
        out.extend_from_slice(&[0, 0, 0, 1]);
        out.extend_from_slice(n);
    }
    out
}

fn video(dts: i64, pts: i64, keyframe: bool, payload: Bytes) -> Frame {
    Frame {
        kind: MediaKind::Video,
        dts,
        pts,
        keyframe,
        payload,
    }
}

fn audio(t: i64, payload: Bytes) -> Frame {
    Frame {
        kind: MediaKind::Audio,
        dts: t,
        pts: t,
        keyframe: true,
        payload,
    }
}

fn ts33(t: i64) -> u64 {
    (t + TIMESTAMP_OFFSET).rem_euclid(1 << 33) as u64
}

// ---- an independent demuxer ----

/// What the demuxer saw.
#[derive(Debug, Default)]
pub struct Seen {
    /// (PID, stream_type) from the PMT, with the PMT's PCR PID.
    streams: Vec<(u16, u8)>,
    pcr_pid: Option<u16>,
    pmt_pid: Option<u16>,
    /// Reassembled PES packets per PID.
    pes: BTreeMap<u16, Vec<Pes>>,
    continuity_errors: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pes {
    pts: Option<u64>,
    dts: Option<u64>,
    data: Vec<u8>,
}

pub struct Collector {
    pid: u16,
}

impl ElementaryStreamConsumer<Ctx> for Collector {
    fn start_stream(&mut self, _ctx: &mut Ctx) {}
    fn begin_packet(&mut self, ctx: &mut Ctx, header: pes::PesHeader<'_>) {
        let mut p = Pes::default();
        match header.contents() {
            PesContents::Parsed(Some(parsed)) => {
                match parsed.pts_dts() {
                    Ok(PtsDts::PtsOnly(Ok(pts))) => p.pts = Some(pts.value()),
                    Ok(PtsDts::Both {
                        pts: Ok(pts),
                        dts: Ok(dts),
                    }) => {
                        p.pts = Some(pts.value());
                        p.dts = Some(dts.value());
                    }
                    other => panic!("PID {:#x}: bad timestamps {other:?}", self.pid),
                }
                p.data.extend_from_slice(parsed.payload());
            }
            _ => panic!("PID {:#x}: unparsed PES", self.pid),
        }
        ctx.seen.pes.entry(self.pid).or_default().push(p);
    }
    fn continue_packet(&mut self, ctx: &mut Ctx, data: &[u8]) {
        if let Some(p) = ctx.seen.pes.get_mut(&self.pid).and_then(|v| v.last_mut()) {
            p.data.extend_from_slice(data);
        }
    }
    fn end_packet(&mut self, _ctx: &mut Ctx) {}
    fn continuity_error(&mut self, ctx: &mut Ctx) {
        ctx.seen.continuity_errors += 1;
    }
}

packet_filter_switch! {
    Switch<Ctx> {
        Pat: PatPacketFilter<Ctx>,
        Pmt: PmtPacketFilter<Ctx>,
        Pes: pes::PesPacketFilter<Ctx, Collector>,
        Null: NullPacketFilter<Ctx>,
    }
}

pub struct Ctx {
    changeset: FilterChangeset<Switch>,
    seen: Seen,
}

impl DemuxContext for Ctx {
    type F = Switch;

    fn filter_changeset(&mut self) -> &mut FilterChangeset<Switch> {
        &mut self.changeset
    }

    fn construct(&mut self, req: FilterRequest<'_, '_>) -> Switch {
        match req {
            FilterRequest::ByPid(psi::pat::PAT_PID) => Switch::Pat(PatPacketFilter::default()),
            FilterRequest::ByPid(_) | FilterRequest::Nit { .. } => {
                Switch::Null(NullPacketFilter::default())
            }
            FilterRequest::Pmt {
                pid,
                program_number,
            } => {
                assert_eq!(program_number, 1);
                self.seen.pmt_pid = Some(u16::from(pid));
                Switch::Pmt(PmtPacketFilter::new(pid, program_number))
            }
            FilterRequest::ByStream {
                stream_type,
                pmt,
                stream_info,
                ..
            } => {
                let pid = u16::from(stream_info.elementary_pid());
                self.seen.streams.push((pid, u8::from(stream_type)));
                self.seen.pcr_pid = Some(u16::from(pmt.pcr_pid()));
                Switch::Pes(pes::PesPacketFilter::new(Collector { pid }))
            }
        }
    }
}

fn demux(ts: &[u8]) -> Seen {
    let mut ctx = Ctx {
        changeset: FilterChangeset::default(),
        seen: Seen::default(),
    };
    let mut d = demultiplex::Demultiplex::new(&mut ctx);
    d.push(&mut ctx, ts);
    // The last PES of each PID is complete: we reassembled it from its packets, and a
    // PES ends where the next begins or where the stream ends.
    ctx.seen
}

/// Packet-level facts, read with the crate's packet parser.
#[derive(Debug, Default)]
struct PacketFacts {
    /// Per PID, each packet in order.
    by_pid: BTreeMap<u16, Vec<PacketInfo>>,
}

#[derive(Debug, Clone, Copy)]
struct PacketInfo {
    /// The PCR base, if the packet carries one.
    pcr: Option<u64>,
    random_access: bool,
    unit_start: bool,
}

/// Checks framing and continuity counters of every packet, and collects PCRs.
fn check_packets(ts: &[u8]) -> PacketFacts {
    assert_eq!(ts.len() % PACKET_LEN, 0, "whole packets");
    let mut facts = PacketFacts::default();
    let mut cc: BTreeMap<u16, u8> = BTreeMap::new();
    for (i, chunk) in ts.chunks(PACKET_LEN).enumerate() {
        assert_eq!(chunk[0], 0x47, "sync byte of packet {i}");
        let pk = Packet::try_new(chunk).expect("a packet");
        let pid = u16::from(pk.pid());
        assert!(
            pk.adaptation_control().has_payload(),
            "packet {i} has payload"
        );
        let count = pk.continuity_counter().count();
        if let Some(prev) = cc.insert(pid, count) {
            assert_eq!(
                count,
                (prev + 1) & 0x0f,
                "continuity of PID {pid:#x} at packet {i}"
            );
        }
        let af = pk.adaptation_field();
        let pcr = af.as_ref().and_then(|a| a.pcr().ok()).map(|c| {
            assert_eq!(c.extension(), 0);
            c.base()
        });
        let rai = af.as_ref().is_some_and(|a| a.random_access_indicator());
        facts.by_pid.entry(pid).or_default().push(PacketInfo {
            pcr,
            random_access: rai,
            unit_start: pk.payload_unit_start_indicator(),
        });
    }
    facts
}

// ---- tests ----

/// Two segments of H.264 + AAC: one GOP of four frames with B-frame timing, audio between.
fn h264_aac_stream(m: &mut TsMuxer, out: &mut BytesMut) -> (Vec<Frame>, Vec<Frame>) {
    let mut videos = Vec::new();
    let mut audios = Vec::new();
    for seg in 0..2i64 {
        m.write_tables(out);
        for i in 0..8i64 {
            let n = seg * 8 + i;
            let dts = n * 3003 - 3003;
            // I P B B order: presentation offsets of a stream with B-frames.
            let pts = dts + [3003, 12012, 3003, 3003][(i % 4) as usize];
            let keyframe = i == 0;
            let payload = if keyframe {
                // SEI, then an IDR of 2000 bytes: several packets.
                length_prefixed(&[nal(&[0x06, 0x05], 20, 1), nal(&[0x65, 0x88], 2000, 2)])
            } else {
                length_prefixed(&[nal(&[0x41, 0x9a], 300 + 50 * i as usize, 3)])
            };
            let f = video(dts, pts, keyframe, payload);
            m.write_frame(&f, out).expect("video frame");
            videos.push(f);
            let a = audio(n * 3003, Bytes::from(nal(&[0x21], 370, n as u8)));
            m.write_frame(&a, out).expect("audio frame");
            audios.push(a);
        }
    }
    (videos, audios)
}

#[test]
fn h264_aac_segments_demux_to_the_access_units_we_wrote() {
    let (vt, at) = (h264_track(), aac_track());
    let mut m = TsMuxer::new(Some(&vt), Some(&at)).expect("muxer");
    let mut out = BytesMut::new();
    let (videos, audios) = h264_aac_stream(&mut m, &mut out);

    let seen = demux(&out);
    assert_eq!(seen.pmt_pid, Some(PMT_PID));
    assert_eq!(seen.streams, vec![(VIDEO_PID, 0x1b), (AUDIO_PID, 0x0f)]);
    assert_eq!(seen.pcr_pid, Some(VIDEO_PID));
    assert_eq!(seen.continuity_errors, 0);

    let TrackConfig::H264(avc) = &vt.config else {
        unreachable!()
    };
    let (sps, pps) = (&avc.sps[0][..], &avc.pps[0][..]);
    let got = &seen.pes[&VIDEO_PID];
    assert_eq!(got.len(), videos.len());
    for (i, (pes, f)) in got.iter().zip(&videos).enumerate() {
        let nals: Vec<Vec<u8>> = sluice_media::codec::nal_units(&f.payload, 4)
            .map(|n| n.expect("valid").to_vec())
            .collect();
        let mut expected_nals: Vec<&[u8]> = Vec::new();
        if f.keyframe {
            expected_nals.extend([sps, pps]);
        }
        expected_nals.extend(nals.iter().map(|n| &n[..]));
        assert_eq!(
            pes.data,
            annex_b(&[0x09, 0xf0], &expected_nals),
            "video {i}"
        );
        assert_eq!(pes.pts, Some(ts33(f.pts)), "video {i} pts");
        assert_eq!(pes.dts, Some(ts33(f.dts)), "video {i} dts");
    }

    let got = &seen.pes[&AUDIO_PID];
    assert_eq!(got.len(), audios.len());
    let TrackConfig::Aac(aac) = &at.config else {
        unreachable!()
    };
    for (i, (pes, f)) in got.iter().zip(&audios).enumerate() {
        let mut adts = aac.adts_header(f.payload.len()).expect("adts").to_vec();
        adts.extend_from_slice(&f.payload);
        assert_eq!(pes.data, adts, "audio {i}");
        assert_eq!((pes.pts, pes.dts), (Some(ts33(f.pts)), None), "audio {i}");
    }
}

#[test]
fn packets_are_whole_continuous_and_carry_pcr() {
    let (vt, at) = (h264_track(), aac_track());
    let mut m = TsMuxer::new(Some(&vt), Some(&at)).expect("muxer");
    let mut out = BytesMut::new();
    let (videos, _) = h264_aac_stream(&mut m, &mut out);
    let facts = check_packets(&out);

    // Two segments: PAT and PMT twice each, counters running on.
    assert_eq!(facts.by_pid[&0].len(), 2);
    assert_eq!(facts.by_pid[&PMT_PID].len(), 2);
    // First packet of each video PES: PCR on keyframes and at least every 100 ms
    // (frames are 33 ms apart), random access exactly on keyframes.
    let starts: Vec<_> = facts.by_pid[&VIDEO_PID]
        .iter()
        .filter(|p| p.unit_start)
        .collect();
    assert_eq!(starts.len(), videos.len());
    let mut last_pcr: Option<u64> = None;
    for (f, p) in videos.iter().zip(&starts) {
        let (pcr, rai) = (p.pcr, p.random_access);
        assert_eq!(rai, f.keyframe);
        if f.keyframe {
            assert!(pcr.is_some(), "PCR on keyframe");
        }
        if let Some(pcr) = pcr {
            assert_eq!(pcr, ts33(f.dts - PCR_LEAD));
            if let Some(last) = last_pcr {
                assert!(pcr - last <= 9000, "PCR gap {}", pcr - last);
            }
            last_pcr = Some(pcr);
        } else {
            let last = last_pcr.expect("a PCR before");
            assert!(ts33(f.dts - PCR_LEAD) - last < 9000);
        }
    }
    // No PCR on the audio PID when there is video.
    assert!(facts.by_pid[&AUDIO_PID].iter().all(|p| p.pcr.is_none()));
    // Packets after the first of a PES never carry a PCR or start a unit.
    for p in facts.by_pid[&VIDEO_PID].iter().filter(|p| !p.unit_start) {
        assert_eq!((p.pcr, p.random_access), (None, false));
    }
}

#[test]
fn h265_keyframes_get_vps_sps_pps_and_an_aud() {
    let vt = h265_track();
    let mut m = TsMuxer::new(Some(&vt), None).expect("muxer");
    let mut out = BytesMut::new();
    m.write_tables(&mut out);
    // IDR_W_RADL (19): header 0x26 0x01; TRAIL_R (1): 0x02 0x01.
    let idr = nal(&[0x26, 0x01], 3000, 5);
    let trail = nal(&[0x02, 0x01], 500, 6);
    // A keyframe with its own (stale) AUD, which we replace with ours.
    let key = video(
        0,
        0,
        true,
        length_prefixed(&[vec![0x46, 0x01, 0x10], idr.clone()]),
    );
    let p = video(
        3000,
        3000,
        false,
        length_prefixed(std::slice::from_ref(&trail)),
    );
    m.write_frame(&key, &mut out).expect("keyframe");
    m.write_frame(&p, &mut out).expect("frame");
    check_packets(&out);

    let seen = demux(&out);
    assert_eq!(seen.streams, vec![(VIDEO_PID, 0x24)]);
    let TrackConfig::H265(c) = &vt.config else {
        unreachable!()
    };
    let aud = [0x46, 0x01, 0x50];
    let got = &seen.pes[&VIDEO_PID];
    assert_eq!(
        got[0].data,
        annex_b(&aud, &[&c.vps[0], &c.sps[0], &c.pps[0], &idr])
    );
    assert_eq!(got[1].data, annex_b(&aud, &[&trail]));
    // PTS equals DTS: no DTS written.
    assert_eq!((got[1].pts, got[1].dts), (Some(ts33(3000)), None));
}

#[test]
fn parameter_sets_in_the_frame_are_not_repeated() {
    let vt = h264_track();
    let TrackConfig::H264(c) = &vt.config else {
        unreachable!()
    };
    let mut m = TsMuxer::new(Some(&vt), None).expect("muxer");
    let mut out = BytesMut::new();
    m.write_tables(&mut out);
    let idr = nal(&[0x65, 0x88], 100, 0);
    let payload = length_prefixed(&[c.sps[0].to_vec(), c.pps[0].to_vec(), idr.clone()]);
    m.write_frame(&video(0, 0, true, payload), &mut out)
        .expect("keyframe");
    let seen = demux(&out);
    assert_eq!(
        seen.pes[&VIDEO_PID][0].data,
        annex_b(&[0x09, 0xf0], &[&c.sps[0], &c.pps[0], &idr])
    );
}

#[test]
fn audio_only_stream_carries_pcr_on_audio() {
    let at = aac_track();
    let mut m = TsMuxer::new(None, Some(&at)).expect("muxer");
    let mut out = BytesMut::new();
    m.write_tables(&mut out);
    // 1024 samples at 44.1 kHz: 2090 ticks.
    let frames: Vec<Frame> = (0..50)
        .map(|i| audio(i * 2090, Bytes::from(nal(&[0x21], 200 + i as usize, 0))))
        .collect();
    for f in &frames {
        m.write_frame(f, &mut out).expect("audio");
    }
    let facts = check_packets(&out);
    let seen = demux(&out);
    assert_eq!(seen.streams, vec![(AUDIO_PID, 0x0f)]);
    assert_eq!(seen.pcr_pid, Some(AUDIO_PID));
    assert_eq!(seen.pes[&AUDIO_PID].len(), frames.len());
    let pcrs: Vec<u64> = facts.by_pid[&AUDIO_PID]
        .iter()
        .filter_map(|p| p.pcr)
        .collect();
    assert_eq!(pcrs.first(), Some(&ts33(-PCR_LEAD)));
    assert!(pcrs.windows(2).all(|w| w[1] - w[0] <= 9000), "{pcrs:?}");
    let last = ts33(frames.last().expect("frames").dts - PCR_LEAD);
    assert!(last - pcrs.last().expect("pcr") < 9000);
    // Every audio PES is a random access point when there is no video.
    assert!(facts.by_pid[&AUDIO_PID]
        .iter()
        .filter(|p| p.unit_start)
        .all(|p| p.random_access));
}

#[test]
fn mp3_keeps_frames_as_they_are() {
    for (rate, stream_type) in [(44_100, 0x03), (22_050, 0x04)] {
        let t = mp3_track(rate);
        let mut m = TsMuxer::new(None, Some(&t)).expect("muxer");
        let mut out = BytesMut::new();
        m.write_tables(&mut out);
        let frame = Bytes::from(nal(&[0xff, 0xfb, 0x90, 0x64], 413, 0));
        m.write_frame(&audio(0, frame.clone()), &mut out)
            .expect("mp3");
        let seen = demux(&out);
        assert_eq!(seen.streams, vec![(AUDIO_PID, stream_type)]);
        assert_eq!(seen.pes[&AUDIO_PID][0].data, frame);
    }
}

#[test]
fn large_keyframe_and_wrapping_timestamps() {
    let vt = h264_track();
    let mut m = TsMuxer::new(Some(&vt), None).expect("muxer");
    let mut out = BytesMut::new();
    m.write_tables(&mut out);
    // 300 kB: PES_packet_length cannot say it, so it is 0 (unbounded).
    let big = nal(&[0x65, 0x88], 300_000, 9);
    let times = [
        -200_000i64,
        (1 << 33) - TIMESTAMP_OFFSET - 1,
        i64::MAX,
        i64::MIN,
    ];
    for &t in &times {
        let f = video(
            t,
            t.wrapping_add(3000),
            true,
            length_prefixed(std::slice::from_ref(&big)),
        );
        m.write_frame(&f, &mut out).expect("big frame");
    }
    check_packets(&out);
    let seen = demux(&out);
    let got = &seen.pes[&VIDEO_PID];
    assert_eq!(got.len(), times.len());
    for (pes, &t) in got.iter().zip(&times) {
        let tm = |t: i64| (t.wrapping_add(TIMESTAMP_OFFSET)).rem_euclid(1 << 33) as u64;
        assert_eq!(pes.dts, Some(tm(t)));
        assert_eq!(pes.pts, Some(tm(t.wrapping_add(3000))));
        assert!(pes.data.ends_with(&big));
    }
    // PES_packet_length of the first PES is 0.
    let pes_start = 4 + 1 + usize::from(out[2 * PACKET_LEN + 4]);
    assert_eq!(
        &out[2 * PACKET_LEN + pes_start..2 * PACKET_LEN + pes_start + 6],
        &[0, 0, 1, 0xe0, 0, 0]
    );
}

#[test]
fn errors_leave_the_buffer_untouched() {
    let (vt, at) = (h264_track(), aac_track());
    let mut m = TsMuxer::new(Some(&vt), Some(&at)).expect("muxer");
    let mut out = BytesMut::from(&b"segment so far"[..]);
    let bad = [
        video(0, 0, true, Bytes::from_static(&[0, 0, 0, 5, 0x65])),
        video(0, 0, true, Bytes::new()),
        audio(0, Bytes::from(vec![0u8; 8200])), // over ADTS's 13-bit frame length
    ];
    for f in &bad {
        assert!(m.write_frame(f, &mut out).is_err(), "{f:?}");
    }
    assert_eq!(&out[..], b"segment so far");
    let mp3 = mp3_track(44_100);
    let mut m = TsMuxer::new(None, Some(&mp3)).expect("muxer");
    let r = m.write_frame(&audio(0, Bytes::from(vec![0u8; 70_000])), &mut out);
    assert!(matches!(r, Err(TsError::TooLarge { .. })), "{r:?}");
    assert!(matches!(
        m.write_frame(&video(0, 0, true, length_prefixed(&[vec![0x65]])), &mut out),
        Err(TsError::NoTrack {
            kind: MediaKind::Video
        })
    ));
    assert_eq!(&out[..], b"segment so far");
}

proptest! {
    #[test]
    fn any_frames_give_whole_packets_and_never_panic(
        frames in prop::collection::vec(
            (any::<bool>(), any::<bool>(), any::<i64>(), -100_000i64..100_000, 0usize..5000, any::<bool>(), any::<u8>()),
            1..30,
        ),
    ) {
        let (vt, at) = (h264_track(), aac_track());
        let mut m = TsMuxer::new(Some(&vt), Some(&at)).expect("muxer");
        let mut out = BytesMut::new();
        m.write_tables(&mut out);
        for (is_video, keyframe, dts, cts, len, well_formed, seed) in frames {
            let before = out.len();
            let f = if is_video {
                let payload = if well_formed {
                    length_prefixed(&[nal(&[0x41], len, seed)])
                } else {
                    // Arbitrary bytes: a length prefix may run past the end.
                    Bytes::from((0..len).map(|i| (i as u8).wrapping_mul(seed)).collect::<Vec<u8>>())
                };
                video(dts, dts.wrapping_add(cts), keyframe, payload)
            } else {
                audio(dts, Bytes::from(vec![seed; len]))
            };
            match m.write_frame(&f, &mut out) {
                Ok(()) => prop_assert!(out.len() > before),
                Err(_) => {
                    prop_assert_eq!(out.len(), before);
                    prop_assert!(is_video && !well_formed);
                }
            }
            prop_assert_eq!(out.len() % PACKET_LEN, 0);
        }
        let _ = check_packets(&out);
        let seen = demux(&out);
        prop_assert_eq!(seen.continuity_errors, 0);
    }
}

// ---- ffprobe ----

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffprobe")]
fn ffprobe_reads_h264_aac_and_h265_aac() {
    if !ffprobe_present() {
        return;
    }
    for (name, vt, expected) in [
        ("h264.ts", h264_track(), "h264,1280,720"),
        ("h265.ts", h265_track(), "hevc,1920,1080"),
    ] {
        let at = aac_track();
        let mut m = TsMuxer::new(Some(&vt), Some(&at)).expect("muxer");
        let mut out = BytesMut::new();
        m.write_tables(&mut out);
        let (key, other) = match vt.config {
            TrackConfig::H264(_) => (vec![0x65, 0x88], vec![0x41, 0x9a]),
            // Slice headers start with first_slice_segment_in_pic_flag = 1 and PPS id 0
            // (after no_output_of_prior_pics_flag on the IDR), so ffprobe's parser finds
            // the SPS and the picture size.
            _ => (vec![0x26, 0x01, 0xa0], vec![0x02, 0x01, 0xc0]),
        };
        for i in 0..30i64 {
            let header = if i % 15 == 0 { &key } else { &other };
            let f = video(
                i * 3000,
                i * 3000,
                i % 15 == 0,
                length_prefixed(&[nal(header, 800, i as u8)]),
            );
            m.write_frame(&f, &mut out).expect("video");
            // A silent AAC-LC stereo frame (channel pair element, zero spectra).
            let silent = Bytes::from_static(&[0x21, 0x10, 0x04, 0x60, 0x8c, 0x1c]);
            m.write_frame(&audio(i * 3000, silent), &mut out)
                .expect("audio");
        }
        let path = temp_file(name, &out);
        let streams = ffprobe(
            &path,
            &[
                "-show_entries",
                "stream=codec_name,width,height,sample_rate,channels",
            ],
        );
        let packets = ffprobe(&path, &["-show_entries", "packet=stream_index,pts,dts"]);
        let _ = std::fs::remove_file(&path);
        let video_pts: Vec<i64> = packets
            .lines()
            .filter_map(|l| l.strip_prefix("0,"))
            .filter_map(|l| l.split(',').next()?.parse().ok())
            .collect();
        let expected_pts: Vec<i64> = (0..30).map(|i| TIMESTAMP_OFFSET + i * 3000).collect();
        assert_eq!(video_pts, expected_pts, "{packets}");
        assert_eq!(packets.lines().filter(|l| l.starts_with("1,")).count(), 30);
        // ffprobe lists the streams under the program and again on their own.
        let mut lines: Vec<&str> = streams
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        lines.dedup_by(|a, b| a == b);
        lines.truncate(2);
        assert_eq!(lines.len(), 2, "{streams}");
        assert_eq!(lines[0].trim_end_matches(','), expected, "{streams}");
        assert!(lines[1].starts_with("aac,44100,2"), "{streams}");
    }
}
