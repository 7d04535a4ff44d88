//! The web console in headless Chromium over HTTPS (HTTP/2): ffmpeg publishes
//! `live/cam`, the console at `/console` lists it, and its stream page plays it
//! (mpegts.js, HTTP-FLV, then hls.js, then WebRTC)
//! while reading needs authorization: the player gets a viewer token from the API. A harness
//! page served from the media root (`/files/`, the console's origin) loads the console
//! in an iframe, reads its DOM and reports to a listener of the test. Screenshots at
//! desktop and phone sizes go to the scratch folder `console`.

use crate::common::{have, have_ffmpeg, publish_test_pattern, Kill, TestServer};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

const HARNESS: &str = r#"<!doctype html>
<html><body style="margin:0">
<iframe id="f" src="/console/" allow="autoplay" style="width:1200px;height:800px;border:0"></iframe>
<script>
const report = (q) => fetch('REPORT?' + q, { mode: 'no-cors' }).catch(() => {});
const f = document.getElementById('f');
const wait = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(check, ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    try { const v = check(); if (v) return v; } catch (e) {}
    await wait(100);
  }
  return null;
}
f.onload = async () => {
  const doc = () => f.contentDocument;
  const row = await until(() => [...doc().querySelectorAll('#streams tbody a')]
    .find((a) => a.textContent === 'live/cam'), 10000);
  // Its snapshot in the list: a decoded JPEG 160 pixels wide.
  const thumb = await until(() => {
    const img = doc().querySelector('#streams tbody img.thumb');
    return img && img.complete && img.naturalWidth;
  }, 15000);
  const workers = doc().querySelectorAll('#workers .worker').length;
  // Not a node of a cluster: no cluster card.
  const cluster = doc().getElementById('cluster-card').hidden;
  f.contentWindow.location.hash = '#/stream/live/cam';
  const video = () => doc().getElementById('video');
  const t0 = await until(() => video().currentTime > 0 && video().currentTime, 15000);
  await wait(2000);
  const t1 = video().currentTime;
  const note = doc().getElementById('player-note').textContent;
  // The same stream through hls.js (LL-HLS): a new player, its session in a cookie.
  doc().querySelector('.toggle button[data-kind="hls"]').click();
  await until(() => doc().getElementById('player-note').textContent.includes('hls.js'), 10000);
  const h0 = await until(() => video().currentTime > 0 && video().currentTime, 20000);
  await wait(2000);
  const h1 = video().currentTime;
  const hlsNote = doc().getElementById('player-note').textContent;
  // And through WebRTC (WHEP).
  doc().querySelector('.toggle button[data-kind="webrtc"]').click();
  await until(() => doc().getElementById('player-note').textContent.includes('WHEP'), 10000);
  await until(() => video().srcObject && video().currentTime > 0, 10000);
  const w0 = video().currentTime;
  await wait(2000);
  const w1 = video().currentTime;
  const rtcNote = doc().getElementById('player-note').textContent;
  report('listed=' + !!row + '&thumb=' + thumb + '&workers=' + workers + '&cluster=' + cluster + '&t0=' + t0 + '&t1=' + t1 +
    '&note=' + encodeURIComponent(note) + '&h0=' + h0 + '&h1=' + h1 +
    '&hlsnote=' + encodeURIComponent(hlsNote) + '&w0=' + w0 + '&w1=' + w1 +
    '&rtcnote=' + encodeURIComponent(rtcNote));
};
</script></body></html>"#;

/// Receives one `/report?...` request and passes its query to `tx`.
fn report_listener(tx: mpsc::Sender<String>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut line = String::new();
            let mut reader = BufReader::new(conn.try_clone().expect("clone"));
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
            if let Some(q) = path.strip_prefix("/report?") {
                let _ = tx.send(q.to_string());
            }
            let _ = conn
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    addr
}

/// `METHOD path` over HTTP/1.1: (status, head in lower case, body).
fn request(addr: SocketAddr, method: &str, path: &str) -> (u16, String, Vec<u8>) {
    let (status, head, body) =
        crate::common::http_request(addr, method, path, "Content-Length: 0\r\n");
    (status, head.to_ascii_lowercase(), body)
}

use crate::common::report_field as field;

/// Chromium for the console's screenshots and page: scrollbars hidden.
fn chromium(profile: &std::path::Path) -> Command {
    let mut cmd = crate::common::chromium(profile);
    cmd.arg("--hide-scrollbars");
    cmd
}

