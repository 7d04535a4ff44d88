//! HLS end to end: ffmpeg publishes over RTMP; ffprobe/ffmpeg read the MPEG-TS and
//! the fMP4 (Low-Latency) variants; blocking reload, caching and bad requests.

use crate::common::{have_ffmpeg, probe_video, publish_test_pattern, Kill, TestServer};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

fn publish(server: &TestServer, name: &str, seconds: u32) -> Kill {
    let url = format!("rtmp://{}/live/{name}", server.rtmp);
    publish_test_pattern(&url, "flv", "libx264", seconds)
}

/// A GET (or HEAD) with extra header lines; returns (status line, headers, body).
fn get(addr: SocketAddr, method: &str, path: &str, extra: &str) -> (String, String, Vec<u8>) {
    let (_, head, body) = crate::common::http_request(addr, method, path, extra);
    let status = head.lines().next().unwrap_or("").to_string();
    (status, head, body)
}

fn text(addr: SocketAddr, path: &str) -> String {
    let (status, _, body) = get(addr, "GET", path, "");
    assert!(status.contains(" 200 "), "{path}: {status}");
    String::from_utf8(body).expect("utf-8 playlist")
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn ts_and_fmp4_variants_play_with_continuous_timestamps() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&[]);
    let _publisher = publish(&server, "cam", 30);
    std::thread::sleep(Duration::from_millis(7000));
    for path in ["/live/cam.m3u8", "/live/cam/index.m3u8"] {
        let url = format!("http://{}{path}", server.http);
        let (out, times) = probe_video(&url, "%+4");
        assert!(out.contains("h264,320,240"), "{path}: {out}");
        assert!(out.contains("aac"), "{path}: no audio in {out}");
        assert!(
            times.len() >= 75,
            "{path}: only {} video packets",
            times.len()
        );
        for w in times.windows(2) {
            assert!(
                w[1] > w[0] && w[1] - w[0] < 0.1,
                "{path}: timestamps {} then {}",
                w[0],
                w[1]
            );
        }
    }
    let playlist = text(server.http, "/live/cam.m3u8");
    assert!(playlist.contains("#EXT-X-TARGETDURATION:2"), "{playlist}");
    let segment = playlist
        .lines()
        .rfind(|l| l.ends_with(".ts"))
        .expect("a segment");
    ranges_are_served(server.http, &format!("/live/{segment}"));
    let ll = text(server.http, "/live/cam/index.m3u8");
    for tag in [
        "#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES",
        "#EXT-X-PART-INF",
        "#EXT-X-PART:",
        "#EXT-X-PRELOAD-HINT:TYPE=PART",
        "#EXT-X-MAP:",
        "#EXT-X-PROGRAM-DATE-TIME",
    ] {
        assert!(ll.contains(tag), "missing {tag} in {ll}");
    }
    // The default parts (200 ms, five frames at 25 fps) and the spec's least hold back,
    // three parts: what a low-latency player plays behind the newest part (docs/hls.md).
    for line in [
        "#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=0.600,HOLD-BACK=6.000\n",
        "#EXT-X-PART-INF:PART-TARGET=0.200\n",
    ] {
        assert!(ll.contains(line), "no {line} in {ll}");
    }
}

/// The (msn, part index) of every `#EXT-X-PART` of a playlist, in order, and of its
/// preload hint last (URIs name segments by their start, not their msn: the msn
/// comes from `#EXT-X-MEDIA-SEQUENCE` and the segments before).
/// A segment's byte ranges (sendfile from its in-memory file on plain HTTP), as
/// players that seek or probe ask for them, and a range past its end.
fn ranges_are_served(addr: SocketAddr, path: &str) {
    let (status, head, whole) = get(addr, "GET", path, "");
    assert!(status.contains(" 200 "), "{path}: {status}");
    assert!(head.contains("Accept-Ranges: bytes"), "{head}");
    let len = whole.len();
    assert!(len > 1000, "{path}: {len} bytes");
    for (range, want) in [
        ("100-199", 100..200),
        ("0-0", 0..1),
        (&format!("{}-", len - 10)[..], len - 10..len),
        ("-25", len - 25..len),
        (&format!("500-{}", len * 2)[..], 500..len),
    ] {
        let (status, head, body) = get(addr, "GET", path, &format!("Range: bytes={range}\r\n"));
        assert!(status.contains(" 206 "), "{range}: {status}");
        let content_range = format!("Content-Range: bytes {}-{}/{len}", want.start, want.end - 1);
        assert!(head.contains(&content_range), "{range}: {head}");
        assert_eq!(body, &whole[want], "{range}");
    }
    let (status, head, body) = get(addr, "GET", path, &format!("Range: bytes={len}-\r\n"));
    assert!(status.contains(" 416 "), "{status}");
    assert!(
        head.contains(&format!("Content-Range: bytes */{len}")),
        "{head}"
    );
    assert!(body.is_empty());
}

