//! Real clients: ffmpeg publishes over RTMP; ffprobe and ffmpeg play over RTMP and
//! HTTP-FLV.

mod common;

use common::{have_ffmpeg, TestServer};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

struct Publisher(Child);

impl Drop for Publisher {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// ffmpeg encoding a test pattern and a tone in real time, published over RTMP.
fn ffmpeg_publish(url: &str, seconds: u32) -> Publisher {
    let child = Command::new("ffmpeg")
        .args(["-hide_banner", "-loglevel", "error", "-re"])
        .args(["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25"])
        .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"])
        .args(["-t", &seconds.to_string()])
        .args([
            "-c:v",
            "libx264",
            "-preset",
            "ultrafast",
            "-tune",
            "zerolatency",
            "-g",
            "25",
            "-pix_fmt",
            "yuv420p",
        ])
        .args(["-c:a", "aac", "-b:a", "64k", "-f", "flv", url])
        .stdin(Stdio::null())
        .spawn()
        .expect("start ffmpeg");
    Publisher(child)
}

fn run_with_timeout(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let started = Instant::now();
    while started.elapsed() < limit {
        if let Ok(Some(_)) = child.try_wait() {
            return child.wait_with_output().expect("output");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let out = child.wait_with_output().expect("output");
    panic!(
        "{cmd:?} did not finish in {limit:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn ffprobe_streams(url: &str) -> String {
    let out = run_with_timeout(
        Command::new("ffprobe").args([
            "-v",
            "error",
            "-show_entries",
            "stream=codec_name,width,height,sample_rate",
            "-of",
            "compact",
            url,
        ]),
        Duration::from_secs(20),
    );
    assert!(
        out.status.success(),
        "ffprobe {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Decodes `seconds` of `url` and returns the number of video frames ffmpeg decoded.
fn ffmpeg_decode(url: &str, seconds: u32) -> u64 {
    let out = run_with_timeout(
        Command::new("ffmpeg").args([
            "-hide_banner",
            "-loglevel",
            "error",
            "-stats_period",
            "0.5",
            "-progress",
            "pipe:1",
            "-i",
            url,
            "-t",
            &seconds.to_string(),
            "-f",
            "null",
            "-",
        ]),
        Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "ffmpeg {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("error"),
        "decode errors from {url}: {stderr}"
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("frame="))
        .filter_map(|v| v.trim().parse().ok())
        .max()
        .unwrap_or(0)
}

#[test]
fn ffmpeg_publishes_and_ffprobe_plays_rtmp_and_http_flv() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&["--workers", "2"]);
    let _publisher = ffmpeg_publish(&format!("rtmp://{}/live/ff", server.rtmp), 20);
    // Let the first GOP arrive so the probes start from the GOP cache.
    std::thread::sleep(Duration::from_millis(1500));
    for url in [
        format!("rtmp://{}/live/ff", server.rtmp),
        format!("http://{}/live/ff.flv", server.http),
    ] {
        let streams = ffprobe_streams(&url);
        assert!(
            streams.contains("codec_name=h264|width=320|height=240"),
            "{url}: {streams}"
        );
        assert!(
            streams.contains("codec_name=aac") && streams.contains("sample_rate=48000"),
            "{url}: {streams}"
        );
        let frames = ffmpeg_decode(&url, 3);
        assert!(frames >= 60, "{url}: decoded only {frames} frames in 3 s");
    }
}
