//! A real browser player: mpegts.js in headless Chromium plays HTTP-FLV and
//! WebSocket-FLV from Sluice while ffmpeg publishes over RTMP; the console's fMP4
//! player plays HTTP-fMP4 and WebSocket-fMP4 through Media Source.

use crate::common::nginx;

use crate::common::{have, have_ffmpeg, publish_test_pattern, Kill, TestServer};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc;
use std::time::Duration;

const PAGE: &str = r#"<!doctype html>
<html><body><video id="v" muted autoplay></video>
<script src="/player.js"></script>
<script>
const report = (q) => fetch('/report?' + q).catch(() => {});
const video = document.getElementById('v');
let errors = [];
// A setup may add figures of its own to the report (`&name=value...`).
let extra = () => '';
try {
  SETUP
  video.play().catch(e => errors.push('play:' + e));
} catch (e) { errors.push('setup:' + e); }
let first = null;
const started = Date.now();
const tick = setInterval(() => {
  if (first === null && video.currentTime > 0) first = (Date.now() - started);
  if (Date.now() - started > WATCH_MS) {
    clearInterval(tick);
    report('t=' + video.currentTime + '&first=' + first + '&err=' + encodeURIComponent(errors.join('|')) + extra());
  }
}, 100);
</script></body></html>"#;

/// mpegts.js playing an FLV URL (HTTP or WebSocket).
const MPEGTS_SETUP: &str = "
  if (!mpegts.getFeatureList().mseLivePlayback) throw new Error('no MSE live playback');
  const player = mpegts.createPlayer({ type: 'flv', isLive: true, url: 'STREAM_URL' });
  player.on(mpegts.Events.ERROR, (type, detail) => errors.push(type + ':' + detail));
  player.attachMediaElement(video);
  player.load();";

/// Sluice's own small Media Source player (`web/console/fmp4.js`) playing an fMP4
/// URL (HTTP or WebSocket). The report says how far the picture advanced once it
/// played (`played`, s: the stream's times are the server's, so `t` starts high), its
/// width and how bright it is (a black picture fails).
const FMP4_SETUP: &str = "
  if (!window.MediaSource) throw new Error('no Media Source');
  SluiceFmp4.play('STREAM_URL', video, (m) => errors.push(m));
  let startAt = null;
  setInterval(() => {
    if (startAt === null && !video.seeking && !video.paused && video.readyState >= 3) startAt = video.currentTime;
  }, 100);
  extra = () => {
    const c = document.createElement('canvas');
    c.width = 64; c.height = 48;
    const g = c.getContext('2d');
    g.drawImage(video, 0, 0, 64, 48);
    const px = g.getImageData(0, 0, 64, 48).data;
    let sum = 0;
    for (let i = 0; i < px.length; i += 4) sum += px[i] + px[i + 1] + px[i + 2];
    return '&played=' + (startAt === null ? 0 : video.currentTime - startAt).toFixed(2) +
      '&w=' + video.videoWidth + '&bright=' + (sum / (px.length / 4) / 3).toFixed(1);
  };";

/// hls.js playing a playlist, with Low-Latency HLS on.
const HLS_SETUP: &str = "
  if (!Hls.isSupported()) throw new Error('hls.js not supported');
  const hls = new Hls({ lowLatencyMode: true });
  hls.on(Hls.Events.ERROR, (e, d) => { if (d.fatal) errors.push(d.type + ':' + d.details); });
  hls.loadSource('STREAM_URL');
  hls.attachMedia(video);
  // Glass-to-glass, less the encoder: the wall clock now minus the program date time
  // (the server's arrival time of the frames) of what is on screen.
  extra = () => '&behind=' + (hls.playingDate ? Date.now() - hls.playingDate.getTime() : '');";

/// [`HLS_SETUP`] watched for a long run: how far behind live it plays each second once
/// playing (`behind` is the list of samples, in ms), hls.js's own latency and target,
/// and its stalls: `BUFFER_STALLED_ERROR`s and the video's `waiting` events once it
/// played.
const HLS_WATCH_SETUP: &str = "
  if (!Hls.isSupported()) throw new Error('hls.js not supported');
  const hls = new Hls({ lowLatencyMode: true });
  let stalled = 0, waiting = 0, playing = false;
  hls.on(Hls.Events.ERROR, (e, d) => {
    if (d.fatal) errors.push(d.type + ':' + d.details);
    if (d.details === Hls.ErrorDetails.BUFFER_STALLED_ERROR) stalled++;
  });
  video.addEventListener('playing', () => { playing = true; });
  video.addEventListener('waiting', () => { if (playing) waiting++; });
  hls.loadSource('STREAM_URL');
  hls.attachMedia(video);
  const behind = [];
  setInterval(() => {
    if (playing && hls.playingDate) behind.push(Date.now() - hls.playingDate.getTime());
  }, 1000);
  extra = () => '&behind=' + behind.join(',') + '&stalled=' + stalled + '&waiting=' + waiting +
    '&latency=' + (hls.latency || 0).toFixed(3) + '&target=' + (hls.targetLatency || 0).toFixed(3);";

