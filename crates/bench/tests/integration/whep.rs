//! `sluice-bench play --protocol whep` end to end, and the handshake storm the issue
//! asks about: 500 WHEP players started at once against Sluice (in this process
//! through `sluice_server`), fed by `sluice-bench publish` over RTMP. Every ICE, DTLS
//! and SRTP handshake completes and every player gets video from a keyframe on.

use crate::common::{bench, report, scratch, u, write_clip};
use clap::Parser;
use std::time::Duration;

#[test]
fn five_hundred_whep_players_started_at_once_all_play() {
    let cli = sluice_server::Cli::parse_from([
        "sluice",
        "--rtmp",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
        "--srt",
        "off",
        "--webrtc-udp",
        "127.0.0.1:0",
        "--rtsp",
        "off",
        "--https",
        "off",
        "--workers",
        "2",
        "--log",
        "warn",
    ]);
    let config = sluice_server::Config::load(&cli).expect("config");
    let server = sluice_server::Server::start(config).expect("start sluice");
    let rtmp = server.rtmp.expect("rtmp");
    let http = server.http.expect("http");
    let dir = scratch("whep");
    let clip = dir.join("clip.flv");
    write_clip(&clip);
    let mut publisher = bench(&[
        "publish",
        "--url",
        &format!("rtmp://{rtmp}/live/cam"),
        "--clip",
        clip.to_str().expect("path"),
        "--duration",
        "30s",
        "--quiet",
    ]);
    std::thread::sleep(Duration::from_millis(800));
    let json = dir.join("whep.json");
    let players = bench(&[
        "play",
        "--protocol",
        "whep",
        "--url",
        &format!("http://{http}/live/cam/whep"),
        "-n",
        "500",
        "--ramp",
        "5000/s",
        "--duration",
        "12s",
        "--quiet",
        "--json",
        json.to_str().expect("path"),
    ]);
    let r = report(players, &json);
    let _ = publisher.kill();
    let _ = publisher.wait();
    server.stop();
    assert_eq!(r["protocol"], "whep");
    assert_eq!(u(&r["failed"]), 0, "{r}");
    assert_eq!(u(&r["ok"]), 500, "{r}");
    for p in r["players"].as_array().expect("players") {
        assert!(p["connect_ms"].as_f64().is_some(), "{p}");
        assert!(p["first_keyframe_ms"].as_f64().is_some(), "{p}");
        assert!(u(&p["video_frames"]) >= 25, "{p}");
    }
    eprintln!(
        "connect p50 {} ms, p99 {} ms; first keyframe p50 {} ms",
        r["connect_ms"]["p50"], r["connect_ms"]["p99"], r["first_keyframe_ms"]["p50"]
    );
}
