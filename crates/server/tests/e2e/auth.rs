//! One authorization for every protocol, end to end with real clients: ffmpeg publishes
//! over RTMP only with a user's password; ffprobe plays RTMP, HTTP-FLV and HLS (the
//! HLS viewer authorized once at its playlist, its segments carried by the cookie);
//! curl gets 401 with a Basic challenge, or plays with Basic credentials or a signed
//! URL; files need the same; denials are counted in /metrics.

use crate::common::{have_ffmpeg, publish_test_pattern, signed, unix_now as now, TestServer};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

fn sha256_hex(s: &str) -> String {
    Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The head (status and headers) of a GET, and up to 64 KiB of its body.
fn get(addr: SocketAddr, path: &str, extra: &str) -> (u16, String, Vec<u8>) {
    let mut sock = TcpStream::connect(addr).expect("connect");
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(sock, "GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n").unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 << 10];
    while raw.len() < 64 << 10 {
        match sock.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_string();
            let len = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(|v| v.trim().to_string())
                })
                .and_then(|v| v.parse::<usize>().ok());
            if len.is_some_and(|l| raw.len() >= end + 4 + l)
                || (len.is_none() && raw.len() > end + 4 + 13)
            {
                break;
            }
        }
    }
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("head");
    let head = String::from_utf8_lossy(&raw[..end]).to_string();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, head, raw[end + 4..].to_vec())
}

