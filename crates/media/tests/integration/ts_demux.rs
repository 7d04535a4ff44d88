//! The MPEG-TS demuxer: what our muxer writes comes back frame for frame, in any split
//! of the byte stream; and, where ffmpeg is installed, its H.264/H.265 with AAC/Opus
//! output demuxes to what ffprobe sees.
//!
//! Video tracks use the x264/x265 records in `data/` with synthetic slice NAL units
//! (as `ts_mux.rs` builds them); the ffmpeg clips are made in a temporary folder from
//! the same synthetic sources as `scripts/make-test-media.sh`, 2 s each.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use sluice_media::codec::{nal_units, AacConfig, AvcConfig, HevcConfig};
use sluice_media::ts::{DemuxStats, Demuxed, TsDemuxer, TsMuxer, PACKET_LEN};
use sluice_media::{Frame, MediaKind, Track, TrackConfig};
use std::path::{Path, PathBuf};
use std::process::Command;

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

/// The parameter sets of a video track, in the order the muxer adds them.
fn parameter_sets(track: &Track) -> Vec<Bytes> {
    match &track.config {
        TrackConfig::H264(c) => c.sps.iter().chain(&c.pps).cloned().collect(),
        TrackConfig::H265(c) => c.vps.iter().chain(&c.sps).chain(&c.pps).cloned().collect(),
        _ => Vec::new(),
    }
}

/// What a frame we muxed demuxes to: the muxer adds the parameter sets a keyframe
/// lacks and an AUD, and the demuxer drops AUDs, so a keyframe gains the sets in front
/// and loses any AUD of its own.
fn expected_payload(f: &Frame, track: &Track, aud_type: impl Fn(&[u8]) -> bool) -> Bytes {
    let nals: Vec<Bytes> = nal_units(&f.payload, 4)
        .map(|n| n.expect("valid"))
        .filter(|n| !aud_type(n))
        .collect();
    let mut all: Vec<Vec<u8>> = Vec::new();
    if f.keyframe {
        for set in parameter_sets(track) {
            if !nals.contains(&set) {
                all.push(set.to_vec());
            }
        }
    }
    all.extend(nals.iter().map(|n| n.to_vec()));
    length_prefixed(&all)
}

// ---- the demuxer ----

/// Pushes `ts` in pieces of `chunk` bytes, draining after each push, then finishes.
fn demux(ts: &[u8], chunk: usize) -> (Vec<Demuxed>, DemuxStats) {
    let mut d = TsDemuxer::new();
    let mut out = Vec::new();
    for piece in ts.chunks(chunk.max(1)) {
        d.push(piece);
        while let Some(o) = d.poll() {
            out.push(o);
        }
    }
    d.finish();
    while let Some(o) = d.poll() {
        out.push(o);
    }
    (out, d.stats())
}

/// The same stream in datagrams of 1316 bytes and in 100-byte pieces (which cut
/// packets anywhere) gives the same outputs.
fn demux_both_ways(ts: &[u8]) -> (Vec<Demuxed>, DemuxStats) {
    let (a, stats) = demux(ts, 7 * PACKET_LEN);
    let (b, _) = demux(ts, 100);
    assert!(a == b, "the 100-byte split gave other outputs");
    (a, stats)
}

fn frames(out: &[Demuxed], kind: MediaKind) -> Vec<&Frame> {
    out.iter()
        .filter_map(|d| match d {
            Demuxed::Frame(f) if f.kind == kind => Some(f),
            _ => None,
        })
        .collect()
}

fn tracks(out: &[Demuxed]) -> Vec<(i64, &Track)> {
    out.iter()
        .filter_map(|d| match d {
            Demuxed::Track(at, t) => Some((*at, t)),
            _ => None,
        })
        .collect()
}

/// Every track comes before the first frame of its kind.
fn assert_tracks_lead(out: &[Demuxed]) {
    let mut announced = Vec::new();
    for o in out {
        match o {
            Demuxed::Track(_, t) => announced.push(t.kind()),
            Demuxed::Frame(f) => assert!(
                announced.contains(&f.kind),
                "{:?} frame before its track",
                f.kind
            ),
            Demuxed::Cue(_) => {}
        }
    }
}

