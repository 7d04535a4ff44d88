//! Configuration end to end: per-app overrides as a running server applies them,
//! `--print-config` read back by `--config`, and plain log lines on a pipe.

use crate::common::{avc_track, synthetic_clip, TestServer};
use sluice_bench::player::{Player, Protocol};
use sluice_bench::publish::publish_clip;
use sluice_bench::rtmp::RtmpConn;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::time::{timeout, Instant};

/// The status code of a GET of `path`.
fn status(addr: SocketAddr, path: &str) -> u16 {
    let mut sock = TcpStream::connect(addr).expect("connect");
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    write!(
        sock,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut head = String::new();
    BufReader::new(sock)
        .read_line(&mut head)
        .expect("status line");
    head.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{path}: {head:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_with_hls_off_answers_404_while_another_apps_hls_plays() {
    let dir = crate::common::scratch("config-apps");
    let file = dir.join("apps.toml");
    std::fs::write(&file, "[[apps]]\nname = \"quiet\"\nhls = false\n").expect("config");
    let server = TestServer::start(&["--config", file.to_str().expect("utf-8")]);
    let clip = synthetic_clip(&avc_track(), 8, 25, 2000);
    let until = Instant::now() + Duration::from_secs(8);
    let mut publishers = Vec::new();
    for app in ["live", "quiet"] {
        let mut conn = RtmpConn::connect(server.rtmp, app, false).await.unwrap();
        conn.publish("cam").await.unwrap();
        let clip = clip.clone();
        publishers.push(tokio::spawn(async move {
            publish_clip(&mut conn, &clip, until, true, None)
                .await
                .unwrap();
            conn
        }));
    }
    let http = server.http;
    let deadline = Instant::now() + Duration::from_secs(7);
    let live = loop {
        let live = tokio::task::spawn_blocking(move || status(http, "/live/cam.m3u8"))
            .await
            .unwrap();
        if live == 200 || Instant::now() > deadline {
            break live;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(live, 200, "live/cam has HLS");
    let quiet = tokio::task::spawn_blocking(move || {
        [
            status(http, "/quiet/cam.m3u8"),
            status(http, "/quiet/cam/index.m3u8"),
        ]
    })
    .await
    .unwrap();
    assert_eq!(quiet, [404, 404], "quiet/cam has no HLS");
    // It is live all the same: HTTP-FLV plays it.
    let mut player = Player::connect(Protocol::Flv, http, "quiet", "cam")
        .await
        .unwrap();
    let tag = timeout(Duration::from_secs(10), player.next_tag())
        .await
        .expect("a tag in time");
    assert!(tag.is_ok(), "quiet/cam plays over HTTP-FLV");
    for p in publishers {
        p.await.unwrap().close().await.unwrap();
    }
}

#[test]
fn printed_configuration_reads_back_unchanged() {
    let dir = crate::common::scratch("config-print");
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(args)
            .output()
            .expect("sluice --print-config");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let file = dir.join("in.toml");
    std::fs::write(
        &file,
        "[players]\nmerge_ms = 40\n[[apps]]\nname = \"live\"\nrecord = false\n",
    )
    .expect("config");
    let first = run(&[
        "--config",
        file.to_str().expect("utf-8"),
        "--workers",
        "3",
        "--print-config",
    ]);
    assert!(first.contains("\nworkers = 3\n"), "{first}");
    assert!(first.contains("\nmerge_ms = 40\n"), "{first}");
    let printed = dir.join("printed.toml");
    std::fs::write(&printed, &first).expect("printed");
    let second = run(&[
        "--config",
        printed.to_str().expect("utf-8"),
        "--print-config",
    ]);
    assert_eq!(first, second);

    // A key of the old flat layout is refused, and the error says where it went.
    std::fs::write(&file, "merge_ms = 40\n").expect("config");
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["--config", file.to_str().expect("utf-8"), "--print-config"])
        .output()
        .expect("sluice");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("merge_ms") && err.contains("[players]"),
        "{err}"
    );
}

/// Runs the server with `flags`, makes it log a bad RTMP handshake (a warning in the
/// connection's span), stops it with SIGTERM ("shutting down"), and returns its exit
/// status and everything it logged.
fn log_of_a_bad_handshake(flags: &[&str]) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["--rtmp", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .args(["--rtsp", "off", "--webrtc-udp", "off", "--srt", "off"])
        .args(["--log", "info"])
        .args(flags)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sluice");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("listening line");
    let rtmp: SocketAddr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("rtmp="))
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no rtmp address in {line:?}"));
    let mut sock = TcpStream::connect(rtmp).expect("connect");
    sock.write_all(&[9; 1537]).expect("send");
    let mut log = BufReader::new(child.stderr.take().expect("stderr"));
    // Up to the handshake's warning (a start may log others first, such as a low
    // descriptor limit).
    let mut first = String::new();
    while !first.contains("handshake") {
        if log.read_line(&mut first).expect("a log line") == 0 {
            break;
        }
    }
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill -TERM");
    let mut rest = String::new();
    log.read_to_string(&mut rest).expect("stderr");
    (child.wait().expect("exit"), first + &rest)
}

#[test]
fn log_lines_on_a_pipe_have_no_colour_codes() {
    let (status, log) = log_of_a_bad_handshake(&[]);
    assert!(log.contains("handshake"), "{log:?}");
    assert!(log.contains("shutting down"), "{log:?}");
    assert!(status.success(), "a graceful stop: {status:?}");
    assert!(!log.contains('\x1b'), "colour codes in {log:?}");
}

#[test]
fn json_logs_are_one_object_per_line() {
    let (status, log) = log_of_a_bad_handshake(&["--log-format", "json"]);
    assert!(status.success());
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
        .collect();
    let warning = lines
        .iter()
        .find(|l| {
            l["level"] == "WARN"
                && l["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("handshake"))
        })
        .expect("the handshake warning");
    assert_eq!(warning["span"]["name"], "rtmp", "{warning}");
    assert!(lines
        .iter()
        .any(|l| l["fields"]["message"] == "shutting down"));
}

#[test]
fn an_unknown_log_format_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["--log-format", "xml"])
        .output()
        .expect("run sluice");
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("--log-format") && said.contains("text, json"),
        "{said}"
    );
    // In the file, the key and the choices.
    let file = crate::common::scratch("bad-log-format").join("sluice.toml");
    std::fs::write(&file, "log_format = \"xml\"\n").expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["--config", file.to_str().expect("utf-8")])
        .output()
        .expect("run sluice");
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("log_format") && said.contains("`text` or `json`"),
        "{said}"
    );
}