/// A WHEP player: Chromium's own WebRTC, receive-only, posting its offer to
/// `STREAM_URL`. The report says how bright the picture is (a canvas sample), so a
/// black screen fails.
pub(crate) const WHEP_SETUP: &str = "
  const pc = new RTCPeerConnection();
  pc.addTransceiver('video', { direction: 'recvonly' });
  pc.addTransceiver('audio', { direction: 'recvonly' });
  // The loudest 100 ms of audio heard (RMS): Chromium feeds a remote track to Web
  // Audio only while a media element plays it too.
  let loudest = 0;
  pc.ontrack = (e) => {
    if (e.track.kind === 'video') video.srcObject = new MediaStream([e.track]);
    if (e.track.kind !== 'audio') return;
    const stream = new MediaStream([e.track]);
    const sink = new Audio();
    sink.muted = true;
    sink.srcObject = stream;
    sink.play().catch(() => {});
    const ctx = new AudioContext();
    const analyser = ctx.createAnalyser();
    ctx.createMediaStreamSource(stream).connect(analyser);
    const pcm = new Float32Array(analyser.fftSize);
    setInterval(() => {
      analyser.getFloatTimeDomainData(pcm);
      const rms = Math.sqrt(pcm.reduce((a, x) => a + x * x, 0) / pcm.length);
      loudest = Math.max(loudest, rms);
    }, 100);
  };
  pc.onconnectionstatechange = () => {
    if (pc.connectionState === 'failed') errors.push('connection failed');
  };
  (async () => {
    await pc.setLocalDescription(await pc.createOffer());
    const r = await fetch('STREAM_URL', {
      method: 'POST', headers: { 'Content-Type': 'application/sdp' },
      body: pc.localDescription.sdp });
    if (r.status !== 201) throw new Error('WHEP answered ' + r.status);
    if (!r.headers.get('Location')) throw new Error('no Location');
    await pc.setRemoteDescription({ type: 'answer', sdp: await r.text() });
  })().catch(e => errors.push('whep:' + e));
  extra = () => {
    const c = document.createElement('canvas');
    c.width = 64; c.height = 48;
    const g = c.getContext('2d');
    g.drawImage(video, 0, 0, 64, 48);
    const px = g.getImageData(0, 0, 64, 48).data;
    let sum = 0;
    for (let i = 0; i < px.length; i += 4) sum += px[i] + px[i + 1] + px[i + 2];
    return '&w=' + video.videoWidth + '&bright=' + (sum / (px.length / 4) / 3).toFixed(1) +
      '&audio=' + loudest.toFixed(4);
  };";

/// A WHIP publisher: Chromium's fake camera and microphone, sent to `STREAM_URL`.
pub(crate) const WHIP_SETUP: &str = "
  (async () => {
    const media = await navigator.mediaDevices.getUserMedia({ video: { width: 320, height: 240 }, audio: true });
    const pc = new RTCPeerConnection();
    for (const t of media.getTracks()) pc.addTransceiver(t, { direction: 'sendonly' });
    video.srcObject = media;
    await pc.setLocalDescription(await pc.createOffer());
    const r = await fetch('STREAM_URL', {
      method: 'POST', headers: { 'Content-Type': 'application/sdp' },
      body: pc.localDescription.sdp });
    if (r.status !== 201) throw new Error('WHIP answered ' + r.status + ': ' + await r.text());
    await pc.setRemoteDescription({ type: 'answer', sdp: await r.text() });
    pc.onconnectionstatechange = () => {
      if (pc.connectionState === 'failed') errors.push('connection failed');
    };
  })().catch(e => errors.push('whip:' + e));";

/// Serves the page and the player script (`script`: a vendored player's file name,
/// or a path below `web/`), and passes the page's report to `tx`.
fn page_server(page: String, script: &str, tx: mpsc::Sender<String>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let folder = if script.contains('/') { "" } else { "vendor/" };
    let script = std::fs::read(format!(
        "{}/../../web/{folder}{script}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("player script");
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
                ("text/html", page.clone().into_bytes())
            } else if path == "/player.js" {
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

/// Plays `stream_url` in headless Chromium with `setup` for `watch_ms`; returns the
/// page's report (`t`, `first`, `err`).
pub(crate) fn play_in_chromium(
    script: &str,
    setup: &str,
    stream_url: &str,
    watch_ms: u32,
) -> String {
    let (tx, rx) = mpsc::channel();
    let html = PAGE
        .replace("SETUP", setup)
        .replace("STREAM_URL", stream_url)
        .replace("WATCH_MS", &watch_ms.to_string());
    let page = page_server(html, script, tx);
    let profile = crate::common::scratch(&format!("chromium-{}", page.port()));
    let _browser = Kill(
        crate::common::chromium(&profile)
            .args([
                "--disable-quic",
                // Our test server's certificate is self-signed.
                "--ignore-certificate-errors",
                "--remote-debugging-port=0",
                // A camera and a microphone for WHIP.
                "--use-fake-device-for-media-stream",
                "--use-fake-ui-for-media-stream",
            ])
            .arg(format!("http://{page}/"))
            .spawn()
            .expect("start chromium"),
    );
    // 40 s covers Chromium's start on a loaded machine; a long watch adds its own.
    let wait = Duration::from_secs(40).max(Duration::from_millis(u64::from(watch_ms) + 32_000));
    rx.recv_timeout(wait).expect("the page reported")
}

use crate::common::report_field as field;

/// What every WHEP page must report: no error, the picture advanced past 3 s, and it
/// is not black.
pub(crate) fn assert_played(report: &str) {
    let errors = field(report, "err");
    assert!(errors.is_empty(), "WHEP errors {errors} ({report})");
    let t: f64 = field(report, "t").parse().unwrap_or(0.0);
    assert!(t > 3.0, "video played only to {t} s ({report})");
    let bright: f64 = field(report, "bright").parse().unwrap_or(0.0);
    assert!(bright > 30.0, "a black picture ({report})");
}

fn publish(server: &TestServer, name: &str) -> Kill {
    let url = format!("rtmp://{}/live/{name}", server.rtmp);
    publish_test_pattern(&url, "flv", "libx264", 60)
}

#[test]
#[cfg_attr(
    not(all(have_ffmpeg, have_chromium)),
    ignore = "needs ffmpeg and chromium"
)]
fn mpegts_js_plays_http_flv_and_websocket_flv() {
    if !have_ffmpeg() || !have("chromium") {
        return;
    }
    let server = TestServer::start(&[]);
    let _publisher = publish(&server, "browser");
    std::thread::sleep(Duration::from_millis(1500));
    for url in [
        format!("http://{}/live/browser.flv", server.http),
        format!("ws://{}/live/browser.flv", server.http),
    ] {
        let report = play_in_chromium("mpegts.js", MPEGTS_SETUP, &url, 6000);
        let errors = field(&report, "err");
        assert!(errors.is_empty(), "{url}: player errors {errors}");
        let t: f64 = field(&report, "t").parse().unwrap_or(0.0);
        assert!(t > 3.0, "{url}: video played only to {t} s ({report})");
    }
}

/// Chromium plays HTTP-fMP4 and WebSocket-fMP4 through Media Source with the
/// console's own player: the init segment, then fragments from a keyframe on.
#[test]
#[cfg_attr(
    not(all(have_ffmpeg, have_chromium)),
    ignore = "needs ffmpeg and chromium"
)]
fn chromium_plays_fmp4_over_http_and_websocket_through_mse() {
    if !have_ffmpeg() || !have("chromium") {
        return;
    }
    let server = TestServer::start(&[]);
    let _publisher = publish(&server, "fmp4");
    std::thread::sleep(Duration::from_millis(1500));
    for url in [
        format!("http://{}/live/fmp4.mp4", server.http),
        format!("ws://{}/live/fmp4.mp4", server.http),
    ] {
        let report = play_in_chromium("console/fmp4.js", FMP4_SETUP, &url, 6000);
        eprintln!("{url}: {report}");
        let errors = field(&report, "err");
        assert!(
            errors.is_empty(),
            "{url}: player errors {errors} ({report})"
        );
        let played: f64 = field(&report, "played").parse().unwrap_or(0.0);
        assert!(played > 3.0, "{url}: played only {played} s ({report})");
        assert_eq!(field(&report, "w"), "320", "{url}: {report}");
        let bright: f64 = field(&report, "bright").parse().unwrap_or(0.0);
        assert!(bright > 30.0, "{url}: a black picture ({report})");
    }
}

