//! HTTP-fMP4: a live stream (or a file on demand) as one fragmented MP4 byte stream
//! (`GET /app/name.mp4`): the init segment, then a fragment per frame from a keyframe
//! on; read by ffprobe. Chromium's Media Source plays it in `browser.rs`.

use crate::common::TestServer;
use crate::common::{have_ffmpeg, http_request, probe_video, publish_test_pattern, wait_live};
use std::time::Duration;

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn ffprobe_reads_a_live_stream_over_http_fmp4() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&[]);
    let _publisher = publish_test_pattern(
        &format!("rtmp://{}/live/cam", server.rtmp),
        "flv",
        "libx264",
        30,
    );
    wait_live(server.http, "live/cam");
    let url = format!("http://{}/live/cam.mp4", server.http);
    // Both tracks, from a keyframe on, video in order without a hole.
    let (streams, times) = probe_video(&url, "%+3");
    assert!(streams.contains("h264,320,240"), "{streams}");
    assert!(streams.lines().any(|l| l.starts_with("aac")), "{streams}");
    assert!(times.len() >= 50, "{} video packets", times.len());
    assert!(
        times.windows(2).all(|w| w[1] > w[0] && w[1] - w[0] < 0.1),
        "{times:?}"
    );

    // The byte stream starts with the init segment.
    let (status, head) = first_bytes(server.http, "/live/cam.mp4", 16);
    assert_eq!(status, 200);
    assert_eq!(&head[4..8], b"ftyp", "{head:?}");

    let (status, head, _) = http_request(server.http, "HEAD", "/live/cam.mp4", "");
    assert_eq!(status, 200, "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: video/mp4"),
        "{head}"
    );
    assert_eq!(
        http_request(server.http, "GET", "/live/nobody.mp4", "").0,
        404
    );
    // HLS's init segment keeps its name: not the stream `live/cam/ab-init`.
    let (status, _, body) = http_request(server.http, "GET", "/live/cam/ab-init.mp4", "");
    assert_eq!(status, 404, "{}", String::from_utf8_lossy(&body));
}

/// The status and the first `n` body bytes of a GET that never ends by itself.
fn first_bytes(http: std::net::SocketAddr, path: &str, n: usize) -> (u16, Vec<u8>) {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(http).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(conn, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let len = conn.read(&mut buf).expect("read");
        assert!(len > 0, "closed early");
        got.extend_from_slice(&buf[..len]);
        let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let status = std::str::from_utf8(&got[9..12]).unwrap().parse().unwrap();
        let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
        let mut body = got[end + 4..].to_vec();
        if head.contains("transfer-encoding: chunked") {
            // Enough for the first chunk: skip its size line.
            while !body.windows(2).any(|w| w == b"\r\n") || body.len() < n + 8 {
                let len = conn.read(&mut buf).expect("read");
                assert!(len > 0, "closed early");
                body.extend_from_slice(&buf[..len]);
            }
            let at = body.windows(2).position(|w| w == b"\r\n").unwrap() + 2;
            body.drain(..at);
        }
        while body.len() < n {
            let len = conn.read(&mut buf).expect("read");
            assert!(len > 0, "closed early");
            body.extend_from_slice(&buf[..len]);
        }
        body.truncate(n);
        return (status, body);
    }
}

/// A file on demand plays as `/vod/<path>.mp4.mp4`, H.264 with B-frames (composition
/// offsets) and H.265 alike.
#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn ffprobe_reads_files_on_demand_over_http_fmp4() {
    if !have_ffmpeg() {
        return;
    }
    let root = crate::vod::media_root();
    let server = crate::vod::start(&root);
    for (file, codec) in [("clip.mp4", "h264"), ("hevc.mp4", "hevc")] {
        let url = format!("http://{}/vod/sub/{file}.mp4", server.http);
        let (streams, video) = crate::vod::probe_all(&url);
        assert!(streams.lines().any(|l| l == codec), "{url}: {streams}");
        assert!(streams.lines().any(|l| l == "aac"), "{url}: {streams}");
        // The whole 4 s file at 25 fps.
        assert!(video >= 95, "{url}: {video} video packets");
    }
}

