//! `sluice-bench play --protocol srt` end to end against Sluice (in this process
//! through `sluice_server`), fed by `sluice-bench publish` over RTMP: 100 SRT
//! players started at once all play from a keyframe on and find the publisher's
//! stamps; with a passphrase, encrypted players play and a wrong passphrase is
//! refused.

use crate::common::{bench, report, scratch, u, write_clip};
use clap::Parser;
use std::time::Duration;

fn start(srt_flags: &[&str]) -> sluice_server::Server {
    let mut args = vec![
        "sluice",
        "--rtmp",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
        "--srt",
        "127.0.0.1:0",
        "--webrtc-udp",
        "off",
        "--rtsp",
        "off",
        "--https",
        "off",
        "--workers",
        "2",
        "--log",
        "warn",
    ];
    args.extend_from_slice(srt_flags);
    let cli = sluice_server::Cli::parse_from(args);
    let config = sluice_server::Config::load(&cli).expect("config");
    sluice_server::Server::start(config).expect("start sluice")
}

/// `sluice-bench publish` to live/cam for 30 s.
fn publish(server: &sluice_server::Server, dir: &std::path::Path) -> std::process::Child {
    let clip = dir.join("clip.flv");
    write_clip(&clip);
    let rtmp = server.rtmp.expect("rtmp");
    let publisher = bench(&[
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
    publisher
}

fn play(dir: &std::path::Path, name: &str, url: &str, n: &str) -> serde_json::Value {
    let json = dir.join(format!("{name}.json"));
    let players = bench(&[
        "play",
        "--protocol",
        "srt",
        "--url",
        url,
        "-n",
        n,
        "--ramp",
        "5000/s",
        "--duration",
        "6s",
        "--quiet",
        "--json",
        json.to_str().expect("path"),
    ]);
    report(players, &json)
}

#[test]
fn a_hundred_srt_players_all_play() {
    let server = start(&[]);
    let srt = server.srt.expect("srt");
    let dir = scratch("srt-players");
    let mut publisher = publish(&server, &dir);
    let r = play(
        &dir,
        "srt",
        &format!("srt://{srt}?streamid=%23!::r=live/cam,m=request"),
        "100",
    );
    let _ = publisher.kill();
    let _ = publisher.wait();
    server.stop();
    assert_eq!(r["protocol"], "srt");
    assert_eq!(u(&r["failed"]), 0, "{r}");
    assert_eq!(u(&r["ok"]), 100, "{r}");
    for p in r["players"].as_array().expect("players") {
        assert!(p["first_keyframe_ms"].as_f64().is_some(), "{p}");
        assert!(u(&p["video_frames"]) >= 100, "{p}");
        assert!(u(&p["audio_frames"]) >= 100, "{p}");
    }
    // The bench publisher's stamps came through the TS muxer.
    assert!(u(&r["publish_latency_ms"]["n"]) > 1000, "{r}");
}

#[test]
fn encrypted_players_play_and_a_wrong_passphrase_is_refused() {
    let server = start(&[
        "--srt-passphrase",
        "correct horse battery",
        "--srt-pbkeylen",
        "32",
    ]);
    let srt = server.srt.expect("srt");
    let dir = scratch("srt-encrypted");
    let mut publisher = publish(&server, &dir);
    let good = play(
        &dir,
        "good",
        &format!("srt://{srt}?streamid=read:live/cam&passphrase=correct%20horse%20battery"),
        "5",
    );
    let wrong = play(
        &dir,
        "wrong",
        &format!("srt://{srt}?streamid=read:live/cam&passphrase=wrong%20horse%20battery"),
        "1",
    );
    let _ = publisher.kill();
    let _ = publisher.wait();
    server.stop();
    assert_eq!(u(&good["ok"]), 5, "{good}");
    for p in good["players"].as_array().expect("players") {
        assert!(u(&p["video_frames"]) >= 100, "{p}");
    }
    assert_eq!(u(&wrong["failed"]), 1, "{wrong}");
    let error = wrong["players"][0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("1010"), "{error}");
}

#[test]
fn srt_publishers_feed_rtmp_and_srt_players() {
    let server = start(&[]);
    let srt = server.srt.expect("srt");
    let rtmp = server.rtmp.expect("rtmp");
    let dir = scratch("srt-publishers");
    let clip = dir.join("clip.flv");
    write_clip(&clip);
    let json = dir.join("publish.json");
    let publishers = bench(&[
        "publish",
        "--protocol",
        "srt",
        "--url",
        &format!("srt://{srt}?streamid=%23!::r=live/cam{{i}},m=publish"),
        "--clip",
        clip.to_str().expect("path"),
        "-n",
        "3",
        "--duration",
        "9s",
        "--quiet",
        "--json",
        json.to_str().expect("path"),
    ]);
    std::thread::sleep(Duration::from_millis(1500));
    let rtmp_json = dir.join("rtmp.json");
    let rtmp_players = bench(&[
        "play",
        "--protocol",
        "rtmp",
        "--url",
        &format!("rtmp://{rtmp}/live/cam0"),
        "-n",
        "2",
        "--duration",
        "5s",
        "--quiet",
        "--json",
        rtmp_json.to_str().expect("path"),
    ]);
    let over_srt = play(
        &dir,
        "srt",
        &format!("srt://{srt}?streamid=read:live/cam2"),
        "2",
    );
    let over_rtmp = report(rtmp_players, &rtmp_json);
    let published = report(publishers, &json);
    server.stop();
    assert_eq!(published["protocol"], "srt");
    assert_eq!(u(&published["ok"]), 3, "{published}");
    for (r, frames) in [(&over_srt, 100), (&over_rtmp, 80)] {
        assert_eq!(u(&r["ok"]), 2, "{r}");
        for p in r["players"].as_array().expect("players") {
            assert!(p["first_keyframe_ms"].as_f64().is_some(), "{p}");
            assert!(u(&p["video_frames"]) >= frames, "{p}");
            assert!(u(&p["audio_frames"]) >= 10, "{p}");
        }
        // The publisher's stamps went through TS in and out.
        assert!(u(&r["publish_latency_ms"]["n"]) > 50, "{r}");
    }
}
