//! TLS for the HTTP players (`https://`, `wss://`): one rustls client configuration per
//! run, shared by every connection, and the sans-IO step from ciphertext read off a
//! socket to the plaintext the players scan.
//!
//! Why rustls's `ClientConnection` driven by hand and not `tokio-rustls`: the players
//! read into one buffer per thread and scan what one read returns (`load` module).
//! Here a read takes ciphertext into a second per-thread buffer, [`decrypt`] hands it
//! to rustls and copies the plaintext into the thread's read buffer. A connection
//! keeps only rustls's own state: its record buffer (at most one partial record,
//! about 18 KiB, 4 KiB when idle) and its keys. Every connection of a run shares one
//! `Arc<ClientConfig>`, with its in-memory session cache (TLS resumption on
//! reconnects).
//!
//! # Invariants
//! - HTTP/1.1 only: ALPN offers `http/1.1` alone, so a server that also speaks h2 is
//!   measured on its HTTP/1.1 path.
//! - One crypto provider, aws-lc-rs, as the server's.
//! - Without `--insecure` the server's certificate chain is verified against the
//!   `--ca` roots and the URL's host; with it any certificate passes, but the
//!   handshake signatures are still checked against the certificate's key.
//! - [`decrypt`] never leaves ciphertext behind: it feeds all of it to rustls, which
//!   holds at most one partial record. Its output buffer must have room for the
//!   ciphertext plus [`CARRY`] (checked: an error, not a panic, if not).

use crate::figures::ErrorKind;
use crate::load::Failure;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore};
use std::io::Read;
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// Plaintext rustls may hold back from one [`decrypt`] for the next: one partial
/// record (16 KiB of payload plus the largest record overhead rustls accepts), with
/// room to spare.
pub(crate) const CARRY: usize = 24 << 10;

/// How the server's certificate is checked.
#[derive(Debug, Clone)]
pub(crate) enum Verify {
    /// Against these PEM roots, and the URL's host.
    Ca(std::path::PathBuf),
    /// Not at all (self-signed benchmarking).
    Insecure,
}

/// What every TLS connection of a run shares.
#[derive(Debug)]
pub(crate) struct TlsClient {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
    /// Version, cipher suite and ALPN of the first connection, for the report.
    first: OnceLock<String>,
}

impl TlsClient {
    /// The run's configuration for the server `host` (a DNS name or an IP address, as
    /// in the URL, without port or brackets).
    pub(crate) fn new(verify: &Verify, host: &str) -> Result<TlsClient, String> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?;
        let mut config = match verify {
            Verify::Insecure => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
                .with_no_client_auth(),
            Verify::Ca(path) => builder
                .with_root_certificates(roots(path)?)
                .with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| format!("TLS server name {host:?}: {e}"))?;
        Ok(TlsClient {
            config: Arc::new(config),
            name,
            first: OnceLock::new(),
        })
    }

    /// A new client connection (nothing sent yet).
    pub(crate) fn connect(&self) -> Result<ClientConnection, Failure> {
        ClientConnection::new(self.config.clone(), self.name.clone())
            .map_err(|e| (ErrorKind::Tls, format!("TLS: {e}")))
    }

    /// Notes what the first finished handshake agreed on.
    pub(crate) fn handshaken(&self, conn: &ClientConnection) {
        if self.first.get().is_some() {
            return;
        }
        let version = conn
            .protocol_version()
            .map_or("?".to_string(), |v| format!("{v:?}"));
        let suite = conn
            .negotiated_cipher_suite()
            .map_or("?".to_string(), |s| format!("{:?}", s.suite()));
        let alpn = conn.alpn_protocol().map_or("no ALPN".to_string(), |a| {
            String::from_utf8_lossy(a).into_owned()
        });
        let _ = self.first.set(format!("{version} {suite} {alpn}"));
    }

    /// What the first handshake agreed on, once there was one.
    pub(crate) fn agreed(&self) -> Option<String> {
        self.first.get().cloned()
    }
}

/// The certificates of a PEM file, as trust anchors.
fn roots(path: &Path) -> Result<RootCertStore, String> {
    let what = |e: rustls::pki_types::pem::Error| format!("--ca {}: {e}", path.display());
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).map_err(what)? {
        roots
            .add(cert.map_err(what)?)
            .map_err(|e| format!("--ca {}: {e}", path.display()))?;
    }
    if roots.is_empty() {
        return Err(format!("--ca {}: no certificate in it", path.display()));
    }
    Ok(roots)
}

