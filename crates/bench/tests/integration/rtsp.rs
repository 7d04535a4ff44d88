//! `sluice-bench play --protocol rtsp` and `rtsp-udp` end to end: the real binary
//! against Sluice (run in this process through `sluice_server`) fed by
//! `sluice-bench publish` over RTMP; and keep-alives against a small RTSP server made
//! of `sluice_rtsp::ServerSession` with a two-second session timeout.

use crate::common::{bench, report, scratch, u, write_clip};
use clap::Parser;
use serde_json::Value;
use sluice_rtsp::{
    ServerConfig, ServerEvent, ServerOutput, ServerSession, SetupAnswer, TrackStart,
};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Every player connected, saw every packet and frame of a 25 fps stream from a
/// keyframe on, and read the publisher's stamps.
fn check_players(r: &Value, n: u64, seconds: f64, what: &str) {
    assert_eq!(u(&r["ok"]), n, "{what}: {r}");
    assert_eq!(u(&r["failed"]), 0, "{what}");
    let rtp = &r["rtp"];
    assert_eq!(u(&rtp["lost"]), 0, "{what}: {rtp}");
    assert_eq!(u(&rtp["late"]), 0, "{what}: {rtp}");
    assert_eq!(u(&rtp["frames_dropped"]), 0, "{what}: {rtp}");
    assert_eq!(u(&rtp["bad_packets"]), 0, "{what}: {rtp}");
    assert!(u(&r["publish_latency_ms"]["n"]) > 0, "{what}: no stamps");
    let p50 = r["publish_latency_ms"]["p50"].as_f64().expect("p50");
    assert!((0.0..2000.0).contains(&p50), "{what}: latency p50 {p50} ms");
    let players = r["players"].as_array().expect("players");
    assert_eq!(players.len() as u64, n);
    for p in players {
        // 25 fps for the run, less a second for ramp and start, plus the GOP cache.
        let min = ((seconds - 1.0) * 25.0) as u64;
        assert!(u(&p["video_frames"]) >= min, "{what}: {p}");
        assert!(u(&p["audio_frames"]) >= min, "{what}: {p}");
        assert!(p["first_keyframe_ms"].as_f64().is_some(), "{what}: {p}");
        assert!(
            u(&p["rtp"]["packets"]) > u(&p["video_frames"]),
            "{what}: {p}"
        );
        assert!(
            p["publish_latency_ms"]["n"].as_u64() > Some(0),
            "{what}: {p}"
        );
    }
}

#[test]
fn rtsp_players_over_tcp_and_udp_get_every_frame() {
    let cli = sluice_server::Cli::parse_from([
        "sluice",
        "--rtmp",
        "127.0.0.1:0",
        "--rtsp",
        "127.0.0.1:0",
        "--rtp-ports",
        "0",
        "--http",
        "off",
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
    ]);
    let config = sluice_server::Config::load(&cli).expect("config");
    let server = sluice_server::Server::start(config).expect("start sluice");
    let rtmp = server.rtmp.expect("rtmp");
    let rtsp = server.rtsp.expect("rtsp");
    let dir = scratch("rtsp");
    let clip = dir.join("clip.flv");
    write_clip(&clip);
    let started = Instant::now();
    let mut publisher = bench(&[
        "publish",
        "--url",
        &format!("rtmp://{rtmp}/live/cam"),
        "--clip",
        clip.to_str().expect("path"),
        "--duration",
        "9s",
        "--quiet",
    ]);
    std::thread::sleep(Duration::from_millis(800));
    let url = format!("rtsp://{rtsp}/live/cam");
    let play = |protocol: &str, n: &str, json: &Path| {
        bench(&[
            "play",
            "--protocol",
            protocol,
            "--url",
            &url,
            "-n",
            n,
            "--ramp",
            "100/s",
            "--duration",
            "4s",
            "--quiet",
            "--json",
            json.to_str().expect("path"),
        ])
    };
    let (tcp_json, udp_json) = (dir.join("tcp.json"), dir.join("udp.json"));
    let tcp = play("rtsp", "20", &tcp_json);
    let udp = play("rtsp-udp", "5", &udp_json);
    let tcp = report(tcp, &tcp_json);
    let udp = report(udp, &udp_json);
    let _ = publisher.kill();
    let _ = publisher.wait();
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(tcp["protocol"], "rtsp");
    assert_eq!(udp["protocol"], "rtsp-udp");
    check_players(&tcp, 20, 4.0, "tcp");
    check_players(&udp, 5, 4.0, "udp");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}

