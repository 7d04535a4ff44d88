//! TLS settings for the HTTPS listener: a PEM certificate and key, or a self-signed
//! certificate generated at start for development. rustls with the aws-lc-rs provider.

use crate::config::HttpSettings;
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

/// The server's TLS configuration, or `None` when HTTPS is off (no certificate given
/// and none to generate).
pub fn server_config(config: &HttpSettings) -> Result<Option<Arc<rustls::ServerConfig>>, TlsError> {
    let (certs, key) = if config.tls_self_signed {
        let cert = rcgen::generate_simple_self_signed(vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
        ])?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der()));
        (vec![cert.cert.der().clone()], key)
    } else {
        match (config.tls_cert.is_empty(), config.tls_key.is_empty()) {
            (true, true) => return Ok(None),
            (false, false) => {}
            _ => return Err(TlsError::Incomplete),
        }
        let pem = |path: &str, source| TlsError::Pem {
            path: path.to_string(),
            source,
        };
        let certs = CertificateDer::pem_file_iter(&config.tls_cert)
            .map_err(|e| pem(&config.tls_cert, e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| pem(&config.tls_cert, e))?;
        let key =
            PrivateKeyDer::from_pem_file(&config.tls_key).map_err(|e| pem(&config.tls_key, e))?;
        (certs, key)
    };
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    // h2 for HLS (many parallel requests per viewer); HTTP-FLV stays on HTTP/1.1.
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Some(Arc::new(tls)))
}
