//! The demuxer as a whole: streams from our own muxer and hand-built packets, fed in
//! every split, with loss, garbage and hostile tables.

use super::*;
use crate::codec::{AacConfig, AvcConfig};
use crate::ts::packet::{pes_header, write_pes, Adaptation};
use crate::ts::psi::{crc32_mpeg2, pat_section, write_section};
use crate::ts::{TsMuxer, AUDIO_PID, PMT_PID, TIMESTAMP_OFFSET, VIDEO_PID};
use crate::{MediaKind, TrackConfig};
use bytes::BytesMut;

fn h264_track() -> Track {
    let sps = Bytes::from_static(&[
        0x67, 0x64, 0x00, 0x1f, 0xac, 0xd9, 0x40, 0x50, 0x05, 0xbb, 0x01, 0x10, 0x00, 0x00, 0x03,
        0x00, 0x10, 0x00, 0x00, 0x03, 0x03, 0x20, 0xf1, 0x83, 0x19, 0x60,
    ]);
    let pps = Bytes::from_static(&[0x68, 0xef, 0x8f, 0xcb]);
    Track::new(TrackConfig::H264(
        AvcConfig::from_parameter_sets(&[sps], &[pps]).expect("valid sets"),
    ))
}

fn aac_track() -> Track {
    Track::new(TrackConfig::Aac(
        AacConfig::parse(Bytes::from_static(&[0x11, 0x90])).expect("ASC"),
    ))
}

/// A length-prefixed payload of one NAL unit: `header`, then `len` bytes that never
/// form a start code.
fn nal(header: &[u8], len: usize) -> Bytes {
    let mut n = header.to_vec();
    n.extend((0..len).map(|i| 0x80 | i as u8));
    let mut out = (n.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&n);
    Bytes::from(out)
}

fn frame(kind: MediaKind, dts: i64, pts: i64, keyframe: bool, payload: Bytes) -> Frame {
    Frame {
        kind,
        dts,
        pts,
        keyframe,
        payload,
    }
}

/// Tables, then 12 video frames (a keyframe every 6, 3000-byte keyframes over many
/// packets) with an AAC frame after each; starting at `t0`.
fn h264_aac(t0: i64) -> (Vec<u8>, Vec<Frame>) {
    let mut m = TsMuxer::new(Some(&h264_track()), Some(&aac_track())).expect("muxer");
    let mut out = BytesMut::new();
    let mut frames = Vec::new();
    m.write_tables(&mut out);
    for i in 0..12i64 {
        let key = i % 6 == 0;
        let payload = if key {
            nal(&[0x65, 0x88], 3000)
        } else {
            nal(&[0x41, 0x9a], 200 + 10 * i as usize)
        };
        let v = frame(
            MediaKind::Video,
            t0 + i * 3600,
            t0 + i * 3600 + 3600,
            key,
            payload,
        );
        let a = frame(
            MediaKind::Audio,
            t0 + i * 1920,
            t0 + i * 1920,
            true,
            Bytes::from(vec![0x21; 100 + i as usize]),
        );
        m.write_frame(&v, &mut out).expect("video");
        m.write_frame(&a, &mut out).expect("audio");
        frames.extend([v, a]);
    }
    (out.to_vec(), frames)
}

/// Pushes `ts` in pieces of `chunk` bytes, draining after each, then finishes.
fn demux(ts: &[u8], chunk: usize) -> (Vec<Demuxed>, DemuxStats) {
    let mut d = TsDemuxer::new();
    let mut got = Vec::new();
    for piece in ts.chunks(chunk.max(1)) {
        d.push(piece);
        got.extend(std::iter::from_fn(|| d.poll()));
    }
    d.finish();
    got.extend(std::iter::from_fn(|| d.poll()));
    (got, d.stats())
}

fn frames_of(out: &[Demuxed], kind: MediaKind) -> Vec<&Frame> {
    out.iter()
        .filter_map(|d| match d {
            Demuxed::Frame(f) if f.kind == kind => Some(f),
            _ => None,
        })
        .collect()
}

fn tracks_of(out: &[Demuxed]) -> Vec<(Timestamp, &Track)> {
    out.iter()
        .filter_map(|d| match d {
            Demuxed::Track(at, t) => Some((*at, t)),
            _ => None,
        })
        .collect()
}

