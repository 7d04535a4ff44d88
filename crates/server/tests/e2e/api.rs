//! The HTTP API and `/metrics` end to end: ffmpeg publishes over RTMP, a raw HTTP-FLV
//! player plays; the API lists both, kicks the player (its socket really closes),
//! closes the stream (ffmpeg's connection ends); `/metrics` is checked line by line
//! against the text format; the bearer token is enforced when set.

use crate::common::{have_ffmpeg, publish_test_pattern, TestServer};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A request with extra header lines; returns (status code, headers, body).
fn request(addr: SocketAddr, method: &str, path: &str, extra: &str) -> (u16, String, Vec<u8>) {
    crate::common::http_request(addr, method, path, extra)
}

fn json(addr: SocketAddr, method: &str, path: &str) -> (u16, Value) {
    let (status, head, body) = request(addr, method, path, "");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{path}: {head}"
    );
    (status, serde_json::from_slice(&body).expect("JSON body"))
}

/// Polls `path` until `ok` holds for its JSON (10 s at most).
fn wait_json(addr: SocketAddr, path: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, v) = json(addr, "GET", path);
        if status == 200 && ok(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{path} never matched: {v}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Checks the Prometheus text exposition format (OpenMetrics flavor) line by line:
/// `# HELP`/`# TYPE`/`# UNIT` comments, samples `name{label="value",...} number`, and
/// `# EOF` last. Returns the samples.
fn parse_metrics(text: &str) -> Vec<(String, f64)> {
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.last(), Some(&"# EOF"), "ends with # EOF");
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
            && !n.as_bytes()[0].is_ascii_digit()
    };
    let mut samples = Vec::new();
    for line in &lines[..lines.len() - 1] {
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let kind = parts.next().unwrap_or("");
            assert!(matches!(kind, "HELP" | "TYPE" | "UNIT"), "comment: {line}");
            assert!(name_ok(parts.next().unwrap_or("")), "metric name: {line}");
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("sample: name value");
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("value: {line}"));
        let name = match series.split_once('{') {
            Some((name, labels)) => {
                let labels = labels.strip_suffix('}').expect("labels close");
                for pair in labels.split("\",").filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once("=\"").expect("label=\"value\"");
                    assert!(name_ok(k), "label name: {line}");
                    assert!(!v.contains('\n'), "label value: {line}");
                }
                name
            }
            None => series,
        };
        assert!(name_ok(name), "metric name: {line}");
        samples.push((series.to_string(), value));
    }
    samples
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn api_lists_kicks_and_closes_and_metrics_parse() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&["--workers", "2", "--metrics-per-connection", "true"]);
    let http = server.http;

    let (status, info) = json(http, "GET", "/api/v1/server");
    assert_eq!(status, 200);
    assert_eq!(info["name"], "sluice");
    assert_eq!(info["workers"], 2);

    let url = format!("rtmp://{}/live/cam", server.rtmp);
    let mut publisher = publish_test_pattern(&url, "flv", "libx264", 60);
    let stream = wait_json(http, "/api/v1/streams/live/cam", |s| {
        s["video"]["codec"] == "h264"
            && s["audio"]["codec"] == "aac"
            && s["frames_in"].as_u64() > Some(25)
    });
    assert_eq!(stream["video"]["width"], 320);
    assert_eq!(stream["video"]["height"], 240);
    assert_eq!(stream["live"], true);
    assert_eq!(stream["publisher"]["protocol"], "rtmp");
    let (_, list) = json(http, "GET", "/api/v1/streams");
    assert_eq!(list["streams"][0]["key"], "live/cam");

    // A raw HTTP-FLV player.
    let mut player = TcpStream::connect(http).expect("connect");
    write!(player, "GET /live/cam.flv HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
    player
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut buf = vec![0u8; 64 << 10];
    let n = player.read(&mut buf).expect("FLV bytes");
    assert!(n > 0);

    let clients = wait_json(http, "/api/v1/clients", |v| {
        v["clients"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["role"] == "play" && c["stream"] == "live/cam")
        })
    });
    let all = clients["clients"].as_array().expect("clients");
    let playing = all
        .iter()
        .find(|c| c["role"] == "play")
        .expect("the player");
    assert_eq!(playing["protocol"], "http");
    assert!(playing["peer"].as_str().unwrap().starts_with("127.0.0.1:"));
    assert!(all
        .iter()
        .any(|c| c["role"] == "publish" && c["protocol"] == "rtmp" && c["stream"] == "live/cam"));
    let stream = wait_json(http, "/api/v1/streams/live/cam", |s| {
        s["viewers"]["flv"] == 1
    });
    assert_eq!(stream["players"], 1);
    let (status, one) = json(http, "GET", &format!("/api/v1/clients/{}", playing["id"]));
    assert_eq!((status, &one["id"]), (200, &playing["id"]));

    let (status, _, body) = request(http, "GET", "/metrics", "");
    assert_eq!(status, 200);
    let text = String::from_utf8(body).expect("utf-8 metrics");
    let samples = parse_metrics(&text);
    let sample = |series: &str| {
        samples
            .iter()
            .find(|(s, _)| s == series)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    };
    assert_eq!(
        sample("sluice_stream_viewers{app=\"live\",stream=\"cam\",protocol=\"flv\"}"),
        1.0
    );
    assert!(sample("sluice_stream_received_bytes_total{app=\"live\",stream=\"cam\"}") > 0.0);
    assert!(sample("sluice_stream_sent_bytes_total{app=\"live\",stream=\"cam\"}") > 0.0);
    assert_eq!(sample("sluice_streams"), 1.0);
    assert!(samples
        .iter()
        .any(|(s, _)| s.starts_with("sluice_worker_busy_ratio{worker=\"1\"}")));
    // Per connection (opt-in): the player and the publisher, each with its figures.
    let series = format!(
        "sluice_connection_sent_bytes_total{{id=\"{}\",protocol=\"http\",",
        playing["id"]
    );
    assert!(
        samples
            .iter()
            .any(|(s, v)| s.starts_with(&series) && s.contains("role=\"play\"") && *v > 0.0),
        "{series}... in\n{text}"
    );
    assert!(samples.iter().any(
        |(s, v)| s.starts_with("sluice_connection_received_bytes_total")
            && s.contains("role=\"publish\",stream=\"live/cam\"")
            && *v > 0.0
    ));

    // Every GET of the OpenAPI document answers with a status it documents.
    let (status, doc) = json(http, "GET", "/api/v1/openapi.json");
    assert_eq!(status, 200);
    for (template, item) in doc["paths"].as_object().expect("paths") {
        let Some(get) = item.get("get") else { continue };
        let path = template
            .replace("{app}/{name}", "live/cam")
            .replace("{id}", &playing["id"].to_string());
        let (status, head, _) = request(http, "GET", &path, "");
        assert!(
            get["responses"].get(status.to_string()).is_some(),
            "GET {path}: {status} is not documented"
        );
        let documented = get["responses"]["200"]["content"]
            .as_object()
            .and_then(|c| c.keys().next().cloned())
            .expect("a 200 content type");
        assert!(
            head.to_ascii_lowercase()
                .contains(&format!("content-type: {documented}")),
            "GET {path}: {head}"
        );
    }

    // Kick the player: its socket closes.
    let (status, _) = json(
        http,
        "DELETE",
        &format!("/api/v1/clients/{}", playing["id"]),
    );
    assert_eq!(status, 200);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match player.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => assert!(Instant::now() < deadline, "kicked player still fed"),
        }
    }
    wait_json(http, "/api/v1/streams/live/cam", |s| s["players"] == 0);
    let (_, _, body) = request(http, "GET", "/metrics", "");
    let text = String::from_utf8(body).expect("utf-8 metrics");
    let samples = parse_metrics(&text);
    let total = |prefix: &str| -> f64 {
        samples
            .iter()
            .filter(|(s, _)| s.starts_with(prefix))
            .map(|(_, v)| v)
            .sum()
    };
    assert_eq!(
        total("sluice_disconnects_total{protocol=\"http\",reason=\"kicked\"}"),
        1.0,
        "{text}"
    );
    assert!(
        total("sluice_time_to_first_frame_seconds_count") >= 1.0,
        "{text}"
    );

    // Unknown routes, methods and clients.
    assert_eq!(json(http, "GET", "/api/v1/nope").0, 404);
    assert_eq!(json(http, "DELETE", "/api/v1/clients/99999999").0, 404);
    assert_eq!(json(http, "DELETE", "/api/v1/server").0, 405);
    assert_eq!(json(http, "GET", "/api/v1/streams/live/none").0, 404);
    let (status, config) = json(http, "GET", "/api/v1/config");
    assert_eq!(status, 200);
    assert_eq!(config["players"]["merge_ms"], 200);

    // Close the stream: it is gone, and the publisher's connection ends.
    let (status, closed) = json(http, "DELETE", "/api/v1/streams/live/cam");
    assert_eq!(status, 200, "{closed}");
    assert_eq!(closed["publishers_kicked"], 1);
    assert_eq!(json(http, "GET", "/api/v1/streams/live/cam").0, 404);
    let deadline = Instant::now() + Duration::from_secs(10);
    while publisher.0.try_wait().expect("ffmpeg status").is_none() {
        assert!(
            Instant::now() < deadline,
            "ffmpeg still publishing after the close"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn api_and_metrics_need_the_token_when_one_is_set() {
    let server = TestServer::start(&["--api-token", "s3cret"]);
    for path in ["/api/v1/server", "/metrics"] {
        let (status, head, _) = request(server.http, "GET", path, "");
        assert_eq!(status, 401, "{path} without a token");
        assert!(head.contains("WWW-Authenticate: Bearer"), "{head}");
        let (status, _, _) = request(server.http, "GET", path, "Authorization: Bearer nope\r\n");
        assert_eq!(status, 403, "{path} with a wrong token");
        let (status, _, _) = request(server.http, "GET", path, "Authorization: Bearer s3cret\r\n");
        assert_eq!(status, 200, "{path} with the token");
    }
    // The token is never shown.
    let (_, _, body) = request(
        server.http,
        "GET",
        "/api/v1/config",
        "Authorization: Bearer s3cret\r\n",
    );
    let config: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(config["api"]["token"], "(set)");
    // Media routes are not behind the API's token.
    let (status, _, _) = request(server.http, "GET", "/", "");
    assert_eq!(status, 200);
}

/// Whether curl, trusting only `ca`, accepts the certificate HTTPS presents now.
fn presents(https: SocketAddr, ca: &std::path::Path) -> bool {
    std::process::Command::new("curl")
        .args(["-s", "-o", "/dev/null", "--max-time", "5", "--cacert"])
        .arg(ca)
        .arg("--resolve")
        .arg(format!("localhost:{}:127.0.0.1", https.port()))
        .arg(format!("https://localhost:{}/", https.port()))
        .status()
        .expect("run curl")
        .success()
}

#[test]
fn a_reload_applies_the_limits_and_names_what_takes_a_restart() {
    let dir = crate::common::scratch("api-reload-restart");
    let file = dir.join("sluice.toml");
    std::fs::write(
        &file,
        "[limits]\nmax_streams = 10\n[rtmp]\nchunk_size = 4096\n",
    )
    .unwrap();
    let server = TestServer::start(&["--config", file.to_str().unwrap()]);
    let (status, nothing) = json(server.http, "POST", "/api/v1/reload");
    assert_eq!(status, 200, "{nothing}");
    assert_eq!(
        nothing["restart_needed"],
        serde_json::json!([]),
        "{nothing}"
    );
    std::fs::write(
        &file,
        "[limits]\nmax_streams = 20\n[rtmp]\nchunk_size = 8192\n",
    )
    .unwrap();
    let (status, done) = json(server.http, "POST", "/api/v1/reload");
    assert_eq!(status, 200, "{done}");
    assert!(
        done["reloaded"]
            .as_array()
            .unwrap()
            .contains(&"limits".into()),
        "{done}"
    );
    assert_eq!(
        done["restart_needed"],
        serde_json::json!(["rtmp.chunk_size"]),
        "{done}"
    );
}

#[test]
#[cfg_attr(not(all(have_ffmpeg, have_curl)), ignore = "needs ffmpeg and curl")]
fn a_certificate_reload_keeps_https_players_playing() {
    if !have_ffmpeg() || !crate::common::have("curl") {
        return;
    }
    let dir = crate::common::scratch("api-reload");
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    let (a, b) = (
        crate::common::localhost_certificate(),
        crate::common::localhost_certificate(),
    );
    let (ca_a, ca_b) = (dir.join("a.pem"), dir.join("b.pem"));
    std::fs::write(&ca_a, &a.0).unwrap();
    std::fs::write(&ca_b, &b.0).unwrap();
    std::fs::write(&cert_path, &a.0).unwrap();
    std::fs::write(&key_path, &a.1).unwrap();
    let mut server = TestServer::start(&[
        "--https",
        "127.0.0.1:0",
        "--tls-cert",
        cert_path.to_str().unwrap(),
        "--tls-key",
        key_path.to_str().unwrap(),
    ]);
    let https = server.https.expect("https");
    assert!(presents(https, &ca_a) && !presents(https, &ca_b));

    let url = format!("rtmp://{}/live/cam", server.rtmp);
    let _publisher = publish_test_pattern(&url, "flv", "libx264", 40);
    wait_json(server.http, "/api/v1/streams/live/cam", |s| {
        s["frames_in"].as_u64() > Some(10)
    });
    // An HTTPS player that plays through both reloads.
    let out = dir.join("played.flv");
    // curl creates the file with its first bytes: one from an earlier run would mislead.
    let _ = std::fs::remove_file(&out);
    let mut player = crate::common::Kill(
        std::process::Command::new("curl")
            .args(["-sk", "-o"])
            .arg(&out)
            .arg(format!("https://{https}/live/cam.flv"))
            .spawn()
            .expect("curl"),
    );
    let size = || std::fs::metadata(&out).map_or(0, |m| m.len());
    let grows = || {
        let before = size();
        let deadline = Instant::now() + Duration::from_secs(5);
        while size() <= before {
            assert!(
                Instant::now() < deadline,
                "the HTTPS player stopped getting media"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    grows();

    // The API's reload: the new certificate from the next handshake on.
    std::fs::write(&cert_path, &b.0).unwrap();
    std::fs::write(&key_path, &b.1).unwrap();
    let (status, done) = json(server.http, "POST", "/api/v1/reload");
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["reloaded"][0], "tls_certificate");
    assert!(presents(https, &ca_b) && !presents(https, &ca_a));
    grows();

    // SIGHUP does the same; a broken file changes nothing.
    std::fs::write(&cert_path, &a.0).unwrap();
    std::fs::write(&key_path, &a.1).unwrap();
    let hup = |pid: u32| {
        std::process::Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .expect("kill -HUP")
    };
    hup(server.pid());
    let deadline = Instant::now() + Duration::from_secs(5);
    while !presents(https, &ca_a) {
        assert!(Instant::now() < deadline, "SIGHUP did not reload");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::write(&key_path, "not a key").unwrap();
    let (status, _) = json(server.http, "POST", "/api/v1/reload");
    assert_eq!(status, 500);
    assert!(presents(https, &ca_a));
    grows();
    assert!(server.alive());
    assert!(
        player.0.try_wait().unwrap().is_none(),
        "the player is still connected"
    );
}

#[test]
fn the_api_may_have_a_listener_of_its_own() {
    let server = TestServer::start(&["--api", "127.0.0.1:0"]);
    let api = server.api.expect("the API's listener");
    assert_eq!(json(api, "GET", "/api/v1/server").0, 200);
    assert_eq!(request(api, "GET", "/metrics", "").0, 200);
    assert_eq!(request(api, "GET", "/console/", "").0, 200);
    // Media and files are not served there.
    assert_eq!(request(api, "GET", "/live/cam.flv", "").0, 404);
    assert_eq!(request(api, "GET", "/files/x", "").0, 404);
    // The HTTP listener still answers the API too.
    assert_eq!(json(server.http, "GET", "/api/v1/server").0, 200);
}

/// One request with curl over HTTPS, forced to HTTP/1.1 or HTTP/2: (status, the HTTP
/// version curl spoke, response headers, body).
fn curl(
    https: SocketAddr,
    http2: bool,
    method: &str,
    path: &str,
    headers: &[&str],
    body: Option<&str>,
) -> (u16, String, String, String) {
    let dir = crate::common::scratch("api-routes");
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let id = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (head_file, body_file) = (
        dir.join(format!("{id}.head")),
        dir.join(format!("{id}.body")),
    );
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-sk", "--max-time", "3", "-X", method])
        .arg(if http2 { "--http2" } else { "--http1.1" })
        .args(["-w", "%{http_code} %{http_version}", "-D"])
        .arg(&head_file)
        .arg("-o")
        .arg(&body_file);
    if method == "HEAD" {
        cmd.arg("-I");
    }
    for h in headers {
        cmd.args(["-H", h]);
    }
    if let Some(body) = body {
        cmd.args(["--data-binary", body]);
    }
    let out = cmd
        .arg(format!("https://{https}{path}"))
        .output()
        .expect("run curl");
    let written = String::from_utf8_lossy(&out.stdout).to_string();
    let (status, version) = written.split_once(' ').unwrap_or(("0", ""));
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
    let answer = (
        status.parse().unwrap_or(0),
        version.to_string(),
        read(&head_file).to_ascii_lowercase(),
        read(&body_file),
    );
    let _ = std::fs::remove_file(&head_file);
    let _ = std::fs::remove_file(&body_file);
    answer
}

/// Every route asked over HTTP/1.1 and over HTTP/2 (HTTPS, as browsers speak to it):
/// the same status, and the answer each route should give. HTTP/2 once had a route
/// table of its own without WHEP, WHIP and WebDAV, and dropped request bodies.
#[test]
#[cfg_attr(not(all(have_ffmpeg, have_curl)), ignore = "needs ffmpeg and curl")]
fn every_route_answers_alike_over_http1_and_http2() {
    if !have_ffmpeg() || !crate::common::have("curl") {
        return;
    }
    let root = crate::common::scratch("api-routes-root");
    std::fs::write(root.join("clip.bin"), vec![7u8; 100_000]).unwrap();
    let server = TestServer::start(&[
        "--https",
        "127.0.0.1:0",
        "--tls-self-signed",
        "--webrtc-udp",
        "127.0.0.1:0",
        "--media-root",
        root.to_str().unwrap(),
        "--play-wait-ms",
        "300",
    ]);
    let https = server.https.expect("https");
    let _publisher = publish_test_pattern(
        &format!("rtmp://{}/live/walk", server.rtmp),
        "flv",
        "libx264",
        60,
    );
    crate::common::wait_live(server.http, "live/walk");
    // Segments for the HLS routes.
    wait_json(server.http, "/api/v1/streams/live/walk", |v| {
        v["ring"]["span_ms"].as_u64().unwrap_or(0) >= 2500
    });
    let offer = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../webrtc/fuzz/offer.sdp"
    ))
    .expect("a browser's WHEP offer");
    let sdp = "Content-Type: application/sdp";
    let json_type = "Content-Type: application/json";
    let pull = r#"{"stream":"live/pulled","url":"rtmp://127.0.0.1:1/live/x"}"#;
    // (method, path, headers, body, the status it must get)
    type Case<'a> = (&'a str, String, Vec<&'a str>, Option<&'a str>, u16);
    let cases: Vec<Case> = vec![
        ("GET", "/".into(), vec![], None, 200),
        ("HEAD", "/live/walk.flv".into(), vec![], None, 200),
        ("HEAD", "/live/none.flv".into(), vec![], None, 404),
        ("GET", "/live/walk.m3u8".into(), vec![], None, 200),
        ("GET", "/live/walk/index.m3u8".into(), vec![], None, 200),
        (
            "GET",
            "/live/walk/index.m3u8?_HLS_msn=x".into(),
            vec![],
            None,
            400,
        ),
        ("GET", "/live/none.m3u8".into(), vec![], None, 404),
        ("GET", "/files/clip.bin".into(), vec![], None, 200),
        (
            "GET",
            "/files/clip.bin".into(),
            vec!["Range: bytes=10-19"],
            None,
            206,
        ),
        ("HEAD", "/files/clip.bin".into(), vec![], None, 200),
        ("GET", "/files/none".into(), vec![], None, 404),
        ("OPTIONS", "/files/".into(), vec![], None, 200),
        ("PROPFIND", "/files/".into(), vec!["Depth: 1"], None, 207),
        ("OPTIONS", "/live/walk/whep".into(), vec![], None, 204),
        (
            "POST",
            "/live/walk/whep".into(),
            vec![sdp],
            Some(&offer),
            201,
        ),
        (
            "POST",
            "/live/walk/whep".into(),
            vec![json_type],
            Some("{}"),
            415,
        ),
        (
            "POST",
            "/live/none/whep".into(),
            vec![sdp],
            Some(&offer),
            404,
        ),
        ("DELETE", "/live/walk/whep/1-00".into(), vec![], None, 404),
        ("PUT", "/live/walk.flv".into(), vec![], Some("x"), 405),
        ("GET", "/console/".into(), vec![], None, 200),
        ("GET", "/console/none.js".into(), vec![], None, 404),
        ("POST", "/console/".into(), vec![], Some("x"), 405),
        ("GET", "/metrics".into(), vec![], None, 200),
        (
            "POST",
            "/api/v1/relays/pulls".into(),
            vec![json_type],
            Some(pull),
            201,
        ),
        (
            "DELETE",
            "/api/v1/relays/pulls/live/pulled".into(),
            vec![],
            None,
            200,
        ),
        (
            "POST",
            "/api/v1/relays/pulls".into(),
            vec![json_type],
            Some("{"),
            400,
        ),
        ("GET", "/nothing/here/at/all".into(), vec![], None, 404),
    ];
    for http2 in [false, true] {
        let version = if http2 { "2" } else { "1.1" };
        for (method, path, headers, body, want) in &cases {
            let (status, spoke, head, text) = curl(https, http2, method, path, headers, *body);
            assert_eq!(spoke, version, "{method} {path}: curl spoke HTTP/{spoke}");
            assert_eq!(
                status, *want,
                "{method} {path} over HTTP/{version}: {status} {head}{text}"
            );
            if *method == "POST" && path.ends_with("/whep") && status == 201 {
                // The answer, and a session that DELETE of its Location ends.
                assert!(text.starts_with("v=0"), "{text}");
                let location = head
                    .lines()
                    .find_map(|l| l.strip_prefix("location: "))
                    .expect("a Location")
                    .trim()
                    .to_string();
                let (status, ..) = curl(https, http2, "DELETE", &location, &[], None);
                assert_eq!(status, 200, "DELETE {location} over HTTP/{version}");
            }
        }
        // Every GET of the API that names no resource answers as the API says.
        let (_, _, _, openapi) = curl(https, http2, "GET", "/api/v1/openapi.json", &[], None);
        let openapi: Value = serde_json::from_str(&openapi).expect("the OpenAPI document");
        let paths = openapi["paths"].as_object().expect("paths");
        for (path, ops) in paths.iter().filter(|(p, _)| !p.contains('{')) {
            if ops.get("get").is_some() {
                let (status, ..) = curl(https, http2, "GET", path, &[], None);
                assert_eq!(status, 200, "GET {path} over HTTP/{version}");
            }
        }
    }
}

/// ffmpeg reading `url` (with input `options`) until killed, its output thrown away.
fn ffmpeg_player(options: &[&str], url: &str) -> crate::common::Kill {
    crate::common::Kill(
        std::process::Command::new("ffmpeg")
            .args(["-hide_banner", "-loglevel", "error"])
            .args(options)
            .args(["-i", url, "-c", "copy", "-f", "null", "-"])
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("start ffmpeg"),
    )
}

/// Viewers are counted by the protocol they play with, whatever output format it
/// shares with another: an RTSP player (ffmpeg, over TCP) as `rtsp`, an SRT player
/// (ffmpeg's libsrt) and an HTTP-TS player (both of the stream's TS form) as `srt` and
/// `http-ts`, an HTTP-fMP4 player as `http-fmp4`, and nobody as `webrtc`, in the API and
/// in `/metrics`.
#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn viewers_are_counted_by_the_protocol_they_play_with() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&[]);
    let _publisher = publish_test_pattern(
        &format!("rtmp://{}/live/cam", server.rtmp),
        "flv",
        "libx264",
        30,
    );
    crate::common::wait_live(server.http, "live/cam");
    let rtsp = server.rtsp.expect("RTSP");
    let srt = server.srt.expect("SRT");
    let _rtsp_player = ffmpeg_player(
        &["-rtsp_transport", "tcp"],
        &format!("rtsp://{rtsp}/live/cam"),
    );
    let _srt_player = ffmpeg_player(
        &[],
        &format!("srt://127.0.0.1:{}?streamid=read:live/cam", srt.port()),
    );
    let _ts_player = ffmpeg_player(&[], &format!("http://{}/live/cam.ts", server.http));
    let _mp4_player = ffmpeg_player(&[], &format!("http://{}/live/cam.mp4", server.http));
    let stream = wait_json(server.http, "/api/v1/streams/live/cam", |s| {
        s["viewers"]["rtsp"] == 1
            && s["viewers"]["srt"] == 1
            && s["viewers"]["http-ts"] == 1
            && s["viewers"]["http-fmp4"] == 1
    });
    let viewers = &stream["viewers"];
    for (protocol, n) in [
        ("rtmp", 0),
        ("flv", 0),
        ("ws-flv", 0),
        ("http-ts", 1),
        ("http-fmp4", 1),
        ("ws-fmp4", 0),
        ("rtsp", 1),
        ("srt", 1),
        ("webrtc", 0),
        ("hls", 0),
    ] {
        assert_eq!(viewers[protocol], n, "{protocol}: {viewers}");
    }
    assert_eq!(stream["players"], 4);
    for (protocol, n) in [
        ("rtsp", 1.0),
        ("srt", 1.0),
        ("http-ts", 1.0),
        ("http-fmp4", 1.0),
        ("webrtc", 0.0),
    ] {
        let series =
            format!("sluice_stream_viewers{{app=\"live\",stream=\"cam\",protocol=\"{protocol}\"}}");
        assert_eq!(crate::common::metric(server.http, &series), n, "{series}");
    }
}