/// VP9 and AV1 from Enhanced RTMP play in Chromium over HTTP-fMP4 (`vp09`, `av01`
/// sample entries; the page reads their codecs from the init segment).
///
/// Known to fail (VP9 checked; AV1 not reached): the sample entries say 0x0 for the
/// picture size (the init segment is made from the decoder configurations, which for
/// VP9 do not carry it), and Chromium's Media Source refuses the init segment ("source
/// buffer error"). ffprobe reads both (`http_fmp4::ffprobe_reads_av1_and_vp9_over_http_fmp4`).
/// The fix: the size from the AV1 sequence header, and for VP9 from the start keyframe
/// handed to the preamble.
#[test]
#[ignore = "known gap: VP9/AV1 sample entries without a picture size (see the doc)"]
fn chromium_plays_vp9_and_av1_over_fmp4_through_mse() {
    if !have_ffmpeg() || !have("chromium") {
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
        let frames = ivf_frames(encoder, 4);
        let publisher = publish_enhanced(&server, name, fourcc, frames, 12);
        std::thread::sleep(Duration::from_millis(1500));
        let url = format!("http://{}/live/{name}.mp4", server.http);
        let report = play_in_chromium("console/fmp4.js", FMP4_SETUP, &url, 5000);
        eprintln!("{name} over HTTP-fMP4 in Chromium: {report}");
        let errors = field(&report, "err");
        assert!(
            errors.is_empty(),
            "{name}: player errors {errors} ({report})"
        );
        let played: f64 = field(&report, "played").parse().unwrap_or(0.0);
        assert!(played > 2.5, "{name}: played only {played} s ({report})");
        assert_eq!(field(&report, "w"), "320", "{name}: {report}");
        publisher.join().unwrap();
    }
}

#[test]
#[cfg_attr(
    not(all(have_ffmpeg, have_chromium)),
    ignore = "needs ffmpeg and chromium"
)]
fn hls_js_plays_ts_and_low_latency_hls() {
    if !have_ffmpeg() || !have("chromium") {
        return;
    }
    let server = TestServer::start(&[]);
    let _publisher = publish(&server, "hls");
    // A few segments, so the TS playlist has its usual three to start from.
    std::thread::sleep(Duration::from_millis(6500));
    for url in [
        format!("http://{}/live/hls.m3u8", server.http),
        format!("http://{}/live/hls/index.m3u8", server.http),
    ] {
        let report = play_in_chromium("hls.light.min.js", HLS_SETUP, &url, 8000);
        let errors = field(&report, "err");
        assert!(errors.is_empty(), "{url}: player errors {errors}");
        let t: f64 = field(&report, "t").parse().unwrap_or(0.0);
        assert!(t > 3.0, "{url}: video played only to {t} s ({report})");
        // A figure, not a timed test: printed (see --nocapture), bounded only loosely.
        let behind: f64 = field(&report, "behind").parse().unwrap_or(f64::NAN);
        eprintln!("{url}: hls.js plays {behind:.0} ms behind the server's wall clock");
        assert!(
            behind.is_nan() || behind < 20_000.0,
            "{url}: {behind} ms behind ({report})"
        );
    }
}