/// `--insecure`: any certificate is the server's; handshake signatures must still be
/// made with its key (a broken server still fails).
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// What one [`decrypt`] produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decrypted {
    /// Plaintext bytes written at the start of the output buffer.
    pub len: usize,
    /// The server sent close_notify and every plaintext byte before it was taken.
    pub closed: bool,
}

/// Hands `cipher` (bytes read off the socket, possibly none) to `conn` and copies the
/// plaintext it yields, with any it held back before, into `out`. Post-handshake
/// messages (session tickets, key updates) are processed on the way; answers to them
/// wait in `conn` for the next write.
///
/// `out` must hold `cipher.len() + CARRY` bytes; a connection that outgrows it fails
/// with [`ErrorKind::Io`] rather than losing bytes.
pub(crate) fn decrypt(
    conn: &mut ClientConnection,
    mut cipher: &[u8],
    out: &mut [u8],
) -> Result<Decrypted, Failure> {
    let (mut len, mut closed) = take_plaintext(conn, out);
    while !cipher.is_empty() && !closed {
        if len == out.len() {
            return Err((
                ErrorKind::Io,
                "TLS plaintext outgrew the read buffer".into(),
            ));
        }
        // A slice reader: rustls takes up to 4 KiB per call and the slice advances.
        let n = conn
            .read_tls(&mut cipher as &mut dyn Read)
            .map_err(|e| (ErrorKind::Io, format!("TLS: {e}")))?;
        if n == 0 {
            // close_notify came: what follows it is not data.
            break;
        }
        conn.process_new_packets()
            .map_err(|e| (ErrorKind::Tls, format!("TLS: {e}")))?;
        let (n, c) = take_plaintext(conn, &mut out[len..]);
        len += n;
        closed = c;
    }
    Ok(Decrypted { len, closed })
}