fn part_positions(playlist: &str) -> Vec<(u64, u32)> {
    let mut msn: u64 = playlist
        .lines()
        .find_map(|l| l.strip_prefix("#EXT-X-MEDIA-SEQUENCE:"))
        .and_then(|n| n.parse().ok())
        .expect("media sequence");
    let mut part = 0;
    let mut out = Vec::new();
    for line in playlist.lines() {
        if line.starts_with("#EXT-X-PART:") || line.starts_with("#EXT-X-PRELOAD-HINT") {
            out.push((msn, part));
            part += 1;
        } else if !line.starts_with('#') && !line.is_empty() {
            msn += 1;
            part = 0;
        }
    }
    out
}

/// The URI of a playlist's tag line `name`.
fn tag_uri(playlist: &str, name: &str) -> String {
    playlist
        .lines()
        .rfind(|l| l.starts_with(name))
        .and_then(|l| l.split("URI=\"").nth(1))
        .and_then(|u| u.split('"').next())
        .unwrap_or_else(|| panic!("no {name} in {playlist}"))
        .to_string()
}

/// The last `#EXT-X-PART`'s (msn, part).
fn last_part(playlist: &str) -> (u64, u32) {
    let positions = part_positions(playlist);
    positions[positions.len() - 2]
}

/// The preload hint's URI and (msn, part).
fn preload_hint(playlist: &str) -> (String, (u64, u32)) {
    let at = *part_positions(playlist).last().expect("a preload hint");
    (tag_uri(playlist, "#EXT-X-PRELOAD-HINT"), at)
}

