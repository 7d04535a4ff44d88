//! Origin and edges, as separate processes on 127.0.0.1: an edge pulls a stream it
//! does not have from its origin (RTMP or HTTP-FLV) when a viewer asks, every
//! protocol plays it there, an edge pulls from an edge, many viewers make one pull,
//! the pull stops after the last viewer, and an origin that dies gives way to the
//! next one while the edge's viewers keep playing.

use crate::common::nginx;

use crate::common::{
    have_ffmpeg, http_request, probe_video, publish_test_pattern, scratch, wait_live, Kill,
    TestServer,
};
use nginx::free_port;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn json(addr: SocketAddr, path: &str) -> (u16, Value) {
    let (status, _, body) = http_request(addr, "GET", path, "");
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// Waits up to `within` for `ok` of the JSON at `path`; the last answer.
fn wait_json(addr: SocketAddr, path: &str, within: Duration, ok: impl Fn(u16, &Value) -> bool) {
    let deadline = Instant::now() + within;
    loop {
        let (status, v) = json(addr, path);
        if ok(status, &v) {
            return;
        }
        assert!(Instant::now() < deadline, "{path}: {status} {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The value of a metric series that starts with `prefix` at `addr`'s `/metrics`.
fn metric(addr: SocketAddr, prefix: &str) -> f64 {
    let (_, _, body) = http_request(addr, "GET", "/metrics", "");
    let text = String::from_utf8_lossy(&body).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix(prefix)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
}

/// Players of `live/cam` at `addr` over `protocol`, as its API counts them.
fn viewers(addr: SocketAddr, protocol: &str) -> u64 {
    json(addr, "/api/v1/streams/live/cam").1["viewers"][protocol]
        .as_u64()
        .unwrap_or(0)
}

/// ffmpeg publishing its test pattern to `key` on `server` over RTMP for `seconds`.
fn publish(server: &TestServer, key: &str, seconds: u32) -> Kill {
    let url = format!("rtmp://{}/{key}", server.rtmp);
    publish_test_pattern(&url, "flv", "libx264", seconds)
}

/// A server with ffmpeg publishing `live/cam` to it for `seconds`, live.
fn origin_with_stream(seconds: u32) -> (TestServer, Kill) {
    let origin = TestServer::start(&[]);
    let publisher = publish(&origin, "live/cam", seconds);
    wait_live(origin.http, "live/cam");
    (origin, publisher)
}

/// A server started with `toml` as its configuration file (written to a scratch
/// directory `name`) and `extra` flags.
fn with_config(name: &str, toml: &str, extra: &[&str]) -> TestServer {
    let config = scratch(name).join("sluice.toml");
    std::fs::write(&config, toml).expect("config");
    let mut args = vec!["--config", config.to_str().expect("utf-8")];
    args.extend_from_slice(extra);
    TestServer::start(&args)
}

fn edge_of(origins: &[String], extra: &[&str]) -> TestServer {
    let mut args: Vec<&str> = Vec::new();
    for o in origins {
        args.extend(["--origin", o.as_str()]);
    }
    args.extend_from_slice(extra);
    TestServer::start(&args)
}

#[test]
fn every_protocol_plays_from_an_edge_and_from_an_edge_of_an_edge() {
    if !have_ffmpeg() {
        return;
    }
    let origin = TestServer::start(&[]);
    let edge = edge_of(&[format!("rtmp://{}", origin.rtmp)], &[]);
    // The second level pulls from the first over HTTP-FLV.
    let edge2 = edge_of(&[format!("http://{}", edge.http)], &[]);
    let _publisher = publish(&origin, "live/cam", 40);
    wait_live(origin.http, "live/cam");
    // Nothing is pulled before a viewer asks.
    assert_eq!(json(edge.http, "/api/v1/streams/live/cam").0, 404);

    let rtsp = edge.rtsp.expect("rtsp");
    for url in [
        format!("rtmp://{}/live/cam", edge.rtmp),
        format!("http://{}/live/cam.flv", edge.http),
        format!("rtsp://{rtsp}/live/cam"),
        format!("http://{}/live/cam.m3u8", edge.http),
        format!("http://{}/live/cam.flv", edge2.http),
        format!("rtmp://{}/live/cam", edge2.rtmp),
    ] {
        let (streams, times) = probe_video(&url, "%+#100");
        assert!(streams.contains("h264"), "{url}: {streams}");
        assert!(streams.contains("aac"), "{url}: {streams}");
        assert!(times.len() >= 25, "{url}: {} video packets", times.len());
    }

    // Each edge says where its stream comes from.
    let (_, s) = json(edge.http, "/api/v1/streams/live/cam");
    let want = format!("rtmp://{}/live/cam", origin.rtmp);
    assert_eq!(s["pull"]["origin"], want.as_str(), "{s}");
    assert!(s["pull"]["bytes"].as_u64().unwrap_or(0) > 10_000, "{s}");
    let (_, s) = json(edge2.http, "/api/v1/streams/live/cam");
    let want = format!("http://{}/live/cam.flv", edge.http);
    assert_eq!(s["pull"]["origin"], want.as_str(), "{s}");
    // The origin publishes its stream itself.
    assert!(json(origin.http, "/api/v1/streams/live/cam").1["pull"].is_null());
}

/// Sends `GET path` on a new connection to `addr` and reads the answer's first bytes.
fn start_flv(addr: SocketAddr, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").expect("request");
    s
}

#[test]
fn two_hundred_viewers_make_one_pull_which_stops_after_the_last_leaves() {
    if !have_ffmpeg() {
        return;
    }
    let origin = TestServer::start(&[]);
    let edge = edge_of(
        &[format!("rtmp://{}", origin.rtmp)],
        &["--edge-idle-ms", "1000", "--max-connections-per-ip", "0"],
    );
    let _publisher = publish(&origin, "live/cam", 40);
    wait_live(origin.http, "live/cam");
    // All at once: every request is in before any answer.
    let mut socks: Vec<TcpStream> = (0..200)
        .map(|_| start_flv(edge.http, "/live/cam.flv"))
        .collect();
    for s in &mut socks {
        let mut head = [0u8; 12];
        s.read_exact(&mut head).expect("an answer");
        assert_eq!(&head, b"HTTP/1.1 200", "{}", String::from_utf8_lossy(&head));
    }
    wait_json(
        edge.http,
        "/api/v1/streams/live/cam",
        Duration::from_secs(5),
        |_, v| v["viewers"]["flv"] == 200,
    );
    assert_eq!(metric(edge.http, "sluice_relay_pulls_total"), 1.0);
    assert_eq!(viewers(origin.http, "rtmp"), 1);

    // The last viewer leaves: the pull stops a second later, and the stream ends.
    drop(socks);
    wait_json(
        edge.http,
        "/api/v1/streams/live/cam",
        Duration::from_secs(6),
        |status, _| status == 404,
    );
    let deadline = Instant::now() + Duration::from_secs(3);
    while viewers(origin.http, "rtmp") != 0 {
        assert!(Instant::now() < deadline, "the origin still has the pull");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(metric(edge.http, "sluice_relay_active_pulls"), 0.0);

    // A stream no origin has: refused, after bounded tries.
    let started = Instant::now();
    let (status, _, _) = http_request(edge.http, "GET", "/live/none.flv", "");
    assert_eq!(status, 404);
    assert!(started.elapsed() < Duration::from_secs(8));
}

#[test]
fn a_dead_origin_gives_way_to_the_next_and_viewers_keep_playing() {
    if !have_ffmpeg() {
        return;
    }
    let mut first = TestServer::start(&[]);
    let second = TestServer::start(&[]);
    // The same stream on both origins, as a publisher sending to two would.
    let _p1 = publish(&first, "live/cam", 40);
    let _p2 = publish(&second, "live/cam", 40);
    wait_live(first.http, "live/cam");
    wait_live(second.http, "live/cam");
    let edge = edge_of(
        &[
            format!("rtmp://{}", first.rtmp),
            format!("rtmp://{}", second.rtmp),
        ],
        &[],
    );
    let dir = scratch("edge-failover");
    let out = dir.join("viewer.flv");
    let _ = std::fs::remove_file(&out);
    // A viewer of the edge records 8 s of what it plays.
    let viewer = Kill(
        Command::new("ffmpeg")
            .args([
                "-hide_banner",
                "-loglevel",
                "error",
                "-y",
                "-rw_timeout",
                "10000000",
            ])
            .args(["-i", &format!("http://{}/live/cam.flv", edge.http)])
            .args(["-t", "8", "-c", "copy", "-f", "flv"])
            .arg(&out)
            .stdin(Stdio::null())
            .spawn()
            .expect("ffmpeg"),
    );
    std::thread::sleep(Duration::from_secs(3));
    first.kill();
    let mut viewer = viewer;
    let status = viewer.0.wait().expect("ffmpeg ends");
    assert!(status.success(), "the viewer failed: {status}");

    // The edge moved to the second origin once.
    let (_, s) = json(edge.http, "/api/v1/streams/live/cam");
    let want = format!("rtmp://{}/live/cam", second.rtmp);
    assert_eq!(s["pull"]["origin"], want.as_str(), "{s}");
    assert_eq!(s["pull"]["failovers"], 1, "{s}");
    assert!(metric(edge.http, "sluice_relay_failovers_total") >= 1.0);

    // The viewer got 8 s of video with times that only go forward.
    let (_, times) = probe_video(out.to_str().expect("path"), "%+#1000");
    // The edge stamps the new origin's first frame right after the last one, so
    // the failover leaves no hole in the timeline however long it took.
    let gap = times.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
    assert!(gap < 0.5, "a hole of {gap:.3} s in the video");
    assert!(times.len() >= 190, "{} video frames", times.len());
    assert!(times.windows(2).all(|w| w[1] >= w[0]), "{times:?}");
    let span = times.last().unwrap_or(&0.0) - times.first().unwrap_or(&0.0);
    assert!(span >= 7.0, "{span} s of video");
}

/// nginx with the RTMP module, live application `live`, on its own prefix; stopped
/// when dropped.
struct Nginx {
    _child: Kill,
    rtmp: SocketAddr,
}

fn nginx_rtmp(name: &str) -> Option<Nginx> {
    let module = "/usr/lib/nginx/modules/ngx_rtmp_module.so";
    if !crate::common::tools_present(
        "nginx with the RTMP module",
        cfg!(have_nginx),
        &[&["sh", "-c", &format!("command -v nginx && test -e {module}")]],
    ) {
        return None;
    }
    let dir = scratch(name);
    let rtmp: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let conf = format!(
        "load_module {module};\ndaemon off;\nmaster_process off;\nworker_processes 1;\n\
         error_log {d}/logs/error.log warn;\npid {d}/logs/nginx.pid;\n\
         events {{ worker_connections 256; }}\n\
         rtmp {{ server {{ listen {rtmp}; application live {{ live on; }} }} }}\n",
        d = dir.display()
    );
    let child = nginx::run(&dir, &conf, rtmp);
    Some(Nginx {
        _child: child,
        rtmp,
    })
}

#[test]
fn published_streams_are_pushed_to_nginx_rtmp_and_an_edge_forwards_to_its_origin() {
    if !have_ffmpeg() {
        return;
    }
    let Some(nginx) = nginx_rtmp("push-nginx") else {
        return;
    };
    let server = with_config(
        "push-config",
        &format!(
            "[[apps]]\nname = \"live\"\npush = [\"rtmp://{}/live/{{name}}-copy\"]\n",
            nginx.rtmp
        ),
        &[],
    );
    let _publisher = publish(&server, "live/cam", 30);
    wait_live(server.http, "live/cam");
    // nginx plays what Sluice pushed.
    let (streams, times) = probe_video(&format!("rtmp://{}/live/cam-copy", nginx.rtmp), "%+#200");
    assert!(
        streams.contains("h264") && streams.contains("aac"),
        "{streams}"
    );
    assert!(times.len() >= 40, "{} video packets", times.len());
    assert_eq!(metric(server.http, "sluice_relay_pushes_total"), 1.0);

    // An edge that takes publishers sends them on to its origin.
    let origin = TestServer::start(&[]);
    let edge = edge_of(
        &[format!("rtmp://{}", origin.rtmp)],
        &["--edge-forward-publish", "true"],
    );
    let _publisher2 = publish(&edge, "live/studio", 30);
    wait_live(origin.http, "live/studio");
    let (streams, _) = probe_video(&format!("rtmp://{}/live/studio", origin.rtmp), "%+#60");
    assert!(streams.contains("h264"), "{streams}");
}

#[test]
fn pulls_and_pushes_go_over_rtmps_to_a_private_ca() {
    if !have_ffmpeg() {
        return;
    }
    let dir = scratch("relay-rtmps");
    let (cert, key, ca) = crate::common::private_ca(&dir);
    let origin = TestServer::start(&[
        "--rtmps",
        "127.0.0.1:0",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ]);
    let rtmps = origin.rtmps.expect("rtmps");
    let _publisher = publish(&origin, "live/cam", 30);
    wait_live(origin.http, "live/cam");
    // Pulled over RTMPS, the origin's certificate checked against the private root.
    let edge = edge_of(&[format!("rtmps://{rtmps}")], &["--edge-tls-ca", &ca]);
    let (streams, _) = probe_video(&format!("rtmp://{}/live/cam", edge.rtmp), "%+#60");
    assert!(streams.contains("h264"), "{streams}");
    // Without the root, the origin is not trusted.
    let untrusting = edge_of(
        &[format!("rtmps://{rtmps}")],
        &["--edge-connect-timeout-ms", "1500"],
    );
    let (status, _, _) = http_request(untrusting.http, "GET", "/live/cam.flv", "");
    assert_eq!(status, 404);

    // Pushed over RTMPS to the origin.
    let pusher = with_config(
        "relay-rtmps-push",
        &format!(
            "[edge]\ntls_ca = \"{ca}\"\n[[apps]]\nname = \"studio\"\n\
         push = [\"rtmps://{rtmps}/live/{{name}}-pushed\"]\n"
        ),
        &[],
    );
    let _publisher2 = publish(&pusher, "studio/a", 30);
    wait_live(origin.http, "live/a-pushed");
}

#[test]
fn sources_named_per_stream_are_pulled_over_srt_always_and_http_flv_on_demand() {
    if !have_ffmpeg() {
        return;
    }
    // A camera-like SRT listener: ffmpeg serving MPEG-TS to one caller.
    let srt_port = std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("a free UDP port")
        .port();
    let _camera = Kill(
        Command::new("ffmpeg")
            .args(["-hide_banner", "-loglevel", "error", "-re"])
            .args(["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25"])
            .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"])
            .args([
                "-t",
                "40",
                "-c:v",
                "libx264",
                "-preset",
                "ultrafast",
                "-g",
                "25",
            ])
            .args(["-pix_fmt", "yuv420p", "-c:a", "aac", "-f", "mpegts"])
            .arg(format!(
                "srt://127.0.0.1:{srt_port}?mode=listener&pkt_size=1316"
            ))
            .stdin(Stdio::null())
            .spawn()
            .expect("ffmpeg"),
    );
    let (origin, _publisher) = origin_with_stream(40);
    let edge = with_config(
        "edge-sources",
        &format!(
            "[[apps]]\nname = \"cams/door\"\npull = \"srt://127.0.0.1:{srt_port}\"\n\
         pull_always = true\n\
         [[apps]]\nname = \"feeds\"\npull = \"http://{}/live/{{name}}.flv\"\n",
            origin.http
        ),
        &[],
    );
    // The always-on pull runs with nobody watching.
    wait_live(edge.http, "cams/door");
    let (_, s) = json(edge.http, "/api/v1/streams/cams/door");
    assert_eq!(s["pull"]["always"], true, "{s}");
    let (streams, times) = probe_video(&format!("rtmp://{}/cams/door", edge.rtmp), "%+#100");
    assert!(
        streams.contains("h264") && streams.contains("aac"),
        "{streams}"
    );
    assert!(times.len() >= 25, "{} video packets", times.len());
    // feeds/cam is live/cam at the origin, asked for over HTTP-FLV.
    let (streams, _) = probe_video(&format!("http://{}/feeds/cam.flv", edge.http), "%+#60");
    assert!(streams.contains("h264"), "{streams}");
    let (_, s) = json(edge.http, "/api/v1/streams/feeds/cam");
    let want = format!("http://{}/live/cam.flv", origin.http);
    assert_eq!(s["pull"]["origin"], want.as_str(), "{s}");
}

#[test]
fn a_camera_is_pulled_over_rtsp_with_digest_over_tcp_and_udp() {
    if !have_ffmpeg() {
        return;
    }
    // The camera: a Sluice serving RTSP to users with a password (Digest).
    let camera = TestServer::start(&[
        "--rtp-ports",
        "0",
        "--rtsp-user",
        "viewer:s3cret",
        "--rtsp-auth",
        "all",
    ]);
    let rtsp = camera.rtsp.expect("rtsp");
    let _publisher = publish(&camera, "live/cam", 40);
    wait_live(camera.http, "live/cam");
    let edge = with_config(
        "edge-camera",
        &format!(
            "[[apps]]\nname = \"cams/tcp\"\npull = \"rtsp://viewer:s3cret@{rtsp}/live/cam\"\n\
         [[apps]]\nname = \"cams/udp\"\npull = \"rtsp://viewer:s3cret@{rtsp}/live/cam\"\n\
         pull_transport = \"udp\"\n\
         [[apps]]\nname = \"cams/wrong\"\npull = \"rtsp://viewer:nope@{rtsp}/live/cam\"\n"
        ),
        &["--rtp-ports", "0", "--edge-connect-timeout-ms", "3000"],
    );
    for key in ["cams/tcp", "cams/udp"] {
        let (streams, times) = probe_video(&format!("http://{}/{key}.flv", edge.http), "%+#100");
        assert!(
            streams.contains("h264") && streams.contains("aac"),
            "{key}: {streams}"
        );
        assert!(times.len() >= 25, "{key}: {} video packets", times.len());
    }
    // The camera counts one RTSP player per pull.
    assert_eq!(viewers(camera.http, "rtsp"), 2);
    let (status, _, _) = http_request(edge.http, "GET", "/cams/wrong.flv", "");
    assert_eq!(status, 404);
}

/// An HTTP lookup service on 127.0.0.1 answering `GET ...{key}` with `origin` for
/// `live/cam` and 404 for any other stream, counting the requests.
fn lookup_service(origin: String) -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let count = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    std::thread::spawn(move || {
        for sock in listener.incoming() {
            let Ok(mut sock) = sock else { continue };
            let mut head = [0u8; 2048];
            let n = sock.read(&mut head).unwrap_or(0);
            counted.fetch_add(1, Ordering::Relaxed);
            let request = String::from_utf8_lossy(&head[..n]).into_owned();
            let answer = if request.contains("stream=live/cam ") {
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{origin}",
                    origin.len()
                )
            } else {
                "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into()
            };
            let _ = sock.write_all(answer.as_bytes());
        }
    });
    (addr, count)
}

#[test]
fn a_lookup_url_names_the_origin_and_says_when_none_has_the_stream() {
    if !have_ffmpeg() {
        return;
    }
    let (origin, _publisher) = origin_with_stream(30);
    let (lookup, asked) = lookup_service(format!("rtmp://{}", origin.rtmp));
    // The configured origin has nothing; only the lookup knows where the stream is.
    let dead = free_port();
    let edge = edge_of(
        &[format!("rtmp://127.0.0.1:{dead}")],
        &[
            "--edge-lookup-url",
            &format!("http://{lookup}/where?stream={{key}}"),
        ],
    );
    let (streams, _) = probe_video(&format!("http://{}/live/cam.flv", edge.http), "%+#60");
    assert!(streams.contains("h264"), "{streams}");
    let (_, s) = json(edge.http, "/api/v1/streams/live/cam");
    assert_eq!(s["pull"]["failovers"], 0, "{s}");
    // A stream no origin has is refused at once, without trying the origins.
    let started = Instant::now();
    let (status, _, _) = http_request(edge.http, "GET", "/live/none.flv", "");
    assert_eq!(status, 404);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(asked.load(std::sync::atomic::Ordering::Relaxed), 2);
}

/// `method path` with a JSON `body` on a new connection: status and JSON answer.
fn api(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, Value) {
    let extra = format!(
        "Content-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    let mut s = TcpStream::connect(addr).expect("connect");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n{body}"
    )
    .expect("send");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[test]
fn pulls_and_pushes_are_added_and_removed_through_the_api() {
    if !have_ffmpeg() {
        return;
    }
    let (origin, _publisher) = origin_with_stream(40);
    let server = TestServer::start(&[]);

    // An always-on pull, added while the server runs.
    let body = format!(
        r#"{{"stream": "feeds/cam", "url": "http://{}/live/cam.flv", "always": true}}"#,
        origin.http
    );
    assert_eq!(
        api(server.http, "POST", "/api/v1/relays/pulls", &body).0,
        201
    );
    wait_live(server.http, "feeds/cam");
    let (_, relays) = json(server.http, "/api/v1/relays");
    assert_eq!(relays["pull_rules"][0]["stream"], "feeds/cam", "{relays}");
    assert_eq!(relays["pulls"][0]["pull"]["always"], true, "{relays}");
    assert_eq!(
        api(server.http, "POST", "/api/v1/relays/pulls", "{}").0,
        400
    );

    // A push of what the server pulls, to the origin under another name.
    let body = format!(
        r#"{{"streams": "feeds/*", "url": "rtmp://{}/live/{{name}}-back"}}"#,
        origin.rtmp
    );
    let (status, added) = api(server.http, "POST", "/api/v1/relays/pushes", &body);
    assert_eq!(status, 201, "{added}");
    wait_live(origin.http, "live/cam-back");
    let id = added["id"].as_u64().expect("an id");

    // Removed: the push ends (the origin's copy loses its publisher), the pull stops.
    assert_eq!(
        api(
            server.http,
            "DELETE",
            &format!("/api/v1/relays/pushes/{id}"),
            ""
        )
        .0,
        200
    );
    wait_json(
        origin.http,
        "/api/v1/streams/live/cam-back",
        Duration::from_secs(10),
        |status, v| status == 404 || v["live"] == false,
    );
    assert_eq!(
        api(server.http, "DELETE", "/api/v1/relays/pulls/feeds/cam", "").0,
        200
    );
    wait_json(
        server.http,
        "/api/v1/relays",
        Duration::from_secs(5),
        |_, v| v["pulls"].as_array().is_some_and(|p| p.is_empty()),
    );
    assert_eq!(
        api(server.http, "DELETE", "/api/v1/relays/pulls/feeds/cam", "").0,
        404
    );
}

#[test]
fn an_hls_playlist_is_pulled_and_played_over_every_protocol() {
    if !have_ffmpeg() {
        return;
    }
    let (origin, _publisher) = origin_with_stream(40);
    let edge = with_config(
        "edge-hls",
        &format!(
            "[[apps]]\nname = \"tv\"\npull = \"http://{}/live/{{name}}.m3u8\"\n",
            origin.http
        ),
        &["--edge-connect-timeout-ms", "8000"],
    );
    let (streams, times) = probe_video(&format!("rtmp://{}/tv/cam", edge.rtmp), "%+#150");
    assert!(
        streams.contains("h264") && streams.contains("aac"),
        "{streams}"
    );
    assert!(times.len() >= 50, "{} video packets", times.len());
    assert!(times.windows(2).all(|w| w[1] >= w[0]), "{times:?}");
    let (_, s) = json(edge.http, "/api/v1/streams/tv/cam");
    let want = format!("http://{}/live/cam.m3u8", origin.http);
    assert_eq!(s["pull"]["origin"], want.as_str(), "{s}");
}

/// An RTMP server that takes one publisher and keeps what it sends: the far end of a
/// push, whose reading the test can pause.
struct PushTarget {
    addr: SocketAddr,
    paused: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Video messages received: (timestamp, FLV tag body).
    video: std::sync::Arc<std::sync::Mutex<Vec<(u32, bytes::Bytes)>>>,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PushTarget {
    fn start() -> PushTarget {
        use sluice_rtmp::{Media, ServerConfig, ServerSession};
        use sluice_session::{Event, Output};
        use socket2::{Domain, Socket, Type};
        use std::sync::atomic::Ordering;
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
        // A small receive buffer: paused, the target soon stops taking bytes.
        socket.set_recv_buffer_size(8 << 10).expect("SO_RCVBUF");
        socket
            .bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
            .expect("bind");
        socket.listen(1).expect("listen");
        let listener: std::net::TcpListener = socket.into();
        let addr = listener.local_addr().expect("address");
        let paused = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let video = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (p, d, v) = (paused.clone(), done.clone(), video.clone());
        let thread = std::thread::spawn(move || {
            listener.set_nonblocking(true).expect("nonblocking");
            let mut sock = loop {
                match listener.accept() {
                    Ok((s, _)) => break s,
                    Err(_) if !d.load(Ordering::Relaxed) => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    Err(_) => return,
                }
            };
            sock.set_nonblocking(false).expect("blocking");
            sock.set_read_timeout(Some(Duration::from_millis(20)))
                .expect("timeout");
            let mut session = ServerSession::new(ServerConfig::default());
            let mut buf = vec![0u8; 64 << 10];
            while !d.load(Ordering::Relaxed) {
                if p.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                match sock.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => session.handle_input(&buf[..n]).expect("RTMP from the push"),
                    Err(_) => {}
                }
                while let Some(out) = session.poll_output() {
                    match out {
                        Output::Transmit(t) => sock.write_all(&t.data).expect("write"),
                        Output::Event(Event::Publish(_)) => session.accept_publish(),
                        Output::Event(Event::Media(Media::Video {
                            timestamp_ms,
                            payload,
                        })) => v.lock().unwrap().push((timestamp_ms as u32, payload)),
                        Output::Event(_) => {}
                    }
                }
            }
        });
        PushTarget {
            addr,
            paused,
            video,
            done,
            thread: Some(thread),
        }
    }

    fn pause(&self, paused: bool) {
        self.paused
            .store(paused, std::sync::atomic::Ordering::Relaxed);
    }

    /// Waits up to 20 s for a video message that `ok` accepts.
    fn wait_for(&self, what: &str, ok: impl Fn(u32, &[u8]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.video.lock().unwrap().iter().any(|(ts, b)| ok(*ts, b)) {
            assert!(Instant::now() < deadline, "the target never got {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for PushTarget {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A 25 fps H.264 clip from ffmpeg (a keyframe every 5 frames, no audio) as FLV
/// video tags: (timestamp, body), the sequence header first, then one per frame.
fn h264_clip(dir: &std::path::Path, name: &str, source: &str, seconds: u32) -> Vec<(u32, Vec<u8>)> {
    let path = dir.join(name);
    let status = Command::new("ffmpeg")
        .args(["-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi"])
        .args(["-i", source, "-t", &seconds.to_string()])
        .args(["-c:v", "libx264", "-preset", "ultrafast", "-qp", "10"])
        .args([
            "-g", "5", "-bf", "0", "-pix_fmt", "yuv420p", "-an", "-f", "flv",
        ])
        .arg(&path)
        .status()
        .expect("ffmpeg");
    assert!(status.success());
    let clip = sluice_bench::clip::Clip::load(&path).expect("the clip");
    clip.tags
        .into_iter()
        // Not the end-of-sequence tag ffmpeg ends the file with: no frame.
        .filter(|t| t.tag_type == sluice_media::flv::TAG_VIDEO && t.body.get(1) != Some(&2))
        .map(|t| (t.ts_ms as u32, t.body.to_vec()))
        .collect()
}

/// Whether an FLV video body is an AVC sequence header.
fn is_sequence_header(body: &[u8]) -> bool {
    body.len() > 1 && body[0] & 0x0f == 7 && body[1] == 0
}

/// A push target that stops reading falls behind the ring while the publisher changes
/// resolution (a new sequence header, then enough GOPs that the ring no longer holds
/// it). When it reads again, the push skips it to the newest keyframe, and sends the
/// new sequence header first: what it received decodes in ffmpeg without an error.
#[test]
fn a_push_target_that_lags_across_a_resolution_change_gets_the_new_configuration() {
    if !have_ffmpeg() {
        return;
    }
    let dir = scratch("push-lag");
    std::fs::create_dir_all(&dir).expect("scratch");
    // Noise makes big frames (about 360 KB): the paused target soon blocks the push.
    let big = h264_clip(
        &dir,
        "big.flv",
        "testsrc2=size=640x360:rate=25,noise=alls=60:allf=t",
        2,
    );
    let small = h264_clip(&dir, "small.flv", "testsrc2=size=320x240:rate=25", 4);

    let target = PushTarget::start();
    let server = with_config(
        "push-lag",
        &format!(
            "[[apps]]\nname = \"live\"\npush = [\"rtmp://{}/live/copy\"]\n",
            target.addr
        ),
        // The ring holds the whole big clip (so the push cannot skip within it, and
        // is blocked in a write holding part of it), and less than the small one.
        // Reads not merged: the publisher sends faster than real time.
        &["--ring-ms", "2500", "--publisher-read-merge-ms", "0"],
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut publisher = runtime.block_on(async {
        let mut p = sluice_bench::rtmp::RtmpConn::connect(server.rtmp, "live", false)
            .await
            .expect("connect");
        p.publish("cam").await.expect("publish");
        p
    });
    let mut send = |tags: &[(u32, Vec<u8>)], offset: u32| {
        runtime.block_on(async {
            for (ts, body) in tags {
                publisher.send(sluice_media::flv::TAG_VIDEO, ts + offset, body);
                publisher.flush().await.expect("publish");
            }
        })
    };
    let frames_in = |n: usize| {
        wait_json(
            server.http,
            "/api/v1/streams/live/cam",
            Duration::from_secs(20),
            |_, v| v["frames_in"].as_u64() >= Some(n as u64),
        )
    };
    // The big clip's configuration and first GOP reach the target.
    send(&big[..6], 0);
    target.wait_for("a keyframe", |_, b| {
        b.first() == Some(&0x17) && !is_sequence_header(b)
    });
    // The target stops reading; the rest of the big clip blocks the push in a write.
    target.pause(true);
    send(&big[6..], 0);
    frames_in(big.len() - 1);
    let pushed = || metric(server.http, "sluice_relay_pushed_bytes_total");
    // The push is blocked once it stops taking packets from the ring (it has more
    // than the kernel's buffers take left to send).
    let mut last = pushed();
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = pushed();
        if now == last {
            break;
        }
        last = now;
    }
    // The resolution changes, and the ring moves on past the new sequence header.
    let offset = 2000;
    send(&small, offset);
    frames_in(big.len() + small.len() - 2);
    target.pause(false);
    let end = small.last().expect("frames").0 + offset;
    target.wait_for("the last frame", |ts, _| ts == end);

    let video = target.video.lock().unwrap().clone();
    // What the target got decodes, frame by frame.
    let mut flv = bytes::BytesMut::new();
    sluice_media::flv::write_file_header(&mut flv, false, true);
    for (ts, body) in &video {
        sluice_media::flv::write_tag(&mut flv, sluice_media::flv::TAG_VIDEO, *ts, body)
            .expect("tag");
    }
    let got = dir.join("received.flv");
    std::fs::write(&got, &flv).expect("write");
    let out = Command::new("ffmpeg")
        .args(["-hide_banner", "-v", "error", "-i"])
        .arg(&got)
        .args(["-f", "null", "-"])
        .output()
        .expect("ffmpeg");
    let errors = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && errors.is_empty(), "{errors}");
    let headers = video.iter().filter(|(_, b)| is_sequence_header(b)).count();
    let first_small = video
        .iter()
        .position(|(ts, b)| *ts >= offset && !is_sequence_header(b))
        .expect("frames of the small clip");
    assert!(
        is_sequence_header(&video[first_small - 1].1),
        "no sequence header before the first frame after the change ({headers} in all)"
    );
}
