//! The MP4 demuxer on files ffmpeg writes, checked packet by packet against ffprobe:
//! progressive with B-frames (`ctts`, edit lists), faststart, H.265 (`hvc1`), Opus
//! (`dOps`), fragmented (`frag_keyframe+empty_moov`) and a fragmented file cut short.
//!
//! The files are made in the test with ffmpeg (3 s of 320x240 at 25 fps); without ffmpeg
//! and ffprobe the test is skipped, unless `SLUICE_REQUIRE_TOOLS=1`. The clips of
//! `scripts/make-test-media.sh` are checked too (see `crate::common::test_media`).

use crate::common::{ffmpeg_present, ffprobe, test_media};
use bytes::Bytes;
use sluice_media::codec::{h264_nal_type, h265_is_keyframe_nal, h265_nal_type, nal_units};
use sluice_media::mp4::{parse_movie, Movie, Position};
use sluice_media::{MediaKind, TrackConfig, CLOCK_HZ};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Makes `name` in the temp dir from 3 s of test picture and tone with `args` (codecs,
/// flags); `None` (skipped) when this ffmpeg lacks an encoder.
fn make(name: &str, args: &[&str]) -> Option<PathBuf> {
    let path = std::env::temp_dir().join(format!("sluice-{}-{name}", std::process::id()));
    let out = Command::new("ffmpeg")
        .args(["-hide_banner", "-loglevel", "error", "-y"])
        .args(["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25"])
        .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"])
        .args(["-t", "3", "-pix_fmt", "yuv420p"])
        .args(args)
        .arg(&path)
        .output()
        .expect("ffmpeg runs");
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            std::env::var("SLUICE_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "ffmpeg failed for {name}: {err}"
        );
        eprintln!("ffmpeg could not make {name} ({err}); skipped");
        return None;
    }
    Some(path)
}

/// One packet as ffprobe lists it.
#[derive(Debug)]
struct Packet {
    pts: Option<i64>,
    dts: Option<i64>,
    size: u32,
    key: bool,
}

/// The packets of stream `kind` ("v" or "a") in decode order, and the stream's
/// timescale (its time base is 1/timescale for MP4).
fn probe(path: &Path, kind: &str) -> (Vec<Packet>, u32) {
    let tb = ffprobe(
        path,
        &["-select_streams", kind, "-show_entries", "stream=time_base"],
    );
    let timescale = tb
        .trim()
        .strip_prefix("1/")
        .and_then(|d| d.parse().ok())
        .expect("time base 1/N");
    let csv = ffprobe(
        path,
        &[
            "-select_streams",
            kind,
            "-show_entries",
            "packet=pts,dts,size,flags",
        ],
    );
    let packets = csv
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            // pts, dts, size, flags (ffprobe's order), maybe a trailing empty field.
            let f: Vec<&str> = l.split(',').collect();
            Packet {
                pts: f[0].parse().ok(),
                dts: f[1].parse().ok(),
                size: f[2].parse().expect("size"),
                key: f[3].contains('K'),
            }
        })
        .collect();
    (packets, timescale)
}

fn to_clock(t: i64, timescale: u32) -> i64 {
    (i128::from(t) * i128::from(CLOCK_HZ)).div_euclid(i128::from(timescale)) as i64
}

/// Checks every sample of track `t` against ffprobe's packets of the same stream.
fn check_track(movie: &Movie, t: usize, path: &Path) {
    let track = &movie.tracks[t];
    let kind = match track.track.kind() {
        MediaKind::Video => "v",
        MediaKind::Audio => "a",
    };
    let (packets, timescale) = probe(path, kind);
    assert_eq!(track.timescale, timescale);
    assert_eq!(track.samples.len(), packets.len(), "{kind} sample count");
    for (i, (s, p)) in track.samples.iter().zip(&packets).enumerate() {
        assert_eq!(s.size, p.size, "{kind} sample {i} size");
        if kind == "v" {
            assert_eq!(s.keyframe, p.key, "{kind} sample {i} keyframe");
        } else {
            assert!(s.keyframe);
        }
        if let Some(dts) = p.dts {
            assert_eq!(s.dts, to_clock(dts, timescale), "{kind} sample {i} dts");
        }
        if let Some(pts) = p.pts {
            let ours = s.dts + i64::from(s.cts);
            assert_eq!(ours, to_clock(pts, timescale), "{kind} sample {i} pts");
        }
    }
}

