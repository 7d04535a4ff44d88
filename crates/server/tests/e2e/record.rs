//! Recording end to end: publishers over RTMP (ffmpeg, or synthetic clips), files in
//! the media root read back by ffprobe/ffmpeg and by a small box walker: complete after
//! the publisher leaves or a graceful stop, playable up to the last fragment after
//! `kill -9`, rotated at keyframes, and only for the streams the patterns name; the
//! recordings index (`/api/v1/recordings`) lists their spans and gaps, and after
//! `kill -9` still lists the cut file up to its last complete fragment.

use crate::common::{
    avc_track, have_ffmpeg, publish_test_pattern, scratch, synthetic_clip, wait_for, TestServer,
};
use sluice_bench::publish::publish_clip;
use sluice_bench::rtmp::RtmpConn;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A fresh media root for one test.
fn media_root(name: &str) -> PathBuf {
    let dir = scratch(&format!("record-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("media root");
    dir
}

/// A server recording `live/*` into `root`, with a short grace window unless `extra`
/// sets one.
fn server(root: &Path, extra: &[&str]) -> TestServer {
    let root = root.to_str().expect("utf-8 path");
    let mut args = vec!["--media-root", root, "--record", "live/*", "--workers", "2"];
    if !extra.contains(&"--publish-grace-ms") {
        args.extend_from_slice(&["--publish-grace-ms", "300"]);
    }
    args.extend_from_slice(extra);
    TestServer::start(&args)
}

/// Every recording under `root` (not the streams' `.sluice-index`), sorted by path.
fn recordings(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if !entry.file_name().to_string_lossy().starts_with('.') {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root.join("recordings"), &mut out);
    out.sort();
    out
}

/// What ffprobe says of a file.
#[derive(Debug, Default)]
struct Probe {
    codecs: Vec<String>,
    /// The container's duration, if it states one.
    duration: Option<f64>,
    /// (pts in seconds, keyframe) of each video packet.
    video: Vec<(f64, bool)>,
    audio_packets: usize,
}

fn probe(path: &Path) -> Probe {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-show_entries"])
        .args(["stream=index,codec_name:format=duration:packet=codec_type,pts_time,flags"])
        .args(["-of", "compact"])
        .arg(path)
        .output()
        .expect("ffprobe");
    assert!(
        out.status.success(),
        "ffprobe {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut probe = Probe::default();
    // MPEG-TS lists its streams twice (in the program and on their own).
    let mut streams = std::collections::BTreeMap::new();
    for line in text.lines() {
        let field = |name: &str| {
            line.split('|')
                .find_map(|f| f.strip_prefix(&format!("{name}=")))
                .unwrap_or("")
                .to_string()
        };
        if line.starts_with("packet|") {
            match field("codec_type").as_str() {
                "video" => probe.video.push((
                    field("pts_time").parse().unwrap_or(f64::NAN),
                    field("flags").starts_with('K'),
                )),
                "audio" => probe.audio_packets += 1,
                _ => {}
            }
        } else if line.contains("codec_name=") {
            streams.insert(field("index"), field("codec_name"));
        } else if line.starts_with("format|") {
            probe.duration = field("duration").parse().ok();
        }
    }
    probe.codecs = streams.into_values().collect();
    probe
}

/// Whether ffmpeg decodes the whole file without a single error.
fn decodes_cleanly(path: &Path) -> Result<(), String> {
    let out = Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(path)
        .args(["-f", "null", "-"])
        .output()
        .expect("ffmpeg");
    let errors = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() && errors.trim().is_empty() {
        Ok(())
    } else {
        Err(format!("{}: {errors}", path.display()))
    }
}

/// Top-level boxes of an MP4 file, as (type, size); the walk stops at a box that runs
/// past the end (a fragment cut by `kill -9`).
fn top_level_boxes(bytes: &[u8]) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while let Some(head) = bytes.get(at..at + 8) {
        let size = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if size < 8 || at + size > bytes.len() {
            break;
        }
        out.push((String::from_utf8_lossy(&head[4..8]).into_owned(), size));
        at += size;
    }
    out
}

/// An ordinary fragmented MP4: `ftyp`, `moov` (with `mvex`), then `prft`/`moof`/`mdat`
/// for each fragment (the `prft` gives its wall-clock time).
fn assert_fragmented_mp4(path: &Path) {
    let bytes = std::fs::read(path).expect("read recording");
    let boxes: Vec<String> = top_level_boxes(&bytes).into_iter().map(|b| b.0).collect();
    assert!(boxes.len() >= 5, "{}: {boxes:?}", path.display());
    assert_eq!(&boxes[..2], ["ftyp", "moov"], "{}", path.display());
    for fragment in boxes[2..].chunks(3) {
        assert_eq!(
            fragment,
            ["prft", "moof", "mdat"],
            "{}: {boxes:?}",
            path.display()
        );
    }
    assert!(bytes.windows(4).any(|w| w == b"mvex"));
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn publishers_that_leave_leave_complete_recordings() {
    if !have_ffmpeg() {
        return;
    }
    let root = media_root("leave");
    let server = server(&root, &[]);
    let rtsp = server.rtsp.expect("rtsp listener");
    // The same 3 s over RTMP and over RTSP (tracks from the SDP, frames from RTP).
    let mut publishers = [
        publish_test_pattern(
            &format!("rtmp://{}/live/cam", server.rtmp),
            "flv",
            "libx264",
            3,
        ),
        publish_test_pattern(&format!("rtsp://{rtsp}/live/rtsp"), "rtsp", "libx264", 3),
    ];
    for p in &mut publishers {
        assert!(p.0.wait().expect("ffmpeg").success());
    }
    // A file is complete as soon as its publisher is gone; closed after the grace.
    assert!(wait_for(Duration::from_secs(5), || recordings(&root).len() == 2));
    std::thread::sleep(Duration::from_millis(800));
    let files = recordings(&root);
    for (path, stream) in files.iter().zip(["cam", "rtsp"]) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let dir = format!("recordings/live/{stream}");
        assert!(path.parent().unwrap().ends_with(&dir), "{path:?}");
        assert!(
            name.starts_with(&format!("{stream}-")) && name.ends_with(".mp4"),
            "{name}"
        );
        assert_fragmented_mp4(path);
        let p = probe(path);
        assert_eq!(p.codecs, ["h264", "aac"], "{path:?}: {p:?}");
        let duration = p.duration.expect("a duration");
        assert!((2.5..=3.5).contains(&duration), "{path:?}: {duration} s");
        // Every frame of 3 s at 25 fps: the last ones (read with the publisher's
        // TEARDOWN, or just before its connection closed) too.
        assert_eq!(p.video.len(), 75, "{path:?}: video packets");
        assert!(p.video[0].1, "{path:?} starts at a keyframe");
        assert!(
            p.audio_packets >= 120,
            "{path:?}: {} audio packets",
            p.audio_packets
        );
        decodes_cleanly(path).unwrap();
    }
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn kill_9_leaves_a_file_that_plays_up_to_its_last_fragment() {
    if !have_ffmpeg() {
        return;
    }
    let root = media_root("kill9");
    let mut server = server(&root, &[]);
    let _publisher = publish_test_pattern(
        &format!("rtmp://{}/live/cam", server.rtmp),
        "flv",
        "libx264",
        20,
    );
    // Recording for ~3 s: two or three one-second fragments are on disk.
    assert!(wait_for(Duration::from_secs(10), || {
        recordings(&root)
            .first()
            .and_then(|p| std::fs::metadata(p).ok())
            .is_some_and(|m| m.len() > 0)
    }));
    std::thread::sleep(Duration::from_millis(3000));
    server.kill();
    let files = recordings(&root);
    assert_eq!(files.len(), 1);
    let p = probe(&files[0]);
    assert_eq!(p.codecs, ["h264", "aac"], "{p:?}");
    assert!(
        p.video.len() >= 25,
        "{} video packets: under 1 s",
        p.video.len()
    );
    assert!(p.video[0].1, "starts at a keyframe");
    decodes_cleanly(&files[0]).unwrap();
    plays_on_demand(&root, &files[0], p.video.len());
}

/// A recording plays back on demand (its fragments demuxed, a cut-off last one
/// dropped) over HLS and RTSP from a server on the same media root.
fn plays_on_demand(root: &Path, file: &Path, video_packets: usize) {
    let rel = file
        .strip_prefix(root)
        .expect("below the root")
        .to_str()
        .expect("utf-8");
    let vod = TestServer::start(&["--media-root", root.to_str().expect("utf-8")]);
    let hls = format!("http://{}/vod/{rel}/index.m3u8", vod.http);
    let out = Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-show_entries",
            "packet=codec_type",
            "-of",
            "csv=p=0",
        ])
        .arg(&hls)
        .output()
        .expect("ffprobe");
    assert!(
        out.status.success(),
        "{hls}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let video = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("video"))
        .count();
    // Only a fragment cut off by the kill may be missing.
    assert!(
        video + 30 >= video_packets && video >= 25,
        "{hls}: {video} video packets of {video_packets}"
    );
    let rtsp = format!("rtsp://{}/vod/{rel}", vod.rtsp.expect("rtsp"));
    let (streams, times) = crate::common::probe_video(&rtsp, "%+1");
    assert!(streams.contains("h264,320,240"), "{rtsp}: {streams}");
    assert!(times.len() >= 20, "{rtsp}: {} video packets", times.len());
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn a_graceful_stop_completes_the_file() {
    if !have_ffmpeg() {
        return;
    }
    let root = media_root("sigterm");
    let mut server = server(&root, &[]);
    let _publisher = publish_test_pattern(
        &format!("rtmp://{}/live/cam", server.rtmp),
        "flv",
        "libx264",
        20,
    );
    assert!(wait_for(Duration::from_secs(10), || {
        recordings(&root)
            .first()
            .and_then(|p| std::fs::metadata(p).ok())
            .is_some_and(|m| m.len() > 0)
    }));
    std::thread::sleep(Duration::from_millis(2500));
    let status = server.terminate(Duration::from_secs(10)).expect("exits");
    assert!(status.success(), "{status:?}");
    let files = recordings(&root);
    assert_eq!(files.len(), 1);
    assert_fragmented_mp4(&files[0]);
    let p = probe(&files[0]);
    let duration = p.duration.expect("a duration");
    // Everything received went to the file, including the fragment in progress.
    let last = p.video.last().map_or(0.0, |v| v.0);
    assert!(
        duration >= 2.0 && duration - last < 0.2,
        "{duration} s, last frame at {last}"
    );
    decodes_cleanly(&files[0]).unwrap();
}

#[tokio::test]
async fn files_rotate_at_keyframes_and_unmatched_streams_are_not_recorded() {
    let root = media_root("rotate");
    let server = server(
        &root,
        &["--record-rotate-s", "1", "--record-fragment-ms", "500"],
    );
    // 5 s of media with a keyframe every second, sent as fast as the socket goes, to a
    // recorded stream and to one no pattern names.
    let clip = synthetic_clip(&avc_track(), 5, 25, 2000);
    for (app, name) in [("live", "cam"), ("other", "cam")] {
        let mut publisher = RtmpConn::connect(server.rtmp, app, false).await.unwrap();
        publisher.publish(name).await.unwrap();
        let until = tokio::time::Instant::now() + Duration::from_secs(10);
        publish_clip(&mut publisher, &clip, until, false, Some(1))
            .await
            .unwrap();
        drop(publisher);
    }
    assert!(wait_for(Duration::from_secs(5), || {
        recordings(&root).len() == 5
            && recordings(&root).iter().all(|p| {
                let bytes = std::fs::read(p).unwrap_or_default();
                top_level_boxes(&bytes).len() >= 4
            })
    }));
    let files = recordings(&root);
    assert_eq!(files.len(), 5, "{files:?}");
    assert!(files
        .iter()
        .all(|p| p.parent().unwrap().ends_with("recordings/live/cam")));
    assert!(!root.join("recordings/other").exists());
    for path in &files {
        assert_fragmented_mp4(path);
    }
    if cfg!(have_ffmpeg) && have_ffmpeg() {
        let mut total = 0.0;
        for path in &files {
            let p = probe(path);
            assert!(
                p.video.first().is_some_and(|v| v.1),
                "{path:?} starts at a keyframe"
            );
            assert_eq!(
                p.video.iter().filter(|v| v.1).count(),
                1,
                "{path:?}: one GOP"
            );
            assert_eq!(p.video.len(), 25, "{path:?}");
            total += p.duration.unwrap_or(0.0);
        }
        assert!((4.9..=5.1).contains(&total), "{total} s in all");
    }
}

#[tokio::test]
async fn mpeg_ts_recordings_are_whole_transport_packets() {
    let root = media_root("ts");
    let server = server(&root, &["--record-format", "ts"]);
    let clip = synthetic_clip(&avc_track(), 3, 25, 2000);
    let mut publisher = RtmpConn::connect(server.rtmp, "live", false).await.unwrap();
    publisher.publish("cam").await.unwrap();
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    publish_clip(&mut publisher, &clip, until, false, Some(1))
        .await
        .unwrap();
    drop(publisher);
    assert!(wait_for(Duration::from_secs(5), || {
        recordings(&root)
            .first()
            .and_then(|p| std::fs::metadata(p).ok())
            .is_some_and(|m| m.len() > 100_000)
    }));
    std::thread::sleep(Duration::from_millis(500));
    let files = recordings(&root);
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].extension().unwrap(), "ts");
    let bytes = std::fs::read(&files[0]).unwrap();
    assert!(bytes.len().is_multiple_of(188) && bytes.chunks(188).all(|p| p[0] == 0x47));
    if cfg!(have_ffmpeg) && have_ffmpeg() {
        let p = probe(&files[0]);
        assert_eq!(p.codecs, ["h264", "aac"], "{p:?}");
        assert_eq!(p.video.len(), 75);
        assert!(p.video[0].1, "starts at a keyframe");
    }
}

#[tokio::test]
async fn a_publisher_that_returns_within_the_grace_window_continues_the_file() {
    let root = media_root("return");
    let server = server(&root, &["--publish-grace-ms", "1500"]);
    let clip = synthetic_clip(&avc_track(), 2, 25, 2000);
    for _ in 0..2 {
        let mut publisher = RtmpConn::connect(server.rtmp, "live", false).await.unwrap();
        publisher.publish("cam").await.unwrap();
        let until = tokio::time::Instant::now() + Duration::from_secs(10);
        publish_clip(&mut publisher, &clip, until, false, Some(1))
            .await
            .unwrap();
        drop(publisher);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // The stream ends after the grace window; its one file is then closed.
    tokio::time::sleep(Duration::from_millis(1800)).await;
    let files = recordings(&root);
    assert_eq!(files.len(), 1, "{files:?}");
    assert_fragmented_mp4(&files[0]);
    if cfg!(have_ffmpeg) && have_ffmpeg() {
        let p = probe(&files[0]);
        assert_eq!(p.video.len(), 100, "both visits, every frame");
        assert!(p.video.windows(2).all(|w| w[1].0 > w[0].0), "{:?}", p.video);
        let duration = p.duration.expect("a duration");
        assert!((3.9..=4.2).contains(&duration), "{duration} s");
    }
}

/// A tmpfs of `kib` KiB mounted at `dir` while it lives (needs root, as in CI).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, kib: u32) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).expect("mount point");
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            assert!(
                std::env::var("SLUICE_REQUIRE_TOOLS").as_deref() != Ok("1"),
                "mounting a tmpfs needs root, and SLUICE_REQUIRE_TOOLS=1"
            );
            eprintln!("skipping: cannot mount a tmpfs (not root)");
            return None;
        }
        Some(Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// The disk fills while a stream is recorded: the file is abandoned with an error (a
/// log line and `sluice_record_failures_total`), what was written before plays, and a
/// player of the stream gets every frame all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_stops_the_recording_and_spares_live_delivery() {
    use sluice_bench::player::{Player, Protocol};
    let root = media_root("full");
    let Some(_disk) = Tmpfs::mount(&root.join("recordings"), 400) else {
        return;
    };
    let server = server(&root, &["--merge-ms", "50", "--record-fragment-ms", "500"]);
    // 20 KB frames at 25 fps: 500 KB/s, so the 400 KiB disk is full within a second.
    let seconds = 4;
    let clip = synthetic_clip(&avc_track(), seconds, 25, 20_000);
    let mut publisher = RtmpConn::connect(server.rtmp, "live", false).await.unwrap();
    publisher.publish("big").await.unwrap();
    let until = tokio::time::Instant::now() + Duration::from_millis(u64::from(seconds) * 1000);
    let publishing = tokio::spawn(async move {
        publish_clip(&mut publisher, &clip, until, true, None)
            .await
            .unwrap();
        publisher
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut player = Player::connect(Protocol::Flv, server.http, "live", "big")
        .await
        .unwrap();
    let last = seconds * 25 - 1;
    let mut numbers = Vec::new();
    while numbers.last() != Some(&last) {
        let tag = tokio::time::timeout(Duration::from_secs(10), player.next_tag())
            .await
            .expect("in time")
            .expect("tag");
        numbers.extend(crate::common::frame_number(&tag));
    }
    assert!(
        numbers.windows(2).all(|w| w[1] == w[0] + 1),
        "the player got every frame: {numbers:?}"
    );
    publishing.await.unwrap().close().await.unwrap();

    let failures = crate::common::metric(server.http, "sluice_record_failures_total");
    assert!(failures >= 1.0, "{failures} failures");
    let files = recordings(&root);
    assert_eq!(files.len(), 1, "{files:?}");
    if have_ffmpeg() {
        // Up to the fragment that did not fit.
        let p = probe(&files[0]);
        assert!(!p.video.is_empty() && p.video[0].1, "{p:?}");
        assert!(p.video.len() < 100, "{p:?}");
    }
}

/// `GET path` of the server's API (loopback: no token needed) as JSON.
fn api(server: &TestServer, path: &str) -> (u16, serde_json::Value) {
    let (status, _, body) = crate::common::http_request(server.http, "GET", path, "");
    let value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("{path}: {e}: {}", String::from_utf8_lossy(&body)));
    (status, value)
}

/// Unix ms now.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

/// The spans and files the API lists for `live/cam`, once the index is loaded.
fn listed(server: &TestServer, query: &str) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    assert!(
        wait_for(Duration::from_secs(10), || {
            let (status, v) = api(server, &format!("/api/v1/recordings/live/cam{query}"));
            last = v;
            status == 200 && last["indexing"] == false
        }),
        "{last}"
    );
    last
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn the_index_lists_spans_and_gaps_and_survives_kill_9() {
    if !have_ffmpeg() {
        return;
    }
    let root = media_root("index");
    let mut server = server(&root, &[]);
    let url = format!("rtmp://{}/live/cam", server.rtmp);
    // Two publishes of 3 s with a gap of about 2 s between them.
    let before = now_ms();
    for publish in 0..2 {
        if publish == 1 {
            std::thread::sleep(Duration::from_millis(2000));
        }
        let mut p = publish_test_pattern(&url, "flv", "libx264", 3);
        assert!(p.0.wait().expect("ffmpeg").success());
        assert!(wait_for(Duration::from_secs(5), || recordings(&root).len()
            == publish + 1));
    }
    // Closed once the grace window is over.
    std::thread::sleep(Duration::from_millis(800));
    let after = now_ms();
    let (status, all) = api(&server, "/api/v1/recordings");
    assert_eq!(status, 200);
    let list = all["recordings"].as_array().expect("recordings");
    assert_eq!(list.len(), 1, "{all}");
    assert_eq!(list[0]["stream"], "live/cam");
    assert_eq!(list[0]["files"], 2);
    let on_disk: u64 = recordings(&root)
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert_eq!(list[0]["bytes"], on_disk);

    let cam = listed(&server, "");
    let spans = cam["spans"].as_array().expect("spans");
    assert_eq!(spans.len(), 2, "two spans with a gap: {cam}");
    let ms = |v: &serde_json::Value, f: &str| v[f].as_i64().unwrap_or_else(|| panic!("{f}: {v}"));
    for s in spans {
        let length = ms(s, "end_ms") - ms(s, "start_ms");
        assert!((2500..=3500).contains(&length), "{length} ms: {s}");
        assert!(
            ms(s, "start_ms") >= before && ms(s, "end_ms") <= after,
            "{before}..{after}: {s}"
        );
    }
    let gap = ms(&spans[1], "start_ms") - ms(&spans[0], "end_ms");
    assert!((1500..=4000).contains(&gap), "a gap of {gap} ms");
    let files = cam["files"].as_array().expect("files");
    assert_eq!(files.len(), 2);
    assert!(files.iter().all(|f| f["complete"] == true), "{cam}");
    // Ranges: inside the gap nothing; the second file by RFC 3339 times; bad times.
    let in_gap = format!(
        "?from={}&to={}",
        ms(&spans[0], "end_ms") + 100,
        ms(&spans[1], "start_ms") - 100
    );
    let none = listed(&server, &in_gap);
    assert_eq!(none["files"].as_array().map(Vec::len), Some(0), "{none}");
    let second = format!(
        "?from={}&to={}",
        files[1]["start"].as_str().unwrap(),
        files[1]["end"].as_str().unwrap()
    );
    let one = listed(&server, &second);
    assert_eq!(one["files"].as_array().map(Vec::len), Some(1), "{one}");
    assert_eq!(one["files"][0]["path"], files[1]["path"]);
    assert_eq!(api(&server, "/api/v1/recordings/live/cam?from=noon").0, 400);
    assert_eq!(api(&server, "/api/v1/recordings/live/nope").0, 404);

    // kill -9 during a third publish, 3.5 s in: its last record is up to 1 s old, and
    // its last fragment may be cut.
    let _publisher = publish_test_pattern(&url, "flv", "libx264", 20);
    assert!(wait_for(Duration::from_secs(10), || recordings(&root)
        .len()
        == 3));
    std::thread::sleep(Duration::from_millis(3500));
    server.kill();
    let killed = recordings(&root).pop().expect("the third file");
    let probed = probe(&killed);
    let last_video = probed.video.last().expect("video").0;

    // A new server reads the index back, and reads the cut file again.
    let server = self::server(&root, &[]);
    let cam = listed(&server, "");
    let files = cam["files"].as_array().expect("files");
    assert_eq!(files.len(), 3, "{cam}");
    let cut = &files[2];
    assert!(cut["path"]
        .as_str()
        .unwrap()
        .ends_with(&*killed.file_name().unwrap().to_string_lossy()));
    assert_eq!(cut["bytes"], std::fs::metadata(&killed).unwrap().len());
    let length = ms(cut, "end_ms") - ms(cut, "start_ms");
    // Up to the end of the last complete fragment: what ffprobe reads of it (its last
    // video frame's time plus one frame), audio ending up to a frame later.
    let expected = (last_video * 1000.0) as i64 + 40;
    assert!(
        (expected - 10..=expected + 60).contains(&length),
        "{length} ms listed, {expected} ms in the file: {cut}"
    );
    assert!(length >= 2000, "{length} ms");
    assert_eq!(cut["complete"], true, "no server writes it any more");
}

/// `method path` of the server's API as JSON.
fn api_call(server: &TestServer, method: &str, path: &str) -> (u16, serde_json::Value) {
    let (status, _, body) = crate::common::http_request(server.http, method, path, "");
    let value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("{path}: {e}: {}", String::from_utf8_lossy(&body)));
    (status, value)
}

/// The files the API lists for `live/cam` now.
fn listed_files(server: &TestServer) -> Vec<serde_json::Value> {
    listed(server, "")["files"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Retention under a byte limit while a recording is played on demand: ffmpeg
/// publishes with 2 s files; once three are complete, ffmpeg plays the oldest over
/// HLS on demand, and a reload sets `record.keep_bytes` to about one file. Every
/// other complete file goes, oldest first, the played one stays (a `DELETE` of it is
/// refused with 409) until its player is done; then a later pass removes it. The API
/// listing and `sluice_record_removed_total` show each removal; a `DELETE` of a range
/// removes the complete files in it.
#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn retention_removes_the_oldest_files_under_a_byte_limit_while_one_is_played() {
    if !have_ffmpeg() {
        return;
    }
    let root = media_root("retain");
    let config = scratch("record-retain-config").join("sluice.toml");
    std::fs::write(&config, "[record]\nkeep_bytes = 0\n").expect("config");
    let server = server(
        &root,
        &[
            "--config",
            config.to_str().expect("utf-8"),
            "--record-rotate-s",
            "2",
            "--record-fragment-ms",
            "500",
        ],
    );
    let url = format!("rtmp://{}/live/cam", server.rtmp);
    let _publisher = publish_test_pattern(&url, "flv", "libx264", 600);
    let complete = |files: &[serde_json::Value]| -> Vec<serde_json::Value> {
        files
            .iter()
            .filter(|f| f["complete"] == true)
            .cloned()
            .collect()
    };
    let mut files = Vec::new();
    assert!(
        wait_for(Duration::from_secs(60), || {
            files = complete(&listed_files(&server));
            files.len() >= 3
        }),
        "three complete files: {files:?}"
    );
    let oldest = files[0]["path"].as_str().expect("path").to_string();
    let oldest_path = root.join("recordings").join(&oldest);
    assert!(oldest_path.exists(), "{oldest_path:?}");

    // An on-demand player of the oldest file, in real time.
    let hls = format!("http://{}/vod/recordings/{oldest}/index.m3u8", server.http);
    let mut player = crate::common::Kill(
        Command::new("ffmpeg")
            .args(["-hide_banner", "-loglevel", "error", "-re", "-i", &hls])
            .args(["-f", "null", "-"])
            .spawn()
            .expect("start ffmpeg"),
    );
    let reading = || crate::common::metric(server.http, "sluice_files_read");
    assert!(
        wait_for(Duration::from_secs(30), || reading() >= 1.0),
        "the player opens the file"
    );

    // About one file's bytes: everything complete and free must go.
    let limit = files[0]["bytes"].as_u64().expect("bytes");
    std::fs::write(&config, format!("[record]\nkeep_bytes = {limit}\n")).expect("config");
    let (status, reload) = api_call(&server, "POST", "/api/v1/reload");
    assert_eq!(status, 200, "{reload}");
    assert_eq!(reload["restart_needed"], serde_json::json!([]), "{reload}");
    let removed =
        || crate::common::metric(server.http, "sluice_record_removed_total{reason=\"bytes\"}");
    assert!(
        wait_for(Duration::from_secs(60), || removed() >= 2.0),
        "{} removed",
        removed()
    );
    // Newer files went; the one being played is still there, still read after the
    // check (so it was read throughout), and a DELETE of it is refused.
    let kept = oldest_path.exists();
    let (status, refused) = api_call(
        &server,
        "DELETE",
        &format!(
            "/api/v1/recordings/live/cam?from={}&to={}",
            files[0]["start_ms"], files[0]["end_ms"]
        ),
    );
    assert!(
        reading() >= 1.0,
        "the player's hold ended before the checks"
    );
    assert!(kept, "{oldest_path:?} removed while it was played");
    assert_eq!(status, 409, "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .unwrap_or("")
            .contains("being read"),
        "{refused}"
    );
    let now = listed_files(&server);
    assert_eq!(now[0]["path"], oldest.as_str(), "{now:?}");
    for gone in &files[1..] {
        assert!(
            !now.iter().any(|f| f["path"] == gone["path"]),
            "{} still listed",
            gone["path"]
        );
        let path = root
            .join("recordings")
            .join(gone["path"].as_str().expect("path"));
        assert!(!path.exists(), "{path:?}");
    }

    // The player ends (it played the whole file); once it lets go, a later pass
    // removes the file.
    let played = player.0.wait().expect("ffmpeg");
    assert!(played.success(), "{played:?}");
    assert!(
        wait_for(Duration::from_secs(120), || !oldest_path.exists()),
        "{oldest_path:?} kept after its player ended"
    );
    assert!(wait_for(Duration::from_secs(10), || {
        !listed_files(&server)
            .iter()
            .any(|f| f["path"] == oldest.as_str())
    }));
    assert!(removed() >= 3.0, "{} removed", removed());
    let bytes = crate::common::metric(
        server.http,
        "sluice_record_removed_bytes_total{reason=\"bytes\"}",
    );
    assert!(bytes >= 3.0 * 1000.0, "{bytes} bytes removed");

    // No limit again: complete files stay, and a DELETE of a range removes those
    // wholly within it, never the file being written.
    std::fs::write(&config, "[record]\nkeep_bytes = 0\n").expect("config");
    assert_eq!(api_call(&server, "POST", "/api/v1/reload").0, 200);
    assert!(
        wait_for(Duration::from_secs(60), || {
            files = complete(&listed_files(&server));
            files.len() >= 2
        }),
        "{files:?}"
    );
    let to = files.last().expect("a file")["end_ms"]
        .as_i64()
        .expect("end");
    let (status, missing) = api_call(&server, "DELETE", "/api/v1/recordings/live/cam?to=1");
    assert_eq!(status, 400, "{missing}");
    let (status, deleted) = api_call(
        &server,
        "DELETE",
        &format!("/api/v1/recordings/live/cam?from=0&to={to}"),
    );
    assert_eq!(status, 200, "{deleted}");
    let removed_paths: Vec<&str> = deleted["removed"]
        .as_array()
        .expect("removed")
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    for f in &files {
        let path = f["path"].as_str().expect("path");
        assert!(removed_paths.contains(&path), "{path} not in {deleted}");
        assert!(!root.join("recordings").join(path).exists(), "{path}");
    }
    let left = listed_files(&server);
    assert!(
        left.iter()
            .all(|f| f["complete"] == false || f["end_ms"].as_i64() > Some(to)),
        "{left:?} after {deleted}"
    );
    // A range reaching into the future removes every complete file, never the one
    // being written (listed once its first fragment is written).
    let far = format!(
        "/api/v1/recordings/live/cam?from=0&to={}",
        now_ms() + 3_600_000
    );
    let mut left = Vec::new();
    assert!(
        wait_for(Duration::from_secs(10), || {
            left = listed_files(&server);
            left.iter().any(|f| f["complete"] == false)
        }),
        "the file being written: {left:?}"
    );
    let before = now_ms();
    let (status, deleted) = api_call(&server, "DELETE", &far);
    assert_eq!(status, 200, "{deleted}");
    // Left: the file written during the DELETE (complete since, perhaps) and newer.
    let mut left = Vec::new();
    assert!(
        wait_for(Duration::from_secs(10), || {
            left = listed_files(&server);
            left.iter().any(|f| f["complete"] == false)
        }),
        "{left:?} after {deleted}"
    );
    for f in &left {
        let path = f["path"].as_str().expect("path");
        assert!(root.join("recordings").join(path).exists(), "{path}");
        // A complete file ended after the DELETE began (its record of the file being
        // written may be up to a second stale).
        assert!(
            f["complete"] == false || f["end_ms"].as_i64().expect("end") > before - 1000,
            "{f} older than the DELETE: {deleted}"
        );
    }
    let api = crate::common::metric(server.http, "sluice_record_removed_total{reason=\"api\"}");
    let removed_later = deleted["removed"].as_array().map_or(0, Vec::len);
    assert_eq!(api, (files.len() + removed_later) as f64);
}
