//! HLS behind a real cache: nginx, configured as `docs/cdn.md` says, in front of
//! Sluice while ffmpeg publishes; 200 viewers of the MPEG-TS variant and 200 of the
//! Low-Latency fMP4 variant (blocking playlist reloads, then the new parts) watch
//! through it for 10 s. From nginx's log, counted: what reached the origin. Each
//! segment, part and init segment once, playlists about once a second (their
//! `max-age`), and each blocking reload once however many viewers asked for it.

use crate::common::nginx;

use crate::common::{have_ffmpeg, publish_test_pattern, wait_live, TestServer};
use nginx::NginxCache;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Viewers of each variant.
const VIEWERS: usize = 200;
/// How long they watch.
const WATCH: Duration = Duration::from_secs(10);

/// One keep-alive HTTP/1.1 connection to the cache, reopened when it closes.
struct Client {
    addr: SocketAddr,
    conn: Option<BufReader<TcpStream>>,
}

impl Client {
    fn new(addr: SocketAddr) -> Client {
        Client { addr, conn: None }
    }

    /// GET `path`: the status and the body.
    fn get(&mut self, path: &str) -> (u16, Vec<u8>) {
        for _ in 0..3 {
            if let Some(answer) = self.try_get(path) {
                return answer;
            }
            self.conn = None;
        }
        panic!("GET {path} through the cache failed three times");
    }

    fn try_get(&mut self, path: &str) -> Option<(u16, Vec<u8>)> {
        if self.conn.is_none() {
            let sock = TcpStream::connect(self.addr).ok()?;
            sock.set_read_timeout(Some(Duration::from_secs(20))).ok()?;
            self.conn = Some(BufReader::new(sock));
        }
        let conn = self.conn.as_mut()?;
        conn.get_mut()
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: cdn\r\n\r\n").as_bytes())
            .ok()?;
        let mut line = String::new();
        conn.read_line(&mut line).ok()?;
        let status: u16 = line.split_whitespace().nth(1)?.parse().ok()?;
        let (mut length, mut chunked, mut close) = (None, false, false);
        loop {
            let mut h = String::new();
            conn.read_line(&mut h).ok()?;
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (name, value) = h.split_once(':')?;
            let (name, value) = (name.to_ascii_lowercase(), value.trim());
            match name.as_str() {
                "content-length" => length = value.parse::<usize>().ok(),
                "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
                "connection" => close = value.eq_ignore_ascii_case("close"),
                _ => {}
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                let mut size = String::new();
                conn.read_line(&mut size).ok()?;
                let size = usize::from_str_radix(size.trim(), 16).ok()?;
                let mut chunk = vec![0; size + 2];
                conn.read_exact(&mut chunk).ok()?;
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..size]);
            }
        } else {
            body.resize(length?, 0);
            conn.read_exact(&mut body).ok()?;
        }
        if close {
            self.conn = None;
        }
        Some((status, body))
    }
}

/// What one viewer did.
#[derive(Default)]
struct Watched {
    /// Segments (TS) or parts (LL-HLS) fetched, by URI.
    media: BTreeSet<String>,
    /// Playlist requests: plain and blocking.
    playlists: usize,
    blocking: usize,
    /// Blocking reloads whose answer did not hold the part asked for.
    short: usize,
}