/// AV1 and VP9 from Enhanced RTMP are carried in their own sample entries (`av01`,
/// `vp09`): ffprobe reads the codec and the frames.
#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn ffprobe_reads_av1_and_vp9_over_http_fmp4() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&[]);
    let codecs: [(&str, &[u8; 4], &[&str]); 2] = [
        (
            "vp9",
            b"vp09",
            &["libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8"],
        ),
        (
            "av1",
            b"av01",
            &["libaom-av1", "-usage", "realtime", "-cpu-used", "8"],
        ),
    ];
    for (name, fourcc, encoder) in codecs {
        let frames = crate::browser::ivf_frames(encoder, 4);
        let publisher = crate::browser::publish_enhanced(&server, name, fourcc, frames, 8);
        wait_live(server.http, &format!("live/{name}"));
        let url = format!("http://{}/live/{name}.mp4", server.http);
        let (streams, times) = probe_video(&url, "%+2");
        assert!(
            streams
                .lines()
                .any(|l| l.starts_with(&format!("{name},320,240"))),
            "{url}: {streams}"
        );
        assert!(times.len() >= 25, "{url}: {} video packets", times.len());
        publisher.join().unwrap();
    }
}

/// ffmpeg publishing a `size` test pattern (H.264, AAC) to `url` for `seconds`.
fn publish_size(url: &str, size: &str, seconds: u32) -> crate::common::Kill {
    crate::common::Kill(
        std::process::Command::new("ffmpeg")
            .args(["-hide_banner", "-loglevel", "error", "-re"])
            .args([
                "-f",
                "lavfi",
                "-i",
                &format!("testsrc2=size={size}:rate=25"),
            ])
            .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"])
            .args(["-t", &seconds.to_string(), "-c:v", "libx264"])
            .args([
                "-preset",
                "ultrafast",
                "-g",
                "25",
                "-bf",
                "0",
                "-c:a",
                "aac",
            ])
            .args(["-f", "flv", url])
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("start ffmpeg"),
    )
}

/// A publisher that comes back with another picture size: the fMP4 response of a
/// player that watched the first one ends (its init segment no longer describes the
/// stream), and a new request gets the new size.
#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn a_new_picture_size_ends_the_response_and_the_next_one_has_it() {
    use std::io::{Read, Write};
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&["--publish-grace-ms", "10000"]);
    let url = format!("rtmp://{}/live/switch", server.rtmp);
    let mut first = publish_size(&url, "320x240", 3);
    wait_live(server.http, "live/switch");
    let http = server.http;
    let reader = std::thread::spawn(move || {
        let mut conn = std::net::TcpStream::connect(http).expect("connect");
        conn.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        write!(conn, "GET /live/switch.mp4 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 65536];
        // Until the server ends the response: the connection closes.
        let ended = loop {
            match conn.read(&mut buf) {
                Ok(0) => break true,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(_) => break false,
            }
        };
        (ended, got)
    });
    first.0.wait().expect("the first publisher");
    let _second = publish_size(&url, "160x120", 8);
    let (ended, got) = reader.join().expect("the reader");
    assert!(ended, "the response went on ({} bytes)", got.len());
    let count = |kind: &[u8]| got.windows(4).filter(|w| *w == kind).count();
    assert_eq!(count(b"ftyp"), 1, "one init segment");
    assert!(count(b"moof") >= 25, "{} fragments", count(b"moof"));
    let (streams, times) = probe_video(&format!("http://{http}/live/switch.mp4"), "%+1");
    assert!(streams.contains("h264,160,120"), "{streams}");
    assert!(!times.is_empty(), "{streams}");
}
