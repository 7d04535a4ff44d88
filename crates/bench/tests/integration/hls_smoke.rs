//! The CI smoke run of the HLS players: `sluice-bench play --protocol hls` and
//! `--protocol ll-hls` against a tiny in-test HTTP/1.1 keep-alive server whose live
//! playlists follow the clock: 500 ms segments of two 250 ms parts, a window of four
//! segments, blocking reload and blocking preload-hint requests. Playlists go out
//! chunked, segments with Content-Length.

use std::process::Command;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

const PART_MS: u64 = 250;
const PARTS: u64 = 2;
const WINDOW: u64 = 4;
const SEGMENT_LEN: usize = 20_000;

/// Parts complete at `elapsed` (global part index k = msn * PARTS + part).
fn parts_done(elapsed: Duration) -> u64 {
    elapsed.as_millis() as u64 / PART_MS
}

fn ts_playlist(done: u64) -> String {
    let segments = done / PARTS;
    let first = segments.saturating_sub(WINDOW);
    let mut p = format!(
        "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:1\n#EXT-X-MEDIA-SEQUENCE:{first}\n"
    );
    for msn in first..segments {
        p.push_str(&format!("#EXTINF:0.500,\na/s-{msn}.ts\n"));
    }
    p
}

fn ll_playlist(done: u64) -> String {
    let segments = done / PARTS;
    let first = segments.saturating_sub(WINDOW);
    let mut p = format!(
        "#EXTM3U\n#EXT-X-VERSION:6\n#EXT-X-TARGETDURATION:1\n\
         #EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=0.750\n\
         #EXT-X-PART-INF:PART-TARGET=0.250\n#EXT-X-MEDIA-SEQUENCE:{first}\n\
         #EXT-X-MAP:URI=\"init.mp4\"\n"
    );
    let part = |p: &mut String, msn: u64, i: u64| {
        let ind = if i == 0 { ",INDEPENDENT=YES" } else { "" };
        p.push_str(&format!(
            "#EXT-X-PART:DURATION=0.250,URI=\"s-{msn}.{i}.m4s\"{ind}\n"
        ));
    };
    for msn in first..segments {
        for i in 0..PARTS {
            part(&mut p, msn, i);
        }
        p.push_str(&format!("#EXTINF:0.500,\ns-{msn}.m4s\n"));
    }
    for i in 0..done % PARTS {
        part(&mut p, segments, i);
    }
    p.push_str(&format!(
        "#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"s-{segments}.{}.m4s\"\n",
        done % PARTS
    ));
    p
}

/// The global part index a request waits for, if any: a blocking reload or a part.
fn waits_for(target: &str) -> Option<u64> {
    if let Some((_, q)) = target.split_once('?') {
        let mut msn = None;
        let mut part = None;
        for kv in q.split('&') {
            match kv.split_once('=') {
                Some(("_HLS_msn", v)) => msn = v.parse::<u64>().ok(),
                Some(("_HLS_part", v)) => part = v.parse::<u64>().ok(),
                _ => {}
            }
        }
        return Some(msn? * PARTS + part.unwrap_or(0));
    }
    let name = target.rsplit('/').next()?.strip_suffix(".m4s")?;
    let (msn, part) = name.strip_prefix("s-")?.split_once('.')?;
    Some(msn.parse::<u64>().ok()? * PARTS + part.parse::<u64>().ok()?)
}

