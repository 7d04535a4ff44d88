//! The fragment engine end to end: a live stream of frames cut by the rules into fMP4
//! (an init segment and pieces) or MPEG-TS, concatenated as a recording or an HLS
//! playlist would have them, and read back by ffprobe when it is installed: every frame
//! once, in order, keyframes where ffmpeg says, audio on its sample rate's timescale.

use crate::common::{ffprobe, ffprobe_present, temp_file};
use bytes::Bytes;
use sluice_media::codec::{AacConfig, AvcConfig};
use sluice_media::fragment::{Container, CutRules, Fragmenter, FragmenterConfig, Origin, Output};
use sluice_media::{Frame, MediaKind, Timestamp, Track, TrackConfig};

const AVCC_720P: &[u8] = include_bytes!("../data/x264_720p.avcC");
/// AAC-LC, 44.1 kHz, stereo.
const ASC_LC_44K: &[u8] = &[0x12, 0x10];

fn h264_track() -> Track {
    let c = AvcConfig::parse(Bytes::from_static(AVCC_720P)).expect("valid avcC");
    Track::new(TrackConfig::H264(c))
}

fn aac_track() -> Track {
    let c = AacConfig::parse(Bytes::from_static(ASC_LC_44K)).expect("valid ASC");
    Track::new(TrackConfig::Aac(c))
}

/// `seconds` of 25 fps H.264 (a keyframe each second) and 44.1 kHz AAC, interleaved
/// in decode order as a publisher sends them. AAC frames are 1024 samples, which the
/// 90 kHz clock cannot hold exactly.
fn stream(seconds: i64) -> Vec<Frame> {
    let mut out = Vec::new();
    let mut a = 0i64;
    for n in 0..seconds * 25 {
        let dts = n * 3600;
        let key = n % 25 == 0;
        // first_mb_in_slice 0, then slice_type 7 (I) or 5 (P).
        let mut nal = if key {
            vec![0x65, 0x88]
        } else {
            vec![0x41, 0x98]
        };
        nal.extend((0..200).map(|i| 0x80 | (i as u8)));
        let mut payload = (nal.len() as u32).to_be_bytes().to_vec();
        payload.extend_from_slice(&nal);
        out.push(Frame {
            kind: MediaKind::Video,
            dts,
            pts: dts,
            keyframe: key,
            payload: Bytes::from(payload),
        });
        loop {
            let adts = a * 1024 * 90_000 / 44_100;
            if adts >= dts + 3600 {
                break;
            }
            out.push(Frame {
                kind: MediaKind::Audio,
                dts: adts,
                pts: adts,
                keyframe: true,
                payload: Bytes::from_static(&[0x21, 0x10, 0x04, 0x60, 0x8c, 0x1c]),
            });
            a += 1;
        }
    }
    out
}

/// Everything the fragmenter made for `frames`, then `finish`.
fn fragment(config: FragmenterConfig, frames: &[Frame]) -> Vec<Output> {
    let mut f = Fragmenter::new(config);
    f.set_tracks(Some(&h264_track()), Some(&aac_track()))
        .expect("tracks");
    let mut out = Vec::new();
    for frame in frames {
        f.push(frame).expect("push");
        out.extend(std::iter::from_fn(|| f.poll_output()));
    }
    f.finish(None).expect("finish");
    out.extend(std::iter::from_fn(|| f.poll_output()));
    out
}

/// The init (if any) and every piece, in order: the whole output as one file.
fn file(outputs: &[Output]) -> Vec<u8> {
    let mut file = Vec::new();
    for o in outputs {
        match o {
            Output::Init(b) if file.is_empty() => file.extend_from_slice(b),
            Output::Piece { bytes, .. } => file.extend_from_slice(bytes),
            _ => {}
        }
    }
    file
}

/// `(stream index, pts, keyframe)` of each packet ffprobe reads from `bytes`.
fn packets(name: &str, bytes: &[u8]) -> (String, Vec<(u32, i64, bool)>) {
    let path = temp_file(name, bytes);
    let streams = ffprobe(
        &path,
        &["-show_entries", "stream=codec_name,time_base,sample_rate"],
    );
    let packets = ffprobe(&path, &["-show_entries", "packet=stream_index,pts,flags"]);
    let _ = std::fs::remove_file(&path);
    let packets = packets
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (
                f[0].parse().expect("index"),
                f[1].parse().expect("pts"),
                f[2].starts_with('K'),
            )
        })
        .collect();
    (streams, packets)
}

fn rules() -> CutRules {
    CutRules {
        part_ticks: Some(45_000),
        ..CutRules::at_start_points(180_000)
    }
}

