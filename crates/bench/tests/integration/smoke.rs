//! The CI smoke run: `sluice-bench play --protocol flv` against a tiny in-test
//! HTTP-FLV server that serves a synthetic clip paced by its timestamps.

use bytes::BytesMut;
use sluice_media::codec::{AacConfig, AvcConfig};
use sluice_media::flv::{self, TAG_AUDIO, TAG_VIDEO};
use sluice_media::{Track, TrackConfig};
use std::process::Command;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::time::Instant;

/// One second of 25 fps H.264 (keyframe every 25 frames, 2 kB frames) and AAC, as
/// (timestamp ms, FLV tag bytes); the sequence headers come first at ts 0.
fn clip() -> Vec<(u32, Vec<u8>)> {
    let sps =
        bytes::Bytes::from_static(&[0x67, 0x42, 0xc0, 0x1e, 0xd9, 0x00, 0xa0, 0x47, 0xfe, 0xc8]);
    let pps = bytes::Bytes::from_static(&[0x68, 0xce, 0x3c, 0x80]);
    let video = Track::new(TrackConfig::H264(
        AvcConfig::from_parameter_sets(&[sps], &[pps]).expect("avcC"),
    ));
    let audio = Track::new(TrackConfig::Aac(
        AacConfig::parse(bytes::Bytes::from_static(&[0x11, 0x90])).expect("asc"),
    ));
    let mut tags = Vec::new();
    let mut body = BytesMut::new();
    let mut tag = |ts: u32, tag_type: u8, body: &[u8]| {
        let mut out = BytesMut::new();
        flv::write_tag(&mut out, tag_type, ts, body).expect("tag");
        tags.push((ts, out.to_vec()));
    };
    flv::write_video_config(&mut body, &video).expect("video config");
    tag(0, TAG_VIDEO, &body.split());
    assert!(flv::write_audio_config(&mut body, &audio).expect("audio config"));
    tag(0, TAG_AUDIO, &body.split());
    for n in 0..25u32 {
        let ts = n * 40;
        flv::audio_frame_header(&mut body, &audio).expect("audio header");
        body.extend_from_slice(&[0x21, 0x10, 0x04, 0x60, 0x8c, 0x1c]);
        tag(ts, TAG_AUDIO, &body.split());
        flv::video_frame_header(&mut body, &video, n == 0, 0).expect("video header");
        let len = 2000u32;
        body.extend_from_slice(&len.to_be_bytes());
        body.extend_from_slice(&[if n == 0 { 0x65 } else { 0x41 }]);
        body.resize(body.len() + len as usize - 1, 0xab);
        tag(ts, TAG_VIDEO, &body.split());
    }
    tags
}

/// Serves the clip, looped with a continuous timeline, to every GET, in real time.
async fn serve(listener: TcpListener) {
    let clip = std::sync::Arc::new(clip());
    loop {
        let Ok((mut sock, _)) = listener.accept().await else {
            return;
        };
        let clip = clip.clone();
        tokio::spawn(async move {
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match sock.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            let mut out = BytesMut::new();
            out.extend_from_slice(
                b"HTTP/1.1 200 OK\r\nContent-Type: video/x-flv\r\nConnection: close\r\n\r\n",
            );
            flv::write_file_header(&mut out, true, true);
            if sock.write_all(&out).await.is_err() {
                return;
            }
            let start = Instant::now();
            for round in 0u32.. {
                for (i, (ts, bytes)) in clip.iter().enumerate() {
                    // Sequence headers only once.
                    if round > 0 && i < 2 {
                        continue;
                    }
                    let ts = ts + round * 1000;
                    tokio::time::sleep_until(start + Duration::from_millis(u64::from(ts))).await;
                    let mut tag = bytes.clone();
                    // Rewrite the timestamp (bytes 4..7 and the extension byte 7).
                    let t = ts.to_be_bytes();
                    tag[4..8].copy_from_slice(&[t[1], t[2], t[3], t[0]]);
                    if sock.write_all(&tag).await.is_err() {
                        return;
                    }
                }
            }
        });
    }
}

#[test]
fn five_flv_players_get_media() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).expect("bind");
    let addr = listener.local_addr().expect("addr");
    rt.spawn(serve(listener));
    let dir = std::env::temp_dir().join(format!("sluice-bench-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let json = dir.join("out.json");
    let started = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_sluice-bench"))
        .args(["play", "--protocol", "flv", "--url"])
        .arg(format!("http://{addr}/live/test.flv"))
        .args([
            "-n",
            "5",
            "--ramp",
            "50/s",
            "--duration",
            "2s",
            "--quiet",
            "--json",
        ])
        .arg(&json)
        .arg("--server-pid")
        .arg(std::process::id().to_string())
        .output()
        .expect("run sluice-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "took {:?}",
        started.elapsed()
    );
    assert!(stdout.contains("first keyframe ms"), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).expect("json");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(report["count"], 5, "{report:#}");
    assert_eq!(report["ok"], 5, "{report:#}");
    assert_eq!(report["failed"], 0, "{report:#}");
    assert!(
        report["bytes_total"].as_u64().unwrap_or(0) > 5 * 50_000,
        "{report:#}"
    );
    assert!(report["mbit_s"].as_f64().unwrap_or(0.0) > 0.0, "{report:#}");
    assert_eq!(report["first_keyframe_ms"]["n"], 5, "{report:#}");
    assert!(report["first_keyframe_ms"]["max"].as_f64().unwrap_or(-1.0) >= 0.0);
    assert_eq!(report["stalls"], 0, "{report:#}");
    let players = report["players"].as_array().expect("player rows");
    assert_eq!(players.len(), 5);
    for p in players {
        assert!(p["video_frames"].as_u64().unwrap_or(0) >= 25, "{p}");
        assert!(p["connect_ms"].as_f64().is_some(), "{p}");
        assert!(p["media_ms"].as_i64().unwrap_or(0) >= 1000, "{p}");
    }
    // The test process stands in for the server: its figures are there.
    assert!(
        report["server"]["rss_end_kib"].as_u64().unwrap_or(0) > 0,
        "{report:#}"
    );
}
