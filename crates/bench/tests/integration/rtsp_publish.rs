//! `sluice-bench publish --protocol rtsp` and `rtsp-udp` end to end: the real binary
//! publishing H.264 (and H.265) with AAC to Sluice (run in this process through
//! `sluice_server`) while the bench's own RTSP, RTMP and HTTP-FLV players read each
//! stream back, with the publisher's wall-clock stamps; a server that wants
//! credentials refusing it; and keep-alives and a closed connection against a small
//! RTSP server made of `sluice_rtsp::ServerSession` with a two-second session timeout.

use crate::common::{avc_track, bench, hevc_track, report, scratch, u, write_clip_of};
use clap::Parser;
use serde_json::Value;
use sluice_rtsp::{ServerConfig, ServerEvent, ServerOutput, ServerSession, SetupAnswer};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn start_server(extra: &[&str]) -> sluice_server::Server {
    let mut args = vec![
        "sluice",
        "--rtmp",
        "127.0.0.1:0",
        "--rtsp",
        "127.0.0.1:0",
        "--rtp-ports",
        "0",
        "--http",
        "127.0.0.1:0",
        "--https",
        "off",
        "--workers",
        "2",
        "--srt",
        "off",
        "--webrtc-udp",
        "off",
        "--log",
        "warn",
    ];
    args.extend_from_slice(extra);
    let cli = sluice_server::Cli::parse_from(args);
    let config = sluice_server::Config::load(&cli).expect("config");
    sluice_server::Server::start(config).expect("start sluice")
}

/// One player of `url` for `secs` seconds, its JSON in `dir`.
fn player(dir: &Path, protocol: &str, url: &str, secs: &str) -> (Child, PathBuf) {
    let name: String = url
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let json = dir.join(format!("{protocol}-{name}.json"));
    let child = bench(&[
        "play",
        "--protocol",
        protocol,
        "--url",
        url,
        "--duration",
        secs,
        "--quiet",
        "--json",
        json.to_str().expect("path"),
    ]);
    (child, json)
}

/// The player connected, saw a 25 fps stream with its audio from a keyframe on, and
/// (H.264) read the publisher's stamps.
fn check_player(r: &Value, seconds: f64, what: &str) {
    assert_eq!(u(&r["ok"]), 1, "{what}: {r}");
    let p = &r["players"][0];
    let min = ((seconds - 1.0) * 25.0) as u64;
    assert!(u(&p["video_frames"]) >= min, "{what}: {p}");
    assert!(u(&p["audio_frames"]) >= min, "{what}: {p}");
    assert!(p["first_keyframe_ms"].as_f64().is_some(), "{what}: {p}");
    if what.contains("h265") {
        // Only H.264 frames are stamped.
        assert!(r.get("publish_latency_ms").is_none(), "{what}: {r}");
    } else {
        assert!(
            u(&r["publish_latency_ms"]["n"]) > 0,
            "{what}: no stamps: {r}"
        );
        let p50 = r["publish_latency_ms"]["p50"].as_f64().expect("p50");
        assert!((0.0..1000.0).contains(&p50), "{what}: latency p50 {p50} ms");
    }
    if let Some(rtp) = r.get("rtp") {
        assert_eq!(u(&rtp["lost"]), 0, "{what}: {rtp}");
        assert_eq!(u(&rtp["frames_dropped"]), 0, "{what}: {rtp}");
        assert_eq!(u(&rtp["bad_packets"]), 0, "{what}: {rtp}");
    }
}

/// The publishers of a report all recorded for the run and sent media.
fn check_publishers(r: &Value, n: u64, protocol: &str, seconds: f64) {
    assert_eq!(r["mode"], "publish", "{r}");
    assert_eq!(r["protocol"], protocol, "{r}");
    assert_eq!(u(&r["ok"]), n, "{r}");
    assert_eq!(u(&r["failed"]), 0, "{r}");
    assert!(u(&r["bytes_total"]) > 0, "{r}");
    let rows = r["publishers"].as_array().expect("publishers");
    assert_eq!(rows.len() as u64, n);
    for p in rows {
        assert!(p["connect_ms"].as_f64().is_some(), "{p}");
        // 25 video and ~47 audio frames a second, less the start.
        let min = ((seconds - 0.5) * 70.0) as u64;
        assert!(u(&p["tags_sent"]) >= min, "{p}");
        assert!(u(&p["bytes_sent"]) > u(&p["tags_sent"]) * 12, "{p}");
        assert!(p["error"].is_null(), "{p}");
    }
}

