//! Snapshots (`/APP/NAME.jpg`): JPEGs of a live stream's newest keyframe, made by ffmpeg
//! at most once per interval and size, read back by ffprobe.

use crate::common::{
    have_ffmpeg, http_request, publish_test_pattern, scratch, wait_live, TestServer,
};
use std::process::Command;
use std::time::{Duration, Instant};

/// `GET path` until it is not 503 (the first snapshot is being made), up to 15 s.
fn get(server: &TestServer, path: &str) -> (u16, String, Vec<u8>) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, head, body) = http_request(server.http, "GET", path, "");
        if status != 503 || Instant::now() > deadline {
            return (status, head, body);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What ffprobe reads of a JPEG: `codec,width,height`.
fn probe(jpeg: &[u8], name: &str) -> String {
    let path = scratch("snapshot").join(name);
    std::fs::create_dir_all(path.parent().expect("dir")).expect("scratch");
    std::fs::write(&path, jpeg).expect("write");
    let out = Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-show_entries",
            "stream=codec_name,width,height",
        ])
        .args(["-of", "csv=p=0"])
        .arg(&path)
        .output()
        .expect("ffprobe");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn a_snapshot_is_a_jpeg_of_the_stream_made_once_per_interval() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&["--snapshot-s", "3"]);
    let _publisher = publish_test_pattern(
        &format!("rtmp://{}/live/cam", server.rtmp),
        "flv",
        "libx264",
        30,
    );
    wait_live(server.http, "live/cam");
    let (status, head, first) = get(&server, "/live/cam.jpg");
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("Content-Type: image/jpeg"), "{head}");
    assert!(head.contains("Cache-Control: public, max-age="), "{head}");
    assert_eq!(probe(&first, "full.jpg"), "mjpeg,320,240");
    // Scaled, the height keeping the shape.
    let (status, _, small) = get(&server, "/live/cam.jpg?width=160");
    assert_eq!(status, 200);
    assert_eq!(probe(&small, "small.jpg"), "mjpeg,160,120");
    // Within the interval, the same JPEG, however often asked.
    for _ in 0..20 {
        let (status, _, again) = http_request(server.http, "GET", "/live/cam.jpg", "");
        assert_eq!(status, 200);
        assert_eq!(again, first);
    }
    // After it, a newer keyframe's (the test pattern moves): the stale one is answered
    // while the new one is made, which follows.
    std::thread::sleep(Duration::from_millis(3200));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, _, now) = http_request(server.http, "GET", "/live/cam.jpg", "");
        if now != first {
            assert_eq!(probe(&now, "newer.jpg"), "mjpeg,320,240");
            break;
        }
        assert!(Instant::now() < deadline, "never a newer snapshot");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Clear refusals.
    let (status, _, _) = http_request(server.http, "GET", "/live/nobody.jpg", "");
    assert_eq!(status, 404);
    let (status, _, _) = http_request(server.http, "GET", "/live/cam.jpg?width=9999", "");
    assert_eq!(status, 400);
}