async fn answer(sock: &mut TcpStream, target: &str, start: Instant) -> std::io::Result<()> {
    if let Some(k) = waits_for(target) {
        // Part k exists once k + 1 parts are done.
        tokio::time::sleep_until(start + Duration::from_millis((k + 1) * PART_MS)).await;
    }
    let done = parts_done(start.elapsed());
    let path = target.split('?').next().unwrap_or_default();
    let playlist = match path {
        "/live/a.m3u8" => Some(ts_playlist(done)),
        "/live/a/index.m3u8" => Some(ll_playlist(done)),
        _ => None,
    };
    if let Some(p) = playlist {
        // Chunked, in two chunks.
        let (a, b) = p.split_at(p.len() / 2);
        let out = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.apple.mpegurl\r\n\
             Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
            a.len(),
            b.len()
        );
        return sock.write_all(out.as_bytes()).await;
    }
    let len = if path.ends_with(".ts") || path.ends_with(".m4s") {
        SEGMENT_LEN / if path.ends_with(".m4s") { 2 } else { 1 }
    } else if path.ends_with("init.mp4") {
        700
    } else {
        return sock
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            .await;
    };
    let mut out = format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n").into_bytes();
    out.resize(out.len() + len, 0x47);
    sock.write_all(&out).await
}

/// Serves every connection with keep-alive, one request at a time.
async fn serve(listener: TcpListener) {
    let start = Instant::now();
    loop {
        let Ok((mut sock, _)) = listener.accept().await else {
            return;
        };
        tokio::spawn(async move {
            let mut req = Vec::new();
            let mut buf = [0u8; 2048];
            loop {
                let end = loop {
                    if let Some(i) = req.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                };
                let head = String::from_utf8_lossy(&req[..end]).into_owned();
                req.drain(..end);
                let target = head.split(' ').nth(1).unwrap_or("/").to_string();
                if answer(&mut sock, &target, start).await.is_err() {
                    return;
                }
            }
        });
    }
}

fn run(protocol: &str, url: &str) -> serde_json::Value {
    let dir = std::env::temp_dir().join(format!(
        "sluice-bench-hls-smoke-{protocol}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let json = dir.join("out.json");
    let started = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_sluice-bench"))
        .args(["play", "--protocol", protocol, "--url", url])
        .args([
            "-n",
            "3",
            "--ramp",
            "all",
            "--duration",
            "3s",
            "--quiet",
            "--json",
        ])
        .arg(&json)
        .output()
        .expect("run sluice-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(started.elapsed() < Duration::from_secs(9));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).expect("json");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(report["ok"], 3, "{report:#}");
    assert_eq!(report["stalls"], 0, "{report:#}");
    assert_eq!(report["first_keyframe_ms"]["n"], 3, "{report:#}");
    report
}

#[test]
fn hls_and_ll_hls_players_follow_live_playlists() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).expect("bind");
    let addr = listener.local_addr().expect("addr");
    rt.spawn(serve(listener));
    // Let the server's timeline fill its window.
    std::thread::sleep(Duration::from_millis(2200));

    let r = run("hls", &format!("http://{addr}/live/a.m3u8"));
    for p in r["players"].as_array().expect("rows") {
        // Three segments back from the edge, then one every 500 ms for 3 s.
        let segments = p["segments"].as_u64().unwrap_or(0);
        assert!((6..=11).contains(&segments), "{p}");
        assert_eq!(p["misses"], 0, "{p}");
        assert!(p["playlists"].as_u64().unwrap_or(0) >= 5, "{p}");
        assert_eq!(p["media_ms"].as_i64(), Some(segments as i64 * 500), "{p}");
        assert!(p["bytes"].as_u64().unwrap_or(0) >= segments * SEGMENT_LEN as u64);
    }

    let r = run("ll-hls", &format!("http://{addr}/live/a/index.m3u8"));
    for p in r["players"].as_array().expect("rows") {
        // From the last independent part, then one part every 250 ms.
        let parts = p["segments"].as_u64().unwrap_or(0);
        assert!((11..=16).contains(&parts), "{p}");
        assert_eq!(p["misses"], 0, "{p}");
        assert_eq!(p["media_ms"].as_i64(), Some(parts as i64 * 250), "{p}");
        // Parts arrive as they are made: lag stays within a part of its minimum.
        assert!(p["max_lag_ms"].as_f64().unwrap_or(1e9) < 200.0, "{p}");
    }
}
