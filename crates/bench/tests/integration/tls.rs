//! `sluice-bench play` over TLS end to end: HLS (MPEG-TS), Low-Latency HLS and
//! HTTP-FLV players on `https://` URLs against Sluice's HTTPS listener (run in this
//! process through `sluice_server`, fed by `sluice-bench publish` over RTMP): with
//! `--insecure` against a self-signed certificate, and with `--ca` (right and wrong
//! roots, WebSocket-FLV over `wss://` too) against a certificate made here.

use crate::common::{bench, report, scratch, u, write_clip};
use clap::Parser;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// Sluice with RTMP in and HTTPS out (no plain HTTP), one-second HLS segments (the
/// clip has a keyframe each second) so that players find a live edge quickly.
fn start_server(tls: &[&str]) -> sluice_server::Server {
    let mut args = vec![
        "sluice",
        "--rtmp",
        "127.0.0.1:0",
        "--rtsp",
        "off",
        "--http",
        "off",
        "--https",
        "127.0.0.1:0",
        "--hls-segment-ms",
        "1000",
        "--hls-part-ms",
        "250",
        "--workers",
        "2",
        "--srt",
        "off",
        "--webrtc-udp",
        "off",
        "--log",
        "warn",
    ];
    args.extend_from_slice(tls);
    let cli = sluice_server::Cli::parse_from(args);
    let config = sluice_server::Config::load(&cli).expect("config");
    sluice_server::Server::start(config).expect("start sluice")
}

/// `sluice-bench publish` of a looped 2 s clip to live/`name` for `seconds`.
fn publish(
    server: &sluice_server::Server,
    dir: &Path,
    name: &str,
    seconds: u32,
) -> std::process::Child {
    let clip = dir.join("clip.flv");
    write_clip(&clip);
    let rtmp = server.rtmp.expect("rtmp");
    bench(&[
        "publish",
        "--url",
        &format!("rtmp://{rtmp}/live/{name}"),
        "--clip",
        clip.to_str().expect("path"),
        "--duration",
        &format!("{seconds}s"),
        "--quiet",
    ])
}

/// `sluice-bench play` of `url` by `n` players for `seconds`, with `tls` flags.
fn play(
    protocol: &str,
    url: &str,
    n: u32,
    seconds: u32,
    tls: &[&str],
    json: &Path,
) -> std::process::Child {
    let (n, duration) = (n.to_string(), format!("{seconds}s"));
    let mut args = vec![
        "play",
        "--protocol",
        protocol,
        "--url",
        url,
        "-n",
        &n,
        "--ramp",
        "100/s",
        "--duration",
        &duration,
        "--quiet",
        "--json",
        json.to_str().expect("path"),
    ];
    args.extend_from_slice(tls);
    bench(&args)
}

/// Every player played, without an error, over TLS 1.3 with HTTP/1.1.
fn check_ok(r: &Value, n: u64, what: &str) {
    assert_eq!(u(&r["ok"]), n, "{what}: {r}");
    assert_eq!(u(&r["failed"]), 0, "{what}: {r}");
    assert_eq!(r["errors"].as_object().map(|e| e.len()), Some(0), "{what}");
    let tls = r["tls"].as_str().unwrap_or_default();
    assert!(
        tls.starts_with("TLSv1_3 ") && tls.ends_with(" http/1.1"),
        "{what}: tls {tls:?}"
    );
    assert_eq!(r["players"].as_array().map(Vec::len), Some(n as usize));
    for p in r["players"].as_array().expect("players") {
        assert!(u(&p["bytes"]) > 0, "{what}: {p}");
        assert!(p["first_keyframe_ms"].as_f64().is_some(), "{what}: {p}");
        assert!(p["error"].is_null(), "{what}: {p}");
    }
}