/// The PID of a packet.
fn pid(p: &[u8]) -> u16 {
    u16::from_be_bytes([p[1] & 0x1f, p[2]])
}

#[test]
fn muxed_frames_come_back_in_any_split() {
    let (ts, sent) = h264_aac(0);
    let (whole, stats) = demux(&ts, ts.len());
    for chunk in [1, 2, 7, 100, 187, 188, 189, 1316, 4000] {
        assert!(demux(&ts, chunk).0 == whole, "chunks of {chunk}");
    }
    assert_eq!(stats.frames, 24);
    assert_eq!(stats.tracks, 2);
    assert_eq!(stats.packets as usize, ts.len() / PACKET_LEN);
    let clean = DemuxStats {
        packets: stats.packets,
        tracks: 2,
        frames: 24,
        ..DemuxStats::default()
    };
    assert_eq!(stats, clean);
    // The first DTS (the first video frame's) is 0; PTS keep their offsets.
    let videos = frames_of(&whole, MediaKind::Video);
    let audios = frames_of(&whole, MediaKind::Audio);
    assert_eq!(videos.len(), 12);
    assert_eq!(audios.len(), 12);
    let sent_audio: Vec<&Frame> = sent.iter().filter(|f| f.kind == MediaKind::Audio).collect();
    for (got, want) in audios.iter().zip(&sent_audio) {
        assert_eq!(**got, **want);
    }
    for (got, want) in videos
        .iter()
        .zip(sent.iter().filter(|f| f.kind == MediaKind::Video))
    {
        assert_eq!(
            (got.dts, got.pts, got.keyframe),
            (want.dts, want.pts, want.keyframe)
        );
        assert!(got.payload.ends_with(&want.payload));
    }
    // The tracks come first, at the time of the first frame of their kind.
    let tracks = tracks_of(&whole);
    assert_eq!(tracks[0], (0, &h264_track()));
    assert_eq!(tracks[1], (0, &aac_track()));
    assert!(matches!(whole[0], Demuxed::Track(..)));
}

#[test]
fn garbage_before_and_between_packets_is_skipped() {
    let (ts, _) = h264_aac(0);
    let (clean, _) = demux(&ts, ts.len());
    // Garbage with sync bytes in it up front, and a run cut into the middle.
    let lead = [0x47, 1, 2, 0x47, 0x47, 9, 9];
    // (Garbage that starts with a sync byte right at a packet boundary would pass for
    // a packet and cost the real one; none of a lost datagram's kind does that.)
    let mid = [0x12, 0x47, 0x34, 0x47, 0x56];
    let cut = 20 * PACKET_LEN;
    let mut dirty = lead.to_vec();
    dirty.extend_from_slice(&ts[..cut]);
    dirty.extend_from_slice(&mid);
    dirty.extend_from_slice(&ts[cut..]);
    for chunk in [1, 100, 1316, dirty.len()] {
        let (got, stats) = demux(&dirty, chunk);
        assert!(got == clean, "chunks of {chunk}");
        assert_eq!(stats.skipped_bytes as usize, lead.len() + mid.len());
        assert_eq!(stats.sync_losses, 1);
    }
}

#[test]
fn a_lost_packet_drops_its_pes_only() {
    let (ts, _) = h264_aac(0);
    let (clean, _) = demux(&ts, ts.len());
    // The second packet of the first video keyframe (packet 2 is its first).
    let packets: Vec<&[u8]> = ts.chunks(PACKET_LEN).collect();
    assert_eq!(pid(packets[3]), VIDEO_PID);
    let lossy: Vec<u8> = packets
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3)
        .flat_map(|(_, p)| p.iter().copied())
        .collect();
    let (got, stats) = demux(&lossy, 1316);
    assert_eq!(stats.continuity_errors, 1);
    assert_eq!(stats.pes_dropped, 1);
    let videos = frames_of(&got, MediaKind::Video);
    // The keyframe is gone and, with it, the parameter sets: frames until the next
    // keyframe have no track to go with.
    assert_eq!(videos.len(), 6);
    assert_eq!(stats.frames_without_config, 5);
    assert_eq!(videos[0].dts, frames_of(&clean, MediaKind::Video)[6].dts);
    assert_eq!(frames_of(&got, MediaKind::Audio).len(), 12);
}