/// How far behind live hls.js (Low-Latency mode, its defaults) plays Sluice's LL-HLS
/// over a long run, and how often it stalls: figures for docs/hls.md, not a timed
/// test. Opt-in (it takes over a minute): run it with
/// `cargo test -p sluice-server --test e2e browser::hls_js_low_latency_long_watch -- --ignored --nocapture`.
/// `SLUICE_LLHLS_WATCH_S` sets the watch (60 s), `SLUICE_LLHLS_PART_MS` the server's
/// `--hls-part-ms` (its default otherwise). It asserts only that it played without errors.
#[test]
#[ignore = "a long run for figures: run it explicitly"]
fn hls_js_low_latency_long_watch() {
    if !have_ffmpeg() || !have("chromium") {
        return;
    }
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u32>().ok());
    let watch_s = env("SLUICE_LLHLS_WATCH_S").unwrap_or(60);
    let part_ms = env("SLUICE_LLHLS_PART_MS").map(|ms| ms.to_string());
    let args: Vec<&str> = part_ms
        .as_deref()
        .map_or_else(Vec::new, |ms| vec!["--hls-part-ms", ms]);
    let server = TestServer::start(&args);
    let url = format!("rtmp://{}/live/long", server.rtmp);
    let _publisher = publish_test_pattern(&url, "flv", "libx264", watch_s + 30);
    std::thread::sleep(Duration::from_millis(4000));
    let url = format!("http://{}/live/long/index.m3u8", server.http);
    let report = play_in_chromium("hls.light.min.js", HLS_WATCH_SETUP, &url, watch_s * 1000);
    let errors = field(&report, "err");
    assert!(errors.is_empty(), "player errors {errors} ({report})");
    let mut behind: Vec<f64> = field(&report, "behind")
        .split(',')
        .filter_map(|v| v.parse().ok())
        .collect();
    assert!(!behind.is_empty(), "never played ({report})");
    let last = behind.last().copied().unwrap_or(f64::NAN);
    behind.sort_by(f64::total_cmp);
    let at = |q: f64| behind[((behind.len() - 1) as f64 * q).round() as usize];
    eprintln!(
        "hls.js over {watch_s} s: behind live median {:.0} ms (min {:.0}, max {:.0}, last {last:.0}) \
         over {} samples; {} stalls (BUFFER_STALLED_ERROR), {} waiting; hls.js latency {} s, \
         target {} s",
        at(0.5),
        at(0.0),
        at(1.0),
        behind.len(),
        field(&report, "stalled"),
        field(&report, "waiting"),
        field(&report, "latency"),
        field(&report, "target"),
    );
}

#[test]
#[cfg_attr(
    not(all(have_ffmpeg, have_chromium, have_nginx)),
    ignore = "needs ffmpeg, chromium and nginx"
)]
fn hls_js_plays_low_latency_hls_through_nginx() {
    if !have_ffmpeg() || !have("chromium") {
        return;
    }
    let server = TestServer::start(&[]);
    // The cache of docs/cdn.md: blocking reloads and parts come through it.
    let Some(cache) = nginx::NginxCache::start("browser-cdn", server.http) else {
        return;
    };
    let _publisher = publish(&server, "cdn");
    std::thread::sleep(Duration::from_millis(4000));
    let url = format!("http://{}/live/cdn/index.m3u8", cache.addr);
    let report = play_in_chromium("hls.light.min.js", HLS_SETUP, &url, 8000);
    let errors = field(&report, "err");
    assert!(errors.is_empty(), "{url}: player errors {errors}");
    let t: f64 = field(&report, "t").parse().unwrap_or(0.0);
    assert!(t > 3.0, "{url}: video played only to {t} s ({report})");
    let behind: f64 = field(&report, "behind").parse().unwrap_or(f64::NAN);
    eprintln!("through nginx, hls.js plays {behind:.0} ms behind the server's wall clock");
    let log = cache.log();
    let blocking = log.iter().filter(|l| l.uri.contains("_HLS_msn=")).count();
    let parts = log
        .iter()
        .filter(|l| l.uri.ends_with(".m4s") && l.uri.matches('.').count() == 2)
        .count();
    assert!(
        blocking >= 5 && parts >= 5,
        "{blocking} blocking reloads and {parts} parts through the cache"
    );
    // A hinted part may never come (its segment ended first): a 404 the player expects.
    let failed: Vec<_> = log
        .iter()
        .filter(|l| l.status != 200 && !(l.status == 404 && l.uri.ends_with(".m4s")))
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
}

#[test]
#[cfg_attr(
    not(all(have_ffmpeg, have_chromium)),
    ignore = "needs ffmpeg and chromium"
)]
fn players_over_https_and_http2() {
    if !have_ffmpeg() || !have("chromium") {
        return;
    }
    let server = TestServer::start(&["--https", "127.0.0.1:0", "--tls-self-signed"]);
    let https = server.https.expect("an HTTPS listener");
    let _publisher = publish(&server, "tls");
    std::thread::sleep(Duration::from_millis(4000));
    // Chromium negotiates h2 with Sluice's HTTPS listener for every request here.
    for (script, setup, url) in [
        (
            "hls.light.min.js",
            HLS_SETUP,
            format!("https://{https}/live/tls/index.m3u8"),
        ),
        (
            "mpegts.js",
            MPEGTS_SETUP,
            format!("https://{https}/live/tls.flv"),
        ),
    ] {
        let report = play_in_chromium(script, setup, &url, 7000);
        let errors = field(&report, "err");
        assert!(errors.is_empty(), "{url}: player errors {errors}");
        let t: f64 = field(&report, "t").parse().unwrap_or(0.0);
        assert!(t > 3.0, "{url}: video played only to {t} s ({report})");
    }
}

