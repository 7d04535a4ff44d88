//! A real browser player: mpegts.js in headless Chromium plays HTTP-FLV and
//! WebSocket-FLV from Sluice while ffmpeg publishes over RTMP.

mod common;

use common::{have_ffmpeg, TestServer};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn have_chromium() -> bool {
    let ok = Command::new("chromium")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("SLUICE_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "chromium missing but SLUICE_REQUIRE_TOOLS=1"
        );
        eprintln!("skipping: chromium not installed");
    }
    ok
}

const PAGE: &str = r#"<!doctype html>
<html><body><video id="v" muted autoplay></video>
<script src="/mpegts.js"></script>
<script>
const report = (q) => fetch('/report?' + q).catch(() => {});
const video = document.getElementById('v');
let errors = [];
try {
  if (!mpegts.getFeatureList().mseLivePlayback) throw new Error('no MSE live playback');
  const player = mpegts.createPlayer({ type: 'flv', isLive: true, url: 'STREAM_URL' });
  player.on(mpegts.Events.ERROR, (type, detail) => errors.push(type + ':' + detail));
  player.attachMediaElement(video);
  player.load();
  video.play().catch(e => errors.push('play:' + e));
} catch (e) { errors.push('setup:' + e); }
let first = null;
const started = Date.now();
const tick = setInterval(() => {
  if (first === null && video.currentTime > 0) first = video.currentTime;
  if (Date.now() - started > 6000) {
    clearInterval(tick);
    report('t=' + video.currentTime + '&first=' + first + '&err=' + encodeURIComponent(errors.join('|')));
  }
}, 100);
</script></body></html>"#;

/// Serves the page and mpegts.js, and passes the page's report to `tx`.
fn page_server(stream_url: String, tx: mpsc::Sender<String>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let script = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../web/vendor/mpegts.js"
    ))
    .expect("vendored mpegts.js");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut line = String::new();
            let mut reader = BufReader::new(conn.try_clone().expect("clone"));
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).is_err() || h == "\r\n" || h.is_empty() {
                    break;
                }
            }
            let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
            let (kind, body): (&str, Vec<u8>) = if path == "/" {
                (
                    "text/html",
                    PAGE.replace("STREAM_URL", &stream_url).into_bytes(),
                )
            } else if path == "/mpegts.js" {
                ("application/javascript", script.clone())
            } else if let Some(q) = path.strip_prefix("/report?") {
                let _ = tx.send(q.to_string());
                ("text/plain", Vec::new())
            } else {
                ("text/plain", Vec::new())
            };
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = conn.write_all(head.as_bytes());
            let _ = conn.write_all(&body);
        }
    });
    addr
}

fn play_in_chromium(stream_url: String) -> String {
    let (tx, rx) = mpsc::channel();
    let page = page_server(stream_url, tx);
    let profile = common::scratch(&format!("chromium-{}", page.port()));
    let _browser = Kill(
        Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--autoplay-policy=no-user-gesture-required",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(format!("http://{page}/"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromium"),
    );
    rx.recv_timeout(Duration::from_secs(40))
        .expect("the page reported")
}

fn field<'a>(report: &'a str, name: &str) -> &'a str {
    report
        .split('&')
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
        .unwrap_or("")
}

#[test]
fn mpegts_js_plays_http_flv_and_websocket_flv() {
    if !have_ffmpeg() || !have_chromium() {
        return;
    }
    let server = TestServer::start(&[]);
    let _publisher = Kill(
        Command::new("ffmpeg")
            .args(["-hide_banner", "-loglevel", "error", "-re"])
            .args(["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25"])
            .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"])
            .args([
                "-t",
                "60",
                "-c:v",
                "libx264",
                "-preset",
                "ultrafast",
                "-g",
                "25",
                "-pix_fmt",
                "yuv420p",
            ])
            .args(["-c:a", "aac", "-f", "flv"])
            .arg(format!("rtmp://{}/live/browser", server.rtmp))
            .stdin(Stdio::null())
            .spawn()
            .expect("start ffmpeg"),
    );
    std::thread::sleep(Duration::from_millis(1500));
    for url in [
        format!("http://{}/live/browser.flv", server.http),
        format!("ws://{}/live/browser.flv", server.http),
    ] {
        let report = play_in_chromium(url.clone());
        let errors = field(&report, "err");
        assert!(errors.is_empty(), "{url}: player errors {errors}");
        let t: f64 = field(&report, "t").parse().unwrap_or(0.0);
        assert!(t > 3.0, "{url}: video played only to {t} s ({report})");
    }
}