#[test]
fn rtsp_publishers_reach_rtsp_rtmp_and_flv_players() {
    let started = Instant::now();
    let server = start_server(&[]);
    let (rtmp, rtsp, http) = (
        server.rtmp.expect("rtmp"),
        server.rtsp.expect("rtsp"),
        server.http.expect("http"),
    );
    let dir = scratch("rtsp-publish");
    let (clip, hevc_clip) = (dir.join("clip.flv"), dir.join("hevc.flv"));
    write_clip_of(&clip, &avc_track(), 4000);
    write_clip_of(&hevc_clip, &hevc_track(), 4000);
    let clip = clip.to_str().expect("path");
    let hevc_clip = hevc_clip.to_str().expect("path");
    let publish = |protocol: &str, url: &str, n: &str, json: &Path| {
        let clip = if url.contains("h265") {
            hevc_clip
        } else {
            clip
        };
        bench(&[
            "publish",
            "--protocol",
            protocol,
            "--url",
            url,
            "--clip",
            clip,
            "-n",
            n,
            "--ramp",
            "all",
            "--duration",
            "3.5s",
            "--quiet",
            "--json",
            json.to_str().expect("path"),
        ])
    };
    let (tcp_json, udp_json) = (dir.join("pub-tcp.json"), dir.join("pub-udp.json"));
    let tcp = publish(
        "rtsp",
        &format!("rtsp://{rtsp}/live/cam{{i}}"),
        "3",
        &tcp_json,
    );
    let udp = publish(
        "rtsp-udp",
        &format!("rtsp://{rtsp}/live/udp"),
        "1",
        &udp_json,
    );
    let hevc_json = dir.join("pub-h265.json");
    let hevc = publish("rtsp", &format!("rtsp://{rtsp}/live/h265"), "1", &hevc_json);
    std::thread::sleep(Duration::from_millis(700));
    let mut players = Vec::new();
    for i in 0..3 {
        let rtsp_url = format!("rtsp://{rtsp}/live/cam{i}");
        players.push(("rtsp", player(&dir, "rtsp", &rtsp_url, "2.5s")));
        // RTMP for two streams, HTTP-FLV for the third.
        let (protocol, url) = if i == 1 {
            ("flv", format!("http://{http}/live/cam{i}.flv"))
        } else {
            ("rtmp", format!("rtmp://{rtmp}/live/cam{i}"))
        };
        players.push((protocol, player(&dir, protocol, &url, "2.5s")));
    }
    let udp_url = format!("rtsp://{rtsp}/live/udp");
    players.push((
        "rtsp over udp ingest",
        player(&dir, "rtsp", &udp_url, "2.5s"),
    ));
    let rtmp_url = format!("rtmp://{rtmp}/live/udp");
    players.push((
        "rtmp over udp ingest",
        player(&dir, "rtmp", &rtmp_url, "2.5s"),
    ));
    let hevc_url = format!("rtsp://{rtsp}/live/h265");
    players.push(("rtsp h265", player(&dir, "rtsp", &hevc_url, "2.5s")));
    let players: Vec<(String, Value)> = players
        .into_iter()
        .map(|(what, (child, json))| (format!("{what} {}", json.display()), report(child, &json)))
        .collect();
    let tcp = report(tcp, &tcp_json);
    let udp = report(udp, &udp_json);
    let hevc = report(hevc, &hevc_json);
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
    for (what, r) in &players {
        check_player(r, 2.5, what);
    }
    check_publishers(&tcp, 3, "rtsp", 3.5);
    check_publishers(&udp, 1, "rtsp-udp", 3.5);
    check_publishers(&hevc, 1, "rtsp", 3.5);
    let streams: Vec<&str> = tcp["publishers"]
        .as_array()
        .expect("rows")
        .iter()
        .filter_map(|p| p["stream"].as_str())
        .collect();
    assert_eq!(streams, ["live/cam0", "live/cam1", "live/cam2"]);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_server_that_wants_credentials_is_a_clear_failure() {
    let server = start_server(&["--rtsp-user", "alice:secret"]);
    let rtsp = server.rtsp.expect("rtsp");
    let dir = scratch("rtsp-publish-401");
    let clip = dir.join("clip.flv");
    write_clip_of(&clip, &avc_track(), 4000);
    let json = dir.join("out.json");
    let child = bench(&[
        "publish",
        "--protocol",
        "rtsp",
        "--url",
        &format!("rtsp://{rtsp}/live/locked"),
        "--clip",
        clip.to_str().expect("path"),
        "--duration",
        "1s",
        "--quiet",
        "--json",
        json.to_str().expect("path"),
    ]);
    let r = report(child, &json);
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(u(&r["ok"]), 0, "{r}");
    assert_eq!(u(&r["failed"]), 1, "{r}");
    assert_eq!(u(&r["errors"]["protocol"]), 1, "{r}");
    let p = &r["publishers"][0];
    let error = p["error"].as_str().expect("error");
    assert!(
        error.starts_with("ANNOUNCE answered 401 Unauthorized: the server wants credentials"),
        "{error}"
    );
    assert!(p["connect_ms"].is_null(), "{p}");
    assert_eq!(u(&p["tags_sent"]), 0, "{p}");
}

/// What the small server saw.
#[derive(Default)]
struct Seen {
    keepalives: AtomicU64,
    rtp: AtomicU64,
    records: AtomicU64,
}

/// One connection of the small server: takes ANNOUNCE, SETUP and RECORD, counts RTP
/// packets and keep-alives, and hangs up `close_after` RECORD.
async fn record_one(mut sock: tokio::net::TcpStream, seen: Arc<Seen>, close_after: Duration) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let config = ServerConfig {
        session_timeout: Duration::from_secs(2),
        ..ServerConfig::default()
    };
    let mut session = ServerSession::new(config, [9; 32], Instant::now());
    let mut hang_up = None;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let mut out = Vec::new();
        while let Some(o) = session.poll_output() {
            match o {
                ServerOutput::Write(b) => out.extend_from_slice(&b),
                ServerOutput::Event(ServerEvent::Announce { .. }) => {
                    session.accept_announce().expect("announce")
                }
                ServerOutput::Event(ServerEvent::Setup { transport, .. }) => session
                    .answer_setup(SetupAnswer::Interleaved {
                        channels: transport.interleaved.expect("channels"),
                        ssrc: None,
                    })
                    .expect("setup"),
                ServerOutput::Event(ServerEvent::Record { .. }) => {
                    session.accept_record().expect("record");
                    seen.records.fetch_add(1, Ordering::Relaxed);
                    hang_up = Some(tokio::time::Instant::now() + close_after);
                }
                ServerOutput::Event(ServerEvent::Interleaved { channel, .. }) => {
                    if channel % 2 == 0 {
                        seen.rtp.fetch_add(1, Ordering::Relaxed);
                    }
                }
                ServerOutput::Event(ServerEvent::KeepAlive) => {
                    seen.keepalives.fetch_add(1, Ordering::Relaxed);
                }
                ServerOutput::Event(ServerEvent::Timeout) => return,
                ServerOutput::Event(_) => {}
            }
        }
        if !out.is_empty() && sock.write_all(&out).await.is_err() {
            return;
        }
        let far = tokio::time::Instant::now() + Duration::from_secs(3600);
        tokio::select! {
            r = sock.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if session.handle_input(Instant::now(), &buf[..n]).is_err() {
                        return;
                    }
                }
            },
            _ = tokio::time::sleep_until(hang_up.unwrap_or(far)) => return,
        }
    }
}

