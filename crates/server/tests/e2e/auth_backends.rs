//! The auth backends beyond static users, end to end: the HTTP hook (allow, deny,
//! timeout, a slow hook that holds up nobody else, the cache, HLS asking once per
//! viewer), notification hooks, JWTs (configured key and JWKS; header and query;
//! expired, wrong key, forged), RTSP's Basic challenge answered by ffmpeg,
//! and a reload that changes who may do what.

use crate::common::{have_ffmpeg, http_request, publish_test_pattern, TestServer};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A local hook receiver: records each POST's path and JSON body, and answers as
/// `answer` says (a delay, then a status) in a thread per request.
struct HookServer {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<(String, Value)>>>,
}

type Answer = dyn Fn(&str, &Value) -> (Duration, u16) + Send + Sync;

impl HookServer {
    fn start(answer: impl Fn(&str, &Value) -> (Duration, u16) + Send + Sync + 'static) -> Self {
        Self::serving(Arc::new(answer), None)
    }

    /// Also answers GETs with `get_body` (a JWKS).
    fn serving(answer: Arc<Answer>, get_body: Option<String>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        std::thread::spawn(move || {
            for sock in listener.incoming().flatten() {
                let (answer, record, get_body) = (answer.clone(), record.clone(), get_body.clone());
                std::thread::spawn(move || serve(sock, &*answer, &record, get_body));
            }
        });
        HookServer { addr, seen }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn calls(&self, path: &str) -> Vec<Value> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, v)| v.clone())
            .collect()
    }
}