/// A TS viewer: reloads the playlist every half second (twice as often as a player
/// would), fetching the segments it has not (from the newest three at the start).
fn watch_ts(cache: SocketAddr, until: Instant) -> Watched {
    let mut client = Client::new(cache);
    let mut w = Watched::default();
    while Instant::now() < until {
        let (status, body) = client.get("/live/cdn.m3u8");
        assert_eq!(status, 200, "TS playlist");
        w.playlists += 1;
        let text = String::from_utf8(body).expect("utf-8");
        let uris: Vec<&str> = text.lines().filter(|l| l.ends_with(".ts")).collect();
        let fresh = w.media.is_empty();
        for (i, uri) in uris.iter().enumerate() {
            if (fresh && i + 3 < uris.len()) || w.media.contains(*uri) {
                continue;
            }
            let (status, body) = client.get(&format!("/live/{uri}"));
            assert!(
                status == 200 && !body.is_empty() && body.len() % 188 == 0,
                "{uri}: {status}, {} bytes",
                body.len()
            );
            w.media.insert(uri.to_string());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    w
}

/// An LL-HLS playlist's parts: the (msn, part) of each `#EXT-X-PART` with its URI,
/// the msn after the last complete segment, and the (msn, part) of the preload hint.
/// URIs name segments by their start: msn come from the media sequence and the
/// segments before.
type Parts = (Vec<((u64, u32), String)>, u64, Option<(u64, u32)>);

fn parts(playlist: &str) -> Parts {
    let mut msn: u64 = playlist
        .lines()
        .find_map(|l| l.strip_prefix("#EXT-X-MEDIA-SEQUENCE:"))
        .and_then(|n| n.parse().ok())
        .expect("a media sequence");
    let (mut part, mut out, mut hint) = (0, Vec::new(), None);
    let uri = |l: &str| {
        l.split("URI=\"")
            .nth(1)
            .and_then(|u| u.split('"').next())
            .expect("URI")
            .to_string()
    };
    for line in playlist.lines() {
        if line.starts_with("#EXT-X-PART:") {
            out.push(((msn, part), uri(line)));
            part += 1;
        } else if line.starts_with("#EXT-X-PRELOAD-HINT") {
            hint = Some((msn, part));
        } else if !line.starts_with('#') && !line.is_empty() {
            msn += 1;
            part = 0;
        }
    }
    (out, msn, hint.or(Some((msn, 0))))
}

/// An LL-HLS viewer at the live edge: asks for the playlist that holds the hinted
/// part (a blocking reload), then fetches the parts it has not.
fn watch_ll(cache: SocketAddr, until: Instant) -> Watched {
    let mut client = Client::new(cache);
    let mut w = Watched::default();
    let (status, body) = client.get("/live/cdn/index.m3u8");
    assert_eq!(status, 200, "LL-HLS playlist");
    w.playlists += 1;
    let text = String::from_utf8(body).expect("utf-8");
    let map = text
        .lines()
        .find_map(|l| l.strip_prefix("#EXT-X-MAP:URI=\""))
        .and_then(|u| u.split('"').next())
        .expect("an init segment");
    let (status, body) = client.get(&format!("/live/cdn/{map}"));
    assert!(
        status == 200 && body.get(4..8) == Some(b"ftyp"),
        "{map}: {status}"
    );
    let (_, _, mut want) = parts(&text);
    let mut have = None;
    while Instant::now() < until {
        let Some((msn, part)) = want else { break };
        let (status, body) = client.get(&format!(
            "/live/cdn/index.m3u8?_HLS_msn={msn}&_HLS_part={part}"
        ));
        assert_eq!(status, 200, "blocking reload {msn}.{part}");
        w.playlists += 1;
        w.blocking += 1;
        let text = String::from_utf8(body).expect("utf-8");
        let (listed, complete_end, hint) = parts(&text);
        // The answer holds the part asked for, or the segment ended before it.
        if !listed.iter().any(|(at, _)| *at >= (msn, part)) && complete_end <= msn {
            w.short += 1;
        }
        let after = have;
        let new = |at: &(u64, u32)| *at >= (msn, part) && after.is_none_or(|h| *at > h);
        for (at, uri) in listed.iter().filter(|(at, _)| new(at)) {
            let (status, body) = client.get(&format!("/live/cdn/{uri}"));
            assert!(
                status == 200 && body.get(4..8) == Some(b"moof"),
                "{uri}: {status}"
            );
            w.media.insert(uri.clone());
            have = Some(*at);
        }
        want = hint;
    }
    w
}

/// The nginx log's origin requests, sorted by what they asked for.
#[derive(Debug, Default)]
struct Origin {
    /// Requests per segment, part or init segment URI.
    media: BTreeMap<String, usize>,
    ts_playlists: usize,
    ll_playlists: usize,
    blocking: BTreeMap<String, usize>,
}

#[test]
#[cfg_attr(not(all(have_ffmpeg, have_nginx)), ignore = "needs ffmpeg and nginx")]
fn viewers_behind_nginx_reach_the_origin_once_per_object() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&[]);
    let Some(cache) = NginxCache::start("hls-cdn", server.http) else {
        return;
    };
    let _publisher = publish_test_pattern(
        &format!("rtmp://{}/live/cdn", server.rtmp),
        "flv",
        "libx264",
        40,
    );
    wait_live(server.http, "live/cdn");
    // Three segments in the TS playlist (asked of the origin directly: not logged).
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (_, _, body) = crate::common::http_request(server.http, "GET", "/live/cdn.m3u8", "");
        let text = String::from_utf8_lossy(&body).to_string();
        if text.lines().filter(|l| l.ends_with(".ts")).count() >= 3 {
            break;
        }
        assert!(Instant::now() < deadline, "no segments: {text}");
        std::thread::sleep(Duration::from_millis(200));
    }

    let until = Instant::now() + WATCH;
    let mut viewers = Vec::new();
    for i in 0..VIEWERS * 2 {
        let addr = cache.addr;
        viewers.push(
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || {
                    // Arrivals spread over the first second.
                    std::thread::sleep(Duration::from_millis((i as u64 * 7) % 1000));
                    if i % 2 == 0 {
                        (false, watch_ts(addr, until))
                    } else {
                        (true, watch_ll(addr, until))
                    }
                })
                .expect("viewer thread"),
        );
    }
    let (mut ts, mut ll) = (Vec::new(), Vec::new());
    for v in viewers {
        let (low_latency, watched) = v.join().unwrap_or_else(|_| {
            panic!("a viewer failed; nginx errors: {}", cache.errors());
        });
        if low_latency {
            ll.push(watched);
        } else {
            ts.push(watched);
        }
    }

    let log = cache.log();
    let mut origin = Origin::default();
    for l in log.iter().filter(|l| l.origin) {
        let path = l.uri.split('?').next().unwrap_or("");
        if l.uri.contains("_HLS_msn") {
            *origin.blocking.entry(l.uri.clone()).or_default() += 1;
        } else if path == "/live/cdn.m3u8" {
            origin.ts_playlists += 1;
        } else if path == "/live/cdn/index.m3u8" {
            origin.ll_playlists += 1;
        } else {
            *origin.media.entry(path.to_string()).or_default() += 1;
        }
    }
    let mut statuses: BTreeMap<&str, usize> = BTreeMap::new();
    for l in &log {
        *statuses.entry(l.cache.as_str()).or_default() += 1;
    }
    eprintln!("nginx: {} requests by cache status {statuses:?}", log.len());
    let failed: Vec<_> = log.iter().filter(|l| l.status != 200).collect();
    assert!(failed.is_empty(), "requests failed: {failed:?}");

    let segments: BTreeSet<&String> = ts.iter().flat_map(|w| &w.media).collect();
    let ll_parts: BTreeSet<&String> = ll.iter().flat_map(|w| &w.media).collect();
    let viewer_requests =
        |w: &[Watched]| w.iter().map(|w| w.playlists + w.media.len()).sum::<usize>();
    let blocking_asked: usize = ll.iter().map(|w| w.blocking).sum();
    let origin_media = |ext: &str| {
        origin
            .media
            .iter()
            .filter(|(p, _)| p.ends_with(ext))
            .map(|(_, n)| n)
            .sum::<usize>()
    };
    let origin_parts = origin
        .media
        .iter()
        .filter(|(p, _)| p.ends_with(".m4s") && p.matches('.').count() == 2)
        .map(|(_, n)| n)
        .sum::<usize>();
    let origin_blocking: usize = origin.blocking.values().sum();
    eprintln!(
        "{VIEWERS} TS viewers for {WATCH:?}: {} requests to the cache; at the origin {} \
         segment requests for {} segments, {} playlist requests",
        viewer_requests(&ts),
        origin_media(".ts"),
        segments.len(),
        origin.ts_playlists
    );
    eprintln!(
        "{VIEWERS} LL-HLS viewers for {WATCH:?}: {} requests to the cache ({blocking_asked} \
         blocking reloads); at the origin {origin_parts} part requests for {} parts, {} \
         init, {origin_blocking} blocking reloads ({} distinct), {} plain playlist requests",
        viewer_requests(&ll),
        ll_parts.len(),
        origin_media(".mp4"),
        origin.blocking.len(),
        origin.ll_playlists
    );

    let fewest = |w: &[Watched]| w.iter().map(|w| w.media.len()).min().unwrap_or(0);
    eprintln!(
        "each TS viewer got at least {} segments, each LL-HLS viewer at least {} parts",
        fewest(&ts),
        fewest(&ll)
    );
    // Every viewer watched: TS viewers got new segments, LL-HLS viewers a part after
    // each blocking reload, which always held what it asked for.
    // (Three at the start, then at least two of the five made while they watch.)
    for w in &ts {
        assert!(
            w.media.len() >= 5,
            "a TS viewer got {} segments",
            w.media.len()
        );
    }
    for w in &ll {
        assert!(
            w.media.len() >= 15,
            "an LL-HLS viewer got {} parts",
            w.media.len()
        );
        assert_eq!(w.short, 0, "blocking reloads that missed their part");
    }
    // One origin request per segment, part and init segment, whoever asked.
    let repeated: Vec<_> = origin.media.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        repeated.is_empty(),
        "fetched from the origin twice: {repeated:?}"
    );
    assert!(origin_media(".ts") <= segments.len());
    assert!(origin_parts <= ll_parts.len() + 2);
    // Blocking reloads: one per (msn, part) asked, however many viewers asked it.
    let repeated: Vec<_> = origin.blocking.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        repeated.is_empty(),
        "blocking reloads asked twice: {repeated:?}"
    );
    assert!(
        blocking_asked >= 50 * origin_blocking,
        "{blocking_asked} blocking reloads, {origin_blocking} at the origin"
    );
    // Plain reloads: the TS playlist about once a second (its max-age), the LL one
    // asked by every viewer at once only when they arrive.
    let seconds = WATCH.as_secs() as usize;
    assert!(
        (2..=2 * seconds + 2).contains(&origin.ts_playlists),
        "{} TS playlist requests at the origin in {seconds} s",
        origin.ts_playlists
    );
    assert!(
        origin.ll_playlists <= 3,
        "{} LL-HLS playlist requests at the origin",
        origin.ll_playlists
    );
}