// ---- round trips through our muxer ----

/// Two segments of H.264 + AAC with B-frame timing, starting at `t0`.
fn h264_aac_stream(t0: i64) -> (Vec<u8>, Vec<Frame>, Vec<Frame>) {
    let (vt, at) = (h264_track(), aac_track());
    let mut m = TsMuxer::new(Some(&vt), Some(&at)).expect("muxer");
    let mut out = BytesMut::new();
    let (mut videos, mut audios) = (Vec::new(), Vec::new());
    for seg in 0..2i64 {
        m.write_tables(&mut out);
        for i in 0..8i64 {
            let n = seg * 8 + i;
            let dts = t0 + n * 3003;
            let pts = dts + [3003, 12012, 3003, 3003][(i % 4) as usize];
            let keyframe = i == 0;
            let payload = if keyframe {
                // SEI, an AUD of its own, then an IDR over many packets.
                length_prefixed(&[
                    nal(&[0x06, 0x05], 20, 1),
                    vec![0x09, 0x10],
                    nal(&[0x65, 0x88], 5000, 2),
                ])
            } else if n == 13 {
                // Over 64 KiB: PES_packet_length 0, ended by the next PES.
                length_prefixed(&[nal(&[0x41, 0x9a], 70_000, 3)])
            } else {
                length_prefixed(&[nal(&[0x41, 0x9a], 300 + 50 * i as usize, 3)])
            };
            let f = video(dts, pts, keyframe, payload);
            m.write_frame(&f, &mut out).expect("video frame");
            videos.push(f);
            // 1024 samples at 44.1 kHz: 2089.8 ticks; the muxer takes what we give.
            let a = audio(t0 + n * 2090, Bytes::from(nal(&[0x21], 370, n as u8)));
            m.write_frame(&a, &mut out).expect("audio frame");
            audios.push(a);
        }
    }
    (out.to_vec(), videos, audios)
}

#[test]
fn h264_aac_round_trip() {
    let t0 = 5_000_000;
    let (ts, videos, audios) = h264_aac_stream(t0);
    let (out, stats) = demux_both_ways(&ts);
    assert_tracks_lead(&out);
    assert_eq!(
        stats.continuity_errors + stats.pes_dropped + stats.frames_dropped,
        0
    );
    assert_eq!(
        stats.bad_packets + stats.bad_sections + stats.skipped_bytes,
        0
    );

    let vt = h264_track();
    let got = tracks(&out);
    assert_eq!(got.len(), 2, "one track each: the sets repeat unchanged");
    let TrackConfig::H264(c) = &got[0].1.config else {
        panic!("{got:?}")
    };
    let TrackConfig::H264(sent) = &vt.config else {
        unreachable!()
    };
    assert_eq!((&c.sps, &c.pps), (&sent.sps, &sent.pps));
    assert_eq!((c.width, c.height), (1280, 720));
    assert_eq!(got[1].1, &aac_track());

    let got = frames(&out, MediaKind::Video);
    assert_eq!(got.len(), videos.len());
    for (i, (g, f)) in got.iter().zip(&videos).enumerate() {
        let is_aud = |n: &[u8]| n.first().map(|b| b & 0x1f) == Some(9);
        assert_eq!(g.payload, expected_payload(f, &vt, is_aud), "video {i}");
        assert_eq!(g.keyframe, f.keyframe, "video {i}");
        // Relative to the first DTS of the stream.
        assert_eq!((g.dts, g.pts), (f.dts - t0, f.pts - t0), "video {i}");
    }
    let got = frames(&out, MediaKind::Audio);
    assert_eq!(got.len(), audios.len());
    for (g, f) in got.iter().zip(&audios) {
        assert_eq!(
            (g.dts, g.pts, &g.payload),
            (f.dts - t0, f.pts - t0, &f.payload)
        );
    }
}

