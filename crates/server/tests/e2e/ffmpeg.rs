//! Real clients: ffmpeg publishes over RTMP; ffprobe and ffmpeg play over RTMP and
//! HTTP-FLV.

use crate::common::{have_ffmpeg, publish_test_pattern, test_media, Kill, TestServer};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// ffmpeg encoding a test pattern and a tone in real time, published over RTMP.
fn ffmpeg_publish(url: &str, seconds: u32) -> Kill {
    publish_test_pattern(url, "flv", "libx264", seconds)
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
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
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

/// ffprobe lists a stream's video and audio and nothing else, over RTMP as over
/// HTTP-FLV: no status message sent at play start becomes a data stream of ffmpeg's
/// FLV demuxer ("Unsupported codec with id 0 for input stream 0").
#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn ffprobe_lists_only_the_media_streams() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&[]);
    let _publisher = ffmpeg_publish(&format!("rtmp://{}/live/only", server.rtmp), 20);
    crate::common::wait_live(server.http, "live/only");
    for url in [
        format!("rtmp://{}/live/only", server.rtmp),
        format!("http://{}/live/only.flv", server.http),
    ] {
        let out = run_with_timeout(
            Command::new("ffprobe").args([
                "-v",
                "warning",
                "-show_entries",
                "stream=codec_type,codec_name",
                "-of",
                "csv=p=0",
                &url,
            ]),
            Duration::from_secs(20),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "ffprobe {url}: {stderr}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut streams: Vec<&str> = stdout.lines().collect();
        streams.sort_unstable();
        assert_eq!(streams, ["aac,audio", "h264,video"], "{url}: {stderr}");
        assert!(!stderr.contains("Unsupported codec"), "{url}: {stderr}");
    }
}

/// One line per packet of `url` until the stream ends: `codec_type,pts_time,flags`.
fn ffprobe_packets(url: String) -> std::thread::JoinHandle<(String, String)> {
    std::thread::spawn(move || {
        let out = run_with_timeout(
            Command::new("ffprobe").args([
                "-v",
                "error",
                "-show_entries",
                "stream=codec_name,width,height:packet=codec_type,pts_time,flags",
                "-of",
                "csv=p=0",
                &url,
            ]),
            Duration::from_secs(60),
        );
        assert!(
            out.status.success(),
            "ffprobe {url}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        (url, String::from_utf8_lossy(&out.stdout).into_owned())
    })
}

fn count_packets(path: &std::path::Path, kind: &str) -> usize {
    let out = Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-select_streams",
            kind,
            "-count_packets",
            "-show_entries",
            "stream=nb_read_packets",
            "-of",
            "csv=p=0",
        ])
        .arg(path)
        .output()
        .expect("ffprobe the clip");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("packet count")
}

/// Where tools are required (CI), every tool the end-to-end tests of this package use
/// was found when they were built, so none of them was compiled as ignored.
#[test]
fn required_tools_were_found() {
    crate::common::require_tools_found_at_build(&[
        (cfg!(have_ffmpeg), "ffmpeg/ffprobe"),
        (cfg!(have_chromium), "chromium"),
        (cfg!(have_gstreamer), "GStreamer RTSP elements"),
        (cfg!(have_curl), "curl"),
        (cfg!(have_wget), "wget"),
        (cfg!(have_webdav), "rclone and cadaver"),
    ]);
}

/// Players that wait for a stream get every frame of a test clip, published twice
/// by ffmpeg with a reconnect in between, on one continuous timeline; a player that
/// joins mid-stream starts on a keyframe.
#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn waiting_players_get_every_frame_across_a_publisher_reconnect() {
    if !have_ffmpeg() {
        return;
    }
    let media = test_media();
    let clip = media.join("h264_aac_720p.mp4");
    let video_frames = count_packets(&clip, "v");
    let server = TestServer::start(&["--play-wait-ms", "15000", "--publish-grace-ms", "1500"]);
    let waiting = [
        ffprobe_packets(format!("rtmp://{}/live/clip", server.rtmp)),
        ffprobe_packets(format!("http://{}/live/clip.flv", server.http)),
    ];
    std::thread::sleep(Duration::from_millis(500));
    let publish = || {
        let status = Command::new("ffmpeg")
            .args(["-hide_banner", "-loglevel", "error", "-re", "-i"])
            .arg(&clip)
            .args(["-c", "copy", "-f", "flv"])
            .arg(format!("rtmp://{}/live/clip", server.rtmp))
            .stdin(Stdio::null())
            .status()
            .expect("ffmpeg publish");
        assert!(status.success());
    };
    let mid = std::thread::spawn({
        let url = format!("http://{}/live/clip.flv", server.http);
        move || {
            std::thread::sleep(Duration::from_millis(3300));
            ffprobe_packets(url).join().expect("mid-stream probe")
        }
    });
    publish();
    std::thread::sleep(Duration::from_millis(300));
    publish();
    for probe in waiting {
        let (url, out) = probe.join().expect("probe");
        assert!(
            out.contains("h264,1280,720"),
            "{url}: {}",
            out.lines().next().unwrap_or("")
        );
        assert!(out.contains("aac"), "{url}");
        let video: Vec<(f64, &str)> = out
            .lines()
            .filter(|l| l.starts_with("video,"))
            .map(|l| {
                let mut f = l.split(',');
                f.next();
                (
                    f.next().and_then(|t| t.parse().ok()).unwrap_or(f64::NAN),
                    f.next().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            video.len(),
            2 * video_frames,
            "{url}: every frame of both runs"
        );
        assert!(video[0].1.starts_with('K'), "{url}: starts on a keyframe");
        for w in video.windows(2) {
            assert!(
                w[1].0 > w[0].0,
                "{url}: monotonic timestamps, {} then {}",
                w[0].0,
                w[1].0
            );
        }
        let span = video.last().map_or(0.0, |v| v.0) - video[0].0;
        assert!(
            span < 2.0 * 8.0 + 1.0,
            "{url}: one continuous timeline, spanning {span} s"
        );
    }
    let (url, out) = mid.join().expect("mid");
    let first_video = out
        .lines()
        .find(|l| l.starts_with("video,"))
        .expect("video packets");
    assert!(
        first_video.ends_with("K__") || first_video.contains(",K"),
        "{url}: joined on a keyframe: {first_video}"
    );
}
