//! The few outgoing HTTP requests the server makes: auth and notification hooks, and
//! fetching a JWKS. One HTTP/1.1 request per connection (`Connection: close`), over
//! TLS for `https://` URLs (the web PKI's roots), with a deadline on the whole
//! exchange and a cap on the answer's size, so a slow, dead or garbage-answering peer
//! costs the caller one bounded wait and never more memory than the cap.

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
pub use sluice_access::{Target, UrlError};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::net::TcpStream;

/// Largest answer body read; a hook's answer is a status, a JWKS a few keys.
const MAX_BODY: usize = 256 << 10;

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(transparent)]
    Url(#[from] UrlError),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("HTTP: {0}")]
    Http(String),
    #[error("answer larger than {0} bytes")]
    TooLarge(usize),
}

/// An answer: its status and body.
#[derive(Debug)]
pub struct Fetched {
    pub status: u16,
    pub body: Bytes,
}

/// POSTs `json` to `target`; the whole exchange within `timeout`.
pub async fn post_json(
    target: &Target,
    json: String,
    timeout: Duration,
) -> Result<Fetched, FetchError> {
    fetch(target, hyper::Method::POST, Some(json), timeout, MAX_BODY).await
}

/// GETs `target` within `timeout`.
pub async fn get(target: &Target, timeout: Duration) -> Result<Fetched, FetchError> {
    fetch(target, hyper::Method::GET, None, timeout, MAX_BODY).await
}

/// GETs `target` within `timeout`, with an answer of up to `max` bytes (an HLS
/// segment).
pub async fn get_up_to(
    target: &Target,
    timeout: Duration,
    max: usize,
) -> Result<Fetched, FetchError> {
    fetch(target, hyper::Method::GET, None, timeout, max).await
}

async fn fetch(
    target: &Target,
    method: hyper::Method,
    json: Option<String>,
    timeout: Duration,
    max: usize,
) -> Result<Fetched, FetchError> {
    tokio::time::timeout(timeout, exchange(target, method, json, max))
        .await
        .map_err(|_| FetchError::Timeout(timeout))?
}

async fn exchange(
    target: &Target,
    method: hyper::Method,
    json: Option<String>,
    max: usize,
) -> Result<Fetched, FetchError> {
    let tcp = TcpStream::connect((target.host(), target.port())).await?;
    let _ = tcp.set_nodelay(true);
    let mut request = http::Request::builder()
        .method(method)
        .uri(target.path())
        .header("Host", target.host_header())
        .header("User-Agent", concat!("sluice/", env!("CARGO_PKG_VERSION")))
        .header("Connection", "close");
    if json.is_some() {
        request = request.header("Content-Type", "application/json");
    }
    let request = request
        .body(json.unwrap_or_default())
        .map_err(|e| FetchError::Http(e.to_string()))?;
    if target.tls() {
        let name = rustls::pki_types::ServerName::try_from(target.host().to_string())
            .map_err(|_| UrlError(target.to_string()))?;
        let tls = tokio_rustls::TlsConnector::from(tls_config())
            .connect(name, tcp)
            .await?;
        send(TokioIo::new(tls), request, max).await
    } else {
        send(TokioIo::new(tcp), request, max).await
    }
}

async fn send<T>(io: T, request: http::Request<String>, max: usize) -> Result<Fetched, FetchError>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let http = |e: hyper::Error| FetchError::Http(e.to_string());
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(http)?;
    // The connection is driven beside the request; both end with the exchange.
    let driver = async move {
        let _ = conn.await;
    };
    let exchange = async move {
        let response = sender.send_request(request).await.map_err(http)?;
        let status = response.status().as_u16();
        let body = http_body_util::Limited::new(response.into_body(), max)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    FetchError::TooLarge(max)
                } else {
                    FetchError::Http(e.to_string())
                }
            })?
            .to_bytes();
        Ok(Fetched { status, body })
    };
    tokio::pin!(driver);
    tokio::pin!(exchange);
    tokio::select! {
        r = &mut exchange => r,
        () = &mut driver => exchange.await,
    }
}

pub(crate) fn tls_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            Arc::new(
                rustls::ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::aws_lc_rs::default_provider(),
                ))
                .with_safe_default_protocol_versions()
                .expect("the provider supports TLS 1.2 and 1.3")
                .with_root_certificates(roots)
                .with_no_client_auth(),
            )
        })
        .clone()
}
