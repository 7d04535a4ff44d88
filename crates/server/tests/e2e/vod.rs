//! Files on demand: an MP4 in the media root played by ffprobe/ffmpeg over RTMP,
//! HTTP-FLV, HLS (fMP4 and TS) and RTSP, with a seek on RTSP.

use crate::common::{have_ffmpeg, probe_video, scratch, Rtsp, TestServer};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A media root with `clip.mp4` (4 s, 320x240 25 fps H.264 with B-frames, 1 s GOP,
/// AAC) and `hevc.mp4` (the same in H.265), made once per test binary.
pub(crate) fn media_root() -> PathBuf {
    let root = scratch("vod-root");
    let lock = std::fs::File::create(root.join(".lock")).expect("lock");
    lock.lock().expect("lock");
    for (name, codec) in [("clip.mp4", "libx264"), ("hevc.mp4", "libx265")] {
        let path = root.join("sub").join(name);
        if path.exists() {
            continue;
        }
        std::fs::create_dir_all(root.join("sub")).expect("mkdir");
        let tmp = root.join(format!("{name}.tmp.mp4"));
        let mut cmd = Command::new("ffmpeg");
        cmd.args(["-hide_banner", "-loglevel", "error", "-y"])
            .args(["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25"])
            .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"])
            .args(["-t", "4", "-c:v", codec, "-preset", "ultrafast", "-g", "25"])
            .args(["-keyint_min", "25", "-pix_fmt", "yuv420p"]);
        if codec == "libx265" {
            cmd.args([
                "-x265-params",
                "log-level=error:bframes=0",
                "-tag:v",
                "hvc1",
            ]);
        } else {
            cmd.args(["-bf", "2"]);
        }
        let status = cmd
            .args(["-c:a", "aac", "-ac", "2"])
            .arg(&tmp)
            .stdin(Stdio::null())
            .status()
            .expect("ffmpeg");
        assert!(status.success(), "making {name}");
        std::fs::rename(&tmp, &path).expect("rename");
    }
    root
}

pub(crate) fn start(root: &Path) -> TestServer {
    TestServer::start(&["--media-root", root.to_str().expect("utf-8 path")])
}

/// ffprobe's stream lines and the number of video packets it read from `url`.
pub(crate) fn probe_all(url: &str) -> (String, usize) {
    let mut cmd = Command::new("ffprobe");
    cmd.args(["-v", "error", "-rw_timeout", "10000000"]);
    if url.starts_with("rtsp:") {
        cmd.args(["-rtsp_transport", "tcp"]);
    }
    let out = cmd
        .args(["-show_entries", "stream=codec_name:packet=codec_type"])
        .args(["-of", "csv=p=0", url])
        .output()
        .expect("ffprobe");
    assert!(
        out.status.success(),
        "ffprobe {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let video = text
        .lines()
        .filter(|l| l.split(',').next() == Some("video"))
        .count();
    (text, video)
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn rtmp_and_http_flv_play_a_file() {
    if !have_ffmpeg() {
        return;
    }
    let root = media_root();
    let server = start(&root);
    for url in [
        format!("rtmp://{}/vod/sub/clip.mp4", server.rtmp),
        format!("http://{}/vod/sub/clip.mp4.flv", server.http),
    ] {
        let (streams, times) = probe_video(&url, "%+1.5");
        assert!(streams.contains("h264,320,240"), "{url}: {streams}");
        assert!(streams.contains("aac"), "{url}: {streams}");
        assert!(times.len() >= 25, "{url}: {} video packets", times.len());
        assert!(times[0] < 0.2, "{url} starts at {}", times[0]);
    }
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn hls_plays_a_whole_file_in_both_variants() {
    if !have_ffmpeg() {
        return;
    }
    let root = media_root();
    let server = start(&root);
    for url in [
        format!("http://{}/vod/sub/clip.mp4/index.m3u8", server.http),
        format!("http://{}/vod/sub/clip.mp4.m3u8", server.http),
        format!("http://{}/vod/sub/hevc.mp4/index.m3u8", server.http),
    ] {
        let (streams, video) = probe_all(&url);
        let codec = if url.contains("hevc") { "hevc" } else { "h264" };
        assert!(streams.contains(codec), "{url}: {streams}");
        assert!(streams.contains("aac"), "{url}: {streams}");
        assert_eq!(video, 100, "{url}: every frame of the 4 s file");
    }
    let playlist = http_get(&format!(
        "http://{}/vod/sub/clip.mp4/index.m3u8",
        server.http
    ));
    assert!(playlist.contains("#EXT-X-PLAYLIST-TYPE:VOD"), "{playlist}");
    assert!(playlist.contains("#EXT-X-ENDLIST"), "{playlist}");
    // 1 s GOPs cut at 2 s: two segments, the last to the end of the file.
    assert_eq!(playlist.matches("#EXTINF:").count(), 2, "{playlist}");
    assert!(playlist.contains("#EXTINF:2.000,"), "{playlist}");
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn rtsp_plays_and_seeks_a_file() {
    if !have_ffmpeg() {
        return;
    }
    let root = media_root();
    let server = start(&root);
    let rtsp = server.rtsp.expect("rtsp on");
    for (name, codec) in [("clip.mp4", "h264,320,240"), ("hevc.mp4", "hevc,320,240")] {
        let url = format!("rtsp://{rtsp}/vod/sub/{name}");
        let (streams, times) = probe_video(&url, "%+1.5");
        assert!(streams.contains(codec), "{url}: {streams}");
        assert!(streams.contains("aac"), "{url}: {streams}");
        assert!(times.len() >= 25, "{url}: {} video packets", times.len());
    }
    // A seek: PLAY with Range npt=2- starts at the keyframe at 2 s.
    let url = format!("rtsp://{rtsp}/vod/sub/clip.mp4");
    let (_, times) = probe_video(&url, "2%+1");
    assert!(!times.is_empty(), "no packets after the seek");
    assert!(
        (1.9..2.5).contains(&times[0]),
        "first packet after seeking to 2 s at {}",
        times[0]
    );
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn missing_files_and_ways_out_are_not_found() {
    if !have_ffmpeg() {
        return;
    }
    let root = media_root();
    let server = start(&root);
    for path in [
        "/vod/sub/nope.mp4/index.m3u8",
        "/vod/../vod-root/sub/clip.mp4/index.m3u8",
        "/vod/sub/clip.mp4/ffff-0.m4s",
        "/vod/sub/clip.mp4.flv/x",
    ] {
        let status = http_status(&format!("http://{}{path}", server.http));
        assert!(status == 404 || status == 400, "{path}: {status}");
    }
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-rtsp_transport", "tcp"])
        .arg(format!(
            "rtsp://{}/vod/sub/nope.mp4",
            server.rtsp.expect("rtsp")
        ))
        .output()
        .expect("ffprobe");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("404"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn http_get(url: &str) -> String {
    let out = Command::new("curl")
        .args(["-sf", url])
        .output()
        .expect("curl");
    assert!(out.status.success(), "GET {url}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn http_status(url: &str) -> u16 {
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--path-as-is",
            url,
        ])
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

/// The start of a `Range: npt=S-E` header, in seconds.
fn npt_start(resp: &str) -> f64 {
    let line = resp
        .lines()
        .find_map(|l| l.strip_prefix("Range:"))
        .unwrap_or_else(|| panic!("no Range in {resp}"));
    line.trim()
        .trim_start_matches("npt=")
        .split('-')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad Range in {resp}"))
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn rtsp_pause_resumes_where_it_stopped_and_range_seeks() {
    if !have_ffmpeg() {
        return;
    }
    let root = media_root();
    let server = start(&root);
    let addr = server.rtsp.expect("rtsp");
    let url = format!("rtsp://{addr}/vod/sub/clip.mp4");
    let mut c = Rtsp::connect(addr);
    let describe = c.request("DESCRIBE", &url, &["Accept: application/sdp"]);
    assert!(describe.starts_with("RTSP/1.0 200"), "{describe}");
    assert!(describe.contains("a=range:npt=0-4"), "{describe}");
    let setup = c.request(
        "SETUP",
        &format!("{url}/trackID=0"),
        &["Transport: RTP/AVP/TCP;unicast;interleaved=0-1"],
    );
    assert!(setup.starts_with("RTSP/1.0 200"), "{setup}");
    let play = c.request("PLAY", &url, &["Range: npt=1-"]);
    assert!(play.starts_with("RTSP/1.0 200"), "{play}");
    assert!(play.contains("RTP-Info:"), "{play}");
    assert!((npt_start(&play) - 1.0).abs() < 0.05, "{play}");
    c.read_for(std::time::Duration::from_millis(1500));
    assert!(c.frames > 10, "{} packets while playing", c.frames);
    let pause = c.request("PAUSE", &url, &[]);
    assert!(pause.starts_with("RTSP/1.0 200"), "{pause}");
    // Resumes near where it paused: the keyframe at or before it.
    let resume = c.request("PLAY", &url, &[]);
    assert!(resume.starts_with("RTSP/1.0 200"), "{resume}");
    let at = npt_start(&resume);
    assert!((1.0..=2.6).contains(&at), "resumed at {at}: {resume}");
    // A seek while playing: the PLAY answer comes with the new position.
    let seek = c.request("PLAY", &url, &["Range: npt=3-"]);
    assert!(seek.starts_with("RTSP/1.0 200"), "{seek}");
    assert!((npt_start(&seek) - 3.0).abs() < 0.05, "{seek}");
    let teardown = c.request("TEARDOWN", &url, &[]);
    assert!(teardown.starts_with("RTSP/1.0 200"), "{teardown}");
}