#[test]
fn h265_round_trip() {
    let vt = h265_track();
    let mut m = TsMuxer::new(Some(&vt), None).expect("muxer");
    let mut ts = BytesMut::new();
    m.write_tables(&mut ts);
    let mut sent = Vec::new();
    for i in 0..10i64 {
        // IDR_W_RADL (19) every 5 frames, with a stale AUD of its own; else TRAIL_R.
        let f = if i % 5 == 0 {
            video(
                i * 3000,
                i * 3000,
                true,
                length_prefixed(&[vec![0x46, 0x01, 0x10], nal(&[0x26, 0x01], 3000, 5)]),
            )
        } else {
            video(
                i * 3000,
                i * 3000,
                false,
                length_prefixed(&[nal(&[0x02, 0x01], 500, 6)]),
            )
        };
        m.write_frame(&f, &mut ts).expect("frame");
        sent.push(f);
    }
    let (out, _) = demux_both_ways(&ts);
    assert_tracks_lead(&out);
    let got = tracks(&out);
    assert_eq!(got.len(), 1);
    let (TrackConfig::H265(c), TrackConfig::H265(s)) = (&got[0].1.config, &vt.config) else {
        panic!("{got:?}")
    };
    assert_eq!((&c.vps, &c.sps, &c.pps), (&s.vps, &s.sps, &s.pps));
    assert_eq!((c.width, c.height), (1920, 1080));
    let got = frames(&out, MediaKind::Video);
    assert_eq!(got.len(), sent.len());
    for (g, f) in got.iter().zip(&sent) {
        let is_aud = |n: &[u8]| n.first().map(|b| (b >> 1) & 0x3f) == Some(35);
        assert_eq!(g.payload, expected_payload(f, &vt, is_aud));
        assert_eq!((g.dts, g.pts, g.keyframe), (f.dts, f.pts, f.keyframe));
    }
}

#[test]
fn lost_datagrams_cost_their_frames_only() {
    let (ts, videos, audios) = h264_aac_stream(0);
    // Drop the 20th datagram of 7 packets.
    let lossy: Vec<u8> = ts
        .chunks(7 * PACKET_LEN)
        .enumerate()
        .filter(|(i, _)| *i != 20)
        .flat_map(|(_, d)| d.iter().copied())
        .collect();
    let (out, stats) = demux(&lossy, 7 * PACKET_LEN);
    assert!(stats.continuity_errors >= 1);
    let v = frames(&out, MediaKind::Video).len();
    let a = frames(&out, MediaKind::Audio).len();
    assert!(
        v < videos.len() && v >= videos.len() - 4,
        "{v} video frames"
    );
    assert!(
        a < audios.len() + 1 && a >= audios.len() - 4,
        "{a} audio frames"
    );
    // What comes out is whole: every video payload splits into NAL units.
    for f in frames(&out, MediaKind::Video) {
        assert!(nal_units(&f.payload, 4).all(|n| n.is_ok()));
    }
}

#[test]
fn mp3_streams_are_ignored() {
    let t = Track::new(TrackConfig::Mp3 {
        sample_rate: 44_100,
        channels: 2,
    });
    let mut m = TsMuxer::new(None, Some(&t)).expect("muxer");
    let mut ts = BytesMut::new();
    m.write_tables(&mut ts);
    m.write_frame(
        &audio(0, Bytes::from(nal(&[0xff, 0xfb, 0x90, 0x64], 413, 0))),
        &mut ts,
    )
    .expect("mp3");
    let (out, stats) = demux(&ts, 1316);
    assert!(out.is_empty());
    assert_eq!(stats.packets as usize, ts.len() / PACKET_LEN);
}