/// The `Cache-Control` value of a response head.
fn cache_control(head: &str) -> &str {
    head.lines()
        .find_map(|l| l.strip_prefix("Cache-Control: "))
        .unwrap_or_else(|| panic!("no Cache-Control in {head}"))
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn blocking_reload_preload_hints_caching_and_bad_requests() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&[]);
    let _publisher = publish(&server, "ll", 30);
    std::thread::sleep(Duration::from_millis(4000));
    let (status, head, body) = get(server.http, "GET", "/live/ll/index.m3u8", "");
    assert!(status.contains(" 200 "), "{status}");
    // A plain reload may be cached for half a target duration (2 s: 1 s).
    assert_eq!(cache_control(&head), "public, max-age=1");
    let playlist = String::from_utf8(body).expect("utf-8");
    // The hinted part does not exist yet; ask for the one after it, so the answer
    // must wait for the hinted part (and its successor, or the segment's end).
    let (_, (hint_msn, hint_part)) = preload_hint(&playlist);
    let started = Instant::now();
    let blocking = format!(
        "/live/ll/index.m3u8?_HLS_msn={hint_msn}&_HLS_part={}",
        hint_part + 1
    );
    let (status, head, body) = get(server.http, "GET", &blocking, "");
    assert!(status.contains(" 200 "), "{status}");
    // The answer to a blocking request always holds what it asked for: six target
    // durations.
    assert_eq!(cache_control(&head), "public, max-age=12");
    let blocked = String::from_utf8(body).expect("utf-8");
    let waited = started.elapsed();
    let (got_msn, got_part) = last_part(&blocked);
    assert!(
        (got_msn, got_part) >= (hint_msn, hint_part),
        "blocking reload returned before the hinted part {hint_msn}.{hint_part}: last is {got_msn}.{got_part}"
    );
    assert!(
        waited < Duration::from_secs(3),
        "and no longer than it must ({waited:?})"
    );

    // The preload hint names a part that does not exist yet: its request blocks until it does.
    let (hint, _) = preload_hint(&blocked);
    let (status, head, body) = get(server.http, "GET", &format!("/live/ll/{hint}"), "");
    assert!(status.contains(" 200 "), "{hint}: {status}");
    assert!(head.contains("Content-Type: video/mp4"), "{head}");
    assert_eq!(cache_control(&head), "public, max-age=31536000, immutable");
    assert!(body.len() > 100 && &body[4..8] == b"moof", "a fragment");
    // The init segment is named by its bytes, and immutable too.
    let map = tag_uri(&blocked, "#EXT-X-MAP");
    let (status, head, body) = get(server.http, "GET", &format!("/live/ll/{map}"), "");
    assert!(
        status.contains(" 200 ") && &body[4..8] == b"ftyp",
        "{map}: {status}"
    );
    assert!(cache_control(&head).ends_with("immutable"), "{head}");

    // Segments are immutable and revalidate by ETag.
    let ts_list = text(server.http, "/live/ll.m3u8");
    let segment = ts_list
        .lines()
        .find(|l| l.ends_with(".ts"))
        .expect("a TS segment");
    let (status, head, body) = get(server.http, "GET", &format!("/live/{segment}"), "");
    assert!(status.contains(" 200 "), "{segment}: {status}");
    assert!(
        head.contains("Content-Type: video/mp2t") && head.contains("immutable"),
        "{head}"
    );
    assert!(!body.is_empty() && body.len() % 188 == 0 && body[0] == 0x47);
    let etag = head
        .lines()
        .find_map(|l| l.strip_prefix("ETag: "))
        .expect("ETag")
        .to_string();
    let (status, _, _) = get(
        server.http,
        "GET",
        &format!("/live/{segment}"),
        &format!("If-None-Match: {etag}\r\n"),
    );
    assert!(status.contains(" 304 "), "{status}");
    let (_, head, _) = get(
        server.http,
        "GET",
        &format!("/live/{segment}"),
        &format!("If-None-Match: {etag}\r\n"),
    );
    assert!(cache_control(&head).ends_with("immutable"), "{head}");
    // No answer carries a per-viewer cookie (a cache would not store it): viewers are
    // counted by the segments they fetch.
    for path in [
        "/live/ll.m3u8",
        "/live/ll/index.m3u8",
        &format!("/live/{segment}"),
    ] {
        let (_, head, _) = get(server.http, "GET", path, "");
        assert!(!head.contains("Set-Cookie"), "{path}: {head}");
    }
    let (status, head, body) = get(server.http, "HEAD", "/live/ll.m3u8", "");
    assert!(status.contains(" 200 ") && body.is_empty(), "{status}");
    assert!(
        head.contains("application/vnd.apple.mpegurl")
            && cache_control(&head) == "public, max-age=1",
        "{head}"
    );
    assert!(head.contains("Access-Control-Allow-Origin: *"), "{head}");

    // Bad requests get clean, quick answers.
    let tag = segment
        .rsplit_once('/')
        .and_then(|(_, f)| f.split_once('-'))
        .map(|(t, _)| t)
        .expect("tag");
    for (path, want) in [
        (
            "/live/ll/index.m3u8?_HLS_msn=99999999&_HLS_part=0".to_string(),
            " 400 ",
        ),
        ("/live/ll/index.m3u8?_HLS_msn=abc".to_string(), " 400 "),
        ("/live/ll/index.m3u8?_HLS_part=1".to_string(), " 400 "),
        (format!("/live/ll/{tag}-99999999.m4s"), " 404 "),
        (format!("/live/ll/{tag}-init-0.mp4"), " 404 "),
        ("/live/ll/0-0.ts".to_string(), " 404 "),
        ("/live/nobody.m3u8".to_string(), " 404 "),
        ("/live/../../etc/passwd".to_string(), " 404 "),
        (format!("/live/ll/{tag}-{}.ts", u64::MAX), " 404 "),
    ] {
        let started = Instant::now();
        let (status, head, _) = get(server.http, "GET", &path, "");
        assert!(status.contains(want), "{path}: {status}");
        // A 404 may be a moment early: cached for a second at most; errors never.
        // (A number of 20 digits is no HLS name: the router's 404.)
        if path.starts_with("/live/ll") && !path.contains(&u64::MAX.to_string()) {
            let want_cache = if want == " 404 " {
                "public, max-age=1"
            } else {
                "no-store"
            };
            assert_eq!(cache_control(&head), want_cache, "{path}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{path} answered at once"
        );
    }
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn a_publisher_restart_is_a_discontinuity_that_ffmpeg_plays_through() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&["--publish-grace-ms", "10000"]);
    drop(publish(&server, "again", 30));
    let first = publish(&server, "again", 5);
    std::thread::sleep(Duration::from_millis(5500));
    drop(first);
    let _second = publish(&server, "again", 30);
    std::thread::sleep(Duration::from_millis(6000));
    let playlist = text(server.http, "/live/again.m3u8");
    assert!(playlist.contains("#EXT-X-DISCONTINUITY\n"), "{playlist}");
    let ll = text(server.http, "/live/again/index.m3u8");
    assert!(ll.contains("#EXT-X-DISCONTINUITY\n"), "{ll}");
    let out = Command::new("ffmpeg")
        .args([
            "-hide_banner",
            "-loglevel",
            "error",
            "-live_start_index",
            "0",
            "-i",
        ])
        .arg(format!("http://{}/live/again.m3u8", server.http))
        .args(["-t", "8", "-f", "null", "-"])
        .output()
        .expect("ffmpeg");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn hls_and_http_flv_over_https() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&["--https", "127.0.0.1:0", "--tls-self-signed"]);
    let https = server.https.expect("an HTTPS listener");
    let _publisher = publish(&server, "tls", 30);
    std::thread::sleep(Duration::from_millis(5000));
    for path in ["/live/tls.m3u8", "/live/tls/index.m3u8", "/live/tls.flv"] {
        let url = format!("https://{https}{path}");
        let out = Command::new("ffprobe")
            .args(["-v", "error", "-tls_verify", "0", "-read_intervals", "%+2"])
            .args([
                "-show_entries",
                "stream=codec_name,width,height:packet=codec_type",
                "-of",
                "csv=p=0",
                &url,
            ])
            .output()
            .expect("ffprobe");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{url}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("h264,320,240") && stdout.contains("aac"),
            "{url}: {stdout}"
        );
        let packets = stdout.lines().filter(|l| l.starts_with("video")).count();
        assert!(packets >= 25, "{url}: {packets} video packets");
    }
    // Whole segments live in sealed memfds: sent with sendfile over plain HTTP, read
    // through the mapping over TLS; both give the same bytes.
    let http = server.http;
    for (playlist, ext) in [("/live/tls.m3u8", ".ts"), ("/live/tls/index.m3u8", ".m4s")] {
        let list = text(http, playlist);
        let uri = list
            .lines()
            .find(|l| !l.starts_with('#') && l.ends_with(ext))
            .unwrap_or_else(|| panic!("no {ext} segment in {list}"));
        let dir = playlist.rsplit_once('/').map_or("", |(d, _)| d);
        let path = if ext == ".ts" {
            format!("/live/{uri}")
        } else {
            format!("{dir}/{uri}")
        };
        let (status, head, plain) = get(http, "GET", &path, "");
        assert!(status.contains(" 200 "), "{path}: {status}");
        assert!(
            head.contains(&format!("Content-Length: {}", plain.len())),
            "{head}"
        );
        let out = Command::new("curl")
            .args(["-sk", "--http1.1", &format!("https://{https}{path}")])
            .output()
            .expect("curl");
        assert!(out.status.success());
        assert!(!plain.is_empty());
        assert_eq!(out.stdout, plain, "{path}: HTTPS and HTTP bodies differ");
    }
    let memfds = std::fs::read_dir(format!("/proc/{}/fd", server.pid()))
        .expect("fds")
        .flatten()
        .filter(|e| {
            std::fs::read_link(e.path())
                .is_ok_and(|l| l.to_string_lossy().contains("memfd:sluice-segment"))
        })
        .count();
    assert!(memfds >= 2, "{memfds} segment memfds");
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn idle_and_half_sent_connections_do_not_stall_viewers() {
    if !have_ffmpeg() {
        return;
    }
    // All from one address: past the default limit per address (1000).
    let server = TestServer::start(&["--max-connections-per-ip", "2000"]);
    let _publisher = publish(&server, "busy", 30);
    std::thread::sleep(Duration::from_millis(3000));
    // 1000 connections that say nothing, or half a request head, and stay open.
    let mut idle = Vec::new();
    for i in 0..1000 {
        let mut sock = TcpStream::connect(server.http).expect("connect");
        if i % 2 == 1 {
            sock.write_all(b"GET /live/busy.m3u8 HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                .expect("half a head");
        }
        idle.push(sock);
    }
    // A stalled worker would answer only after its idle timeout (30 s); a busy
    // machine may take a while, but not that long.
    for path in ["/live/busy.m3u8", "/live/busy/index.m3u8"] {
        let started = Instant::now();
        let playlist = text(server.http, path);
        assert!(playlist.starts_with("#EXTM3U"), "{path}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{path} took {:?}",
            started.elapsed()
        );
    }
    let segment = text(server.http, "/live/busy.m3u8")
        .lines()
        .find(|l| l.ends_with(".ts"))
        .map(str::to_string)
        .expect("a segment");
    let (status, _, body) = get(server.http, "GET", &format!("/live/{segment}"), "");
    assert!(status.contains(" 200 ") && !body.is_empty(), "{status}");
    drop(idle);
}
