//! File downloads end to end: `/files/<path>` from a temporary media root, checked
//! byte for byte against the file with curl (and wget) and raw requests: ranges,
//! conditionals, resumed downloads, path traversal, special files, a file past 4 GiB,
//! HTTPS (HTTP/1.1 and HTTP/2), and a stalled or slow client.

use crate::common::{have, TestServer};
use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A media root in a temporary directory, removed when dropped:
/// `root/a.bin` (pseudo-random), `root/sub/b.mp4`, `secret.txt` beside the root, and
/// `root/out`, a symbolic link to the secret.
struct Media {
    dir: PathBuf,
    root: PathBuf,
    a: Vec<u8>,
}

const A_LEN: usize = 3_000_017;
const SECRET: &[u8] = b"TOP-SECRET-CONTENT-9f2c";

impl Media {
    fn new(name: &str) -> Media {
        let dir = crate::common::scratch(&format!("files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let root = dir.join("root");
        std::fs::create_dir_all(root.join("sub")).expect("media root");
        let a = pseudo_random(A_LEN, 7);
        std::fs::write(root.join("a.bin"), &a).expect("a.bin");
        std::fs::write(root.join("sub/b.mp4"), pseudo_random(1000, 9)).expect("b.mp4");
        std::fs::write(dir.join("secret.txt"), SECRET).expect("secret");
        std::os::unix::fs::symlink(dir.join("secret.txt"), root.join("out")).expect("symlink");
        Media { dir, root, a }
    }

    fn server(&self, extra: &[&str]) -> TestServer {
        let root = self.root.to_str().expect("utf-8 path");
        let mut args = vec!["--rtsp", "off", "--media-root", root];
        args.extend_from_slice(extra);
        TestServer::start(&args)
    }
}

impl Drop for Media {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// curl with `args`; stdout is the body (`-o -`), stderr the response head (`-D`).
fn curl(args: &[&str]) -> Output {
    Command::new("curl")
        .args([
            "-s",
            "-S",
            "--max-time",
            "20",
            "-D",
            "/dev/stderr",
            "-o",
            "-",
        ])
        .args(args)
        .output()
        .expect("run curl")
}

fn status_of(head: &[u8]) -> u16 {
    let head = String::from_utf8_lossy(head);
    // The last head wins (curl -C prints every response it got).
    head.lines()
        .rfind(|l| l.starts_with("HTTP/"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

fn header_of(head: &[u8], name: &str) -> Option<String> {
    String::from_utf8_lossy(head).lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_string())
    })
}

/// One raw request on a fresh connection (no client normalizes the path); returns
/// the status, the head and the body up to the close.
fn raw(addr: SocketAddr, request: &str) -> (u16, String, Vec<u8>) {
    let mut sock = TcpStream::connect(addr).expect("connect");
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    sock.write_all(request.as_bytes()).expect("send");
    let mut all = Vec::new();
    let _ = sock.read_to_end(&mut all);
    let end = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(all.len(), |p| p + 4);
    let head = String::from_utf8_lossy(&all[..end]).into_owned();
    (status_of(head.as_bytes()), head, all[end..].to_vec())
}

fn get(addr: SocketAddr, path: &str) -> (u16, String, Vec<u8>) {
    raw(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
    )
}

#[test]
#[cfg_attr(not(have_curl), ignore = "needs curl")]
fn ranges_are_byte_exact() {
    if !have("curl") {
        return;
    }
    let media = Media::new("ranges");
    let server = media.server(&[]);
    let url = format!("http://{}/files/a.bin", server.http);
    let len = media.a.len();
    let out = curl(&[&url]);
    assert_eq!(status_of(&out.stderr), 200);
    assert!(out.stdout == media.a, "whole file differs");
    for (range, want) in [
        ("0-0", 0..1),
        ("100-199", 100..200),
        ("1000-", 1000..len),
        ("-4096", len - 4096..len),
        ("2999000-99999999", 2_999_000..len),
        (&format!("-{}", len + 10), 0..len),
    ] {
        let out = curl(&["-r", range, &url]);
        assert_eq!(status_of(&out.stderr), 206, "{range}");
        assert!(out.stdout == media.a[want.clone()], "range {range} differs");
        assert_eq!(
            header_of(&out.stderr, "content-range"),
            Some(format!("bytes {}-{}/{len}", want.start, want.end - 1)),
            "{range}"
        );
    }
    let out = curl(&["-r", &format!("{len}-"), &url]);
    assert_eq!(status_of(&out.stderr), 416);
    assert_eq!(
        header_of(&out.stderr, "content-range"),
        Some(format!("bytes */{len}"))
    );
    assert!(out.stdout.is_empty());
    // Several ranges: the whole file (see sluice_http::files).
    let out = curl(&["-r", "0-9,20-29", &url]);
    assert_eq!(status_of(&out.stderr), 200);
    assert!(out.stdout == media.a);
}

#[test]
#[cfg_attr(not(have_curl), ignore = "needs curl")]
fn conditionals_and_head() {
    if !have("curl") {
        return;
    }
    let media = Media::new("cond");
    let server = media.server(&[]);
    let url = format!("http://{}/files/sub/b.mp4", server.http);
    let head = curl(&["-I", &url]);
    assert_eq!(status_of(&head.stderr), 200);
    assert!(head.stdout.is_empty() || head.stdout == head.stderr);
    let h = |name| header_of(&head.stderr, name);
    assert_eq!(h("content-length").as_deref(), Some("1000"));
    assert_eq!(h("content-type").as_deref(), Some("video/mp4"));
    assert_eq!(h("accept-ranges").as_deref(), Some("bytes"));
    assert_eq!(h("access-control-allow-origin").as_deref(), Some("*"));
    let etag = h("etag").expect("ETag");
    assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");
    let modified = h("last-modified").expect("Last-Modified");
    assert!(modified.ends_with(" GMT"), "{modified}");

    let out = curl(&["-H", &format!("If-None-Match: {etag}"), &url]);
    assert_eq!(status_of(&out.stderr), 304);
    assert!(out.stdout.is_empty());
    let out = curl(&["-H", &format!("If-Modified-Since: {modified}"), &url]);
    assert_eq!(status_of(&out.stderr), 304);
    let out = curl(&["-H", "If-None-Match: \"other\"", &url]);
    assert_eq!(status_of(&out.stderr), 200);
    assert_eq!(out.stdout.len(), 1000);

    let file = std::fs::read(media.root.join("sub/b.mp4")).expect("b.mp4");
    let out = curl(&["-r", "10-19", "-H", &format!("If-Range: {etag}"), &url]);
    assert_eq!(status_of(&out.stderr), 206);
    assert!(out.stdout == file[10..20]);
    let out = curl(&["-r", "10-19", "-H", "If-Range: \"stale\"", &url]);
    assert_eq!(status_of(&out.stderr), 200, "If-Range mismatch: whole file");
    assert!(out.stdout == file);
    let out = curl(&["-H", "If-Match: \"stale\"", &url]);
    assert_eq!(status_of(&out.stderr), 412);

    // HEAD then GET on one connection: the HEAD has no body, keep-alive holds.
    let mut sock = TcpStream::connect(server.http).expect("connect");
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    sock.write_all(
        b"HEAD /files/sub/b.mp4 HTTP/1.1\r\nHost: x\r\n\r\nGET /files/sub/b.mp4 HTTP/1.1\r\nHost: x\r\n\r\nGET /files/a.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=5-9\r\nConnection: close\r\n\r\n",
    )
    .expect("send");
    let mut all = Vec::new();
    sock.read_to_end(&mut all).expect("read");
    let heads: Vec<usize> = all
        .windows(4)
        .enumerate()
        .filter(|(_, w)| *w == b"\r\n\r\n")
        .map(|(i, _)| i + 4)
        .collect();
    let first = heads[0];
    assert!(
        all[first..].starts_with(b"HTTP/1.1 200 OK"),
        "HEAD had a body"
    );
    let second_head_end = *heads.iter().find(|&&e| e > first).expect("second head");
    let body = &all[second_head_end..second_head_end + 1000];
    assert!(body == &file[..]);
    let third = &all[second_head_end + 1000..];
    assert!(third.starts_with(b"HTTP/1.1 206 Partial Content"));
    assert!(third.ends_with(&media.a[5..10]));
}

#[test]
#[cfg_attr(not(have_curl), ignore = "needs curl")]
fn resumed_downloads_end_identical() {
    if !have("curl") {
        return;
    }
    let media = Media::new("resume");
    let server = media.server(&[]);
    let url = format!("http://{}/files/a.bin", server.http);
    let partial = media.dir.join("partial.bin");
    std::fs::write(&partial, &media.a[..1_234_567]).expect("partial");
    let p = partial.to_str().expect("utf-8");
    let out = Command::new("curl")
        .args(["-s", "-S", "--max-time", "20", "-C", "-", "-o", p, &url])
        .output()
        .expect("curl -C -");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        std::fs::read(&partial).expect("read") == media.a,
        "curl -C -"
    );

    if cfg!(have_wget) && have("wget") {
        std::fs::write(&partial, &media.a[..777]).expect("partial");
        let out = Command::new("wget")
            .args(["-q", "-T", "20", "-c", "-O", p, &url])
            .output()
            .expect("wget -c");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(std::fs::read(&partial).expect("read") == media.a, "wget -c");
    } else {
        eprintln!("wget not installed: only curl resumed");
    }
}

#[test]
fn paths_out_of_the_root_are_refused() {
    let media = Media::new("traversal");
    let server = media.server(&[]);
    for path in [
        "/files/../secret.txt",
        "/files/%2e%2e/secret.txt",
        "/files/%2E%2E/secret.txt",
        "/files/sub/../../secret.txt",
        "/files/a/..%2f..%2fsecret.txt",
        "/files/sub%2f..%2f..%2fsecret.txt",
        "/files/out",
        "/files//etc/passwd",
        "/files/%2fetc/passwd",
        "/files/..%5csecret.txt",
        "/files/a%00.bin",
        "/files/%",
    ] {
        let (status, head, body) = get(server.http, path);
        assert!(
            matches!(status, 400 | 403 | 404),
            "{path}: {status}\n{head}"
        );
        assert!(
            !body.windows(SECRET.len()).any(|w| w == SECRET),
            "{path} leaked the secret"
        );
    }
    assert_eq!(get(server.http, "/files/out").0, 403, "symlink out");
    assert_eq!(get(server.http, "/files/%2e%2e/secret.txt").0, 403);
    // A symlink that stays inside is followed; `.` and empty segments collapse.
    std::os::unix::fs::symlink("sub/b.mp4", media.root.join("in")).expect("symlink");
    assert_eq!(get(server.http, "/files/in").0, 200);
    assert_eq!(get(server.http, "/files/./sub//b.mp4").0, 200);
    assert_eq!(get(server.http, "/files/s%75b/b.mp4").0, 200);
    let (status, _, body) = raw(
        server.http,
        "POST /files/a.bin HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(status, 405);
    assert!(body.is_empty());
}

#[test]
fn only_regular_files_are_served() {
    let media = Media::new("special");
    let server = media.server(&[]);
    let fifo = media.root.join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo");
    let start = Instant::now();
    assert_eq!(get(server.http, "/files/fifo").0, 404);
    assert!(start.elapsed() < Duration::from_secs(2), "a FIFO stalled");
    // A device node, where this user may make one (root in a container often may).
    let dev = Command::new("mknod")
        .arg(media.root.join("null"))
        .args(["c", "1", "3"])
        .stderr(Stdio::null())
        .status();
    if dev.is_ok_and(|s| s.success()) {
        assert_eq!(get(server.http, "/files/null").0, 404);
    } else {
        eprintln!("cannot mknod here: device node not checked");
    }
    assert_eq!(get(server.http, "/files/sub").0, 404);
    assert_eq!(get(server.http, "/files/sub/").0, 404);
    assert_eq!(get(server.http, "/files/").0, 404);
    assert_eq!(get(server.http, "/files").0, 404);
    assert_eq!(get(server.http, "/files/missing.mp4").0, 404);
    assert_eq!(get(server.http, "/files/a.bin/x").0, 404);
    // The server still answers after all that.
    assert_eq!(get(server.http, "/files/sub/b.mp4").0, 200);
}

/// A sparse file past 4 GiB with known bytes near its end.
fn big_sparse(root: &Path) -> (u64, Vec<u8>) {
    let len = (4u64 << 30) + 123_457;
    let tail = pseudo_random(100_000, 3);
    let f = File::create(root.join("big.bin")).expect("big.bin");
    f.set_len(len).expect("set_len");
    use std::os::unix::fs::FileExt;
    f.write_all_at(&tail, len - tail.len() as u64)
        .expect("tail");
    (len, tail)
}

#[test]
#[cfg_attr(not(have_curl), ignore = "needs curl")]
fn files_past_4_gib() {
    if !have("curl") {
        return;
    }
    let media = Media::new("big");
    let (len, tail) = big_sparse(&media.root);
    let server = media.server(&["--https", "127.0.0.1:0", "--tls-self-signed"]);
    let https = server.https.expect("https");
    let head = curl(&["-I", &format!("http://{}/files/big.bin", server.http)]);
    assert_eq!(
        header_of(&head.stderr, "content-length"),
        Some(len.to_string())
    );
    let start = len - 100_000;
    for (name, url, extra) in [
        (
            "http",
            format!("http://{}/files/big.bin", server.http),
            "--http1.1",
        ),
        (
            "https",
            format!("https://{https}/files/big.bin"),
            "--http1.1",
        ),
        ("h2", format!("https://{https}/files/big.bin"), "--http2"),
    ] {
        let out = curl(&["-k", extra, "-r", &format!("{start}-"), &url]);
        assert_eq!(status_of(&out.stderr), 206, "{name}");
        assert!(out.stdout == tail, "{name}: tail differs");
        let out = curl(&["-k", extra, "-r", "4294967296-4294967305", &url]);
        assert!(out.stdout == [0u8; 10], "{name}: hole past 4 GiB");
        assert_eq!(
            header_of(&out.stderr, "content-range"),
            Some(format!("bytes 4294967296-4294967305/{len}")),
            "{name}"
        );
    }
}

#[test]
#[cfg_attr(not(have_curl), ignore = "needs curl")]
fn https_and_http2_downloads_are_identical() {
    if !have("curl") {
        return;
    }
    let media = Media::new("tls");
    let server = media.server(&["--https", "127.0.0.1:0", "--tls-self-signed"]);
    let url = format!("https://{}/files/a.bin", server.https.expect("https"));
    for version in ["--http1.1", "--http2"] {
        let out = curl(&["-k", version, &url]);
        assert_eq!(status_of(&out.stderr), 200, "{version}");
        assert!(out.stdout == media.a, "{version}: body differs");
        let out = curl(&["-k", version, "-r", "-5000", &url]);
        assert_eq!(status_of(&out.stderr), 206, "{version}");
        assert!(out.stdout == media.a[media.a.len() - 5000..], "{version}");
        let head = curl(&["-k", version, "-I", &url]);
        assert_eq!(
            header_of(&head.stderr, "content-length"),
            Some(A_LEN.to_string()),
            "{version}"
        );
        let etag = header_of(&head.stderr, "etag").expect("etag");
        let out = curl(&["-k", version, "-H", &format!("If-None-Match: {etag}"), &url]);
        assert_eq!(status_of(&out.stderr), 304, "{version}");
        let out = curl(&["-k", version, &url.replace("a.bin", "%2e%2e/secret.txt")]);
        assert_eq!(status_of(&out.stderr), 403, "{version}");
        let out = curl(&["-k", version, &url.replace("a.bin", "missing")]);
        assert_eq!(status_of(&out.stderr), 404, "{version}");
    }
    // Several downloads on one connection: after each other on HTTP/1.1 (keep-alive),
    // at once on HTTP/2.
    for (version, parallel) in [("--http1.1", ""), ("--http2", "-Z")] {
        let (one, two) = (media.dir.join("one.bin"), media.dir.join("two.bin"));
        let mut cmd = Command::new("curl");
        cmd.args(["-s", "-S", "-k", "--max-time", "20", version]);
        if !parallel.is_empty() {
            cmd.arg(parallel);
        }
        let out = cmd
            .arg("-o")
            .arg(&one)
            .arg(&url)
            .arg("-o")
            .arg(&two)
            .arg(&url)
            .output()
            .expect("curl");
        assert!(
            out.status.success(),
            "{version}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for f in [&one, &two] {
            assert!(std::fs::read(f).expect("read") == media.a, "{version}");
        }
    }
    let head = curl(&["-k", "--http2", "-I", &url.replace("a.bin", "missing")]);
    assert!(head.status.success(), "h2 HEAD of a missing file");
    assert_eq!(status_of(&head.stderr), 404);
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r.split_whitespace().collect())
        .unwrap_or_default();
    // utime and stime: fields 14 and 15 of the whole line, 12 and 13 after `comm`.
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

#[test]
#[cfg_attr(not(have_curl), ignore = "needs curl")]
fn slow_clients_wait_and_stalled_ones_are_closed() {
    if !have("curl") {
        return;
    }
    let media = Media::new("slow");
    File::create(media.root.join("64m.bin"))
        .and_then(|f| f.set_len(64 << 20))
        .expect("64m.bin");
    let config = media.dir.join("sluice.toml");
    std::fs::write(&config, "[limits]\nidle_timeout_ms = 700\n").expect("config");
    let server = media.server(&["--config", config.to_str().expect("utf-8")]);
    let url = format!("http://{}/files/64m.bin", server.http);

    // A client reading at 4 MB/s: the server waits on the socket, it does not spin.
    let mut slow = Command::new("curl")
        .args(["-s", "--limit-rate", "4M", "-o", "/dev/null", &url])
        .spawn()
        .expect("curl");
    std::thread::sleep(Duration::from_millis(300));
    let before = cpu_ticks(server.pid());
    std::thread::sleep(Duration::from_millis(1500));
    let used = cpu_ticks(server.pid()) - before;
    let _ = slow.kill();
    let _ = slow.wait();
    assert!(
        used < 30,
        "server used {used} ticks in 1.5 s for one slow client"
    );

    // A client that reads nothing: closed after the idle timeout, not held forever.
    let mut sock = TcpStream::connect(server.http).expect("connect");
    sock.write_all(b"GET /files/64m.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("send");
    std::thread::sleep(Duration::from_millis(2000));
    sock.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match sock.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    eprintln!("stalled client got {got} bytes before the close");
    assert!(
        got < 64 << 20,
        "a stalled client got the whole file ({got} bytes)"
    );
    // The server is fine.
    assert_eq!(get(server.http, "/files/sub/b.mp4").0, 200);
}
