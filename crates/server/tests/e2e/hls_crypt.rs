//! Encrypted HLS end to end: ffmpeg publishes over RTMP to an app with
//! `hls_encryption = "aes-128"` whose reading needs authorization; ffmpeg and hls.js
//! (in Chromium) play both variants with a viewer token, the key answers 403 without
//! one, segments are not in the clear, and keys rotate.

use crate::common::{
    have, have_ffmpeg, http_request, publish_test_pattern, set_cookie, unix_now, Kill, TestServer,
};
use aws_lc_rs::cipher::{DecryptionContext, PaddedBlockDecryptingKey, UnboundCipherKey, AES_128};
use aws_lc_rs::iv::FixedLength;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Segments per key in the test's app: two keys within the first few segments.
const ROTATION: u64 = 2;

/// A server whose app `paid` encrypts HLS and needs authorization to read (a signed
/// URL with `k3y`, or the viewer token a playlist request hands out), publishing a
/// test pattern as `paid/cam`; segments of one second.
fn start() -> (TestServer, Kill) {
    let dir = crate::common::scratch("hls-crypt");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            "[auth]\nsigning_key = \"k3y\"\n\n\
             [hls]\nsegment_ms = 1000\n\n\
             [[apps]]\nname = \"paid\"\nauth_read = true\nhls_encryption = \"aes-128\"\n\
             hls_key_rotation = {ROTATION}\n"
        ),
    )
    .unwrap();
    let server = TestServer::start(&["--config", config.to_str().unwrap()]);
    let publisher = publish_test_pattern(
        &format!("rtmp://{}/paid/cam", server.rtmp),
        "flv",
        "libx264",
        90,
    );
    crate::common::wait_live(server.http, "paid/cam");
    // Enough one-second segments for a full window and a key rotation.
    std::thread::sleep(Duration::from_secs(8));
    (server, publisher)
}

/// `expires=...&sign=...`: a signed URL's query to read `path`, as an operator's
/// backend makes it.
fn signed(path: &str) -> String {
    crate::common::signed("k3y", "read", path, unix_now() + 600)
}

/// The viewer's cookie (`name=token`) a playlist request with `query` gets, and the
/// playlist.
fn playlist(http: SocketAddr, path: &str, query: &str) -> (String, String) {
    let (status, head, body) = http_request(http, "GET", &format!("{path}?{query}"), "");
    assert_eq!(status, 200, "{path}: {head}");
    let cookie = set_cookie(&head).expect("a viewer cookie");
    (cookie, String::from_utf8(body).expect("a playlist"))
}

/// Each listed segment as (key URI, IV, segment URI), in order.
fn listed(playlist: &str) -> Vec<(String, u128, String)> {
    let mut key = None;
    let mut out = Vec::new();
    for line in playlist.lines() {
        if let Some(attrs) = line.strip_prefix("#EXT-X-KEY:") {
            assert!(attrs.starts_with("METHOD=AES-128,URI=\""), "{line}");
            let uri = attrs.split('"').nth(1).expect("a key URI").to_string();
            let iv = attrs.split("IV=0x").nth(1).expect("an IV");
            key = Some((uri, u128::from_str_radix(iv, 16).expect("a hex IV")));
        } else if !line.starts_with('#') && !line.is_empty() {
            let (uri, iv) = key.clone().expect("a key before each segment");
            out.push((uri, iv, line.to_string()));
        }
    }
    out
}

fn decrypt(key: &[u8], iv: u128, data: &[u8]) -> Vec<u8> {
    let key =
        PaddedBlockDecryptingKey::cbc_pkcs7(UnboundCipherKey::new(&AES_128, key).unwrap()).unwrap();
    let mut buf = data.to_vec();
    key.decrypt(
        &mut buf,
        DecryptionContext::Iv128(FixedLength::from(iv.to_be_bytes())),
    )
    .expect("decrypts with its key and IV")
    .to_vec()
}