/// Checks payloads: video is 4-byte length-prefixed NAL units covering the whole payload,
/// keyframes hold an IDR/IRAP picture; every sample is read in interleaved order.
fn check_frames(movie: &Movie, file: &Bytes) {
    let mut pos = Position::default();
    let mut last_dts = i64::MIN;
    let mut n = 0;
    while let Some((t, s)) = movie.next(&mut pos) {
        let f = movie.frame(file, t, s).expect("frame");
        assert!(f.dts >= last_dts, "interleaved in decode order");
        last_dts = f.dts;
        n += 1;
        let hevc = match &movie.tracks[t].track.config {
            TrackConfig::H264(_) => false,
            TrackConfig::H265(_) => true,
            _ => continue,
        };
        let units: Vec<Bytes> = nal_units(&f.payload, 4)
            .collect::<Result<_, _>>()
            .expect("well-formed NAL units");
        let covered: usize = units.iter().map(|u| u.len() + 4).sum();
        assert_eq!(covered, f.payload.len());
        if f.keyframe {
            let has_key = units.iter().any(|u| {
                if hevc {
                    h265_nal_type(u).is_some_and(h265_is_keyframe_nal)
                } else {
                    h264_nal_type(u) == Some(5)
                }
            });
            assert!(has_key, "keyframe {s} holds a key picture");
        }
    }
    let total: usize = movie.tracks.iter().map(|t| t.samples.len()).sum();
    assert_eq!(n, total, "next() visits every sample");
    // From 0: the first keyframe, and audio from the video's decode time on (an AAC
    // priming frame before it is left out).
    let pos = movie.seek(0);
    if let Some(v) = movie.video() {
        let first_key = movie.tracks[v].samples.iter().position(|s| s.keyframe);
        assert_eq!(pos.sample(v), first_key);
    }
}

/// Whether a track configuration is the expected codec (and picture size).
type IsCodec = fn(&TrackConfig) -> bool;

/// Parses `path`, checks both tracks against ffprobe and the payloads; returns the movie.
fn check_file(path: &Path, video: IsCodec, audio: IsCodec) -> Movie {
    let bytes = Bytes::from(std::fs::read(path).expect("read"));
    let movie = parse_movie(&bytes).expect("parses");
    assert_eq!(movie.tracks.len(), 2, "{:?}", movie.skipped);
    let (v, a) = (movie.video().expect("video"), movie.audio().expect("audio"));
    assert!(video(&movie.tracks[v].track.config));
    assert!(audio(&movie.tracks[a].track.config));
    check_track(&movie, v, path);
    check_track(&movie, a, path);
    check_frames(&movie, &bytes);
    let secs: f64 = ffprobe(path, &["-show_entries", "format=duration"])
        .trim()
        .parse()
        .expect("duration");
    let expected = (secs * f64::from(CLOCK_HZ)) as i64;
    assert!(
        (movie.duration - expected).abs() <= 3600,
        "duration {} vs ffprobe {expected}",
        movie.duration
    );
    movie
}

fn h264(c: &TrackConfig) -> bool {
    matches!(c, TrackConfig::H264(c) if (c.width, c.height) == (320, 240))
}

fn h265(c: &TrackConfig) -> bool {
    matches!(c, TrackConfig::H265(c) if (c.width, c.height) == (320, 240))
}

fn aac(c: &TrackConfig) -> bool {
    matches!(c, TrackConfig::Aac(c) if c.sample_rate == 48_000)
}

fn opus(c: &TrackConfig) -> bool {
    matches!(c, TrackConfig::Opus(c) if c.pre_skip == 312)
}

