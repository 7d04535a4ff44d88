//! Playback of recordings by time range (`/live/cam@FROM..TO`): ffmpeg publishes twice
//! over RTMP with a gap between, the recorder rotates files every 2 s, then ffprobe and
//! ffmpeg read the range's HLS playlists (fMP4 and TS) and its MP4 download: the start
//! at or before FROM, a discontinuity at the gap, the frames of the range decoded; a
//! range with nothing recorded is a 404, a malformed one a 400 that says why; with read
//! authorization, HLS viewers show credentials at the playlist and its cookie after.

use crate::common::{
    have_ffmpeg, http_request, probe_video, publish_test_pattern, scratch, set_cookie, wait_for,
    TestServer,
};
use sha2::Digest;
use sluice_archive::time::{format_rfc3339, parse as parse_time};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn api(server: &TestServer, path: &str) -> (u16, serde_json::Value) {
    let (status, _, body) = http_request(server.http, "GET", path, "");
    let value = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    (status, value)
}

/// Video packets and the stream's duration as ffprobe reads `input`.
fn video_packets(input: &str) -> (usize, Vec<f64>) {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v:0", "-show_entries"])
        .args(["packet=pts_time", "-of", "csv=p=0"])
        .arg(input)
        .output()
        .expect("ffprobe");
    assert!(
        out.status.success(),
        "ffprobe {input}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let times: Vec<f64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().trim_end_matches(',').parse().ok())
        .collect();
    (times.len(), times)
}

/// Frames ffmpeg decodes from `input`, every one kept (no frame-rate conversion
/// duplicating frames across the gap).
fn decoded_frames(input: &str) -> usize {
    let out = Command::new("ffmpeg")
        .args(["-hide_banner", "-v", "error", "-i", input])
        .args([
            "-map",
            "0:v:0",
            "-fps_mode",
            "passthrough",
            "-f",
            "framemd5",
            "-",
        ])
        .output()
        .expect("ffmpeg");
    assert!(
        out.status.success(),
        "ffmpeg {input}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .count()
}

/// `(date time ms, seconds of media after it, discontinuity before it)` of each part
/// of a range playlist (the segments after each `EXT-X-PROGRAM-DATE-TIME`).
fn parts(playlist: &str) -> Vec<(i64, f64, bool)> {
    let mut out: Vec<(i64, f64, bool)> = Vec::new();
    let mut discontinuity = false;
    for line in playlist.lines() {
        if line == "#EXT-X-DISCONTINUITY" {
            discontinuity = true;
        } else if let Some(t) = line.strip_prefix("#EXT-X-PROGRAM-DATE-TIME:") {
            out.push((parse_time(t).expect("date time"), 0.0, discontinuity));
            discontinuity = false;
        } else if let Some(d) = line.strip_prefix("#EXTINF:") {
            let secs: f64 = d.trim_end_matches(',').parse().expect("duration");
            if let Some(last) = out.last_mut() {
                last.1 += secs;
            }
        }
    }
    out
}

/// A server that recorded `live/cam` in two runs with a gap between.
pub(crate) struct Recorded {
    pub server: TestServer,
    /// Its media root (the recordings are in it).
    pub root: PathBuf,
    /// The UTC ms spans of the two runs.
    pub first: (i64, i64),
    pub second: (i64, i64),
}

/// Starts a server (with `extra` flags) in a fresh media root `name` and records
/// `live/cam` there: ffmpeg publishes twice over RTMP (5 s, then 4 s, 25 fps with a
/// keyframe a second) with a gap of about 3 s between, and the recorder rotates files
/// every 2 s; returns once the files are complete.
pub(crate) fn record_two_runs(name: &str, extra: &[&str]) -> Recorded {
    let root: PathBuf = scratch(name);
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("media root");
    let mut args = vec![
        "--media-root",
        root.to_str().expect("utf-8"),
        "--record",
        "live/*",
        "--workers",
        "2",
        "--publish-grace-ms",
        "300",
        "--record-rotate-s",
        "2",
        "--record-fragment-ms",
        "500",
    ];
    args.extend_from_slice(extra);
    let server = TestServer::start(&args);
    let url = format!("rtmp://{}/live/cam", server.rtmp);
    for (n, seconds) in [5, 4].into_iter().enumerate() {
        if n == 1 {
            std::thread::sleep(Duration::from_millis(3000));
        }
        let mut p = publish_test_pattern(&url, "flv", "libx264", seconds);
        assert!(p.0.wait().expect("ffmpeg").success());
    }
    let mut listing = serde_json::Value::Null;
    assert!(
        wait_for(Duration::from_secs(10), || {
            let (status, v) = api(&server, "/api/v1/recordings/live/cam");
            listing = v;
            let files = listing["files"].as_array().map_or(0, |f| f.len());
            status == 200
                && files >= 4
                && listing["files"]
                    .as_array()
                    .is_some_and(|f| f.iter().all(|f| f["complete"] == true))
        }),
        "rotated, complete files: {listing}"
    );
    let spans = listing["spans"].as_array().expect("spans").clone();
    assert_eq!(spans.len(), 2, "two runs with a gap: {listing}");
    let ms = |v: &serde_json::Value, k: &str| v[k].as_i64().expect(k);
    let first = (ms(&spans[0], "start_ms"), ms(&spans[0], "end_ms"));
    let second = (ms(&spans[1], "start_ms"), ms(&spans[1], "end_ms"));
    assert!(second.0 - first.1 >= 1500, "a gap: {listing}");
    Recorded {
        server,
        root,
        first,
        second,
    }
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn a_range_plays_across_files_and_gaps_over_hls_and_as_one_mp4() {
    if !have_ffmpeg() {
        return;
    }
    let Recorded {
        server,
        root,
        first: (first_start, first_end),
        second: (second_start, second_end),
    } = record_two_runs("playback-range", &[]);

    // From 1.3 s into the first run (not at a keyframe) to 1 s before the end.
    let from = first_start + 1300;
    let to = second_end - 1000;
    let range = format!("{}..{}", format_rfc3339(from), format_rfc3339(to));
    let (status, _, body) = http_request(
        server.http,
        "GET",
        &format!("/live/cam@{range}/index.m3u8"),
        "",
    );
    let playlist = String::from_utf8_lossy(&body).into_owned();
    assert_eq!(status, 200, "{playlist}");
    assert!(playlist.contains("#EXT-X-ENDLIST"), "{playlist}");
    let found = parts(&playlist);
    assert!(found.len() >= 3, "several files: {playlist}");
    assert!(found[0].0 <= from, "starts at or before FROM: {playlist}");
    assert!(
        found[0].0 > from - 1500,
        "at the keyframe before FROM: {playlist}"
    );
    assert!(
        found.iter().skip(1).all(|p| p.2),
        "a discontinuity per file"
    );
    // The gap: a part that starts well after the one before it ends.
    let gap_at = found.windows(2).position(|w| {
        let end = w[0].0 + (w[0].1 * 1000.0) as i64;
        w[1].2 && w[1].0 - end >= 1500
    });
    assert!(gap_at.is_some(), "a discontinuity at the gap: {playlist}");
    let listed_secs: f64 = found.iter().map(|p| p.1).sum();
    let wanted = ((first_end - from) + (to - second_start)) as f64 / 1000.0;
    assert!(
        listed_secs >= wanted - 0.5 && listed_secs <= wanted + 2.5,
        "{listed_secs} s listed for {wanted} s wanted: {playlist}"
    );

    // ffmpeg plays both variants; the frames are the listed seconds at 25 fps.
    let expected = (listed_secs * 25.0) as usize;
    let near = |n: usize| n + 15 >= expected && n <= expected + 15;
    let ms_range = format!("{from}..{to}");
    for path in [
        format!("/live/cam@{ms_range}/index.m3u8"),
        format!("/live/cam@{ms_range}.m3u8"),
    ] {
        let input = format!("http://{}{path}", server.http);
        let (packets, _) = video_packets(&input);
        assert!(
            near(packets),
            "{path}: {packets} packets, {expected} expected"
        );
        let frames = decoded_frames(&input);
        assert!(near(frames), "{path}: {frames} frames, {expected} expected");
    }

    // The download: one fMP4 that decodes, named for the stream and its start.
    let (status, head, mp4) =
        http_request(server.http, "GET", &format!("/live/cam@{range}.mp4"), "");
    assert_eq!(status, 200, "{head}");
    assert!(
        head.contains("Content-Disposition: attachment; filename=\"cam-"),
        "{head}"
    );
    assert!(head.contains("Accept-Ranges: bytes"), "{head}");
    let file: PathBuf = root.join("clip.mp4");
    std::fs::write(&file, &mp4).expect("clip");
    let input = file.to_str().expect("utf-8").to_string();
    let (packets, times) = video_packets(&input);
    assert!(
        near(packets),
        "download: {packets} packets, {expected} expected"
    );
    assert!(near(decoded_frames(&input)), "download decodes");
    // Gaps closed up: timestamps run on without a jump.
    let jump = times.windows(2).map(|w| w[1] - w[0]).fold(0.0f64, f64::max);
    assert!(jump < 0.5, "largest step {jump} s");
    // A byte range of it.
    let (status, head, part) = http_request(
        server.http,
        "GET",
        &format!("/live/cam@{range}.mp4"),
        "Range: bytes=100-199\r\n",
    );
    assert_eq!(status, 206, "{head}");
    assert_eq!(part, mp4[100..200]);
    assert!(
        head.contains(&format!("Content-Range: bytes 100-199/{}", mp4.len())),
        "{head}"
    );

    // Relative and open-ended: everything up to now.
    let (status, _, body) = http_request(server.http, "GET", "/live/cam@-10m../index.m3u8", "");
    assert_eq!(status, 200);
    assert!(parts(&String::from_utf8_lossy(&body)).len() >= 4);

    // Nothing recorded inside the gap: 404.
    let gap = format!(
        "{}..{}",
        format_rfc3339(first_end + 300),
        format_rfc3339(second_start - 300)
    );
    for path in [
        format!("/live/cam@{gap}/index.m3u8"),
        format!("/live/cam@{gap}.mp4"),
    ] {
        assert_eq!(http_request(server.http, "GET", &path, "").0, 404, "{path}");
    }
    assert_eq!(
        http_request(server.http, "GET", &format!("/live/nope@{range}.m3u8"), "").0,
        404
    );
    // Malformed: 400, saying what is wrong.
    for (path, says) in [
        ("/live/cam@yesterday..now/index.m3u8", "from:"),
        ("/live/cam@2026-11-27T10:00:00Z.m3u8", "FROM..TO"),
        ("/live/cam@-5m..-10m.mp4", "empty"),
    ] {
        let (status, _, body) = http_request(server.http, "GET", path, "");
        let body = String::from_utf8_lossy(&body);
        assert_eq!(status, 400, "{path}: {body}");
        assert!(body.contains(says), "{path}: {body}");
    }

    // With read authorization: HLS as live HLS (credentials at the playlist, then its
    // cookie), the download with credentials.
    drop(server);
    let config = root.join("sluice.toml");
    let hash: String = sha2::Sha256::digest(b"watch")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    std::fs::write(
        &config,
        format!(
            "[auth]\nread = true\n\n[[users]]\nname = \"viewer\"\npassword = \"sha256:{hash}\"\nread = [\"live/*\"]\n"
        ),
    )
    .expect("config");
    let server = TestServer::start(&[
        "--media-root",
        root.to_str().expect("utf-8"),
        "--config",
        config.to_str().expect("utf-8"),
        "--record",
        "live/*",
    ]);
    let playlist_path = format!("/live/cam@{ms_range}/index.m3u8");
    let mut status = 0;
    assert!(
        wait_for(Duration::from_secs(10), || {
            status = http_request(server.http, "GET", &playlist_path, "").0;
            status == 401
        }),
        "no credentials: {status}"
    );
    // The index loads at start.
    let (mut status, mut head, mut body) = (0, String::new(), Vec::new());
    assert!(
        wait_for(Duration::from_secs(10), || {
            (status, head, body) = http_request(
                server.http,
                "GET",
                &format!("{playlist_path}?user=viewer&pass=watch"),
                "",
            );
            status == 200
        }),
        "{head}"
    );
    let cookie = set_cookie(&head).expect("a viewer cookie");
    let segment = String::from_utf8_lossy(&body)
        .lines()
        .find(|l| l.ends_with(".m4s"))
        .expect("a segment")
        .to_string();
    let segment_path = format!("/live/cam@{ms_range}/{segment}");
    assert_eq!(http_request(server.http, "GET", &segment_path, "").0, 401);
    let (status, head, _) = http_request(
        server.http,
        "GET",
        &segment_path,
        &format!("Cookie: {cookie}\r\n"),
    );
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("Cache-Control: private"), "{head}");
    let download = format!("/live/cam@{range}.mp4");
    assert_eq!(http_request(server.http, "GET", &download, "").0, 401);
    let (status, _, again) = http_request(
        server.http,
        "GET",
        &format!("{download}?user=viewer&pass=watch"),
        "",
    );
    assert_eq!((status, again.len()), (200, mp4.len()));
    // Players of the range over HTTP-FLV and RTMP: the stream's read permission too.
    let flv = format!("/live/cam@{ms_range}.flv");
    assert_eq!(http_request(server.http, "GET", &flv, "").0, 401);
    let rtmp = format!("rtmp://{}/live/cam@{ms_range}", server.rtmp);
    let refused = Command::new("ffprobe")
        .args(["-v", "error", "-rw_timeout", "5000000", &rtmp])
        .output()
        .expect("ffprobe");
    assert!(!refused.status.success(), "RTMP without credentials");
    let (streams, times) = probe_video(&format!("{rtmp}?user=viewer&pass=watch"), "%+1");
    assert!(streams.contains("h264"), "{streams}");
    assert!(times.len() >= 20, "{} frames with credentials", times.len());
    drop(server);
    let _ = std::fs::remove_dir_all(Path::new(&root));
}