/// The frames ffmpeg decodes from `url` in `seconds` of its video, and its errors.
fn decoded_frames(url: &str, seconds: u32) -> (usize, String) {
    let out = Command::new("ffmpeg")
        .args(["-hide_banner", "-v", "error", "-rw_timeout", "10000000"])
        .args(["-i", url, "-map", "0:v:0", "-t", &seconds.to_string()])
        .args(["-f", "framecrc", "-"])
        .stdin(Stdio::null())
        .output()
        .expect("ffmpeg");
    let frames = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .count();
    (frames, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn aes_128_segments_keys_and_ffmpeg_with_a_viewer_token() {
    if !have_ffmpeg() {
        return;
    }
    let (server, _publisher) = start();
    let http = server.http;

    // Without credentials no playlist; with a signed URL one, and a viewer cookie.
    assert_eq!(http_request(http, "GET", "/paid/cam.m3u8", "").0, 401);
    for (path, dir, first_byte_of_clear) in [
        ("/paid/cam.m3u8", "/paid/", 0x47u8),
        ("/paid/cam/index.m3u8", "/paid/cam/", 0),
    ] {
        let (cookie, text) = playlist(http, path, &signed("paid/cam"));
        let with_cookie = format!("Cookie: {cookie}\r\n");
        assert!(
            !text.contains("#EXT-X-PART"),
            "no parts when encrypted: {text}"
        );
        if let (Some(map), Some(key)) = (text.find("#EXT-X-MAP"), text.find("#EXT-X-KEY")) {
            assert!(map < key, "the init segment stays in the clear: {text}");
        }
        let segments = listed(&text);
        assert!(segments.len() >= 4, "{path}: {text}");
        // Keys rotate every ROTATION segments; the IV is the segment's msn.
        let sequence: u128 = text
            .lines()
            .find_map(|l| l.strip_prefix("#EXT-X-MEDIA-SEQUENCE:"))
            .and_then(|n| n.parse().ok())
            .expect("a media sequence");
        let mut keys: Vec<&str> = segments.iter().map(|s| s.0.as_str()).collect();
        keys.dedup();
        assert!(keys.len() >= 2, "{path}: one key for all: {text}");
        for (n, (key_uri, iv, _)) in segments.iter().enumerate() {
            assert_eq!(*iv, sequence + n as u128, "{path}");
            let period: u128 = key_uri.rsplit('-').next().unwrap().parse().unwrap();
            assert_eq!(period, *iv / u128::from(ROTATION), "{key_uri}");
        }

        let (key_uri, iv, segment_uri) = &segments[segments.len() - 1];
        let key_path = format!("{dir}{key_uri}");
        // The key: 403 without the token (no challenge), 16 bytes with it; never cached.
        let (status, head, body) = http_request(http, "GET", &key_path, "");
        assert_eq!(status, 403, "{key_path}: {head}");
        assert!(!head.contains("WWW-Authenticate"), "{head}");
        assert!(head.contains("Cache-Control: no-store"), "{head}");
        assert!(body.len() != 16);
        let (status, head, key) = http_request(http, "GET", &key_path, &with_cookie);
        assert_eq!(status, 200, "{key_path}: {head}");
        assert_eq!(key.len(), 16);
        assert!(head.contains("Cache-Control: no-store"), "{head}");
        assert!(
            head.contains("Content-Type: application/octet-stream"),
            "{head}"
        );
        // An expired or never made key: 404, even with the token.
        let gone = key_path.rsplit_once('-').unwrap().0.to_string() + "-1000000";
        assert_eq!(http_request(http, "GET", &gone, &with_cookie).0, 404);
        assert_eq!(
            http_request(http, "GET", &format!("{gone}1234567"), &with_cookie).0,
            404
        );

        // The segment is not in the clear, and decrypts with its key and IV.
        let (status, _, sealed) =
            http_request(http, "GET", &format!("{dir}{segment_uri}"), &with_cookie);
        assert_eq!(status, 200);
        assert_eq!(sealed.len() % 16, 0);
        let plain = decrypt(&key, *iv, &sealed);
        if first_byte_of_clear == 0x47 {
            assert_ne!(sealed[0], 0x47, "plain TS");
            assert!(
                plain.len().is_multiple_of(188) && plain[0] == 0x47,
                "TS inside"
            );
        } else {
            let box_type = |b: &[u8]| b.get(4..8).map(|t| t.to_vec()).unwrap_or_default();
            assert!(
                [b"styp".to_vec(), b"moof".to_vec()].contains(&box_type(&plain)),
                "fMP4 inside"
            );
            assert!(
                ![b"styp".to_vec(), b"moof".to_vec()].contains(&box_type(&sealed)),
                "plain fMP4"
            );
        }
    }

    // ffmpeg, given the viewer token: the playlist renews it in the cookie its
    // segment and key requests carry; it decodes three seconds of 25 fps video.
    let (cookie, _) = playlist(http, "/paid/cam.m3u8", &signed("paid/cam"));
    let token = cookie.split_once('=').unwrap().1;
    for path in ["/paid/cam.m3u8", "/paid/cam/index.m3u8"] {
        let url = format!("http://{http}{path}?sluice_auth={token}");
        let (frames, errors) = decoded_frames(&url, 3);
        eprintln!("{path}: ffmpeg decoded {frames} frames");
        assert!(frames >= 70, "{path}: {frames} frames decoded; {errors}");
    }
    // Without a token, nothing.
    let (frames, _) = decoded_frames(&format!("http://{http}/paid/cam.m3u8"), 3);
    assert_eq!(frames, 0);
}

#[test]
#[cfg_attr(
    not(all(have_ffmpeg, have_chromium)),
    ignore = "needs ffmpeg and chromium"
)]
fn hls_js_plays_aes_128_with_a_viewer_token() {
    if !have_ffmpeg() || !have("chromium") {
        return;
    }
    let (server, _publisher) = start();
    let http = server.http;
    let (cookie, _) = playlist(http, "/paid/cam.m3u8", &signed("paid/cam"));
    let token = cookie.split_once('=').unwrap().1;
    // The page is another origin: hls.js sends the token in the query of every
    // request (playlist, segment, key) instead of a cookie.
    let setup = format!(
        "
  if (!Hls.isSupported()) throw new Error('hls.js not supported');
  let keys = 0;
  const hls = new Hls({{ xhrSetup: (xhr, url) => {{
    if (url.includes('/key/')) keys++;
    xhr.open('GET', url + (url.includes('?') ? '&' : '?') + 'sluice_auth={token}', true);
  }} }});
  hls.on(Hls.Events.ERROR, (e, d) => {{ if (d.fatal) errors.push(d.type + ':' + d.details); }});
  hls.loadSource('STREAM_URL');
  hls.attachMedia(video);
  extra = () => '&keys=' + keys;"
    );
    for path in ["/paid/cam.m3u8", "/paid/cam/index.m3u8"] {
        let url = format!("http://{http}{path}");
        let report = crate::browser::play_in_chromium("hls.light.min.js", &setup, &url, 8000);
        eprintln!("{path}: hls.js {report}");
        let field = |name| crate::common::report_field(&report, name);
        assert!(field("err").is_empty(), "{path}: player errors ({report})");
        let t: f64 = field("t").parse().unwrap_or(0.0);
        assert!(t > 3.0, "{path}: video played only to {t} s ({report})");
        let keys: u32 = field("keys").parse().unwrap_or(0);
        assert!(keys >= 1, "{path}: no key fetched ({report})");
    }
}
