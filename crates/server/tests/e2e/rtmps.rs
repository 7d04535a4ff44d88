//! RTMPS: ffmpeg (GnuTLS) publishes over RTMP on TLS; players get the stream over
//! every protocol, RTMPS too; TLS ends with close_notify and carries no session
//! tickets; a plain RTMP client on the RTMPS port is closed at once.

use crate::common::{have_ffmpeg, probe_video, publish_test_pattern, TestServer};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

fn server() -> TestServer {
    TestServer::start(&[
        "--rtmps",
        "127.0.0.1:0",
        "--https",
        "127.0.0.1:0",
        "--tls-self-signed",
        "true",
    ])
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn ffmpeg_publishes_over_rtmps_and_every_protocol_plays() {
    if !have_ffmpeg() {
        return;
    }
    let server = server();
    let rtmps = server.rtmps.expect("an RTMPS listener");
    // ffmpeg's default RTMPS port is 443: the port is given.
    let _publisher = publish_test_pattern(
        &format!("rtmps://127.0.0.1:{}/live/tls", rtmps.port()),
        "flv",
        "libx264",
        30,
    );
    crate::common::wait_live(server.http, "live/tls");
    let (_, _, api) = crate::common::http_request(server.http, "GET", "/api/v1/clients", "");
    let api = String::from_utf8_lossy(&api);
    assert!(
        api.contains("\"rtmps\""),
        "the publisher is an RTMPS client: {api}"
    );
    for url in [
        format!("rtmps://127.0.0.1:{}/live/tls", rtmps.port()),
        format!("rtmp://{}/live/tls", server.rtmp),
        format!("rtsp://{}/live/tls", server.rtsp.unwrap()),
        format!("http://{}/live/tls.m3u8", server.http),
    ] {
        // Bounded by packets: a player's sequence headers come stamped with the time
        // they arrived, before its first frame's.
        let (streams, times) = probe_video(&url, "%+#120");
        assert!(streams.contains("h264,320,240"), "{url}: {streams}");
        assert!(times.len() >= 25, "{url}: {} video packets", times.len());
    }
}

/// The server ends RTMPS connections with close_notify (GnuTLS clients complain
/// otherwise): a client whose RTMP handshake is refused (RTMPE's version byte) reads a
/// clean end of TLS, not a bare end of TCP. And it sends no session tickets.
#[test]
fn rtmps_connections_end_with_close_notify() {
    let dir = crate::common::scratch("rtmps-cert");
    let (cert, key) = crate::common::localhost_certificate();
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_path, &cert).unwrap();
    std::fs::write(&key_path, &key).unwrap();
    let server = TestServer::start(&[
        "--rtmps",
        "127.0.0.1:0",
        "--https",
        "127.0.0.1:0",
        "--tls-cert",
        cert_path.to_str().unwrap(),
        "--tls-key",
        key_path.to_str().unwrap(),
    ]);
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    let der = rustls::pki_types::CertificateDer::from_pem_slice(cert.as_bytes()).unwrap();
    roots.add(der).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).unwrap();
    let sock = std::net::TcpStream::connect(server.rtmps.unwrap()).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    // C0 with RTMPE's version (refused), and C1.
    let mut hello = vec![6u8];
    hello.extend_from_slice(&[0; 1536]);
    tls.write_all(&hello).unwrap();
    let mut buf = [0u8; 4096];
    let end = loop {
        match tls.read(&mut buf) {
            Ok(0) => break Ok(()),
            Ok(_) => continue,
            Err(e) => break Err(e),
        }
    };
    assert!(
        end.is_ok(),
        "the connection ended without close_notify: {end:?}"
    );
    // TLS 1.3 without session tickets (OBS on mbedTLS 3.6.0 fails on them).
    assert_eq!(
        tls.conn.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_3)
    );
    assert_eq!(tls.conn.tls13_tickets_received(), 0);
}

/// A plain RTMP client (C0 and C1 of the handshake) on the RTMPS port: closed at once.
#[test]
fn a_plain_rtmp_client_on_the_rtmps_port_is_closed() {
    let server = server();
    let mut sock = std::net::TcpStream::connect(server.rtmps.unwrap()).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut hello = vec![3u8];
    hello.extend_from_slice(&[0; 1536]);
    sock.write_all(&hello).unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 64];
    // A TLS alert at most, then the end.
    loop {
        match sock.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => assert!(buf[0] == 0x15 && n <= 7, "not a TLS alert: {:?}", &buf[..n]),
        }
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    // The server is still up.
    assert_eq!(
        crate::common::http_request(server.http, "GET", "/api/v1/streams", "").0,
        200
    );
}