#[test]
fn errored_unknown_and_duplicate_packets() {
    let (ts, _) = h264_aac(0);
    let (clean, _) = demux(&ts, ts.len());
    let mut out = Vec::new();
    for (i, p) in ts.chunks(PACKET_LEN).enumerate() {
        out.extend_from_slice(p);
        // Every video packet twice (a duplicate is allowed once and not used again).
        if pid(p) == VIDEO_PID {
            out.extend_from_slice(p);
        }
        // A packet on a PID nobody listed, and one with the error flag on the audio PID.
        if i == 5 {
            let mut stray = p.to_vec();
            stray[1] = (stray[1] & 0xe0) | 0x07;
            out.extend_from_slice(&stray);
            let mut errored = p.to_vec();
            errored[1] = 0x80 | (AUDIO_PID >> 8) as u8;
            errored[2] = AUDIO_PID as u8;
            out.extend_from_slice(&errored);
        }
    }
    let (got, stats) = demux(&out, 1316);
    assert!(got == clean);
    assert_eq!(stats.bad_packets, 1);
    assert_eq!(stats.continuity_errors, 0);
}

#[test]
fn finish_ends_the_last_video_frame() {
    let (ts, _) = h264_aac(0);
    let mut d = TsDemuxer::new();
    d.push(&ts);
    let before: Vec<Demuxed> = std::iter::from_fn(|| d.poll()).collect();
    // The muxer writes PES_packet_length for frames under 64 KiB, so every frame is
    // out before `finish` except when the length is 0; here all have lengths.
    assert_eq!(frames_of(&before, MediaKind::Video).len(), 12);
    // A frame without a length waits for the next unit start or for `finish`.
    let mut big = BytesMut::new();
    let mut m = TsMuxer::new(Some(&h264_track()), None).expect("muxer");
    m.write_tables(&mut big);
    let f = frame(MediaKind::Video, 0, 0, true, nal(&[0x65], 70_000));
    m.write_frame(&f, &mut big).expect("big");
    let mut d = TsDemuxer::new();
    d.push(&big);
    assert!(std::iter::from_fn(|| d.poll()).all(|o| !matches!(o, Demuxed::Frame(_))));
    d.finish();
    let after: Vec<Demuxed> = std::iter::from_fn(|| d.poll()).collect();
    assert_eq!(frames_of(&after, MediaKind::Video).len(), 1);
}

#[test]
fn timestamps_start_at_zero_and_unwrap() {
    // Start 1 s before the 33-bit wrap of the muxer's output.
    let t0 = (1i64 << 33) - TIMESTAMP_OFFSET - 90_000;
    let (ts, sent) = h264_aac(t0);
    let (got, _) = demux(&ts, 1316);
    let want: Vec<(i64, i64)> = sent
        .iter()
        .filter(|f| f.kind == MediaKind::Video)
        .map(|f| (f.dts - t0, f.pts - t0))
        .collect();
    let have: Vec<(i64, i64)> = frames_of(&got, MediaKind::Video)
        .iter()
        .map(|f| (f.dts, f.pts))
        .collect();
    assert_eq!(have, want);
    let last_audio = frames_of(&got, MediaKind::Audio).last().map(|f| f.pts);
    assert_eq!(last_audio, Some(11 * 1920));
}

/// Sets the `version_number` of every PMT in `ts` and fixes the CRC.
fn set_pmt_version(ts: &mut [u8], version: u8) {
    for p in ts.chunks_mut(PACKET_LEN) {
        if pid(p) != PMT_PID {
            continue;
        }
        let len = 3 + (usize::from(p[6] & 0x0f) << 8 | usize::from(p[7]));
        let s = &mut p[5..5 + len];
        s[5] = (s[5] & 0xc1) | (version << 1);
        let crc = crc32_mpeg2(&s[..len - 4]);
        s[len - 4..].copy_from_slice(&crc.to_be_bytes());
    }
}

fn h265_track() -> Track {
    let record = include_bytes!("../../../tests/data/x265_1080p.hvcC");
    Track::new(TrackConfig::H265(
        crate::codec::HevcConfig::parse(Bytes::from_static(record)).expect("hvcC"),
    ))
}