fn probe(url: &str) -> String {
    let out = Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-rw_timeout",
            "5000000",
            "-show_entries",
            "stream=codec_name,width",
            "-of",
            "csv=p=0",
        ])
        .arg(url)
        .output()
        .expect("ffprobe");
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn every_protocol_asks_the_same_authorization() {
    if !have_ffmpeg() {
        return;
    }
    let dir = crate::common::scratch("auth");
    std::fs::create_dir_all(dir.join("media/rec")).unwrap();
    std::fs::write(dir.join("media/rec/a.bin"), b"recorded").unwrap();
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            "[auth]\npublish = true\nread = true\nsigning_key = \"k3y\"\n\n\
             [[users]]\nname = \"studio\"\npassword = \"sha256:{}\"\npublish = [\"live/*\"]\nread = [\"*\"]\n\n\
             [[users]]\nname = \"viewer\"\npassword = \"sha256:{}\"\nread = [\"live/*\"]\n",
            sha256_hex("s3cret"),
            sha256_hex("watch")
        ),
    )
    .unwrap();
    let server = TestServer::start(&[
        "--config",
        config.to_str().unwrap(),
        "--media-root",
        dir.join("media").to_str().unwrap(),
        "--hls-segment-ms",
        "1000",
    ]);
    let http = server.http;

    // Publishing: refused without a password, or with a viewer's; a studio publishes.
    let base = format!("rtmp://{}/live/cam", server.rtmp);
    for url in [
        base.clone(),
        format!("{base}?user=viewer&pass=watch"),
        format!("{base}?user=studio&pass=nope"),
    ] {
        let mut refused = publish_test_pattern(&url, "flv", "libx264", 5);
        let status = refused.0.wait().expect("ffmpeg ends");
        assert!(!status.success(), "{url} was let publish");
    }
    let _publisher = publish_test_pattern(
        &format!("{base}?user=studio&pass=s3cret"),
        "flv",
        "libx264",
        40,
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(
        http,
        "/live/cam.flv",
        "Authorization: Basic dmlld2VyOndhdGNo\r\nConnection: close\r\n",
    )
    .0 != 200
    {
        assert!(
            Instant::now() < deadline,
            "the studio's stream never came up"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // HTTP-FLV: a challenge, wrong and right passwords, signed URLs.
    let (status, head, _) = get(http, "/live/cam.flv", "Connection: close\r\n");
    assert_eq!(status, 401);
    assert!(
        head.contains("WWW-Authenticate: Basic realm=\"sluice\""),
        "{head}"
    );
    // viewer:nope
    assert_eq!(
        get(
            http,
            "/live/cam.flv",
            "Authorization: Basic dmlld2VyOm5vcGU=\r\n"
        )
        .0,
        401
    );
    let (status, _, body) = get(http, "/live/cam.flv?user=viewer&pass=watch", "");
    assert_eq!(status, 200);
    assert!(body.starts_with(b"FLV"));
    let good = signed("k3y", "read", "live/cam", now() + 60);
    assert_eq!(get(http, &format!("/live/cam.flv?{good}"), "").0, 200);
    assert_eq!(
        get(
            http,
            &format!("/live/other.flv?{good}"),
            "Connection: close\r\n"
        )
        .0,
        403
    );
    let old = signed("k3y", "read", "live/cam", now() - 1);
    assert_eq!(
        get(
            http,
            &format!("/live/cam.flv?{old}"),
            "Connection: close\r\n"
        )
        .0,
        403
    );
    let tampered = good.replace("sign=", "sign=00");
    assert_eq!(
        get(
            http,
            &format!("/live/cam.flv?{tampered}"),
            "Connection: close\r\n"
        )
        .0,
        403
    );
    assert!(probe(&format!(
        "http://{http}/live/cam.flv?user=viewer&pass=watch"
    ))
    .contains("h264,320"));

    // RTMP play.
    assert!(
        !probe(&base).contains("h264"),
        "RTMP played without credentials"
    );
    assert!(probe(&format!("{base}?user=viewer&pass=watch")).contains("h264,320"));

    // RTSP: the same users, in the URL's query.
    let rtsp = format!("rtsp://{}/live/cam", server.rtsp.expect("rtsp"));
    assert!(
        !probe(&rtsp).contains("h264"),
        "RTSP played without credentials"
    );
    assert!(probe(&format!("{rtsp}?user=viewer&pass=watch")).contains("h264,320"));
    let mut refused = publish_test_pattern(&format!("{rtsp}2"), "rtsp", "libx264", 5);
    assert!(
        !refused.0.wait().unwrap().success(),
        "RTSP published without credentials"
    );

    // HLS: the playlist asks once and sets the viewer's cookie; segments need it.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(get(http, "/live/cam.m3u8", "Connection: close\r\n").0, 401);
    let (status, head, body) = get(
        http,
        "/live/cam.m3u8?user=viewer&pass=watch",
        "Connection: close\r\n",
    );
    assert_eq!(status, 200, "{head}");
    // A stream that needs authorization is no shared cache's business.
    assert!(head.contains("Cache-Control: private, max-age="), "{head}");
    let cookie = head
        .lines()
        .find_map(|l| l.strip_prefix("Set-Cookie: "))
        .filter(|c| c.starts_with("sluice_auth_"))
        .expect("a viewer cookie")
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let playlist = String::from_utf8_lossy(&body).to_string();
    let segment = playlist
        .lines()
        .find(|l| l.ends_with(".ts"))
        .expect("a segment");
    // Relative to the playlist's directory (`cam/TAG-N.ts`).
    let segment = format!("/live/{segment}");
    let (status, head, _) = get(http, &segment, "Connection: close\r\n");
    assert_eq!(status, 401);
    assert!(head.contains("Cache-Control: no-store"), "{head}");
    let (status, head, _) = get(
        http,
        &segment,
        &format!("Cookie: {cookie}\r\nConnection: close\r\n"),
    );
    assert_eq!(status, 200);
    assert!(
        head.contains("Cache-Control: private, max-age=31536000, immutable"),
        "{head}"
    );
    assert_eq!(
        get(
            http,
            &segment,
            "Cookie: sluice_auth_x=1.00\r\nConnection: close\r\n"
        )
        .0,
        401
    );
    // ffprobe (ffmpeg's HLS reader) carries the cookie from the playlist to segments.
    assert!(probe(&format!(
        "http://{http}/live/cam.m3u8?user=viewer&pass=watch"
    ))
    .contains("h264,320"));

    // Files: the same rule (the viewer may read live/* only).
    assert_eq!(
        get(http, "/files/rec/a.bin", "Connection: close\r\n").0,
        401
    );
    assert_eq!(
        get(
            http,
            "/files/rec/a.bin?user=viewer&pass=watch",
            "Connection: close\r\n"
        )
        .0,
        403
    );
    let (status, _, body) = get(
        http,
        "/files/rec/a.bin?user=studio&pass=s3cret",
        "Connection: close\r\n",
    );
    assert_eq!((status, body.as_slice()), (200, &b"recorded"[..]));

    // The API shows no secret.
    let (_, _, body) = get(http, "/api/v1/config", "Connection: close\r\n");
    let config = String::from_utf8_lossy(&body);
    assert!(
        !config.contains("k3y") && !config.contains(&sha256_hex("watch")),
        "{config}"
    );

    // Every denial is counted.
    let (_, _, body) = get(http, "/metrics", "Connection: close\r\n");
    let metrics = String::from_utf8_lossy(&body);
    let count = |reason: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix(&format!(
                    "sluice_auth_denials_total{{reason=\"{reason}\"}} "
                ))
            })
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {reason} in {metrics}"))
    };
    assert!(count("no_credentials") >= 6.0);
    assert!(count("bad_credentials") >= 2.0);
    assert!(count("not_permitted") >= 2.0);
    assert!(count("bad_signature") >= 2.0);
    assert!(count("expired") >= 1.0);
}