proptest! {
    #[test]
    fn any_muxed_frames_come_back(
        frames_in in prop::collection::vec(
            (any::<bool>(), any::<bool>(), 0i64..20_000, 0usize..3000, 1usize..4, any::<u8>()),
            1..25,
        ),
        chunk in 1usize..2000,
    ) {
        let (vt, at) = (h264_track(), aac_track());
        let mut m = TsMuxer::new(Some(&vt), Some(&at)).expect("muxer");
        let mut ts = BytesMut::new();
        m.write_tables(&mut ts);
        let (mut dts, mut adts) = (0i64, 0i64);
        let mut sent = Vec::new();
        // Start with a keyframe, so no frame waits for parameter sets.
        for (n, (is_video, key, step, len, count, seed)) in frames_in.into_iter().enumerate() {
            let f = if is_video || n == 0 {
                let header: &[u8] = if key || n == 0 { &[0x65, 0x88] } else { &[0x41, 0x9a] };
                let nals: Vec<Vec<u8>> = (0..count).map(|k| nal(header, len / count, seed.wrapping_add(k as u8))).collect();
                let f = video(dts, dts + step % 9000, key || n == 0, length_prefixed(&nals));
                dts += 1 + step;
                f
            } else {
                let f = audio(adts, Bytes::from(nal(&[0x21], len % 2000, seed)));
                adts += 1 + step;
                f
            };
            m.write_frame(&f, &mut ts).expect("muxes");
            sent.push(f);
        }
        let (out, stats) = demux(&ts, chunk);
        prop_assert_eq!(stats.frames as usize, sent.len());
        let base = sent[0].dts;
        for kind in [MediaKind::Video, MediaKind::Audio] {
            let got = frames(&out, kind);
            let want: Vec<&Frame> = sent.iter().filter(|f| f.kind == kind).collect();
            prop_assert_eq!(got.len(), want.len());
            for (g, f) in got.iter().zip(want) {
                prop_assert_eq!((g.dts, g.pts, g.keyframe), (f.dts - base, f.pts - base, f.keyframe));
                if kind == MediaKind::Audio {
                    prop_assert_eq!(&g.payload, &f.payload);
                } else {
                    prop_assert_eq!(&g.payload, &expected_payload(f, &vt, |_| false));
                }
            }
        }
    }
}

// ---- ffmpeg ----

/// A 2 s clip of testsrc2 (320x240, 25 fps, a keyframe every second) and a 440 Hz tone
/// at 48 kHz, encoded with `video` and `audio` (ffmpeg encoder names) into MPEG-TS.
/// `None` when the encoder is missing (a failure where `SLUICE_REQUIRE_TOOLS=1`).
fn ffmpeg_clip(dir: &Path, video: &str, audio: &str) -> Option<PathBuf> {
    let encoders = Command::new("ffmpeg")
        .args(["-hide_banner", "-encoders"])
        .output()
        .expect("ffmpeg runs");
    let list = String::from_utf8_lossy(&encoders.stdout);
    for codec in [video, audio] {
        if !list.split_whitespace().any(|w| w == codec) {
            assert!(
                std::env::var("SLUICE_REQUIRE_TOOLS").as_deref() != Ok("1"),
                "ffmpeg lacks {codec} but SLUICE_REQUIRE_TOOLS=1"
            );
            eprintln!("ffmpeg lacks {codec}; skipped");
            return None;
        }
    }
    let path = dir.join(format!("{video}-{audio}.ts"));
    let mut args: Vec<&str> = vec![
        "-hide_banner",
        "-loglevel",
        "error",
        "-nostdin",
        "-y",
        "-f",
        "lavfi",
        "-i",
        "testsrc2=size=320x240:rate=25",
        "-f",
        "lavfi",
        "-i",
        "sine=frequency=440:sample_rate=48000",
        "-t",
        "2",
        "-pix_fmt",
        "yuv420p",
        "-c:v",
        video,
        "-g",
        "25",
    ];
    match video {
        "libx264" => args.extend(["-sc_threshold", "0"]),
        _ => args.extend(["-x265-params", "log-level=error:scenecut=0"]),
    }
    args.extend(["-c:a", audio, "-f", "mpegts"]);
    let status = Command::new("ffmpeg")
        .args(&args)
        .arg(&path)
        .status()
        .expect("ffmpeg runs");
    assert!(status.success(), "ffmpeg {args:?}");
    Some(path)
}

/// A temporary folder for this test process's clips, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("ts-demux-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One packet as ffprobe reads it.
struct Probed {
    stream: u32,
    pts: i64,
    dts: i64,
    key: bool,
}