#[test]
fn a_new_pmt_version_restarts_changed_streams() {
    let (first, _) = h264_aac(0);
    // Then H.265 with the same audio, on the same PIDs.
    let mut m = TsMuxer::new(Some(&h265_track()), Some(&aac_track())).expect("muxer");
    let mut second = BytesMut::new();
    m.write_tables(&mut second);
    for i in 12..20 {
        let v = frame(
            MediaKind::Video,
            i * 3600,
            i * 3600,
            i == 12,
            nal(&[0x26, 0x01], 500),
        );
        let a = frame(
            MediaKind::Audio,
            i * 1920,
            i * 1920,
            true,
            Bytes::from(vec![1; 50]),
        );
        m.write_frame(&v, &mut second).expect("video");
        m.write_frame(&a, &mut second).expect("audio");
    }
    let mut second = second.to_vec();
    // The same PMT version: the PMT is not read again, and the H.265 frames are read
    // as H.264 (whose SPS they do not have: no new track). The new muxer's counters
    // start over: a gap on the PMT (same counter, other content) and on each stream.
    let mut ts = first.clone();
    ts.extend_from_slice(&second);
    let (got, stats) = demux(&ts, 1316);
    assert_eq!(tracks_of(&got).len(), 2);
    assert_eq!(stats.continuity_errors, 3);
    // A new version: video starts over as H.265 and is announced; the audio stream is
    // the same (PID and codec), goes on and is not announced again.
    set_pmt_version(&mut second, 1);
    let mut ts = first;
    ts.extend_from_slice(&second);
    let (got, _) = demux(&ts, 1316);
    let tracks = tracks_of(&got);
    assert_eq!(tracks.len(), 3);
    // The same parameter sets (the x265 record also has an SEI, which we do not keep).
    let (TrackConfig::H265(have), TrackConfig::H265(sent)) =
        (&tracks[2].1.config, &h265_track().config)
    else {
        panic!("{:?}", tracks[2])
    };
    assert_eq!(tracks[2].0, 12 * 3600);
    assert_eq!(
        (&have.vps, &have.sps, &have.pps),
        (&sent.vps, &sent.sps, &sent.pps)
    );
    assert_eq!(frames_of(&got, MediaKind::Audio).len(), 20);
    let videos = frames_of(&got, MediaKind::Video);
    assert_eq!(videos.len(), 20);
    assert!(videos[12].keyframe);
}

#[test]
fn bad_crc_tables_are_ignored() {
    let (mut ts, _) = h264_aac(0);
    // Flip a bit in the PAT's transport_stream_id: its CRC no longer checks.
    ts[5 + 4] ^= 1;
    let (got, stats) = demux(&ts, 1316);
    assert!(got.is_empty());
    assert_eq!(stats.bad_sections, 1);
}

#[test]
fn the_output_queue_is_bounded() {
    let mut m = TsMuxer::new(None, Some(&aac_track())).expect("muxer");
    let mut ts = BytesMut::new();
    m.write_tables(&mut ts);
    let n = MAX_QUEUED_OUTPUTS + 100;
    for i in 0..n as i64 {
        let a = frame(
            MediaKind::Audio,
            i * 1920,
            i * 1920,
            true,
            Bytes::from(vec![1; 20]),
        );
        m.write_frame(&a, &mut ts).expect("audio");
    }
    let mut d = TsDemuxer::new();
    d.push(&ts);
    d.finish();
    let got: Vec<Demuxed> = std::iter::from_fn(|| d.poll()).collect();
    assert_eq!(got.len(), MAX_QUEUED_OUTPUTS);
    let stats = d.stats();
    assert_eq!(stats.outputs_dropped as usize, n + 1 - MAX_QUEUED_OUTPUTS);
    assert_eq!(stats.frames as usize, MAX_QUEUED_OUTPUTS - 1);
}

