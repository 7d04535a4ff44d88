//! A cluster of three `sluice` processes around a real `redis-server` (Debian's),
//! all on 127.0.0.1: a stream published on one node plays from the others over every
//! protocol, a second publisher on another node meets the stream's policy, the
//! owner's death moves the stream to the node its publisher reconnects to while the
//! other nodes' viewers keep playing, and a Redis restart stops nothing.

use crate::common::nginx::free_port;
use crate::common::{
    have, have_ffmpeg, http_request, metric, probe_video, publish_test_pattern, scratch, wait_live,
    Kill, TestServer,
};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The TTL the tests' nodes use: a dead node's streams may be taken this soon.
const TTL_MS: &str = "1500";

/// A `redis-server` on its own port and directory, persisting nothing; stopped when
/// dropped.
struct Redis {
    child: Option<Kill>,
    port: u16,
    dir: std::path::PathBuf,
    /// Served over TLS only, with this password: (certificate, key) files.
    tls: Option<(String, String, &'static str)>,
}

impl Redis {
    /// A fresh redis-server, or `None` where it is not installed (a failure where
    /// `SLUICE_REQUIRE_TOOLS=1`).
    fn start(name: &str) -> Option<Redis> {
        Redis::start_with(name, None)
    }

    fn start_with(name: &str, tls: Option<(String, String, &'static str)>) -> Option<Redis> {
        if !have("redis-server") {
            crate::common::require_tools_found_at_build(&[(false, "redis-server")]);
            return None;
        }
        let mut redis = Redis {
            child: None,
            port: free_port(),
            dir: scratch(name),
            tls,
        };
        redis.restart();
        Some(redis)
    }

    /// Starts it (again: empty, as a Redis without persistence comes back).
    fn restart(&mut self) {
        self.child = None;
        let port = self.port.to_string();
        let mut cmd = Command::new("redis-server");
        cmd.args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .args(["--dir", self.dir.to_str().expect("utf-8")]);
        match &self.tls {
            None => cmd.args(["--port", &port]),
            Some((cert, key, password)) => cmd
                .args(["--port", "0", "--tls-port", &port])
                .args(["--tls-cert-file", cert, "--tls-key-file", key])
                .args(["--tls-auth-clients", "no", "--requirepass", password]),
        };
        let child = cmd
            .stdout(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(Kill(child));
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(&mut self) {
        self.child = None;
    }

    fn url(&self) -> String {
        match &self.tls {
            None => format!("redis://127.0.0.1:{}/0", self.port),
            Some((_, _, password)) => format!("rediss://:{password}@127.0.0.1:{}/0", self.port),
        }
    }
}

/// A node of the cluster on `redis`, with id `id` and `extra` flags.
fn node(redis: &Redis, id: &str, extra: &[&str]) -> TestServer {
    let url = redis.url();
    let mut args = vec![
        "--cluster",
        url.as_str(),
        "--node-id",
        id,
        "--cluster-advertise",
        "127.0.0.1",
        "--cluster-ttl-ms",
        TTL_MS,
    ];
    args.extend_from_slice(extra);
    TestServer::start(&args)
}

fn json(addr: SocketAddr, path: &str) -> (u16, Value) {
    let (status, _, body) = http_request(addr, "GET", path, "");
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// Waits up to `within` for `ok` of the cluster as `addr` sees it.
fn wait_cluster(addr: SocketAddr, within: Duration, ok: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let (status, v) = json(addr, "/api/v1/cluster");
        if status == 200 && ok(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "/api/v1/cluster: {status} {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The streams node `id` owns, as the cluster's listing says.
fn streams_of<'a>(cluster: &'a Value, id: &str) -> Vec<&'a str> {
    cluster["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| n["id"] == id)
        .flat_map(|n| n["streams"].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect()
}

fn publish(server: &TestServer, key: &str, seconds: u32) -> Kill {
    publish_test_pattern(
        &format!("rtmp://{}/{key}", server.rtmp),
        "flv",
        "libx264",
        seconds,
    )
}

#[test]
fn a_stream_published_on_one_node_plays_on_the_others_over_every_protocol() {
    if !have_ffmpeg() {
        return;
    }
    let Some(redis) = Redis::start("cluster-play") else {
        return;
    };
    let a = node(&redis, "a", &[]);
    let b = node(&redis, "b", &[]);
    let c = node(&redis, "c", &[]);
    let _publisher = publish(&a, "live/cam", 40);
    wait_live(a.http, "live/cam");

    // Every node lists the three, and a as the stream's owner, with its URLs and its
    // load (its publisher's connection, its stream) from its next refresh on.
    let cluster = wait_cluster(b.http, Duration::from_secs(5), |v| {
        v["nodes"].as_array().is_some_and(|n| n.len() == 3)
            && streams_of(v, "a") == ["live/cam"]
            && v["nodes"][0]["load"]["streams"] == 1
    });
    assert_eq!(cluster["node"], "b");
    let a_entry = cluster["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["id"] == "a"))
        .expect("a listed");
    assert_eq!(
        a_entry["urls"]["rtmp"],
        format!("rtmp://{}", a.rtmp).as_str()
    );
    assert!(
        a_entry["load"]["connections"].as_u64() >= Some(1),
        "{a_entry}"
    );
    assert!(a_entry["load"]["cpu"].as_f64() > Some(0.0), "{a_entry}");

    // b plays it over RTMP, HTTP-FLV, HLS and RTSP; c over SRT: each pulls it from a.
    let urls = [
        format!("rtmp://{}/live/cam", b.rtmp),
        format!("http://{}/live/cam.flv", b.http),
        format!("http://{}/live/cam.m3u8", b.http),
        format!("rtsp://{}/live/cam", b.rtsp.expect("rtsp")),
    ];
    for url in &urls {
        let (streams, times) = probe_video(url, "%+2");
        assert!(streams.contains("h264,320,240"), "{url}: {streams}");
        assert!(times.len() >= 20, "{url}: {} video packets", times.len());
    }
    let srt = format!(
        "srt://{}?streamid=read:live/cam",
        c.srt.expect("srt listener")
    );
    let (streams, times) = probe_video(&srt, "%+2");
    assert!(streams.contains("h264,320,240"), "{srt}: {streams}");
    assert!(times.len() >= 20, "{srt}: {} video packets", times.len());
    // One pull per node whatever the number of protocols.
    assert_eq!(metric(b.http, "sluice_relay_pulls_total"), 1.0);
    // A node just started finds the stream at once: its first lookups wait for its
    // first refresh rather than answer that no node has it.
    let d = node(&redis, "d", &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let first = view(d.http, "live/cam", stop.clone());
    first.wait_playing("a player on a node just started");
    stop.store(true, Ordering::Relaxed);
    drop(first);
    assert!(metric(b.http, "sluice_cluster_lookups_total{result=\"found\"}") >= 1.0);
    assert_eq!(metric(b.http, "sluice_cluster_directory_up"), 1.0);

    // A second publisher of the live name on c is refused (the default policy), as on
    // one server; a stream nobody publishes is not found anywhere, at once.
    let mut second = publish(&c, "live/cam", 5);
    let status = second.0.wait().expect("ffmpeg ends");
    assert!(
        !status.success(),
        "a second publisher on another node was taken"
    );
    assert_eq!(
        metric(c.http, "sluice_cluster_refused_publishers_total"),
        1.0
    );
    let started = Instant::now();
    let (status, _, _) = http_request(b.http, "GET", "/live/nobody.flv", "");
    assert_eq!(status, 404);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

/// An HTTP-FLV viewer that reads until told to stop and keeps when each read came.
struct Viewer {
    arrivals: Arc<Mutex<Vec<Instant>>>,
    bytes: Arc<std::sync::atomic::AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn view(addr: SocketAddr, key: &str, stop: Arc<AtomicBool>) -> Viewer {
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let bytes = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut sock = TcpStream::connect(addr).expect("connect");
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    write!(sock, "GET /{key}.flv HTTP/1.1\r\nHost: x\r\n\r\n").expect("request");
    let thread = std::thread::spawn({
        let (arrivals, bytes) = (arrivals.clone(), bytes.clone());
        move || {
            let mut buf = vec![0; 64 * 1024];
            while !stop.load(Ordering::Relaxed) {
                match sock.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        bytes.fetch_add(n as u64, Ordering::Relaxed);
                        arrivals.lock().expect("lock").push(Instant::now());
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                    Err(_) => break,
                }
            }
        }
    });
    Viewer {
        arrivals,
        bytes,
        thread: Some(thread),
    }
}

impl Viewer {
    /// Waits until it has played a little (up to 15 s).
    fn wait_playing(&self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.bytes.load(Ordering::Relaxed) < 20_000 {
            assert!(Instant::now() < deadline, "{what} did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The longest time without data between `from` and `to`.
    fn longest_gap(&self, from: Instant, to: Instant) -> Duration {
        let arrivals = self.arrivals.lock().expect("lock");
        let mut last = from;
        let mut gap = Duration::ZERO;
        for &t in arrivals.iter().filter(|t| **t > from && **t <= to) {
            gap = gap.max(t - last);
            last = t;
        }
        gap.max(to.saturating_duration_since(last))
    }

    fn got_data_after(&self, t: Instant) -> bool {
        self.arrivals
            .lock()
            .expect("lock")
            .last()
            .is_some_and(|l| *l > t)
    }
}

impl Drop for Viewer {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn the_owners_death_moves_the_stream_and_other_nodes_viewers_keep_playing() {
    if !have_ffmpeg() {
        return;
    }
    let Some(redis) = Redis::start("cluster-failover") else {
        return;
    };
    let mut a = node(&redis, "a", &[]);
    let b = node(&redis, "b", &[]);
    let c = node(&redis, "c", &[]);
    let _first = publish(&a, "live/cam", 60);
    wait_live(a.http, "live/cam");
    let stop = Arc::new(AtomicBool::new(false));
    let viewers: Vec<Viewer> = (0..50)
        .map(|_| view(b.http, "live/cam", stop.clone()))
        .collect();
    // Every viewer plays before the owner dies.
    let deadline = Instant::now() + Duration::from_secs(15);
    while viewers
        .iter()
        .any(|v| v.bytes.load(Ordering::Relaxed) < 20_000)
    {
        assert!(Instant::now() < deadline, "the viewers on b did not start");
        std::thread::sleep(Duration::from_millis(50));
    }

    // a dies without a word; its publisher reconnects to c, as OBS or ffmpeg in a
    // loop would, until c takes it (a's claim lapses within the TTL).
    let killed = Instant::now();
    a.kill();
    let (_moved, taken) = publish_until_taken(&c, "live/cam", killed);
    // The viewers on b get the stream again, from c.
    let deadline = Instant::now() + Duration::from_secs(15);
    let resumed = loop {
        let now = Instant::now();
        if viewers.iter().all(|v| v.got_data_after(killed + taken)) {
            break now;
        }
        assert!(now < deadline, "b's viewers did not get the stream from c");
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_secs(2));
    let end = Instant::now();
    stop.store(true, Ordering::Relaxed);
    let gaps: Vec<Duration> = viewers.iter().map(|v| v.longest_gap(killed, end)).collect();
    let worst = gaps.iter().max().copied().unwrap_or_default();
    let stalls = gaps.iter().filter(|g| **g > Duration::from_secs(1)).count();
    eprintln!(
        "cluster failover: publisher taken by c {} ms after a died, b's 50 viewers resumed {} ms \
         after; longest gap {} ms, viewers with a gap over 1 s: {stalls}",
        taken.as_millis(),
        (resumed - killed).as_millis(),
        worst.as_millis()
    );
    drop(viewers);
    // All 50 stayed connected through it: the stream on b lived through the grace window.
    let (_, s) = json(b.http, "/api/v1/streams/live/cam");
    assert_eq!(
        s["pull"]["origin"],
        format!("rtmp://{}/live/cam", c.rtmp).as_str(),
        "{s}"
    );
    let cluster = wait_cluster(b.http, Duration::from_secs(5), |v| {
        streams_of(v, "c") == ["live/cam"] && streams_of(v, "a").is_empty()
    });
    assert_eq!(
        cluster["nodes"].as_array().map(Vec::len),
        Some(2),
        "{cluster}"
    );
}

/// Publishes `key` on `server` again and again until one publisher stays (the
/// stream's entry may still name its old node for a moment); when it did.
fn publish_until_taken(server: &TestServer, key: &str, since: Instant) -> (Kill, Duration) {
    loop {
        assert!(
            since.elapsed() < Duration::from_secs(20),
            "{key} was never taken on {}",
            server.rtmp
        );
        let mut p = publish(server, key, 60);
        std::thread::sleep(Duration::from_millis(300));
        if !matches!(p.0.try_wait(), Ok(Some(_))) {
            return (p, since.elapsed());
        }
    }
}

#[test]
fn viewers_follow_their_publisher_when_it_reconnects_to_another_node() {
    if !have_ffmpeg() {
        return;
    }
    let Some(redis) = Redis::start("cluster-follow") else {
        return;
    };
    let a = node(&redis, "a", &[]);
    let c = node(&redis, "c", &[]);
    let first = publish(&a, "live/cam", 60);
    wait_live(a.http, "live/cam");
    let stop = Arc::new(AtomicBool::new(false));
    let viewers: Vec<Viewer> = (0..10)
        .map(|_| view(a.http, "live/cam", stop.clone()))
        .collect();
    for v in &viewers {
        v.wait_playing("a viewer on a");
    }

    // The publisher's connection to a drops and it comes back through a load balancer
    // that sends it to c: a still runs, and its viewers wait in the grace window.
    let dropped = Instant::now();
    drop(first);
    let (_second, taken) = publish_until_taken(&c, "live/cam", dropped);
    // a learns that c has it at its next refresh, and pulls it from c for its viewers.
    let deadline = Instant::now() + Duration::from_secs(8);
    let resumed = loop {
        let now = Instant::now();
        if viewers.iter().all(|v| v.got_data_after(dropped + taken)) {
            break now;
        }
        assert!(now < deadline, "a's viewers did not get the stream from c");
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_secs(1));
    let end = Instant::now();
    stop.store(true, Ordering::Relaxed);
    let worst = viewers
        .iter()
        .map(|v| v.longest_gap(dropped, end))
        .max()
        .unwrap_or_default();
    eprintln!(
        "cluster follow: publisher on c {} ms after it left a, a's 10 viewers resumed {} ms \
         after; longest gap {} ms",
        taken.as_millis(),
        (resumed - dropped).as_millis(),
        worst.as_millis()
    );
    drop(viewers);
    let (_, s) = json(a.http, "/api/v1/streams/live/cam");
    assert_eq!(
        s["pull"]["origin"],
        format!("rtmp://{}/live/cam", c.rtmp).as_str(),
        "{s}"
    );
    // The directory names c alone as the stream's owner.
    wait_cluster(a.http, Duration::from_secs(5), |v| {
        streams_of(v, "c") == ["live/cam"] && streams_of(v, "a").is_empty()
    });
}

#[test]
fn a_redis_restart_stops_nothing_and_the_nodes_register_again() {
    if !have_ffmpeg() {
        return;
    }
    let Some(mut redis) = Redis::start("cluster-redis-restart") else {
        return;
    };
    let a = node(&redis, "a", &[]);
    let b = node(&redis, "b", &[]);
    let _publisher = publish(&a, "live/cam", 40);
    wait_live(a.http, "live/cam");
    let stop = Arc::new(AtomicBool::new(false));
    let viewer = view(b.http, "live/cam", stop.clone());
    viewer.wait_playing("the viewer on b");

    // Redis goes away for 3 s: the nodes say so, and the viewer on b keeps playing.
    let down = Instant::now();
    redis.stop();
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(b.http, "sluice_cluster_directory_up") != 0.0 {
        assert!(
            Instant::now() < deadline,
            "b never noticed the directory was gone"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(3000));
    redis.restart();
    // Back, empty: both nodes register again, a with its stream.
    wait_cluster(b.http, Duration::from_secs(10), |v| {
        v["nodes"].as_array().is_some_and(|n| n.len() == 2) && streams_of(v, "a") == ["live/cam"]
    });
    let back = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let gap = viewer.longest_gap(down, Instant::now());
    assert!(viewer.got_data_after(back), "the viewer stopped");
    assert!(
        gap < Duration::from_secs(1),
        "the viewer waited {gap:?} while Redis was away"
    );
    drop(viewer);
    assert!(
        metric(
            b.http,
            "sluice_cluster_directory_operations_total{op=\"refresh\",result=\"error\"}"
        ) >= 1.0
    );
    assert_eq!(metric(a.http, "sluice_cluster_directory_up"), 1.0);
    // A node that starts now finds the stream through the directory again.
    let c = node(&redis, "c", &[]);
    let (streams, _) = probe_video(&format!("http://{}/live/cam.flv", c.http), "%+#10");
    assert!(streams.contains("h264"), "{streams}");
}

#[test]
fn a_drained_node_takes_nothing_new_leaves_the_cluster_and_stops() {
    if !have_ffmpeg() {
        return;
    }
    let Some(redis) = Redis::start("cluster-drain") else {
        return;
    };
    let a = node(&redis, "a", &[]);
    let mut b = node(&redis, "b", &["--drain-ms", "20000"]);
    let _publisher = publish(&a, "live/cam", 60);
    wait_live(a.http, "live/cam");
    let stop = Arc::new(AtomicBool::new(false));
    let viewer = view(b.http, "live/cam", stop.clone());
    viewer.wait_playing("the viewer on b");
    assert_eq!(http_request(b.http, "GET", "/readyz", "").0, 200);

    let (status, _, body) = http_request(b.http, "POST", "/api/v1/drain", "");
    assert_eq!(status, 202, "{}", String::from_utf8_lossy(&body));
    // Not ready, still alive; new players and publishers are refused, the one playing
    // plays on; the cluster sees b draining.
    assert_eq!(http_request(b.http, "GET", "/readyz", "").0, 503);
    assert_eq!(http_request(b.http, "GET", "/healthz", "").0, 200);
    // An HTTP-FLV player is sent to a; RTMP, which follows no redirect, is refused.
    let (status, head, _) = http_request(b.http, "GET", "/live/cam.flv", "");
    assert_eq!(status, 307, "{head}");
    let to_a = format!("location: http://{}/live/cam.flv", a.http);
    assert!(head.to_ascii_lowercase().contains(&to_a), "{head}");
    let mut refused = publish(&b, "live/other", 5);
    assert!(!refused.0.wait().expect("ffmpeg ends").success());
    wait_cluster(a.http, Duration::from_secs(5), |v| {
        v["nodes"]
            .as_array()
            .is_some_and(|n| n.iter().any(|n| n["id"] == "b" && n["draining"] == true))
    });
    let playing = viewer.bytes.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        viewer.bytes.load(Ordering::Relaxed) > playing,
        "the viewer stopped"
    );

    // Its last viewer leaves: b leaves the cluster and exits, long before drain_ms.
    stop.store(true, Ordering::Relaxed);
    drop(viewer);
    let status = b.wait_exit(Duration::from_secs(15));
    assert!(
        status.is_some_and(|s| s.success()),
        "b did not stop: {status:?}"
    );
    // It left at its stop (within its TTL, 1.5 s, even had the leave been lost).
    wait_cluster(a.http, Duration::from_secs(5), |v| {
        v["nodes"].as_array().is_some_and(|n| n.len() == 1)
    });

    // SIGTERM drains too when told to: not ready at once, stopped once its player left.
    let mut c = node(
        &redis,
        "c",
        &["--drain-on-sigterm", "true", "--drain-ms", "20000"],
    );
    let stop = Arc::new(AtomicBool::new(false));
    let viewer = view(c.http, "live/cam", stop.clone());
    viewer.wait_playing("the viewer on c");
    assert!(
        c.terminate(Duration::from_millis(1000)).is_none(),
        "c stopped at once"
    );
    assert_eq!(http_request(c.http, "GET", "/readyz", "").0, 503);
    stop.store(true, Ordering::Relaxed);
    drop(viewer);
    let status = c.wait_exit(Duration::from_secs(15));
    assert!(
        status.is_some_and(|s| s.success()),
        "c did not stop: {status:?}"
    );
}

#[test]
fn an_overloaded_node_sends_new_players_and_publishers_to_another() {
    if !have_ffmpeg() {
        return;
    }
    let Some(redis) = Redis::start("cluster-placement") else {
        return;
    };
    let a = node(&redis, "a", &["--cluster-max-connections", "1"]);
    let b = node(&redis, "b", &[]);
    let _publisher = publish(&b, "live/cam", 40);
    wait_live(b.http, "live/cam");
    wait_cluster(a.http, Duration::from_secs(5), |v| {
        v["nodes"].as_array().is_some_and(|n| n.len() == 2)
    });
    // Under its limit, a serves (it pulls from b).
    let (streams, _) = probe_video(&format!("http://{}/live/cam.flv", a.http), "%+1");
    assert!(streams.contains("h264"), "{streams}");
    assert_eq!(metric(a.http, "sluice_cluster_redirects_total"), 0.0);

    // One connection held open puts a over its limit: ffprobe's HTTP-FLV and HLS
    // requests are sent to b (307) and play from there; a WHIP offer is sent on with
    // its method and body.
    let _held = TcpStream::connect(a.http).expect("connect");
    for path in ["/live/cam.flv", "/live/cam.m3u8"] {
        let (streams, times) = probe_video(&format!("http://{}{path}", a.http), "%+2");
        assert!(streams.contains("h264,320,240"), "{path}: {streams}");
        assert!(times.len() >= 20, "{path}: {} video packets", times.len());
    }
    let (status, head, _) = http_request(
        a.http,
        "POST",
        "/live/other/whip",
        "Content-Type: application/sdp\r\nContent-Length: 0\r\n",
    );
    assert_eq!(status, 307, "{head}");
    let to_b = format!("location: http://{}/live/other/whip", b.http);
    assert!(head.to_ascii_lowercase().contains(&to_b), "{head}");
    // RTSP players are sent with a 302, which ffprobe follows.
    let rtsp = format!("rtsp://{}/live/cam", a.rtsp.expect("rtsp"));
    let (streams, times) = probe_video(&rtsp, "%+2");
    assert!(streams.contains("h264,320,240"), "{rtsp}: {streams}");
    assert!(times.len() >= 20, "{rtsp}: {} video packets", times.len());
    assert!(metric(a.http, "sluice_cluster_redirects_total") >= 4.0);
    // A segment asked for here is still served here (players already on a), while
    // a new HTTP-TS player is sent on like an HTTP-FLV one.
    let (status, _, _) = http_request(a.http, "GET", "/live/cam/0-0.ts", "");
    assert_eq!(status, 404);
    let (status, _, _) = http_request(a.http, "GET", "/live/cam.ts", "");
    assert_eq!(status, 307);
}

/// Chromium publishes over WHIP to an overloaded node and follows its 307 to another
/// node; a second Chromium plays the stream over WHEP on the third, which pulls it
/// from the second.
#[test]
#[cfg_attr(not(have_chromium), ignore = "needs chromium")]
fn chromium_whip_sent_on_by_an_overloaded_node_plays_over_whep_on_a_third() {
    use crate::browser::{assert_played, play_in_chromium, WHEP_SETUP, WHIP_SETUP};
    use crate::common::report_field as field;
    if !have("chromium") {
        return;
    }
    let Some(redis) = Redis::start("cluster-webrtc") else {
        return;
    };
    let udp = ["--webrtc-udp", "127.0.0.1:0"];
    let a = node(
        &redis,
        "a",
        &[&udp[..], &["--cluster-max-connections", "1"]].concat(),
    );
    let b = node(&redis, "b", &udp);
    let c = node(&redis, "c", &udp);
    wait_cluster(a.http, Duration::from_secs(5), |v| {
        v["nodes"].as_array().is_some_and(|n| n.len() == 3)
    });
    // One connection held open puts a over its limit.
    let _held = TcpStream::connect(a.http).expect("connect");
    let whip = format!("http://{}/live/moved/whip", a.http);
    let publisher =
        std::thread::spawn(move || play_in_chromium("mpegts.js", WHIP_SETUP, &whip, 20_000));
    let cluster = wait_cluster(a.http, Duration::from_secs(40), |v| {
        streams_of(v, "b") == ["live/moved"] || streams_of(v, "c") == ["live/moved"]
    });
    assert!(streams_of(&cluster, "a").is_empty(), "{cluster}");
    let other = if streams_of(&cluster, "b").is_empty() {
        &b
    } else {
        &c
    };
    let whep = format!("http://{}/live/moved/whep", other.http);
    let report = play_in_chromium("mpegts.js", WHEP_SETUP, &whep, 6000);
    let published = publisher.join().expect("the publisher page");
    assert!(field(&published, "err").is_empty(), "WHIP: {published}");
    assert_played(&report);
    // The microphone's Opus went between the nodes as AAC and is Opus again here.
    let audio: f64 = field(&report, "audio").parse().unwrap_or(0.0);
    assert!(audio > 0.05, "silence ({report})");
    assert!(metric(a.http, "sluice_cluster_redirects_total") >= 1.0);
    assert_eq!(metric(other.http, "sluice_relay_pulls_total"), 1.0);
    eprintln!("WHIP through a redirect, WHEP on another node, in Chromium: {report}");
}

/// A directory on a Redis that speaks only TLS, with a password: the nodes check its
/// certificate against `cluster.tls_ca`; a node that does not trust it serves what it
/// has on its own and says the directory is down.
#[test]
fn nodes_reach_a_redis_over_tls_with_a_password_and_a_private_root() {
    if !have_ffmpeg() {
        return;
    }
    let dir = scratch("cluster-tls-ca");
    let (cert, key, ca) = crate::common::private_ca(&dir);
    let Some(redis) = Redis::start_with("cluster-tls", Some((cert, key, "s3cret"))) else {
        return;
    };
    let config = dir.join("cluster.toml");
    std::fs::write(&config, format!("[cluster]\ntls_ca = {ca:?}\n")).expect("config");
    let config = config.to_str().expect("utf-8");
    let a = node(&redis, "a", &["--config", config]);
    let b = node(&redis, "b", &["--config", config]);
    let _publisher = publish(&a, "live/cam", 30);
    wait_live(a.http, "live/cam");
    wait_cluster(b.http, Duration::from_secs(5), |v| {
        streams_of(v, "a") == ["live/cam"]
    });
    let (streams, times) = probe_video(&format!("http://{}/live/cam.flv", b.http), "%+2");
    assert!(streams.contains("h264,320,240"), "{streams}");
    assert!(times.len() >= 20, "{} video packets", times.len());
    assert_eq!(metric(b.http, "sluice_cluster_directory_up"), 1.0);

    // Without the private root, the web PKI's roots do not know Redis's certificate.
    let untrusting = node(&redis, "u", &[]);
    let _own = publish(&untrusting, "live/own", 30);
    wait_live(untrusting.http, "live/own");
    assert_eq!(metric(untrusting.http, "sluice_cluster_directory_up"), 0.0);
    let (status, _) = json(untrusting.http, "/api/v1/streams/live/own");
    assert_eq!(status, 200);
}