/// Every packet of `path`, as ffprobe reads it.
fn probe_packets(path: &Path) -> Vec<Probed> {
    crate::common::ffprobe(
        path,
        &["-show_entries", "packet=stream_index,pts,dts,flags"],
    )
    .lines()
    .filter_map(|l| {
        let mut f = l.split(',').map(str::trim);
        Some(Probed {
            stream: f.next()?.parse().ok()?,
            pts: f.next()?.parse().ok()?,
            dts: f.next()?.parse().ok()?,
            key: f.next()?.starts_with('K'),
        })
    })
    .collect()
}

/// Demuxes an ffmpeg clip and checks it against ffprobe: as many frames of each kind,
/// keyframes where ffprobe has them (`keys` in all, the first frame one of them),
/// rising DTS, and the same times for every video frame and (where `exact_audio`)
/// audio frame, up to the one base of the program.
fn check_clip(path: &Path, keys: usize, exact_audio: bool) -> Vec<Demuxed> {
    let ts = std::fs::read(path).expect("clip");
    let (out, stats) = demux_both_ways(&ts);
    assert_tracks_lead(&out);
    assert_eq!(
        (
            stats.continuity_errors,
            stats.pes_dropped,
            stats.frames_dropped,
            stats.frames_without_config
        ),
        (0, 0, 0, 0),
        "{stats:?}"
    );
    let probe = probe_packets(path);
    let pv: Vec<&Probed> = probe.iter().filter(|p| p.stream == 0).collect();
    let pa: Vec<&Probed> = probe.iter().filter(|p| p.stream == 1).collect();
    let (v, a) = (
        frames(&out, MediaKind::Video),
        frames(&out, MediaKind::Audio),
    );
    assert_eq!(v.len(), pv.len());
    assert_eq!(a.len(), pa.len());
    assert_eq!(v.iter().filter(|f| f.keyframe).count(), keys);
    assert!(v[0].keyframe);
    assert!(v.windows(2).all(|w| w[0].dts < w[1].dts), "video DTS rise");
    assert!(a.windows(2).all(|w| w[0].dts < w[1].dts), "audio DTS rise");
    // One offset maps ffprobe's times to ours, for both streams: A/V sync is kept.
    let offset = pv[0].dts - v[0].dts;
    for (i, (f, p)) in v.iter().zip(&pv).enumerate() {
        assert_eq!(
            (f.pts + offset, f.dts + offset, f.keyframe),
            (p.pts, p.dts, p.key),
            "video frame {i}"
        );
    }
    if exact_audio {
        for (i, (f, p)) in a.iter().zip(&pa).enumerate() {
            assert_eq!(
                (f.pts + offset, f.dts + offset),
                (p.pts, p.dts),
                "audio frame {i}"
            );
        }
    } else {
        assert!(
            (a[0].pts + offset - pa[0].pts).abs() < 90,
            "audio starts with ffprobe's"
        );
    }
    out
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn ffmpeg_h264_aac() {
    if !crate::common::ffmpeg_present() {
        return;
    }
    let dir = TempDir::new("h264-aac");
    let Some(path) = ffmpeg_clip(&dir.0, "libx264", "aac") else {
        return;
    };
    let out = check_clip(&path, 2, true);
    assert_eq!(frames(&out, MediaKind::Video).len(), 50);
    // x264's GOP is closed: keyframes at 0 and 25 in decode order too.
    let keys: Vec<usize> = frames(&out, MediaKind::Video)
        .iter()
        .enumerate()
        .filter(|(_, f)| f.keyframe)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(keys, vec![0, 25]);
    let t = tracks(&out);
    assert_eq!(t.len(), 2, "{t:?}");
    let TrackConfig::H264(c) = &t
        .iter()
        .find(|t| t.1.kind() == MediaKind::Video)
        .expect("video")
        .1
        .config
    else {
        panic!("{t:?}")
    };
    assert_eq!((c.width, c.height), (320, 240));
    let TrackConfig::Aac(c) = &t
        .iter()
        .find(|t| t.1.kind() == MediaKind::Audio)
        .expect("audio")
        .1
        .config
    else {
        panic!("{t:?}")
    };
    assert_eq!((c.object_type, c.sample_rate, c.channels), (2, 48_000, 1));
    // About 2 s of 1024-sample frames at 48 kHz.
    assert!((90..=100).contains(&frames(&out, MediaKind::Audio).len()));
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn ffmpeg_h264_opus() {
    if !crate::common::ffmpeg_present() {
        return;
    }
    let dir = TempDir::new("h264-opus");
    let Some(path) = ffmpeg_clip(&dir.0, "libx264", "libopus") else {
        return;
    };
    let out = check_clip(&path, 2, false);
    assert_eq!(frames(&out, MediaKind::Video).len(), 50);
    let t = tracks(&out);
    assert_eq!(t.len(), 2, "{t:?}");
    let TrackConfig::Opus(c) = &t
        .iter()
        .find(|t| t.1.kind() == MediaKind::Audio)
        .expect("audio")
        .1
        .config
    else {
        panic!("{t:?}")
    };
    assert_eq!(c.channels, 1);
    // 20 ms packets.
    let a = frames(&out, MediaKind::Audio);
    assert!((95..=105).contains(&a.len()), "{} Opus packets", a.len());
    assert!(a.windows(2).all(|w| w[1].pts - w[0].pts == 1800));
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn ffmpeg_h265_aac() {
    if !crate::common::ffmpeg_present() {
        return;
    }
    let dir = TempDir::new("h265-aac");
    let Some(path) = ffmpeg_clip(&dir.0, "libx265", "aac") else {
        return;
    };
    // x265's GOP is open: the second keyframe is a CRA, decoded before the leading
    // pictures shown ahead of it.
    let out = check_clip(&path, 2, true);
    assert_eq!(frames(&out, MediaKind::Video).len(), 50);
    let t = tracks(&out);
    assert_eq!(t.len(), 2, "{t:?}");
    let TrackConfig::H265(c) = &t
        .iter()
        .find(|t| t.1.kind() == MediaKind::Video)
        .expect("video")
        .1
        .config
    else {
        panic!("{t:?}")
    };
    assert_eq!((c.width, c.height), (320, 240));
}

/// The standard clips of `scripts/make-test-media.sh` (8 s, 720p/1080p at real bit
/// rates, B-frames in one, keyframes over 64 KiB), remuxed to MPEG-TS by ffmpeg.
#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn ffmpeg_standard_clips_remuxed() {
    if !crate::common::ffmpeg_present() {
        return;
    }
    let clips = [
        "h264_bframes_720p.mp4",
        "h264_opus_720p.mkv",
        "h265_aac_1080p.mp4",
    ];
    let media = crate::common::test_media(&clips);
    let dir = TempDir::new("standard");
    for clip in clips {
        let path = dir.0.join(format!("{clip}.ts"));
        let status = Command::new("ffmpeg")
            .args(["-hide_banner", "-loglevel", "error", "-nostdin", "-y", "-i"])
            .arg(media.join(clip))
            .args(["-c", "copy", "-f", "mpegts"])
            .arg(&path)
            .status()
            .expect("ffmpeg runs");
        assert!(status.success(), "remuxing {clip}");
        let video_frames: usize = crate::common::ffprobe(
            &path,
            &[
                "-select_streams",
                "v",
                "-count_packets",
                "-show_entries",
                "stream=nb_read_packets",
            ],
        )
        // Listed under the program and again on its own.
        .lines()
        .find_map(|l| l.trim().parse().ok())
        .expect("a packet count");
        // 25 fps, a keyframe every 50 frames from the first on.
        let keys = video_frames.div_ceil(50);
        assert!(keys >= 4, "{clip}: {video_frames} frames");
        let out = check_clip(&path, keys, !clip.contains("opus"));
        let v = frames(&out, MediaKind::Video);
        let bframes = v.iter().filter(|f| f.pts != f.dts).count();
        assert_eq!(bframes > 0, clip.contains("bframes"), "{clip}");
        assert_eq!(tracks(&out).len(), 2, "{clip}");
    }
}