/// PAT, a PMT with one Opus stream (registration and, if given, a channel
/// configuration), and PES packets of `units`, each a list of Opus packets behind
/// control headers, 20 ms apart.
/// The PMT section of program 1 (version 0) around `body` (PCR PID, program info and
/// the stream loop), with its CRC.
fn pmt_section(body: &[u8]) -> Vec<u8> {
    let mut pmt = vec![0x02];
    pmt.extend_from_slice(&(0xb000 | (9 + body.len()) as u16).to_be_bytes());
    pmt.extend_from_slice(&[0, 1, 0xc1, 0, 0]);
    pmt.extend_from_slice(body);
    let crc = crc32_mpeg2(&pmt);
    pmt.extend_from_slice(&crc.to_be_bytes());
    pmt
}

fn opus_stream(channel_code: Option<u8>, units: &[&[&[u8]]]) -> Vec<u8> {
    let mut out = BytesMut::new();
    let (mut pat_cc, mut pmt_cc, mut cc) = (0, 0, 0);
    write_section(&mut out, 0, &mut pat_cc, &pat_section());
    let mut descriptors = vec![0x05, 4, b'O', b'p', b'u', b's'];
    if let Some(code) = channel_code {
        descriptors.extend_from_slice(&[0x7f, 2, 0x80, code]);
    }
    let mut body = vec![0xe1, 0x01, 0xf0, 0x00, 0x06, 0xe1, 0x01];
    body.extend_from_slice(&(0xf000 | descriptors.len() as u16).to_be_bytes());
    body.extend_from_slice(&descriptors);
    let pmt = pmt_section(&body);
    write_section(&mut out, PMT_PID, &mut pmt_cc, &pmt);
    for (i, packets) in units.iter().enumerate() {
        let mut es = Vec::new();
        for p in *packets {
            es.extend_from_slice(&[0x7f, 0xe0]);
            es.extend(std::iter::repeat_n(0xff, p.len() / 255));
            es.push((p.len() % 255) as u8);
            es.extend_from_slice(p);
        }
        let pts = 126_000 + 1800 * i as u64;
        let (h, n) = pes_header(0xbd, pts, None, es.len());
        write_pes(
            &mut out,
            AUDIO_PID,
            &mut cc,
            Adaptation::default(),
            &h[..n],
            &[Bytes::from(es)],
        );
    }
    out.to_vec()
}

#[test]
fn opus_packets_come_out_with_their_track() {
    let long = [0xfc; 600];
    let ts = opus_stream(
        Some(6),
        &[&[&[0xfc, 1, 2]], &[&[0xfc, 3], &long[..]], &[&[0xfc, 4]]],
    );
    for chunk in [100, 1316] {
        let (got, stats) = demux(&ts, chunk);
        let tracks = tracks_of(&got);
        assert_eq!(tracks.len(), 1);
        let TrackConfig::Opus(c) = &tracks[0].1.config else {
            panic!("{tracks:?}")
        };
        assert_eq!(c.channels, 6);
        let frames: Vec<(i64, usize)> = frames_of(&got, MediaKind::Audio)
            .iter()
            .map(|f| (f.pts, f.payload.len()))
            .collect();
        // The second PES holds two packets: the second is 20 ms after the first.
        assert_eq!(
            frames,
            vec![(0, 3), (1800, 2), (3600, 600), (3600, 2)],
            "{stats:?}"
        );
    }
    // Without a channel configuration: stereo.
    let (got, _) = demux(&opus_stream(None, &[&[&[0xfc, 1]]]), 1316);
    let tracks = tracks_of(&got);
    assert!(
        matches!(&tracks[..], [(0, t)] if t.config == TrackConfig::Opus(OpusConfig::stereo_48k()))
    );
}

#[test]
fn hostile_bytes_never_panic() {
    // Our stream with every 7th byte changed, in several splits; and pure noise.
    let (ts, _) = h264_aac(0);
    let mut seed = 0x1234_5678u32;
    let mut noise = || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        seed as u8
    };
    let mangled: Vec<u8> = ts
        .iter()
        .enumerate()
        .map(|(i, &b)| if i % 7 == 3 { noise() } else { b })
        .collect();
    for chunk in [1, 13, 1316] {
        let _ = demux(&mangled, chunk);
    }
    let pure: Vec<u8> = (0..100_000)
        .map(|i| if i % 188 == 0 { 0x47 } else { noise() })
        .collect();
    let (_, stats) = demux(&pure, 1316);
    assert!(stats.packets > 0);
}