#[test]
#[cfg_attr(
    not(all(have_ffmpeg, have_chromium)),
    ignore = "needs ffmpeg and chromium"
)]
fn chromium_plays_whep() {
    if !have_ffmpeg() || !have("chromium") {
        return;
    }
    let server = TestServer::start(&["--webrtc-udp", "127.0.0.1:0"]);
    let _publisher = publish(&server, "rtc");
    std::thread::sleep(Duration::from_millis(1500));
    let url = format!("http://{}/live/rtc/whep", server.http);
    let player = std::thread::spawn(move || play_in_chromium("mpegts.js", WHEP_SETUP, &url, 6000));
    // While it plays, the API counts it as a WebRTC viewer (not an RTSP one).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let viewers = loop {
        let (_, _, body) =
            crate::common::http_request(server.http, "GET", "/api/v1/streams/live/rtc", "");
        let stream: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
        if stream["viewers"]["webrtc"] == 1 || std::time::Instant::now() > deadline {
            break stream["viewers"].clone();
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let report = player.join().expect("the player page");
    assert_eq!(viewers["webrtc"], 1, "{viewers}");
    assert_eq!(viewers["rtsp"], 0, "{viewers}");
    assert_played(&report);
    assert_eq!(field(&report, "w"), "320", "{report}");
    // The publisher's AAC tone, transcoded to Opus, is heard.
    let audio: f64 = field(&report, "audio").parse().unwrap_or(0.0);
    assert!(audio > 0.05, "silence ({report})");
    let first: f64 = field(&report, "first").parse().unwrap_or(f64::MAX);
    eprintln!("WHEP in Chromium: first picture after {first} ms; {report}");
}

/// A network without UDP: the server offers ICE over TCP only, and Chromium plays
/// through it.
#[test]
#[cfg_attr(
    not(all(have_ffmpeg, have_chromium)),
    ignore = "needs ffmpeg and chromium"
)]
fn chromium_plays_whep_over_ice_tcp() {
    if !have_ffmpeg() || !have("chromium") {
        return;
    }
    let server = TestServer::start(&["--webrtc-udp", "off", "--webrtc-tcp", "127.0.0.1:0"]);
    let _publisher = publish(&server, "rtctcp");
    std::thread::sleep(Duration::from_millis(1500));
    let url = format!("http://{}/live/rtctcp/whep", server.http);
    let report = play_in_chromium("mpegts.js", WHEP_SETUP, &url, 6000);
    assert_played(&report);
    eprintln!("WHEP over ICE-TCP in Chromium: {report}");
}

#[test]
#[cfg_attr(not(have_chromium), ignore = "needs chromium")]
fn chromium_publishes_whip_and_another_plays_it_over_whep() {
    if !have("chromium") {
        return;
    }
    // Over HTTPS, where Chromium speaks HTTP/2 for the offers.
    let server = TestServer::start(&[
        "--webrtc-udp",
        "127.0.0.1:0",
        "--https",
        "127.0.0.1:0",
        "--tls-self-signed",
    ]);
    let https = server.https.expect("an HTTPS listener");
    let whip = format!("https://{https}/live/chrome/whip");
    let publisher =
        std::thread::spawn(move || play_in_chromium("mpegts.js", WHIP_SETUP, &whip, 14000));
    std::thread::sleep(Duration::from_millis(3000));
    let url = format!("https://{https}/live/chrome/whep");
    // The microphone's Opus is a track of the stream.
    let (_, _, api) =
        crate::common::http_request(server.http, "GET", "/api/v1/streams/live/chrome", "");
    let api = String::from_utf8_lossy(&api).replace(['\n', ' '], "");
    assert!(
        api.contains(r#""audio":{"channels":2,"codec":"opus"}"#),
        "{api}"
    );
    let report = play_in_chromium("mpegts.js", WHEP_SETUP, &url, 6000);
    let published = publisher.join().expect("the publisher page");
    assert!(field(&published, "err").is_empty(), "WHIP: {published}");
    assert_played(&report);
    // The fake microphone's beeps, passed through as Opus.
    let audio: f64 = field(&report, "audio").parse().unwrap_or(0.0);
    assert!(audio > 0.05, "silence ({report})");
    eprintln!("WHIP to WHEP in Chromium: {report}");
}

/// What ffmpeg makes of the audio of `url`: ffprobe's streams (`codec_name,codec_type,
/// start_time` lines), the errors ffmpeg reports decoding 3 s of the audio, and its
/// loudest sample (dBFS).
fn read_audio(url: &str) -> (String, Vec<String>, f64) {
    let probe = std::process::Command::new("ffprobe")
        .args(["-v", "error", "-rw_timeout", "10000000"])
        .args(["-show_entries", "stream=codec_name,codec_type,start_time"])
        .args(["-of", "csv=p=0", url])
        .output()
        .expect("ffprobe");
    let streams = String::from_utf8_lossy(&probe.stdout).into_owned();
    let decode = std::process::Command::new("ffmpeg")
        .args(["-hide_banner", "-nostats", "-loglevel", "level+info"])
        .args(["-rw_timeout", "10000000", "-i", url, "-t", "3"])
        .args(["-map", "0:a:0", "-af", "volumedetect", "-f", "null", "-"])
        .output()
        .expect("ffmpeg");
    let log = String::from_utf8_lossy(&decode.stderr);
    let errors = log
        .lines()
        .filter(|l| l.contains("[error]") || l.contains("[fatal]"))
        .map(str::to_owned)
        .collect();
    let loudest = log
        .lines()
        .find_map(|l| l.split("max_volume:").nth(1))
        .and_then(|v| v.trim().trim_end_matches("dB").trim().parse().ok())
        .unwrap_or(f64::NEG_INFINITY);
    (streams, errors, loudest)
}

/// The start time of the stream of `kind` in ffprobe's lines, and its codec.
fn start_of<'a>(streams: &'a str, kind: &str) -> Option<(&'a str, f64)> {
    streams.lines().find_map(|l| {
        let mut f = l.split(',');
        let (codec, k, start) = (f.next()?, f.next()?, f.next()?);
        (k == kind).then(|| (codec, start.trim().parse().unwrap_or(f64::NAN)))
    })
}