#[test]
#[cfg_attr(
    not(all(have_ffmpeg, have_chromium)),
    ignore = "needs ffmpeg and chromium"
)]
fn console_lists_and_plays_a_stream() {
    if !have_ffmpeg() || !have("chromium") {
        return;
    }
    let media = crate::common::scratch("console-media");
    let out = crate::common::scratch("console");
    // Reading needs authorization: the harness page is fetched with a user's password;
    // the console's players get their token from the API (open on loopback).
    let config = media.join("sluice.toml");
    std::fs::write(
        &config,
        "[auth]\nread = true\n\n[[users]]\nname = \"v\"\n\
         password = \"sha256:50e721e49c013f00c62cf59f2163542a9d8df02464efeb615d31051b0fddc326\"\n\
         read = [\"*\"]\n",
    )
    .expect("write the config");
    let server = TestServer::start(&[
        "--media-root",
        media.to_str().expect("utf-8 path"),
        "--config",
        config.to_str().expect("utf-8 path"),
        "--webrtc-udp",
        "127.0.0.1:0",
        "--https",
        "127.0.0.1:0",
        "--tls-self-signed",
    ]);
    let http = server.http;
    let https = server.https.expect("an HTTPS listener");
    assert_eq!(request(http, "GET", "/live/cam.flv").0, 401);

    // The console's files, as any browser gets them.
    let (status, head, body) = request(http, "GET", "/console");
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("content-type: text/html"), "{head}");
    assert!(head.contains("cache-control: no-cache"), "{head}");
    assert!(String::from_utf8_lossy(&body).contains("/console/console.js"));
    for (path, kind) in [
        ("/console/console.js", "text/javascript"),
        ("/console/console.css", "text/css"),
        ("/console/vendor/mpegts.js", "text/javascript"),
        ("/console/vendor/hls.light.min.js", "text/javascript"),
    ] {
        let (status, head, _) = request(http, "GET", path);
        assert_eq!(status, 200, "{path}: {head}");
        assert!(
            head.contains(&format!("content-type: {kind}")),
            "{path}: {head}"
        );
    }
    let (status, head, body) = request(http, "HEAD", "/console/");
    assert_eq!(status, 200, "{head}");
    assert!(body.is_empty());
    assert_eq!(request(http, "GET", "/console/nope.js").0, 404);
    assert_eq!(request(http, "POST", "/console/").0, 405);
    assert_eq!(request(http, "DELETE", "/console/console.js").0, 405);

    let _publisher = publish_test_pattern(
        &format!("rtmp://{}/live/cam", server.rtmp),
        "flv",
        "libx264",
        60,
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while request(http, "GET", "/api/v1/streams/live/cam").0 != 200 {
        assert!(Instant::now() < deadline, "live/cam never appeared");
        std::thread::sleep(Duration::from_millis(200));
    }

    let (tx, rx) = mpsc::channel();
    let listener = report_listener(tx);
    std::fs::write(
        media.join("console-test.html"),
        HARNESS.replace("REPORT", &format!("http://{listener}/report")),
    )
    .expect("write the harness page");
    // Over HTTPS, as deployments serve the console: Chromium speaks HTTP/2 to it, for
    // the players' requests and WHEP's offer too.
    let _browser = Kill(
        chromium(&crate::common::scratch("console-profile-harness"))
            .arg("--ignore-certificate-errors")
            .arg(format!(
                "https://{https}/files/console-test.html?user=v&pass=w"
            ))
            .spawn()
            .expect("start chromium"),
    );
    let report = rx
        .recv_timeout(Duration::from_secs(70))
        .expect("the harness reported");
    assert_eq!(field(&report, "listed"), "true", "{report}");
    assert_eq!(field(&report, "thumb"), "160", "{report}");
    assert_ne!(field(&report, "workers"), "0", "{report}");
    assert_eq!(field(&report, "cluster"), "true", "{report}");
    let t0: f64 = field(&report, "t0").parse().unwrap_or(0.0);
    let t1: f64 = field(&report, "t1").parse().unwrap_or(0.0);
    assert!(
        t0 > 0.0 && t1 > t0 + 1.0,
        "the video did not play: {report}"
    );
    assert!(!field(&report, "note").contains("error"), "{report}");
    let h0: f64 = field(&report, "h0").parse().unwrap_or(0.0);
    let h1: f64 = field(&report, "h1").parse().unwrap_or(0.0);
    assert!(h0 > 0.0 && h1 > h0 + 1.0, "HLS did not play: {report}");
    assert!(!field(&report, "hlsnote").contains("error"), "{report}");
    let w0: f64 = field(&report, "w0").parse().unwrap_or(0.0);
    let w1: f64 = field(&report, "w1").parse().unwrap_or(0.0);
    assert!(w1 > w0 + 1.0, "WebRTC did not play: {report}");
    assert!(field(&report, "rtcnote").contains("WHEP"), "{report}");

    // Screenshots while the harness still plays (a viewer and a client to show).
    for (name, size, page) in [
        ("desktop", "1280,800", ""),
        ("phone", "390,844", ""),
        ("desktop-stream", "1280,800", "#/stream/live/cam"),
        ("phone-stream", "390,844", "#/stream/live/cam"),
    ] {
        let file = out.join(format!("console-{name}.png"));
        let _ = std::fs::remove_file(&file);
        let status = chromium(&crate::common::scratch(&format!("console-profile-{name}")))
            .arg(format!("--screenshot={}", file.display()))
            .arg(format!("--window-size={size}"))
            .arg("--virtual-time-budget=3000")
            .arg("--timeout=8000")
            .arg(format!("http://{http}/console/{page}"))
            .status()
            .expect("chromium screenshot");
        assert!(status.success() && file.exists(), "no screenshot {name}");
        eprintln!("screenshot: {}", file.display());
    }
}