const X264_BFRAMES: &[&str] = &["-c:v", "libx264", "-bf", "2", "-g", "25"];

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn ffmpeg_h264_bframes_aac() {
    if !ffmpeg_present() {
        return;
    }
    let Some(path) = make("bframes.mp4", &[X264_BFRAMES, &["-c:a", "aac"]].concat()) else {
        return;
    };
    let m = check_file(&path, h264, aac);
    assert!(!m.fragmented);
    let v = &m.tracks[0].samples;
    assert_eq!(v.len(), 75);
    assert!(
        v.iter().any(|s| s.cts != 0),
        "B-frames give composition offsets"
    );
    // The edit list makes the first picture present at 0.
    assert_eq!(v.iter().map(|s| s.dts + i64::from(s.cts)).min(), Some(0));
    assert_eq!(v.iter().filter(|s| s.keyframe).count(), 3);
    let _ = std::fs::remove_file(path);
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn ffmpeg_faststart() {
    if !ffmpeg_present() {
        return;
    }
    let args = [X264_BFRAMES, &["-c:a", "aac", "-movflags", "+faststart"]].concat();
    let Some(path) = make("faststart.mp4", &args) else {
        return;
    };
    let bytes = std::fs::read(&path).expect("read");
    let moov = bytes.windows(4).position(|w| w == b"moov");
    let mdat = bytes.windows(4).position(|w| w == b"mdat");
    assert!(moov < mdat, "moov first");
    check_file(&path, h264, aac);
    let _ = std::fs::remove_file(path);
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn ffmpeg_h265_hvc1() {
    if !ffmpeg_present() {
        return;
    }
    let args = [
        "-c:v",
        "libx265",
        "-x265-params",
        "keyint=25:bframes=2:log-level=error",
        "-tag:v",
        "hvc1",
        "-c:a",
        "aac",
    ];
    let Some(path) = make("hevc.mp4", &args) else {
        return;
    };
    check_file(&path, h265, aac);
    let _ = std::fs::remove_file(path);
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn ffmpeg_opus() {
    if !ffmpeg_present() {
        return;
    }
    let args = [X264_BFRAMES, &["-c:a", "libopus"]].concat();
    let Some(path) = make("opus.mp4", &args) else {
        return;
    };
    let m = check_file(&path, h264, opus);
    // The edit list skips the pre-skip: the first packet decodes 312 samples early.
    assert_eq!(m.tracks[1].samples[0].dts, -312 * 90_000 / 48_000);
    let _ = std::fs::remove_file(path);
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn ffmpeg_fragmented_and_cut() {
    if !ffmpeg_present() {
        return;
    }
    let args = [
        X264_BFRAMES,
        &["-c:a", "aac", "-movflags", "frag_keyframe+empty_moov"],
    ]
    .concat();
    let Some(path) = make("frag.mp4", &args) else {
        return;
    };
    let m = check_file(&path, h264, aac);
    assert!(m.fragmented);

    // Cut at a third, as a recorder killed mid-write leaves it: a prefix of the samples,
    // every one inside the cut file.
    let bytes = std::fs::read(&path).expect("read");
    let cut = Bytes::copy_from_slice(&bytes[..bytes.len() / 3]);
    let c = parse_movie(&cut).expect("a cut fragmented file parses");
    for (t, whole) in c.tracks.iter().zip(&m.tracks) {
        assert!(!t.samples.is_empty());
        assert!(t.samples.len() < whole.samples.len());
        assert_eq!(t.samples[..], whole.samples[..t.samples.len()]);
        assert!(t
            .samples
            .iter()
            .all(|s| s.offset + u64::from(s.size) <= cut.len() as u64));
    }
    check_frames(&c, &cut);
    let _ = std::fs::remove_file(path);
}

/// Where tools are required (CI), ffmpeg and ffprobe were found when the tests were
/// built, so none of them was compiled as ignored.
#[test]
fn required_tools_were_found() {
    crate::common::require_ffmpeg_found_at_build();
}

/// The standard clips of `scripts/make-test-media.sh`.
#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn test_media_clips() {
    if !ffmpeg_present() {
        return;
    }
    let clips: [(&str, IsCodec); 3] = [
        ("h264_aac_720p.mp4", |c| matches!(c, TrackConfig::H264(_))),
        ("h264_bframes_720p.mp4", |c| {
            matches!(c, TrackConfig::H264(_))
        }),
        ("h265_aac_1080p.mp4", |c| matches!(c, TrackConfig::H265(_))),
    ];
    let dir = test_media(&clips.map(|(name, _)| name));
    for (name, video) in clips {
        check_file(&dir.join(name), video, aac);
    }
}