#[test]
fn keep_alives_go_out_and_a_hang_up_is_a_closed_failure() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(Seen::default());
    rt.spawn({
        let seen = seen.clone();
        async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(record_one(sock, seen.clone(), Duration::from_millis(2500)));
            }
        }
    });
    let dir = scratch("rtsp-publish-hangup");
    let clip = dir.join("clip.flv");
    write_clip_of(&clip, &avc_track(), 4000);
    let json = dir.join("out.json");
    let child = bench(&[
        "publish",
        "--protocol",
        "rtsp",
        "--url",
        &format!("rtsp://{addr}/live/t"),
        "--clip",
        clip.to_str().expect("path"),
        "--duration",
        "3.5s",
        "--quiet",
        "--json",
        json.to_str().expect("path"),
    ]);
    let r = report(child, &json);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(seen.records.load(Ordering::Relaxed), 1);
    // timeout=2: a keep-alive each second of the 2.5 s recorded.
    let k = seen.keepalives.load(Ordering::Relaxed);
    assert!(k >= 2, "{k} keep-alives");
    assert!(seen.rtp.load(Ordering::Relaxed) > 100, "too little RTP");
    assert_eq!(u(&r["failed"]), 1, "{r}");
    assert_eq!(u(&r["errors"]["closed"]), 1, "{r}");
    let p = &r["publishers"][0];
    assert!(p["connect_ms"].as_f64().is_some(), "{p}");
    assert!(u(&p["tags_sent"]) > 100, "{p}");
}