/// A playlist's segments: (msn, name, URI), the name being the URI's `N` in `TAG-N`.
fn segments_of(playlist: &str, ext: &str) -> Vec<(u64, u64, String)> {
    let first: u64 = playlist
        .lines()
        .find_map(|l| l.strip_prefix("#EXT-X-MEDIA-SEQUENCE:"))
        .and_then(|n| n.parse().ok())
        .expect("a media sequence");
    let uris = playlist.lines().filter(|l| l.ends_with(ext));
    (first..)
        .zip(uris)
        .map(|(msn, uri)| {
            let file = uri.rsplit('/').next().unwrap_or(uri);
            let name = file
                .split_once('-')
                .and_then(|(_, n)| n.strip_suffix(ext)?.parse().ok())
                .unwrap_or_else(|| panic!("a name in {uri}"));
            (msn, name, uri.to_string())
        })
        .collect()
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn two_origins_fed_one_publish_name_number_and_make_segments_alike() {
    if !have_ffmpeg() {
        return;
    }
    // The second origin keeps 2 s of ring and is asked 5 s later: it starts segmenting
    // at another keyframe than the first.
    let a = TestServer::start(&[]);
    let b = TestServer::start(&["--ring-ms", "2000"]);
    // One encoder, two RTMP outputs (ffmpeg's tee): the same frames, the same times.
    let _publisher = crate::common::publish_test_pattern_to_all(
        &[
            format!("rtmp://{}/live/twin", a.rtmp),
            format!("rtmp://{}/live/twin", b.rtmp),
        ],
        40,
    );
    wait_live(a.http, "live/twin");
    wait_live(b.http, "live/twin");
    let get = |server: SocketAddr, path: &str| {
        let (status, _, body) = crate::common::http_request(server, "GET", path, "");
        assert_eq!(status, 200, "{path}");
        body
    };
    let playlist =
        |server: SocketAddr, path: &str| String::from_utf8(get(server, path)).expect("utf-8");
    // A first request starts segmenting (its answer may be a 404: no segment yet).
    let ask = |server: SocketAddr| {
        for path in ["/live/twin.m3u8", "/live/twin/index.m3u8"] {
            crate::common::http_request(server, "GET", path, "");
        }
    };
    ask(a.http);
    std::thread::sleep(Duration::from_secs(5));
    ask(b.http);
    // Three segments made by the second since it started.
    std::thread::sleep(Duration::from_secs(7));

    for (path, ext, dir) in [
        ("/live/twin.m3u8", ".ts", "/live/"),
        ("/live/twin/index.m3u8", ".m4s", "/live/twin/"),
    ] {
        let (list_a, list_b) = (playlist(a.http, path), playlist(b.http, path));
        let (seg_a, seg_b) = (segments_of(&list_a, ext), segments_of(&list_b, ext));
        // The second's first segment may be its own (it began mid-slot); the rest are
        // the first's: same name, same msn.
        let shared: Vec<_> = seg_b.iter().skip(1).collect();
        assert!(shared.len() >= 2, "{list_b}");
        for (msn, name, uri_b) in shared {
            let (msn_a, _, uri_a) = seg_a
                .iter()
                .find(|s| s.1 == *name)
                .unwrap_or_else(|| panic!("{name} not in the first's\n{list_a}\n{list_b}"));
            assert_eq!(msn_a, msn, "{uri_a} and {uri_b}");
            let (bytes_a, bytes_b) = (
                get(a.http, &format!("{dir}{uri_a}")),
                get(b.http, &format!("{dir}{uri_b}")),
            );
            if ext == ".m4s" {
                assert!(bytes_a == bytes_b, "{uri_a} and {uri_b} differ");
            } else {
                // TS: the same packets; continuity counters may differ.
                assert_eq!(bytes_a.len(), bytes_b.len(), "{uri_a} and {uri_b}");
            }
            // Each answers the other's URI (their tags are the same second, or next).
            assert_eq!(get(a.http, &format!("{dir}{uri_b}")).len(), bytes_a.len());
        }
        let tag = |uri: &str| {
            uri.rsplit('/')
                .next()
                .and_then(|f| f.split_once('-'))
                .map(|t| t.0.to_string())
        };
        eprintln!(
            "{path}: tags {:?} and {:?}; the second's segments {:?} are the first's",
            tag(&seg_a[0].2),
            tag(&seg_b[0].2),
            seg_b.iter().skip(1).map(|s| s.0).collect::<Vec<_>>()
        );
    }
}
