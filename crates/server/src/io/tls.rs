//! TLS settings for the HTTPS listener: a PEM certificate and key, or a self-signed
//! certificate generated at start for development. rustls with the aws-lc-rs provider.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("TLS certificate {path}: {source}")]
    Pem {
        path: String,
        source: rustls::pki_types::pem::Error,
    },
    #[error("TLS: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("self-signed certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("--tls-cert and --tls-key go together")]
    Incomplete,
}

/// Where the HTTPS certificate comes from (`http.tls_cert`, `http.tls_key`,
/// `http.tls_self_signed`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CertSource {
    /// PEM file of the certificate chain; empty for none.
    pub cert: String,
    /// PEM file of the private key; empty for none.
    pub key: String,
    /// Generate a self-signed certificate for localhost instead.
    pub self_signed: bool,
}

/// The certificate HTTPS presents, replaceable while the server runs (`reload`):
/// handshakes after a reload get the new one, connections already up keep theirs.
#[derive(Debug)]
pub struct Certificate {
    key: arc_swap::ArcSwap<rustls::sign::CertifiedKey>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::server::ResolvesServerCert for Certificate {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.key.load_full())
    }
}

impl Certificate {
    /// Reads the certificate and key files again and presents them from the next
    /// handshake on; a self-signed certificate stays as it is. On error the current
    /// one stays.
    pub fn reload(&self, source: &CertSource) -> Result<(), TlsError> {
        if source.self_signed {
            return Ok(());
        }
        let Some((certs, key)) = load(source)? else {
            return Err(TlsError::Incomplete);
        };
        let key = rustls::sign::CertifiedKey::from_der(certs, key, &self.provider)?;
        self.key.store(Arc::new(key));
        Ok(())
    }
}

/// A certificate chain and its private key.
type Pair = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

/// The HTTPS listener's configuration and its replaceable certificate.
pub type ServerTls = (Arc<rustls::ServerConfig>, Arc<Certificate>);

/// The certificate chain and key the settings name (generated when self-signed);
/// `None` when there are none.
fn load(source: &CertSource) -> Result<Option<Pair>, TlsError> {
    if source.self_signed {
        let cert = rcgen::generate_simple_self_signed(vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
        ])?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der()));
        return Ok(Some((vec![cert.cert.der().clone()], key)));
    }
    match (source.cert.is_empty(), source.key.is_empty()) {
        (true, true) => return Ok(None),
        (false, false) => {}
        _ => return Err(TlsError::Incomplete),
    }
    let pem = |path: &str, source| TlsError::Pem {
        path: path.to_string(),
        source,
    };
    let certs = CertificateDer::pem_file_iter(&source.cert)
        .map_err(|e| pem(&source.cert, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem(&source.cert, e))?;
    let key = PrivateKeyDer::from_pem_file(&source.key).map_err(|e| pem(&source.key, e))?;
    Ok(Some((certs, key)))
}

/// The server's TLS configuration and its replaceable certificate, or `None` when
/// HTTPS is off (no certificate given and none to generate).
pub fn server_config(source: &CertSource) -> Result<Option<ServerTls>, TlsError> {
    let Some((certs, key)) = load(source)? else {
        return Ok(None);
    };
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let key = rustls::sign::CertifiedKey::from_der(certs, key, &provider)?;
    let certificate = Arc::new(Certificate {
        key: arc_swap::ArcSwap::from_pointee(key),
        provider: provider.clone(),
    });
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(certificate.clone());
    // h2 for HLS (many parallel requests per viewer); HTTP-FLV stays on HTTP/1.1.
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Some((Arc::new(tls), certificate)))
}

/// RTMPS's TLS: HTTPS's certificate (replaced with it on reload), no ALPN, and no TLS 1.3
/// session tickets, which OBS builds on mbedTLS 3.6.0 fail on.
pub fn rtmps_config(https: &rustls::ServerConfig) -> Arc<rustls::ServerConfig> {
    let mut tls = https.clone();
    tls.alpn_protocols = Vec::new();
    tls.send_tls13_tickets = 0;
    Arc::new(tls)
}

/// Ciphertext rustls may hold per TLS connection beyond what the socket took: its
/// default (64 KiB) times thousands of players is most of their memory.
const TLS_BUFFER: usize = 16 << 10;

/// A server connection's TLS handshake, bounded by `bound`, with the buffer limit set;
/// `None` (logged) when it fails or takes too long (a plain-text client, a scanner).
pub async fn accept(
    acceptor: &tokio_rustls::TlsAcceptor,
    tcp: tokio::net::TcpStream,
    bound: std::time::Duration,
) -> Option<tokio_rustls::server::TlsStream<crate::io::sock::SharedTcp>> {
    let accepting = acceptor.accept(crate::io::sock::SharedTcp(std::rc::Rc::new(tcp)));
    match tokio::time::timeout(bound, accepting).await {
        Ok(Ok(mut tls)) => {
            tls.get_mut().1.set_buffer_limit(Some(TLS_BUFFER));
            Some(tls)
        }
        Ok(Err(e)) => {
            tracing::info!("TLS handshake failed: {e}");
            None
        }
        Err(_) => {
            tracing::info!("TLS handshake timed out");
            None
        }
    }
}