/// `ts` as a mux of two programs: program 1 is now an empty one (its PMT on a PID
/// nothing is sent on), and the stream's own becomes program 2.
fn as_program_two(ts: &mut [u8]) {
    let mut pat = vec![0x00, 0xb0, 17, 0, 1, 0xc1, 0, 0, 0, 1, 0xf2, 0x00, 0, 2];
    pat.extend_from_slice(&(0xe000 | PMT_PID).to_be_bytes());
    let crc = crc32_mpeg2(&pat);
    pat.extend_from_slice(&crc.to_be_bytes());
    let mut pat_packet = BytesMut::new();
    write_section(&mut pat_packet, 0, &mut 0, &pat);
    for p in ts.chunks_mut(PACKET_LEN) {
        if pid(p) == 0 {
            p.copy_from_slice(&pat_packet);
        } else if pid(p) == PMT_PID {
            let len = 3 + (usize::from(p[6] & 0x0f) << 8 | usize::from(p[7]));
            let s = &mut p[5..5 + len];
            s[3..5].copy_from_slice(&2u16.to_be_bytes());
            let crc = crc32_mpeg2(&s[..len - 4]);
            s[len - 4..].copy_from_slice(&crc.to_be_bytes());
        }
    }
}

#[test]
fn the_program_asked_for_is_the_one_demuxed() {
    let (mut ts, frames) = h264_aac(0);
    as_program_two(&mut ts);
    let run = |mut d: TsDemuxer| {
        d.push(&ts);
        d.finish();
        std::iter::from_fn(|| d.poll()).collect::<Vec<_>>()
    };
    let two = run(TsDemuxer::for_program(2));
    assert_eq!(
        frames_of(&two, MediaKind::Video).len(),
        frames.iter().filter(|f| f.kind == MediaKind::Video).count()
    );
    assert_eq!(tracks_of(&two).len(), 2);
    // Without a choice, program 1 is taken: it has nothing.
    assert!(run(TsDemuxer::new()).is_empty());
    assert!(run(TsDemuxer::for_program(3)).is_empty());
}

/// The standard's splice_insert example with its splice time set to `pts` (33-bit).
fn splice_insert(pts: u64) -> Vec<u8> {
    let mut s = vec![
        0xfc, 0x30, 0x2f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xf0, 0x14, 0x05, 0x48,
        0x00, 0x00, 0x8f, 0x7f, 0xef, 0xfe, 0x73, 0x69, 0xc0, 0x2e, 0xfe, 0x00, 0x52, 0xcc, 0xf5,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x08, 0x43, 0x55, 0x45, 0x49, 0x00, 0x00, 0x01,
        0x35, 0x00, 0x00, 0x00, 0x00,
    ];
    s[20] = 0xfe | (pts >> 32) as u8;
    s[21..25].copy_from_slice(&(pts as u32).to_be_bytes());
    let n = s.len() - 4;
    let crc = crc32_mpeg2(&s[..n]);
    s[n..].copy_from_slice(&crc.to_be_bytes());
    s
}

/// PID of the cue stream in the tests.
const CUE_PID: u16 = 0x1f0;