/// Chromium publishes its fake camera and microphone (H.264 and Opus) over WHIP; the
/// players that know no Opus (RTMP, HTTP-FLV, HLS's MPEG-TS) get AAC made from it,
/// which ffmpeg decodes without an error, is not silent (the fake microphone beeps),
/// and starts with the video: within one AAC frame (1024 samples at 48 kHz) over RTMP
/// and FLV, within 100 ms in HLS segments (see below). HTTP-fMP4 players get the Opus
/// itself.
#[test]
#[cfg_attr(
    not(all(have_ffmpeg, have_chromium)),
    ignore = "needs ffmpeg and chromium"
)]
fn chromium_publishes_opus_over_whip_and_rtmp_flv_hls_ts_and_srt_players_get_aac() {
    if !have_ffmpeg() || !have("chromium") {
        return;
    }
    let server = TestServer::start(&["--webrtc-udp", "127.0.0.1:0"]);
    let whip = format!("http://{}/live/opus/whip", server.http);
    let publisher =
        std::thread::spawn(move || play_in_chromium("mpegts.js", WHIP_SETUP, &whip, 22000));
    // Live, with its Opus track known.
    let deadline = std::time::Instant::now() + Duration::from_secs(25);
    loop {
        let (_, _, api) =
            crate::common::http_request(server.http, "GET", "/api/v1/streams/live/opus", "");
        if String::from_utf8_lossy(&api).contains("opus") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no Opus published");
        std::thread::sleep(Duration::from_millis(100));
    }
    // HLS segments from the first request on, the first ones from the GOP cache, made
    // before any AAC was: wait for three made live, which ffprobe then reads.
    let last_segment = || {
        let (_, _, m3u8) = crate::common::http_request(server.http, "GET", "/live/opus.m3u8", "");
        let m3u8 = String::from_utf8_lossy(&m3u8).into_owned();
        let first: Option<u64> = m3u8
            .lines()
            .find_map(|l| l.strip_prefix("#EXT-X-MEDIA-SEQUENCE:"))
            .and_then(|n| n.trim().parse().ok());
        let count = m3u8.matches("#EXTINF").count() as u64;
        first.filter(|_| count > 0).map(|f| f + count - 1)
    };
    let mut started = None;
    loop {
        match (started, last_segment()) {
            (None, Some(last)) => started = Some(last),
            (Some(at), Some(last)) if last >= at + 3 => break,
            _ => {}
        }
        assert!(std::time::Instant::now() < deadline, "no live HLS segments");
        std::thread::sleep(Duration::from_millis(200));
    }
    let urls = [
        format!("rtmp://{}/live/opus", server.rtmp),
        format!("http://{}/live/opus.flv", server.http),
        format!("http://{}/live/opus.m3u8", server.http),
        format!(
            "srt://127.0.0.1:{}?streamid=read:live/opus",
            server.srt.expect("SRT").port()
        ),
        // fMP4 carries Opus: its players get the published audio itself.
        format!("http://{}/live/opus.mp4", server.http),
    ];
    let readers: Vec<_> = urls
        .into_iter()
        .map(|url| std::thread::spawn(move || (read_audio(&url), url)))
        .collect();
    // The AAC of a moment comes out of the encoder 2048 samples (43 ms) later, and
    // the thread's latency on: HLS may have cut a segment at a keyframe meanwhile, and
    // that AAC opens the next segment, before its video (the audio stays continuous,
    // on its own times): 100 ms is allowed there. RTMP and FLV players start at a
    // keyframe and get no AAC that ends before it.
    let one_frame = 1024.0 / 48_000.0;
    for reader in readers {
        let ((streams, errors, loudest), url) = reader.join().expect("a reader");
        let audio = start_of(&streams, "audio");
        let codec = if url.ends_with(".mp4") { "opus" } else { "aac" };
        assert_eq!(audio.map(|a| a.0), Some(codec), "{url}: {streams}");
        assert!(errors.is_empty(), "{url}: {errors:?}");
        assert!(loudest > -30.0, "{url}: silence (max {loudest} dB)");
        let (_, a) = audio.expect("audio");
        let (_, v) = start_of(&streams, "video").expect("video");
        // FLV's times are whole milliseconds.
        // TS (HLS, SRT) carries what the muxer had when the player came; fMP4 the
        // Opus frames that came after the keyframe (the encoders' clocks differ).
        let within = if url.ends_with(".m3u8") || url.ends_with(".mp4") || url.starts_with("srt:") {
            0.1
        } else {
            one_frame + 0.001
        };
        assert!(
            (a - v).abs() <= within,
            "{url}: audio starts at {a} s, video at {v} s"
        );
        eprintln!("{url}: {streams:?}, max volume {loudest} dB");
    }
    let published = publisher.join().expect("the publisher page");
    assert!(field(&published, "err").is_empty(), "WHIP: {published}");
}

/// A stream with B-frames (x264's default, OBS's too) played by Chromium over WHEP:
/// the frames go out in decode order with their presentation times as RTP timestamps,
/// the server flags the stream (API `b_frames`, a log line), and Chromium plays it
/// whole (its decoder reorders). Other WebRTC players may not (docs/webrtc.md).
#[test]
#[cfg_attr(
    not(all(have_ffmpeg, have_chromium)),
    ignore = "needs ffmpeg and chromium"
)]
fn chromium_plays_a_stream_with_b_frames_over_whep() {
    if !have_ffmpeg() || !have("chromium") {
        return;
    }
    let server = TestServer::start(&["--webrtc-udp", "127.0.0.1:0"]);
    let clip = crate::common::test_media().join("h264_bframes_720p.flv");
    let _publisher = Kill(
        std::process::Command::new("ffmpeg")
            .args([
                "-hide_banner",
                "-loglevel",
                "error",
                "-re",
                "-stream_loop",
                "-1",
                "-i",
            ])
            .arg(&clip)
            .args(["-c", "copy", "-f", "flv"])
            .arg(format!("rtmp://{}/live/bf", server.rtmp))
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("ffmpeg"),
    );
    std::thread::sleep(Duration::from_millis(2000));
    let (status, _, body) =
        crate::common::http_request(server.http, "GET", "/api/v1/streams/live/bf", "");
    assert_eq!(status, 200);
    let body = String::from_utf8_lossy(&body);
    assert!(body.contains("\"b_frames\": true"), "{body}");
    let url = format!("http://{}/live/bf/whep", server.http);
    let report = play_in_chromium("mpegts.js", WHEP_SETUP, &url, 6000);
    eprintln!("WHEP of a B-frame stream in Chromium: {report}");
    assert_played(&report);
    assert_eq!(field(&report, "w"), "1280", "{report}");
}