/// Moves the plaintext `conn` holds into `out`; `true` when close_notify came and
/// nothing is left before it.
fn take_plaintext(conn: &mut ClientConnection, out: &mut [u8]) -> (usize, bool) {
    let mut len = 0;
    while len < out.len() {
        match conn.reader().read(&mut out[len..]) {
            Ok(0) => return (len, true),
            Ok(n) => len += n,
            // WouldBlock: no more for now. UnexpectedEof (the socket closed without
            // close_notify) is the caller's to see, on the socket.
            Err(_) => break,
        }
    }
    (len, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    use rustls::{ServerConfig, ServerConnection};
    use std::io::Write;

    /// A server with a fresh self-signed certificate for 127.0.0.1 and localhost, its
    /// certificate as PEM, and its configuration.
    fn server(alpn: &[&[u8]]) -> (Arc<ServerConfig>, String) {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
            .expect("certificate");
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der()));
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert.der().clone()], key)
            .expect("server config");
        config.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
        (Arc::new(config), cert.cert.pem())
    }

    /// Runs the handshake in memory; the error of the client's side if it fails.
    fn handshake(
        client: &mut ClientConnection,
        server: &mut ServerConnection,
    ) -> Result<(), rustls::Error> {
        for _ in 0..10 {
            if !client.is_handshaking() && !server.is_handshaking() {
                return Ok(());
            }
            let mut wire = Vec::new();
            while client.wants_write() {
                client.write_tls(&mut wire).expect("client writes");
            }
            let mut rd = &wire[..];
            while !rd.is_empty() {
                server.read_tls(&mut rd).expect("server reads");
                server.process_new_packets()?;
            }
            let mut wire = Vec::new();
            while server.wants_write() {
                server.write_tls(&mut wire).expect("server writes");
            }
            let mut rd = &wire[..];
            while !rd.is_empty() {
                client.read_tls(&mut rd).expect("client reads");
                client.process_new_packets()?;
            }
        }
        panic!("handshake did not finish");
    }

    /// The records that carry `data` from the server (its send buffer is bounded:
    /// drained as it goes).
    fn server_sends(server: &mut ServerConnection, data: &[u8]) -> Vec<u8> {
        let mut wire = Vec::new();
        let drain = |server: &mut ServerConnection, wire: &mut Vec<u8>| {
            while server.wants_write() {
                server.write_tls(wire).expect("server writes");
            }
        };
        for piece in data.chunks(16 << 10) {
            server.writer().write_all(piece).expect("plaintext in");
            drain(server, &mut wire);
        }
        drain(server, &mut wire);
        wire
    }

    #[test]
    fn insecure_client_reads_what_the_server_sends_in_any_pieces() {
        let (config, _) = server(&[b"h2", b"http/1.1"]);
        let tls = TlsClient::new(&Verify::Insecure, "127.0.0.1").expect("client");
        let mut client = tls.connect().expect("client conn");
        let mut srv = ServerConnection::new(config).expect("server conn");
        handshake(&mut client, &mut srv).expect("handshake");
        assert_eq!(client.alpn_protocol(), Some(&b"http/1.1"[..]));
        tls.handshaken(&client);
        assert!(tls.agreed().expect("noted").ends_with("http/1.1"));

        // 100 kB in records of 16 KiB, fed in odd-sized reads: every byte comes out, in
        // order, and never more than a read plus CARRY at once.
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let wire = server_sends(&mut srv, &data);
        let mut got = Vec::new();
        let mut out = vec![0u8; 1000 + CARRY];
        for piece in wire.chunks(1000) {
            let d = decrypt(&mut client, piece, &mut out).expect("decrypt");
            assert!(!d.closed);
            got.extend_from_slice(&out[..d.len]);
        }
        assert_eq!(got, data);

        // close_notify: the bytes before it, then closed.
        let mut wire = server_sends(&mut srv, b"last");
        srv.send_close_notify();
        wire.extend(server_sends(&mut srv, b""));
        let mut out = vec![0u8; wire.len() + CARRY];
        let d = decrypt(&mut client, &wire, &mut out).expect("decrypt");
        assert_eq!(&out[..d.len], b"last");
        assert!(d.closed);
    }

    #[test]
    fn too_small_an_output_buffer_is_an_error() {
        let (config, _) = server(&[]);
        let tls = TlsClient::new(&Verify::Insecure, "localhost").expect("client");
        let mut client = tls.connect().expect("client conn");
        let mut srv = ServerConnection::new(config).expect("server conn");
        handshake(&mut client, &mut srv).expect("handshake");
        let wire = server_sends(&mut srv, &[7u8; 50_000]);
        let mut out = vec![0u8; 100];
        let r = decrypt(&mut client, &wire, &mut out);
        assert!(matches!(r, Err((ErrorKind::Io, _))), "{r:?}");
    }

    #[test]
    fn garbage_from_the_server_is_a_tls_failure() {
        let (config, _) = server(&[]);
        let tls = TlsClient::new(&Verify::Insecure, "127.0.0.1").expect("client");
        let mut client = tls.connect().expect("client conn");
        let mut srv = ServerConnection::new(config).expect("server conn");
        handshake(&mut client, &mut srv).expect("handshake");
        let mut out = vec![0u8; 64 + CARRY];
        let r = decrypt(
            &mut client,
            b"HTTP/1.1 200 OK\r\n\r\nnot a TLS record",
            &mut out,
        );
        assert!(matches!(r, Err((ErrorKind::Tls, _))), "{r:?}");
    }

    #[test]
    fn ca_verification_checks_the_root_and_the_name() {
        let (config, pem) = server(&[]);
        let dir = std::env::temp_dir().join(format!("sluice-bench-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, &pem).expect("write ca");
        let try_with = |verify: &Verify, host: &str| {
            let tls = TlsClient::new(verify, host).expect("client");
            let mut client = tls.connect().expect("client conn");
            let mut srv = ServerConnection::new(config.clone()).expect("server conn");
            handshake(&mut client, &mut srv)
        };
        assert!(try_with(&Verify::Ca(ca.clone()), "127.0.0.1").is_ok());
        assert!(try_with(&Verify::Ca(ca.clone()), "localhost").is_ok());
        // The right root, the wrong name.
        assert!(try_with(&Verify::Ca(ca.clone()), "example.com").is_err());
        // Another root.
        let (_, other) = server(&[]);
        std::fs::write(&ca, &other).expect("write ca");
        assert!(try_with(&Verify::Ca(ca.clone()), "127.0.0.1").is_err());
        assert!(try_with(&Verify::Insecure, "example.com").is_ok());
        // No certificate in the file.
        std::fs::write(&ca, "nothing").expect("write ca");
        assert!(TlsClient::new(&Verify::Ca(ca.clone()), "127.0.0.1").is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