/// `ts` with its PMT replaced by one that also lists an SCTE-35 stream on
/// [`CUE_PID`], and a cue section (over two packets when `split`) after frame `after`
/// of each kind.
fn with_cues(ts: &[u8], cues: &[(usize, Vec<u8>)], split: bool) -> Vec<u8> {
    let mut body = vec![0xe0 | (VIDEO_PID >> 8) as u8, VIDEO_PID as u8, 0xf0, 0x00];
    for (kind, pid) in [(0x1b, VIDEO_PID), (0x0f, AUDIO_PID), (0x86, CUE_PID)] {
        body.extend_from_slice(&[kind, 0xe0 | (pid >> 8) as u8, pid as u8, 0xf0, 0x00]);
    }
    let pmt = pmt_section(&body);
    let mut out = BytesMut::new();
    let (mut pmt_cc, mut cue_cc, mut audio_units) = (0, 0, 0);
    for p in ts.chunks(PACKET_LEN) {
        if pid(p) == PMT_PID {
            write_section(&mut out, PMT_PID, &mut pmt_cc, &pmt);
            continue;
        }
        out.extend_from_slice(p);
        // A PES start on the audio PID: an audio frame begins; cues go before it.
        if pid(p) == AUDIO_PID && p[1] & 0x40 != 0 {
            for (_, section) in cues.iter().filter(|(after, _)| *after == audio_units) {
                if split {
                    // The section's first 20 bytes, then the rest in a second packet:
                    // adaptation-field stuffing makes the first packet's payload end
                    // where the section's first part does.
                    let mut first = [0xffu8; PACKET_LEN];
                    first[..4].copy_from_slice(&[
                        0x47,
                        0x40 | (CUE_PID >> 8) as u8,
                        CUE_PID as u8,
                        0x30 | cue_cc,
                    ]);
                    let payload_at = PACKET_LEN - 21;
                    first[4] = (payload_at - 5) as u8;
                    first[5] = 0; // no adaptation flags
                    first[payload_at] = 0; // pointer_field
                    first[payload_at + 1..].copy_from_slice(&section[..20]);
                    cue_cc = (cue_cc + 1) & 0x0f;
                    out.extend_from_slice(&first);
                    let mut second = [0xffu8; PACKET_LEN];
                    second[..4].copy_from_slice(&[
                        0x47,
                        (CUE_PID >> 8) as u8,
                        CUE_PID as u8,
                        0x10 | cue_cc,
                    ]);
                    second[4..4 + section.len() - 20].copy_from_slice(&section[20..]);
                    cue_cc = (cue_cc + 1) & 0x0f;
                    out.extend_from_slice(&second);
                } else {
                    write_section(&mut out, CUE_PID, &mut cue_cc, section);
                }
            }
            audio_units += 1;
        }
    }
    out.to_vec()
}

fn cues_of(out: &[Demuxed]) -> Vec<&Cue> {
    out.iter()
        .filter_map(|d| match d {
            Demuxed::Cue(c) => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn scte35_cues_come_out_placed_on_the_frames_timeline() {
    let (ts, frames) = h264_aac(0);
    // A cue after the 4th audio frame for the time of video frame 6 (the second
    // keyframe), and one for a time past the last frame.
    let at6 = TIMESTAMP_OFFSET as u64 + 6 * 3600;
    let late = TIMESTAMP_OFFSET as u64 + 40 * 3600;
    let cues = [(4, splice_insert(at6)), (10, splice_insert(late))];
    for split in [false, true] {
        let ts = with_cues(&ts, &cues, split);
        for chunk in [ts.len(), 188, 100, 7] {
            let (out, stats) = demux(&ts, chunk);
            let got = cues_of(&out);
            assert_eq!(got.len(), 2, "split {split} chunk {chunk}");
            assert_eq!(got[0].at, frames[12].dts, "the keyframe's time");
            assert_eq!(got[1].at, 40 * 3600);
            assert_eq!(got[0].info.direction(), Some(crate::ts::CueDirection::Out));
            assert_eq!(got[0].info.duration(), Some(0x52_ccf5));
            assert_eq!((stats.cues, stats.cues_dropped), (2, 0));
            // The media is untouched.
            assert_eq!(frames_of(&out, MediaKind::Video).len(), 12);
            assert_eq!(frames_of(&out, MediaKind::Audio).len(), 12);
        }
    }
}

#[test]
fn scte35_cues_that_cannot_be_read_or_placed_are_counted() {
    let (ts, _) = h264_aac(0);
    let mut bad = splice_insert(1);
    bad[30] ^= 0xff; // the CRC no longer checks
                     // A cue before any media: nothing to place it against.
    let cues = [(0, bad), (3, splice_insert(5))];
    let mut ts = with_cues(&ts, &cues, false);
    // Move the first PES of audio (with its cue behind it) after a cue-only prefix:
    // a cue right after the tables comes before any frame time.
    let tables = 2 * PACKET_LEN;
    let mut early = BytesMut::new();
    write_section(&mut early, CUE_PID, &mut 0x0e, &splice_insert(9));
    ts.splice(tables..tables, early.iter().copied());
    let (out, stats) = demux(&ts, ts.len());
    assert_eq!(cues_of(&out).len(), 1);
    assert_eq!(stats.cues_dropped, 2);
}