/// Frames of a clip ffmpeg encodes with `encoder` into IVF (VP8, VP9, AV1): each with
/// its time in ms and whether it is a keyframe.
pub(crate) fn ivf_frames(encoder: &[&str], seconds: u32) -> Vec<(i64, bool, Vec<u8>)> {
    let file = crate::common::scratch("browser-codecs").join(format!("{}.ivf", encoder[0]));
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let ok = std::process::Command::new("ffmpeg")
        .args(["-v", "error", "-y", "-f", "lavfi", "-i"])
        .arg(format!("testsrc2=size=320x240:rate=25:duration={seconds}"))
        .arg("-c:v")
        .args(encoder)
        .args([
            "-g", "25", "-b:v", "400k", "-pix_fmt", "yuv420p", "-f", "ivf",
        ])
        .arg(&file)
        .status()
        .unwrap()
        .success();
    assert!(ok, "ffmpeg encoded with {encoder:?}");
    let data = std::fs::read(&file).unwrap();
    assert_eq!(&data[..4], b"DKIF");
    let fourcc = &data[8..12];
    let rate = u32::from_le_bytes(data[16..20].try_into().unwrap()) as i64;
    let scale = u32::from_le_bytes(data[20..24].try_into().unwrap()).max(1) as i64;
    let mut at = usize::from(u16::from_le_bytes([data[6], data[7]]));
    let mut frames = Vec::new();
    while at + 12 <= data.len() {
        let len = u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize;
        let pts = i64::from_le_bytes(data[at + 4..at + 12].try_into().unwrap());
        let frame = data[at + 12..at + 12 + len].to_vec();
        at += 12 + len;
        let keyframe = match fourcc {
            b"VP80" => frame[0] & 1 == 0,
            // Profile 0: frame marker, profile, show_existing_frame, frame_type.
            b"VP90" => frame[0] & 0x0c == 0,
            // A temporal unit that carries a sequence header starts a sequence.
            _ => av1_obus(&frame).iter().any(|o| (o[0] >> 3) & 0xf == 1),
        };
        frames.push((pts * scale * 1000 / rate, keyframe, frame));
    }
    frames
}

/// The OBUs of an AV1 temporal unit (each with its size field), in order.
fn av1_obus(mut tu: &[u8]) -> Vec<&[u8]> {
    let mut obus = Vec::new();
    while let Some(&header) = tu.first() {
        let ext = usize::from(header & 4 != 0);
        let (mut size, mut n, mut shift) = (0usize, 0, 0);
        while let Some(&b) = tu.get(1 + ext + n) {
            size |= usize::from(b & 0x7f) << shift;
            shift += 7;
            n += 1;
            if b & 0x80 == 0 {
                break;
            }
        }
        let end = (1 + ext + n + size).min(tu.len());
        obus.push(&tu[..end]);
        tu = &tu[end..];
    }
    obus
}

/// Publishes `frames` over Enhanced RTMP (FourCC `fourcc`) to `live/{name}` from a
/// thread of its own, looping until `seconds` passed.
pub(crate) fn publish_enhanced(
    server: &TestServer,
    name: &str,
    fourcc: &[u8; 4],
    frames: Vec<(i64, bool, Vec<u8>)>,
    seconds: u64,
) -> std::thread::JoinHandle<()> {
    use bytes::{Bytes, BytesMut};
    use sluice_media::flv::{video_frame_header, write_video_config, TAG_VIDEO};
    use sluice_media::{Track, TrackConfig};
    let record = match fourcc {
        b"av01" => {
            let first = &frames[0].2;
            let header = av1_obus(first)
                .into_iter()
                .find(|o| (o[0] >> 3) & 0xf == 1)
                .expect("a sequence header")
                .to_vec();
            // av1C: version 1, main profile, 4:2:0; then the sequence header OBU.
            [vec![0x81, 0x08, 0x0c, 0x00], header].concat()
        }
        // vpcC: profile 0, level 3.1, 8 bits 4:2:0, BT.709, no init data.
        _ => vec![0, 31, 0x82, 1, 1, 1, 0, 0],
    };
    let record = Bytes::from(record);
    let track = Track::new(match fourcc {
        b"av01" => TrackConfig::Av1 { record },
        b"vp09" => TrackConfig::Vp9 { record },
        _ => TrackConfig::Vp8 { record },
    });
    let mut tags = Vec::new();
    let mut body = BytesMut::new();
    write_video_config(&mut body, &track).unwrap();
    tags.push(sluice_bench::Tag {
        tag_type: TAG_VIDEO,
        ts_ms: 0,
        body: body.split().freeze(),
    });
    let last = frames.last().map_or(0, |f| f.0);
    for (ms, keyframe, data) in frames {
        video_frame_header(&mut body, &track, keyframe, 0).unwrap();
        body.extend_from_slice(&data);
        tags.push(sluice_bench::Tag {
            tag_type: TAG_VIDEO,
            ts_ms: ms,
            body: body.split().freeze(),
        });
    }
    let clip = sluice_bench::clip::Clip {
        tags,
        duration_ms: last + 40,
    };
    let (rtmp, name) = (server.rtmp, name.to_owned());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut conn = sluice_bench::rtmp::RtmpConn::connect(rtmp, "live", false)
                .await
                .unwrap();
            conn.publish(&name).await.unwrap();
            let until = tokio::time::Instant::now() + Duration::from_secs(seconds);
            sluice_bench::publish::publish_clip(&mut conn, &clip, until, true, None)
                .await
                .unwrap();
        });
    })
}