#[test]
fn fmp4_segments_begin_at_keyframes_with_parts_between() {
    let frames = stream(6);
    let out = fragment(
        FragmenterConfig {
            container: Container::Fmp4,
            rules: rules(),
            origin: Origin::FirstFrame,
            late_tracks_join: false,
        },
        &frames,
    );
    let begins: Vec<(Timestamp, bool)> = out
        .iter()
        .filter_map(|o| match o {
            Output::Begin { dts, independent } => Some((*dts, *independent)),
            _ => None,
        })
        .collect();
    assert_eq!(begins, [(0, true), (180_000, true), (360_000, true)]);
    let pieces: Vec<(Timestamp, bool)> = out
        .iter()
        .filter_map(|o| match o {
            Output::Piece {
                duration,
                independent,
                ..
            } => Some((*duration, *independent)),
            _ => None,
        })
        .collect();
    // Parts of 0.5 s (at 40 ms frames: 0.52 s), four to a 2 s segment.
    assert_eq!(pieces.len(), 12);
    // The last segment ends with the estimated end of its last audio frame.
    let last_audio = frames
        .iter()
        .rev()
        .find(|f| f.kind == MediaKind::Audio)
        .map_or(0, |f| f.dts);
    let total: Timestamp = pieces.iter().map(|p| p.0).sum();
    assert_eq!(total, last_audio + 1024 * 90_000 / 44_100);
    assert_eq!(
        pieces.iter().filter(|p| p.1).count(),
        3,
        "the first part of each segment"
    );

    if !ffprobe_present() {
        return;
    }
    let (streams, packets) = packets("fragment.mp4", &file(&out));
    assert!(streams.contains("h264,1/90000"), "{streams}");
    assert!(streams.contains("aac,44100,1/44100"), "{streams}");
    let video: Vec<_> = packets.iter().filter(|p| p.0 == 0).collect();
    let audio: Vec<_> = packets.iter().filter(|p| p.0 == 1).collect();
    assert_eq!(video.len(), 150);
    assert_eq!(
        audio.len(),
        frames.iter().filter(|f| f.kind == MediaKind::Audio).count()
    );
    for (n, p) in video.iter().enumerate() {
        assert_eq!(p.1, n as i64 * 3600, "video pts");
        assert_eq!(p.2, n % 25 == 0, "keyframe flag of frame {n}");
    }
    for (n, p) in audio.iter().enumerate() {
        // 1024 samples each, give or take the 90 kHz rounding of the publisher.
        assert!(
            (p.1 - n as i64 * 1024).abs() <= 1,
            "audio pts {} of {n}",
            p.1
        );
    }
}

#[test]
fn ts_segments_are_whole_packets_that_ffmpeg_reads_through() {
    let frames = stream(5);
    let out = fragment(
        FragmenterConfig {
            container: Container::Ts,
            rules: CutRules::at_start_points(180_000),
            origin: Origin::At(0),
            late_tracks_join: false,
        },
        &frames,
    );
    let pieces: Vec<&Bytes> = out
        .iter()
        .filter_map(|o| match o {
            Output::Piece { bytes, .. } => Some(bytes),
            _ => None,
        })
        .collect();
    assert_eq!(pieces.len(), 3, "2 s, 2 s and the last 1 s");
    for p in &pieces {
        assert!(p.len() % 188 == 0 && p.chunks(188).all(|c| c[0] == 0x47));
        // Each segment starts with the PAT: it decodes on its own.
        assert_eq!(u16::from_be_bytes([p[1] & 0x1f, p[2]]), 0);
    }

    if !ffprobe_present() {
        return;
    }
    let whole: Vec<u8> = pieces.iter().flat_map(|p| p.iter().copied()).collect();
    let (streams, packets) = packets("fragment.ts", &whole);
    assert!(streams.contains("h264"), "{streams}");
    assert!(streams.contains("aac"), "{streams}");
    let video: Vec<_> = packets.iter().filter(|p| p.0 == 0).collect();
    assert_eq!(video.len(), 125);
    for (n, p) in video.iter().enumerate() {
        // The stream's own times, behind MPEG-TS's 1.4 s offset.
        assert_eq!(p.1, 126_000 + n as i64 * 3600, "video pts");
        assert_eq!(p.2, n % 25 == 0, "keyframe flag of frame {n}");
    }
    assert_eq!(
        packets.iter().filter(|p| p.0 == 1).count(),
        frames.iter().filter(|f| f.kind == MediaKind::Audio).count()
    );
}