#[test]
fn hls_ll_hls_and_flv_players_over_https() {
    let started = Instant::now();
    let server = start_server(&["--tls-self-signed"]);
    let https = server.https.expect("an HTTPS listener");
    let dir = scratch("tls");
    let mut publisher = publish(&server, &dir, "cam", 12);
    // Three one-second segments before the HLS players come (they start three back).
    std::thread::sleep(Duration::from_millis(3300));
    let secs = 5;
    let insecure = ["--insecure"];
    let (hls_json, ll_json, flv_json) = (
        dir.join("hls.json"),
        dir.join("ll.json"),
        dir.join("flv.json"),
    );
    let url = |path: &str| format!("https://{https}/live/{path}");
    let hls = play("hls", &url("cam.m3u8"), 20, secs, &insecure, &hls_json);
    let ll = play(
        "ll-hls",
        &url("cam/index.m3u8"),
        5,
        secs,
        &insecure,
        &ll_json,
    );
    let flv = play("flv", &url("cam.flv"), 5, secs, &insecure, &flv_json);
    let (hls, ll, flv) = (
        report(hls, &hls_json),
        report(ll, &ll_json),
        report(flv, &flv_json),
    );
    let _ = publisher.kill();
    let _ = publisher.wait();
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);

    check_ok(&hls, 20, "hls");
    check_ok(&ll, 5, "ll-hls");
    check_ok(&flv, 5, "flv");
    for p in hls["players"].as_array().expect("players") {
        // Three segments back from the edge, then one a second for five seconds.
        assert!(u(&p["segments"]) >= 5, "hls: {p}");
        assert_eq!(u(&p["misses"]), 0, "hls: {p}");
    }
    for p in ll["players"].as_array().expect("players") {
        // 250 ms parts for five seconds, less the start.
        assert!(u(&p["segments"]) >= 12, "ll-hls: {p}");
    }
    // The publisher's stamps, found inside TS segments and fMP4 parts: a frame waits
    // for its segment (1 s) or part (250 ms) to end, then for the player's request.
    for (r, what, most) in [(&hls, "hls", 3000.0), (&ll, "ll-hls", 1500.0)] {
        for p in r["players"].as_array().expect("players") {
            let l = &p["publish_latency_ms"];
            assert!(u(&l["n"]) >= 10, "{what}: no stamps: {p}");
            let p50 = l["p50"].as_f64().expect("p50");
            assert!((0.0..most).contains(&p50), "{what}: latency {l}");
        }
    }
    for p in flv["players"].as_array().expect("players") {
        // 25 fps from a keyframe on, for five seconds less the ramp and start.
        assert!(u(&p["video_frames"]) >= 100, "flv: {p}");
        assert!(u(&p["audio_frames"]) >= 100, "flv: {p}");
        assert_eq!(u(&p["stalls"]), 0, "flv: {p}");
    }
    // The same payload as over HTTP: a 2 s clip of ~150 kB/s.
    assert!(u(&flv["bytes_total"]) > 5 * 400_000, "flv: {flv}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn ca_roots_are_checked() {
    let dir = scratch("tls-ca");
    // A root, and the server's certificate for 127.0.0.1 signed by it.
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).expect("root");
    let ca_issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .expect("params")
        .signed_by(&key, &ca_issuer)
        .expect("certificate");
    let (cert_pem, key_pem, ca_pem) = (
        dir.join("cert.pem"),
        dir.join("key.pem"),
        dir.join("ca.pem"),
    );
    std::fs::write(&cert_pem, cert.pem()).expect("write");
    std::fs::write(&key_pem, key.serialize_pem()).expect("write");
    std::fs::write(&ca_pem, ca_cert.pem()).expect("write");
    // Another root, which did not sign it.
    let other = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).expect("other");
    let other_pem = dir.join("other.pem");
    std::fs::write(&other_pem, other.cert.pem()).expect("write");

    let server = start_server(&[
        "--tls-cert",
        cert_pem.to_str().expect("path"),
        "--tls-key",
        key_pem.to_str().expect("path"),
    ]);
    let https = server.https.expect("an HTTPS listener");
    let mut publisher = publish(&server, &dir, "ca", 6);
    std::thread::sleep(Duration::from_millis(500));
    let ca_flag = ["--ca", ca_pem.to_str().expect("path")];
    let other_flag = ["--ca", other_pem.to_str().expect("path")];
    let (good, wss, bad) = (
        dir.join("good.json"),
        dir.join("wss.json"),
        dir.join("bad.json"),
    );
    let flv = format!("https://{https}/live/ca.flv");
    let ws = format!("wss://{https}/live/ca.flv");
    let good_run = play("flv", &flv, 2, 2, &ca_flag, &good);
    let wss_run = play("ws-flv", &ws, 2, 2, &ca_flag, &wss);
    let bad_run = play("flv", &flv, 2, 2, &other_flag, &bad);
    // Neither --ca nor --insecure: refused at start.
    let none = bench(&[
        "play",
        "--protocol",
        "flv",
        "--url",
        &flv,
        "--duration",
        "1s",
    ])
    .wait_with_output()
    .expect("ran");
    let (good, wss, bad) = (
        report(good_run, &good),
        report(wss_run, &wss),
        report(bad_run, &bad),
    );
    let _ = publisher.kill();
    let _ = publisher.wait();
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);

    check_ok(&good, 2, "flv --ca");
    check_ok(&wss, 2, "ws-flv --ca");
    assert_eq!(u(&bad["ok"]), 0, "{bad}");
    assert_eq!(u(&bad["errors"]["tls"]), 2, "{bad}");
    assert!(
        bad["players"][0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("certificate")),
        "{bad}"
    );
    assert_eq!(none.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&none.stderr).contains("--insecure"),
        "{none:?}"
    );
}