/// VP8, VP9 and AV1 from Enhanced RTMP, packetized once per stream, play in Chromium
/// over WHEP: the picture advances and is not black.
#[test]
#[cfg_attr(
    not(all(have_ffmpeg, have_chromium)),
    ignore = "needs ffmpeg and chromium"
)]
fn chromium_plays_vp8_vp9_and_av1_from_enhanced_rtmp_over_whep() {
    if !have_ffmpeg() || !have("chromium") {
        return;
    }
    let server = TestServer::start(&["--webrtc-udp", "127.0.0.1:0"]);
    let codecs: [(&str, &[u8; 4], &[&str]); 3] = [
        (
            "vp8",
            b"vp08",
            &["libvpx", "-deadline", "realtime", "-cpu-used", "8"],
        ),
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
        let frames = ivf_frames(encoder, 4);
        assert!(
            frames.len() >= 90 && frames[0].1,
            "{name}: {} frames",
            frames.len()
        );
        let publisher = publish_enhanced(&server, name, fourcc, frames, 12);
        std::thread::sleep(Duration::from_millis(1500));
        let url = format!("http://{}/live/{name}/whep", server.http);
        let report = play_in_chromium("mpegts.js", WHEP_SETUP, &url, 5000);
        eprintln!("{name} over WHEP in Chromium: {report}");
        assert_played(&report);
        assert_eq!(field(&report, "w"), "320", "{name}: {report}");
        publisher.join().unwrap();
    }
}

/// A cookie-less HLS player: polls the playlist at `path` twice a target duration and
/// fetches each new segment once (the last three at its start), until `stop`.
fn raw_hls_viewer(
    http: SocketAddr,
    path: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    let mut fetched = std::collections::HashSet::new();
    let mut first = true;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let (status, _, body) = crate::common::http_request(http, "GET", &path, "");
        if status == 200 {
            let playlist = String::from_utf8_lossy(&body).to_string();
            let uris: Vec<&str> = playlist
                .lines()
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .collect();
            let skip = if first {
                uris.len().saturating_sub(3)
            } else {
                0
            };
            first = false;
            let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
            for uri in uris.into_iter().skip(skip) {
                if fetched.insert(uri.to_string()) {
                    let _ = crate::common::http_request(http, "GET", &format!("{dir}/{uri}"), "");
                }
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// HLS viewers that send no cookie back are each counted once: hls.js on a page of
/// another origin (it sends no credentials there), ffmpeg, and 20 raw cookie-less
/// players, each on a stream of its own. A count kept by cookie made a new viewer of
/// every playlist poll of such a player.
#[test]
#[cfg_attr(
    not(all(have_ffmpeg, have_chromium)),
    ignore = "needs ffmpeg and chromium"
)]
fn hls_viewers_are_counted_once_without_cookies() {
    if !have_ffmpeg() || !have("chromium") {
        return;
    }
    let server = TestServer::start(&["--hls-segment-ms", "1000"]);
    let urls = ["hlsjs", "ffmpeg", "raw"].map(|n| format!("rtmp://{}/live/{n}", server.rtmp));
    let _publisher = crate::common::publish_test_pattern_to_all(&urls, 40);
    for name in ["hlsjs", "ffmpeg", "raw"] {
        crate::common::wait_live(server.http, &format!("live/{name}"));
    }
    std::thread::sleep(Duration::from_millis(3000));
    // hls.js in Low-Latency mode: it fetches parts (the first part of each segment
    // counts it); ffmpeg and the raw players fetch TS segments.
    let hlsjs_url = format!("http://{}/live/hlsjs/index.m3u8", server.http);
    let hlsjs = std::thread::spawn(move || {
        play_in_chromium("hls.light.min.js", HLS_SETUP, &hlsjs_url, 14000)
    });
    let _ffmpeg = Kill(
        std::process::Command::new("ffmpeg")
            .args(["-hide_banner", "-loglevel", "error", "-i"])
            .arg(format!("http://{}/live/ffmpeg.m3u8", server.http))
            .args(["-c", "copy", "-f", "null", "-"])
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("start the ffmpeg player"),
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let raw: Vec<_> = (0..20)
        .map(|_| {
            let stop = stop.clone();
            let http = server.http;
            std::thread::spawn(move || raw_hls_viewer(http, "/live/raw.m3u8".into(), stop))
        })
        .collect();
    // Long enough for every player to fetch several segments, and for a count kept by
    // cookie to have made many viewers of each poll.
    std::thread::sleep(Duration::from_millis(10_000));
    let hls = |name: &str| {
        let (_, _, body) = crate::common::http_request(
            server.http,
            "GET",
            &format!("/api/v1/streams/live/{name}"),
            "",
        );
        let v: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
        v["viewers"]["hls"].as_u64().unwrap_or(u64::MAX)
    };
    let counts = (hls("hlsjs"), hls("ffmpeg"), hls("raw"));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in raw {
        r.join().expect("a raw viewer");
    }
    let report = hlsjs.join().expect("the hls.js page");
    eprintln!("HLS viewers (hls.js, ffmpeg, raw): {counts:?}; hls.js: {report}");
    assert!(field(&report, "err").is_empty(), "hls.js: {report}");
    assert_eq!(counts, (1, 1, 20), "HLS viewers (hls.js, ffmpeg, raw)");
}