fn serve(
    sock: TcpStream,
    answer: &Answer,
    seen: &Mutex<Vec<(String, Value)>>,
    get_body: Option<String>,
) {
    let mut reader = BufReader::new(sock.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut len = 0;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; len];
    let _ = reader.read_exact(&mut body);
    let mut sock = sock;
    if method == "GET" {
        let body = get_body.unwrap_or_default();
        let _ = write!(
            sock,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        return;
    }
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    seen.lock().unwrap().push((path.clone(), json.clone()));
    let (delay, status) = answer(&path, &json);
    std::thread::sleep(delay);
    let _ = write!(
        sock,
        "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
}

fn head(addr: SocketAddr, path: &str, extra: &str) -> u16 {
    http_request(addr, "HEAD", path, extra).0
}

fn write_config(name: &str, toml: &str) -> std::path::PathBuf {
    let path = crate::common::scratch("auth-backends").join(format!("{name}.toml"));
    std::fs::write(&path, toml).unwrap();
    path
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Whether `addr` lets a HEAD of `live/cam.flv` through with `query`: 404 (no such
/// stream, but authorized) or a refusal.
fn allowed(addr: SocketAddr, query: &str, extra: &str) -> bool {
    match head(addr, &format!("/live/cam.flv{query}"), extra) {
        404 => true,
        401 | 403 => false,
        other => panic!("{query}: status {other}"),
    }
}

#[test]
fn the_hook_decides_once_per_question_and_a_slow_one_holds_up_nobody() {
    let hook = HookServer::start(|_, body| match body["user"].as_str() {
        Some("ok") => (Duration::ZERO, 200),
        Some("slow") => (Duration::from_secs(4), 200),
        _ => (Duration::ZERO, 403),
    });
    let config = write_config(
        "hook",
        &format!(
            "[auth]\nread = true\nhook_url = \"{}\"\nhook_timeout_ms = 1500\nhook_cache_ms = 60000\n",
            hook.url("/auth")
        ),
    );
    // One worker: a hook call that blocked it would hold up every other request.
    let server = TestServer::start(&["--config", config.to_str().unwrap(), "--workers", "1"]);
    let http = server.http;

    assert!(allowed(http, "?user=ok&pass=x", ""));
    assert!(!allowed(http, "?user=bad&pass=x", ""));
    assert!(!allowed(http, "", ""), "nothing to ask about");
    let calls = hook.calls("/auth");
    assert_eq!(calls.len(), 3, "{calls:?}");
    let first = &calls[0];
    assert_eq!(first["action"], "read");
    assert_eq!(first["path"], "live/cam");
    assert_eq!(first["protocol"], "http");
    assert_eq!(first["ip"], "127.0.0.1");
    assert_eq!(first["user"], "ok");
    assert_eq!(first["password"], "x");
    assert_eq!(first["query"], "user=ok&pass=x");
    assert!(first["id"].as_u64().is_some_and(|id| id > 0));

    // Answers are remembered: asking again costs the hook nothing.
    for _ in 0..3 {
        assert!(allowed(http, "?user=ok&pass=x", ""));
        assert!(!allowed(http, "?user=bad&pass=x", ""));
    }
    assert_eq!(hook.calls("/auth").len(), 3);

    // A hook that does not answer in time refuses; meanwhile others are answered.
    let slow = std::thread::spawn(move || {
        let started = Instant::now();
        let ok = allowed(http, "?user=slow&pass=x", "");
        (ok, started.elapsed())
    });
    while hook.calls("/auth").len() < 4 {
        std::thread::sleep(Duration::from_millis(10));
    }
    for i in 0..5 {
        assert!(allowed(http, &format!("?user=ok&pass=x&n={i}"), ""));
    }
    assert!(
        !slow.is_finished(),
        "the slow hook's request ended before the others"
    );
    let (ok, took) = slow.join().unwrap();
    assert!(!ok, "a hook past its timeout refuses");
    assert!(
        took < Duration::from_secs(4),
        "the timeout did not cut the wait: {took:?}"
    );

    // Denials are counted by reason.
    let (_, _, body) = http_request(http, "GET", "/metrics", "");
    let text = String::from_utf8_lossy(&body);
    for reason in ["hook_denied", "hook_unavailable"] {
        let line = text
            .lines()
            .find(|l| l.starts_with("sluice_auth_denials_total") && l.contains(reason))
            .unwrap_or_else(|| panic!("no {reason} in metrics"));
        assert!(!line.ends_with(" 0"), "{line}");
    }
}

#[test]
fn a_dead_hook_or_one_answering_garbage_refuses_cleanly() {
    // Nothing listens on the hook's port; then one that answers garbage.
    let dead = TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let garbage = TcpListener::bind("127.0.0.1:0").unwrap();
    let garbage_addr = garbage.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut s in garbage.incoming().flatten() {
            let _ = s.write_all(b"\x00\x01garbage\r\n\r\n");
        }
    });
    for addr in [dead_addr, garbage_addr] {
        let config = write_config(
            &format!("dead-{}", addr.port()),
            &format!(
                "[auth]\nread = true\nhook_url = \"http://{addr}/auth\"\nhook_timeout_ms = 2000\n"
            ),
        );
        let server = TestServer::start(&["--config", config.to_str().unwrap()]);
        assert!(!allowed(server.http, "?user=a&pass=b", ""));
        // The server goes on answering.
        assert_eq!(head(server.http, "/", ""), 200);
    }
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn hls_viewers_ask_the_hook_once_and_segments_need_the_session() {
    if !have_ffmpeg() {
        return;
    }
    let hook = HookServer::start(|_, body| match body["user"].as_str() {
        Some("ok") => (Duration::ZERO, 200),
        _ => (Duration::ZERO, 403),
    });
    // No cache: only the viewer's session keeps the hook from being asked again.
    let config = write_config(
        "hls",
        &format!(
            "[auth]\nread = true\nhook_url = \"{}\"\nhook_cache_ms = 0\n",
            hook.url("/auth")
        ),
    );
    let server = TestServer::start(&[
        "--config",
        config.to_str().unwrap(),
        "--hls-segment-ms",
        "1000",
    ]);
    let _publisher = publish_test_pattern(
        &format!("rtmp://{}/live/cam", server.rtmp),
        "flv",
        "libx264",
        20,
    );
    let playlist = "/live/cam/index.m3u8?user=ok&pass=x";
    let deadline = Instant::now() + Duration::from_secs(15);
    let (cookie, first) = loop {
        let (status, head, body) = http_request(server.http, "GET", playlist, "");
        let text = String::from_utf8_lossy(&body).to_string();
        if status == 200 && text.lines().any(|l| !l.is_empty() && !l.starts_with('#')) {
            let cookie = head
                .lines()
                .find_map(|l| l.strip_prefix("Set-Cookie: "))
                .and_then(|c| c.split(';').next())
                .expect("a session cookie")
                .to_string();
            break (cookie, text);
        }
        assert!(Instant::now() < deadline, "no playlist: {status} {text}");
        std::thread::sleep(Duration::from_millis(300));
    };
    let asked = hook.calls("/auth").len();
    let segment = first
        .lines()
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .expect("a segment")
        .to_string();
    let seg_path = format!("/live/cam/{segment}");
    // The viewer goes on with its cookie: playlists and segments, no more hook calls.
    for _ in 0..5 {
        let (status, _, _) = http_request(
            server.http,
            "GET",
            "/live/cam/index.m3u8",
            &format!("Cookie: {cookie}\r\n"),
        );
        assert_eq!(status, 200);
        let (status, _, body) = http_request(
            server.http,
            "GET",
            &seg_path,
            &format!("Cookie: {cookie}\r\n"),
        );
        assert_eq!(status, 200);
        assert!(!body.is_empty(), "an empty segment");
    }
    assert_eq!(hook.calls("/auth").len(), asked, "the hook was asked again");
    // Without the session, a segment is refused (and the hook says no to nobody).
    let (status, _, _) = http_request(server.http, "GET", &seg_path, "");
    assert!(matches!(status, 401 | 403), "{status}");
    let (status, _, _) = http_request(
        server.http,
        "GET",
        &seg_path,
        "Cookie: sluice_auth_x=1.ab\r\n",
    );
    assert!(matches!(status, 401 | 403), "{status}");
}

#[test]
#[cfg_attr(not(all(have_ffmpeg, have_curl)), ignore = "needs ffmpeg and curl")]
fn notification_hooks_tell_of_publishers_players_and_recordings() {
    if !have_ffmpeg() || !crate::common::have("curl") {
        return;
    }
    let hook = HookServer::start(|_, _| (Duration::ZERO, 204));
    let root = crate::common::scratch("auth-backends-notify");
    let _ = std::fs::remove_dir_all(root.join("recordings"));
    let config = write_config(
        "notify",
        &format!(
            "[hooks]\non_publish_done = \"{}\"\non_play_done = \"{}\"\non_record_done = \"{}\"\n",
            hook.url("/publish_done"),
            hook.url("/play_done"),
            hook.url("/record_done"),
        ),
    );
    let server = TestServer::start(&[
        "--config",
        config.to_str().unwrap(),
        "--media-root",
        root.to_str().unwrap(),
        "--record",
        "live/*",
        "--publish-grace-ms",
        "200",
    ]);
    let mut publisher = publish_test_pattern(
        &format!("rtmp://{}/live/cam", server.rtmp),
        "flv",
        "libx264",
        4,
    );
    std::thread::sleep(Duration::from_millis(1500));
    let player = std::process::Command::new("curl")
        .args(["-s", "-o", "/dev/null", "--max-time", "1"])
        .arg(format!("http://{}/live/cam.flv", server.http))
        .status()
        .expect("curl");
    assert!(!player.success(), "curl stops at its --max-time");
    assert!(publisher.0.wait().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while ["/publish_done", "/play_done", "/record_done"]
        .iter()
        .any(|p| hook.calls(p).is_empty())
    {
        assert!(
            Instant::now() < deadline,
            "missing events: {:?}",
            hook.seen.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let publish = &hook.calls("/publish_done")[0];
    assert_eq!(publish["event"], "publish_done");
    assert_eq!(publish["protocol"], "rtmp");
    assert_eq!(publish["path"], "live/cam");
    assert!(publish["bytes_in"].as_u64() > Some(10_000), "{publish}");
    let play = &hook.calls("/play_done")[0];
    assert_eq!(play["event"], "play_done");
    assert_eq!(play["protocol"], "http");
    assert_eq!(play["path"], "live/cam");
    assert!(play["bytes_out"].as_u64() > Some(1_000), "{play}");
    assert!(
        play["duration_s"].as_f64().is_some_and(|d| d > 0.5),
        "{play}"
    );
    let record = &hook.calls("/record_done")[0];
    assert_eq!(record["path"], "live/cam");
    let file = record["file"].as_str().expect("file");
    assert!(std::path::Path::new(file).exists(), "{file}");
    assert!(
        record["duration_s"].as_f64().is_some_and(|d| d > 2.0),
        "{record}"
    );
}

const SECRET: &str = "a shared secret of some length";

fn hs256(claims: Value) -> String {
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn jwts_from_a_header_or_the_query_over_http_rtmp_and_rtsp() {
    if !have_ffmpeg() {
        return;
    }
    let config = write_config(
        "jwt",
        &format!("[auth]\npublish = true\nread = true\njwt_key = \"{SECRET}\"\n"),
    );
    let server = TestServer::start(&["--config", config.to_str().unwrap()]);
    let http = server.http;
    let read = json!([{"action": "read", "path": "live/*"}]);
    let good = hs256(json!({"sub": "viewer", "exp": now() + 600, "sluice": read}));
    assert!(allowed(
        http,
        "",
        &format!("Authorization: Bearer {good}\r\n")
    ));
    assert!(allowed(http, &format!("?jwt={good}"), ""));
    assert!(allowed(http, &format!("?token={good}"), ""));
    let expired = hs256(json!({"exp": now() - 600, "sluice": read}));
    assert!(!allowed(http, &format!("?jwt={expired}"), ""));
    let other_path =
        hs256(json!({"exp": now() + 600, "sluice": [{"action": "read", "path": "other/*"}]}));
    assert!(!allowed(http, &format!("?jwt={other_path}"), ""));
    let wrong_key = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &json!({"exp": now() + 600, "sluice": read}),
        &EncodingKey::from_secret(b"not the key, but long enough"),
    )
    .unwrap();
    assert!(!allowed(http, &format!("?jwt={wrong_key}"), ""));
    let b64 = |v: Value| {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    let none = format!(
        "{}.{}.",
        b64(json!({"alg": "none", "typ": "JWT"})),
        b64(json!({"exp": now() + 600, "sluice": read}))
    );
    assert!(!allowed(http, &format!("?jwt={none}"), ""));
    // Media sessions go on beside refused ones: publish over RTMP and RTSP with a token
    // in the query (ffmpeg cuts URL credentials at 127 bytes, too short for a JWT as an
    // RTSP password; the unit tests hold that path).
    let publish = json!([{"action": "publish", "path": "live/*"}]);
    let token = hs256(json!({"exp": now() + 600, "sluice": publish}));
    let mut refused = publish_test_pattern(
        &format!("rtmp://{}/live/cam?jwt={good}", server.rtmp),
        "flv",
        "libx264",
        2,
    );
    assert!(
        !refused.0.wait().unwrap().success(),
        "a read token published"
    );
    let mut rtmp = publish_test_pattern(
        &format!("rtmp://{}/live/cam?jwt={token}", server.rtmp),
        "flv",
        "libx264",
        2,
    );
    let rtsp = server.rtsp.expect("rtsp");
    let mut rtsp_ok = publish_test_pattern(
        &format!("rtsp://{rtsp}/live/rtsp?jwt={token}"),
        "rtsp",
        "libx264",
        2,
    );
    let mut rtsp_bad = publish_test_pattern(
        &format!("rtsp://{rtsp}/live/rtsp2?jwt={good}"),
        "rtsp",
        "libx264",
        2,
    );
    assert!(rtmp.0.wait().unwrap().success());
    assert!(rtsp_ok.0.wait().unwrap().success());
    assert!(
        !rtsp_bad.0.wait().unwrap().success(),
        "a read token published over RTSP"
    );
}

#[test]
fn jwts_signed_with_a_jwks_key() {
    let key = rcgen::KeyPair::generate().expect("EC key");
    let encoding = EncodingKey::from_ec_pem(key.serialize_pem().as_bytes()).unwrap();
    let mut jwk = jsonwebtoken::jwk::Jwk::from_encoding_key(&encoding, Algorithm::ES256).unwrap();
    jwk.common.key_id = Some("k1".into());
    let jwks = json!({ "keys": [jwk] }).to_string();
    let keys = HookServer::serving(Arc::new(|_, _| (Duration::ZERO, 500)), Some(jwks));
    let config = write_config(
        "jwks",
        &format!(
            "[auth]\nread = true\njwt_jwks_url = \"{}\"\n",
            keys.url("/jwks.json")
        ),
    );
    let server = TestServer::start(&["--config", config.to_str().unwrap()]);
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some("k1".into());
    let claims = json!({"exp": now() + 600, "sluice": [{"action": "read"}]});
    let token = jsonwebtoken::encode(&header, &claims, &encoding).unwrap();
    // The JWKS is fetched at start, in the background.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !allowed(server.http, &format!("?jwt={token}"), "") {
        assert!(
            Instant::now() < deadline,
            "the JWKS key never verified the token"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Another EC key with the same kid does not pass.
    let other = rcgen::KeyPair::generate().unwrap();
    let forged = jsonwebtoken::encode(
        &header,
        &claims,
        &EncodingKey::from_ec_pem(other.serialize_pem().as_bytes()).unwrap(),
    )
    .unwrap();
    assert!(!allowed(server.http, &format!("?jwt={forged}"), ""));
}

fn sha256_hex(s: &str) -> String {
    Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn rtsp_challenges_and_ffmpeg_answers_with_its_url_credentials() {
    if !have_ffmpeg() {
        return;
    }
    let config = write_config(
        "rtsp",
        &format!(
            "[auth]\npublish = true\nread = true\n\n[[users]]\nname = \"cam\"\npassword = \"sha256:{}\"\npublish = [\"live/*\"]\nread = [\"live/*\"]\n",
            sha256_hex("pw")
        ),
    );
    let server = TestServer::start(&["--config", config.to_str().unwrap()]);
    let rtsp = server.rtsp.expect("rtsp");
    // A DESCRIBE without credentials gets the challenge.
    let mut s = TcpStream::connect(rtsp).unwrap();
    write!(
        s,
        "DESCRIBE rtsp://{rtsp}/live/cam RTSP/1.0\r\nCSeq: 1\r\n\r\n"
    )
    .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 1024];
    let n = s.read(&mut buf).unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.starts_with("RTSP/1.0 401"), "{answer}");
    assert!(
        answer.contains("WWW-Authenticate: Basic realm=\"sluice\""),
        "{answer}"
    );

    let mut wrong = publish_test_pattern(
        &format!("rtsp://cam:nope@{rtsp}/live/cam"),
        "rtsp",
        "libx264",
        2,
    );
    assert!(
        !wrong.0.wait().unwrap().success(),
        "a wrong password published"
    );
    let _publisher = publish_test_pattern(
        &format!("rtsp://cam:pw@{rtsp}/live/cam"),
        "rtsp",
        "libx264",
        8,
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let probe = std::process::Command::new("ffprobe")
            .args([
                "-v",
                "error",
                "-rtsp_transport",
                "tcp",
                "-rw_timeout",
                "5000000",
            ])
            .args(["-show_entries", "stream=codec_name", "-of", "csv=p=0"])
            .arg(format!("rtsp://cam:pw@{rtsp}/live/cam"))
            .output()
            .expect("ffprobe");
        if String::from_utf8_lossy(&probe.stdout).contains("h264") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "ffprobe could not play with its credentials"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let anonymous = std::process::Command::new("ffprobe")
        .args(["-v", "error", "-rtsp_transport", "tcp"])
        .arg(format!("rtsp://{rtsp}/live/cam"))
        .output()
        .expect("ffprobe");
    assert!(!anonymous.status.success(), "played without credentials");
}

#[test]
fn a_reload_changes_who_may_do_what() {
    let users = |name: &str| {
        format!(
            "[auth]\nread = true\n\n[[users]]\nname = \"{name}\"\npassword = \"sha256:{}\"\nread = [\"*\"]\n",
            sha256_hex("pw")
        )
    };
    let config = write_config("reload", &users("alice"));
    let server = TestServer::start(&["--config", config.to_str().unwrap()]);
    assert!(allowed(server.http, "?user=alice&pass=pw", ""));
    assert!(!allowed(server.http, "?user=bob&pass=pw", ""));
    std::fs::write(&config, users("bob")).unwrap();
    let (status, _, body) = http_request(
        server.http,
        "POST",
        "/api/v1/reload",
        "Content-Length: 0\r\n",
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("auth"));
    assert!(!allowed(server.http, "?user=alice&pass=pw", ""));
    assert!(allowed(server.http, "?user=bob&pass=pw", ""));
    // A file that does not load changes nothing.
    std::fs::write(&config, "[auth]\nread = maybe\n").unwrap();
    let (status, _, _) = http_request(
        server.http,
        "POST",
        "/api/v1/reload",
        "Content-Length: 0\r\n",
    );
    assert!(status >= 400, "{status}");
    assert!(allowed(server.http, "?user=bob&pass=pw", ""));
}
