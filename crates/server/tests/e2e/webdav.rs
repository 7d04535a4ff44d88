//! `/files/` as read-only WebDAV, with the clients operators use: rclone lists and
//! copies the media root recursively, cadaver lists and downloads; the answers to
//! OPTIONS and PROPFIND, and the refusals (infinite depth, paths out of the root).

use crate::common::TestServer;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A media root with nested directories, names that need encoding, and a file large
/// enough to take several reads.
fn media_root(name: &str) -> std::path::PathBuf {
    let root = crate::common::scratch(name);
    let cam = root.join("recordings/live/cam 1");
    std::fs::create_dir_all(&cam).unwrap();
    std::fs::write(cam.join("a & b.mp4"), b"first file").unwrap();
    std::fs::write(cam.join("é.ts"), b"second").unwrap();
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(root.join("big.bin"), big).unwrap();
    std::fs::write(root.join(".hidden"), b"not listed").unwrap();
    root
}

fn request(addr: SocketAddr, head: &str) -> (u16, String) {
    let mut sock = TcpStream::connect(addr).expect("connect");
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    sock.write_all(head.as_bytes()).expect("send");
    let mut raw = Vec::new();
    sock.read_to_end(&mut raw).expect("read");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    (status, text)
}

fn same_tree(a: &Path, b: &Path) {
    for rel in [
        "big.bin",
        "recordings/live/cam 1/a & b.mp4",
        "recordings/live/cam 1/é.ts",
    ] {
        assert_eq!(
            std::fs::read(a.join(rel)).unwrap(),
            std::fs::read(b.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}")),
            "{rel}"
        );
    }
    assert!(!b.join(".hidden").exists(), "hidden files are not listed");
}

#[test]
fn options_and_propfind_answers_and_refusals() {
    let root = media_root("webdav-raw");
    let server = TestServer::start(&["--media-root", root.to_str().unwrap()]);
    let (status, text) = request(
        server.http,
        "OPTIONS /files/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 200);
    assert!(
        text.contains("DAV: 1\r\n") && text.contains("PROPFIND"),
        "{text}"
    );

    // A PROPFIND with a body, then a GET on the same kept-alive connection.
    let body = "<?xml version=\"1.0\"?><D:propfind xmlns:D=\"DAV:\"><D:allprop/></D:propfind>";
    let (status, text) = request(
        server.http,
        &format!(
            "PROPFIND /files/recordings/live/cam%201/ HTTP/1.1\r\nHost: x\r\nDepth: 1\r\nContent-Length: {}\r\n\r\n{body}GET /files/big.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=0-3\r\nConnection: close\r\n\r\n",
            body.len()
        ),
    );
    assert_eq!(status, 207, "{text}");
    assert!(
        text.contains("<D:href>/files/recordings/live/cam%201/a%20%26%20b.mp4</D:href>"),
        "{text}"
    );
    assert!(
        text.contains("<D:displayname>a &amp; b.mp4</D:displayname>"),
        "{text}"
    );
    assert!(
        text.contains("<D:getcontentlength>10</D:getcontentlength>"),
        "{text}"
    );
    assert!(
        text.contains("HTTP/1.1 206 Partial Content"),
        "the GET after it: {text}"
    );

    let (status, text) = request(
        server.http,
        "PROPFIND /files/big.bin HTTP/1.1\r\nHost: x\r\nDepth: 0\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 207);
    assert!(
        text.contains("<D:getcontentlength>3000000</D:getcontentlength>"),
        "{text}"
    );
    let (status, text) = request(
        server.http,
        "PROPFIND /files/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 403, "no Depth means infinity");
    assert!(text.contains("propfind-finite-depth"), "{text}");
    for bad in ["/files/../etc", "/files/%2e%2e/x", "/files/none/"] {
        let (status, _) = request(
            server.http,
            &format!("PROPFIND {bad} HTTP/1.1\r\nHost: x\r\nDepth: 1\r\nConnection: close\r\n\r\n"),
        );
        assert!(status == 403 || status == 404, "{bad}: {status}");
    }
}

#[test]
#[cfg_attr(not(have_webdav), ignore = "needs rclone and cadaver")]
fn rclone_and_cadaver_list_and_download_the_media_root() {
    if !crate::common::tools_present(
        "rclone and cadaver",
        cfg!(have_webdav),
        &[&["rclone", "version"], &["sh", "-c", "command -v cadaver"]],
    ) {
        return;
    }
    let root = media_root("webdav-clients");
    let server = TestServer::start(&[
        "--media-root",
        root.to_str().unwrap(),
        "--https",
        "127.0.0.1:0",
        "--tls-self-signed",
    ]);
    let url = format!("http://{}/files/", server.http);
    let rclone_at = |url: &str, args: &[&str]| {
        let out = Command::new("rclone")
            .args(["--config", "/dev/null", "--no-check-certificate"])
            .args(["--webdav-url", url])
            .args(args)
            .output()
            .expect("run rclone");
        assert!(
            out.status.success(),
            "rclone {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let rclone = |args: &[&str]| rclone_at(&url, args);
    let listing = rclone(&["lsf", "-R", ":webdav:"]);
    let mut names: Vec<&str> = listing.lines().collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "big.bin",
            "recordings/",
            "recordings/live/",
            "recordings/live/cam 1/",
            "recordings/live/cam 1/a & b.mp4",
            "recordings/live/cam 1/é.ts",
        ]
    );
    let copy = crate::common::scratch("webdav-rclone-copy");
    rclone(&["copy", ":webdav:", copy.to_str().unwrap()]);
    same_tree(&root, &copy);
    // The same over HTTPS, where rclone (Go) speaks HTTP/2.
    let https = format!("https://{}/files/", server.https.expect("https"));
    assert_eq!(rclone_at(&https, &["lsf", "-R", ":webdav:"]), listing);
    let copy = crate::common::scratch("webdav-rclone-copy-h2");
    rclone_at(&https, &["copy", ":webdav:", copy.to_str().unwrap()]);
    same_tree(&root, &copy);

    let dest = crate::common::scratch("webdav-cadaver");
    let mut cadaver = Command::new("cadaver")
        .arg(&url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run cadaver");
    write!(
        cadaver.stdin.take().unwrap(),
        "ls\ncd \"recordings/live/cam 1\"\nls\nget \"a & b.mp4\" {}\nquit\n",
        dest.join("got.mp4").display()
    )
    .unwrap();
    let out = cadaver.wait_with_output().expect("cadaver output");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("big.bin") && text.contains("recordings"),
        "{text}"
    );
    assert!(
        text.contains("a & b.mp4") && text.contains("succeeded"),
        "{text}"
    );
    assert_eq!(std::fs::read(dest.join("got.mp4")).unwrap(), b"first file");
}