/// One RTP packet of a 25 fps H.264 stream, interleaved on channel 0: a keyframe each
/// second, one packet per frame.
fn frame_packet(n: u32, out: &mut Vec<u8>) {
    let key = n.is_multiple_of(25);
    let mut rtp = vec![0x80, 0x80 | 96];
    rtp.extend_from_slice(&(1000u16.wrapping_add(n as u16)).to_be_bytes());
    rtp.extend_from_slice(&(n * 3600).to_be_bytes());
    rtp.extend_from_slice(&[0, 0, 0, 7]);
    rtp.extend_from_slice(&[if key { 0x65 } else { 0x41 }, 0x9a, 0x00, 0x11]);
    out.extend_from_slice(&[b'$', 0]);
    out.extend_from_slice(&(rtp.len() as u16).to_be_bytes());
    out.extend_from_slice(&rtp);
}

const SDP: &str = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=t\r\nc=IN IP4 0.0.0.0\r\nt=0 0\r\n\
a=control:*\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n\
a=fmtp:96 packetization-mode=1;sprop-parameter-sets=Z0LAHtkAoEf+yA==,aM48gA==\r\n\
a=control:trackID=0\r\n";

/// One connection of the small server: answers with `ServerSession`, sends a frame
/// every 40 ms once playing, and counts keep-alives and timeouts.
async fn serve_one(
    mut sock: tokio::net::TcpStream,
    keepalives: Arc<AtomicU64>,
    timeouts: Arc<AtomicU64>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let config = ServerConfig {
        session_timeout: Duration::from_secs(2),
        ..ServerConfig::default()
    };
    let mut session = ServerSession::new(config, [7; 32], Instant::now());
    let mut playing = false;
    let mut frame = 0u32;
    let mut tick = tokio::time::interval(Duration::from_millis(40));
    let mut buf = vec![0u8; 4096];
    loop {
        let mut out = Vec::new();
        while let Some(o) = session.poll_output() {
            match o {
                ServerOutput::Write(b) => out.extend_from_slice(&b),
                ServerOutput::Event(ServerEvent::Describe { .. }) => session
                    .answer_describe(bytes::Bytes::from_static(SDP.as_bytes()))
                    .expect("describe"),
                ServerOutput::Event(ServerEvent::Setup { transport, .. }) => session
                    .answer_setup(SetupAnswer::Interleaved {
                        channels: transport.interleaved.expect("channels"),
                        ssrc: Some(7),
                    })
                    .expect("setup"),
                ServerOutput::Event(ServerEvent::Play { .. }) => {
                    let start = TrackStart {
                        track: 0,
                        seq: 1000,
                        rtptime: 0,
                    };
                    session.answer_play(&[start], None).expect("play");
                    playing = true;
                }
                ServerOutput::Event(ServerEvent::KeepAlive) => {
                    keepalives.fetch_add(1, Ordering::Relaxed);
                }
                ServerOutput::Event(ServerEvent::Timeout) => {
                    timeouts.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                ServerOutput::Event(_) => {}
            }
        }
        if !out.is_empty() && sock.write_all(&out).await.is_err() {
            return;
        }
        let deadline = session.poll_timeout().map(tokio::time::Instant::from_std);
        tokio::select! {
            r = sock.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if session.handle_input(Instant::now(), &buf[..n]).is_err() {
                        return;
                    }
                }
            },
            _ = tick.tick(), if playing => {
                let mut media = Vec::new();
                frame_packet(frame, &mut media);
                frame += 1;
                if sock.write_all(&media).await.is_err() {
                    return;
                }
            }
            _ = tokio::time::sleep_until(deadline.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600))) => {
                session.handle_timeout(Instant::now());
            }
        }
    }
}

#[test]
fn keep_alives_hold_a_short_session() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let keepalives = Arc::new(AtomicU64::new(0));
    let timeouts = Arc::new(AtomicU64::new(0));
    rt.spawn({
        let (k, t) = (keepalives.clone(), timeouts.clone());
        async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(serve_one(sock, k.clone(), t.clone()));
            }
        }
    });
    let dir = scratch("rtsp-keepalive");
    let json = dir.join("out.json");
    let child = bench(&[
        "play",
        "--protocol",
        "rtsp",
        "--url",
        &format!("rtsp://{addr}/live/t"),
        "-n",
        "3",
        "--duration",
        "5s",
        "--quiet",
        "--json",
        json.to_str().expect("path"),
    ]);
    let r = report(child, &json);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(u(&r["ok"]), 3, "{r}");
    assert_eq!(timeouts.load(Ordering::Relaxed), 0, "a session timed out");
    // timeout=2: a keep-alive each second, from PLAY to the end of the 5 s run.
    let k = keepalives.load(Ordering::Relaxed);
    assert!(k >= 3 * 3, "{k} keep-alives from 3 players");
    for p in r["players"].as_array().expect("players") {
        assert!(u(&p["video_frames"]) >= 100, "{p}");
        assert_eq!(u(&p["rtp"]["lost"]), 0, "{p}");
        assert!(p["first_keyframe_ms"].as_f64().is_some(), "{p}");
    }
}
