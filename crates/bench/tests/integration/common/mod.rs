//! Shared by the end-to-end tests of `sluice-bench`: a synthetic FLV clip, the real
//! binary run as a child process, and its JSON report.
#![allow(dead_code)]

use bytes::BytesMut;
use serde_json::Value;
use sluice_media::codec::{AacConfig, AvcConfig, HevcConfig};
use sluice_media::flv::{self, TAG_AUDIO, TAG_VIDEO};
use sluice_media::{Track, TrackConfig};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub fn avc_track() -> Track {
    let sps =
        bytes::Bytes::from_static(&[0x67, 0x42, 0xc0, 0x1e, 0xd9, 0x00, 0xa0, 0x47, 0xfe, 0xc8]);
    let pps = bytes::Bytes::from_static(&[0x68, 0xce, 0x3c, 0x80]);
    Track::new(TrackConfig::H264(
        AvcConfig::from_parameter_sets(&[sps], &[pps]).expect("avcC"),
    ))
}

/// x265's parameter sets of a 1080p Main stream.
const HEVC_VPS: &[u8] = &[
    0x40, 0x01, 0x0c, 0x01, 0xff, 0xff, 0x01, 0x60, 0x00, 0x00, 0x03, 0x00, 0x90, 0x00, 0x00, 0x03,
    0x00, 0x00, 0x03, 0x00, 0x78, 0x95, 0x94, 0x09,
];
const HEVC_SPS: &[u8] = &[
    0x42, 0x01, 0x01, 0x01, 0x60, 0x00, 0x00, 0x03, 0x00, 0x90, 0x00, 0x00, 0x03, 0x00, 0x00, 0x03,
    0x00, 0x78, 0xa0, 0x03, 0xc0, 0x80, 0x11, 0x07, 0xcb, 0x96, 0x56, 0x54, 0xa4, 0xc2, 0xf0, 0x16,
    0x80, 0x80, 0x00, 0x00, 0x03, 0x00, 0x80, 0x00, 0x00, 0x0c, 0x84,
];
const HEVC_PPS: &[u8] = &[0x44, 0x01, 0xc0, 0x73, 0xc1, 0x89];

pub fn hevc_track() -> Track {
    let b = bytes::Bytes::from_static;
    Track::new(TrackConfig::H265(
        HevcConfig::from_parameter_sets(&[b(HEVC_VPS)], &[b(HEVC_SPS)], &[b(HEVC_PPS)])
            .expect("hvcC"),
    ))
}

/// A 2 s FLV clip: 25 fps H.264 (a keyframe each second, 6 kB frames: several RTP
/// packets each) and AAC at 48 kHz.
pub fn write_clip(path: &Path) {
    write_clip_of(path, &avc_track(), 6000);
}

/// A 2 s FLV clip of `video` (H.264 or H.265; a keyframe each second, frames of
/// `frame_len` bytes) and AAC at 48 kHz.
pub fn write_clip_of(path: &Path, video: &Track, frame_len: u32) {
    let hevc = matches!(video.config, TrackConfig::H265(_));
    let audio = Track::new(TrackConfig::Aac(
        AacConfig::parse(bytes::Bytes::from_static(&[0x11, 0x90])).expect("asc"),
    ));
    let mut out = BytesMut::new();
    flv::write_file_header(&mut out, true, true);
    let mut body = BytesMut::new();
    let tag = |out: &mut BytesMut, ts: u32, tag_type: u8, body: &[u8]| {
        flv::write_tag(out, tag_type, ts, body).expect("tag");
    };
    flv::write_video_config(&mut body, video).expect("video config");
    tag(&mut out, 0, TAG_VIDEO, &body.split());
    assert!(flv::write_audio_config(&mut body, &audio).expect("audio config"));
    tag(&mut out, 0, TAG_AUDIO, &body.split());
    let mut audio_ts = 0.0f64;
    for n in 0..50u32 {
        let ts = n * 40;
        while audio_ts <= f64::from(ts) {
            flv::audio_frame_header(&mut body, &audio).expect("audio header");
            body.extend_from_slice(&[0x21, 0x10, 0x04, 0x60, 0x8c, 0x1c]);
            tag(&mut out, audio_ts as u32, TAG_AUDIO, &body.split());
            audio_ts += 1024.0 * 1000.0 / 48000.0;
        }
        let key = n.is_multiple_of(25);
        flv::video_frame_header(&mut body, video, key, 0).expect("video header");
        body.extend_from_slice(&frame_len.to_be_bytes());
        // IDR and non-IDR slices: H.264 types 5 and 1, H.265 IDR_W_RADL and TRAIL_R.
        let nal_header: &[u8] = match (hevc, key) {
            (false, true) => &[0x65],
            (false, false) => &[0x41],
            (true, true) => &[19 << 1, 1],
            (true, false) => &[1 << 1, 1],
        };
        body.extend_from_slice(nal_header);
        body.resize(
            body.len() + frame_len as usize - nal_header.len(),
            (n % 251) as u8,
        );
        tag(&mut out, ts, TAG_VIDEO, &body.split());
    }
    std::fs::write(path, &out).expect("write clip");
}

pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-bench-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

pub fn bench(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_sluice-bench"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sluice-bench")
}

/// Waits for a `sluice-bench play` and returns its JSON report.
pub fn report(child: Child, json: &Path) -> Value {
    let out = child.wait_with_output().expect("sluice-bench ran");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "sluice-bench failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(json).expect("JSON report")).expect("JSON")
}

pub fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}
