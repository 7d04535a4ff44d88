//! JWT credentials: a token signed with a configured key (`auth.jwt_key`: an HMAC
//! secret or a PEM public key) or with a key of a JWKS (`auth.jwt_jwks_url`, fetched at
//! start and every few minutes), whose claim `auth.jwt_claim` lists what it permits.
//! The token and its claims are checked by `sluice_access::jwt` against the keys in
//! hand; here they are kept, and the JWKS fetched.

use super::{Action, Denial, Grant};
use crate::io::http_client::{self, Target, UrlError};
use arc_swap::ArcSwap;
use sluice_access::jwt::{self as verify, Key, KeyError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the JWKS is fetched again.
pub const JWKS_REFRESH: Duration = Duration::from_secs(300);
/// How long one fetch of the JWKS may take.
const JWKS_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a fetch of the JWKS gave no keys (the keys in hand stay).
#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    #[error(transparent)]
    Fetch(#[from] http_client::FetchError),
    #[error("status {0}")]
    Status(u16),
    #[error("not a JWKS: {0}")]
    NotJwks(#[from] serde_json::Error),
}

/// Why the JWT settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum JwtConfigError {
    #[error("auth.jwt_key: {0}")]
    Key(#[from] KeyError),
    #[error("auth.jwt_jwks_url: {0}")]
    Url(#[from] UrlError),
}

/// The verifier of JWT credentials.
pub struct Jwt {
    /// The configured key (if any) first, then the JWKS's.
    keys: ArcSwap<Vec<Key>>,
    /// Whether `keys` starts with a configured key.
    configured: bool,
    jwks: Option<Target>,
    claim: String,
    /// Unix seconds of the last JWKS fetch that worked (0: none yet).
    fetched: AtomicU64,
}

impl std::fmt::Debug for Jwt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jwt")
            .field("keys", &self.keys.load().len())
            .field("jwks", &self.jwks)
            .field("claim", &self.claim)
            .finish()
    }
}

impl Jwt {
    /// The verifier the settings describe; `None` when neither a key nor a JWKS is set.
    pub fn new(key: &str, jwks_url: &str, claim: &str) -> Result<Option<Jwt>, JwtConfigError> {
        if key.is_empty() && jwks_url.is_empty() {
            return Ok(None);
        }
        let mut keys = Vec::new();
        if !key.is_empty() {
            keys.push(Key::configured(key)?);
        }
        let jwks = (!jwks_url.is_empty())
            .then(|| Target::parse(jwks_url))
            .transpose()?;
        Ok(Some(Jwt {
            configured: !keys.is_empty(),
            keys: ArcSwap::from_pointee(keys),
            jwks,
            claim: if claim.is_empty() {
                verify::DEFAULT_CLAIM
            } else {
                claim
            }
            .to_string(),
            fetched: AtomicU64::new(0),
        }))
    }

    /// Whether `token` permits `action` on `path`.
    pub fn check(&self, token: &str, action: Action, path: &str) -> Result<Grant, Denial> {
        verify::check(&self.keys.load(), &self.claim, token, action, path)
    }

    /// Takes the keys `old` fetched from the same JWKS URL, so that a reload does not
    /// leave tokens unverifiable until the next fetch.
    pub fn keep_fetched(&self, old: &Jwt) {
        if self.jwks.is_none() || self.jwks != old.jwks {
            return;
        }
        self.take_fetched(old.fetched_keys());
        self.fetched
            .store(old.fetched.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// Whether a JWKS is to be fetched.
    pub fn jwks(&self) -> Option<&Target> {
        self.jwks.as_ref()
    }

    /// Fetches the JWKS and takes its keys (keeping the configured key, if any).
    pub async fn refresh(&self) -> Result<usize, JwksError> {
        let Some(url) = &self.jwks else {
            return Ok(0);
        };
        let got = http_client::get(url, JWKS_TIMEOUT).await?;
        if got.status != 200 {
            return Err(JwksError::Status(got.status));
        }
        let keys = Key::from_jwks(&got.body)?;
        let n = keys.len();
        self.take_fetched(keys);
        self.fetched.store(super::unix_now(), Ordering::Relaxed);
        Ok(n)
    }

    /// The keys of the JWKS in hand (those after the configured key).
    fn fetched_keys(&self) -> Vec<Key> {
        let keys = self.keys.load();
        keys.iter()
            .skip(usize::from(self.configured))
            .cloned()
            .collect()
    }

    /// The configured key (if any), then `fetched` (a JWKS's).
    fn take_fetched(&self, fetched: Vec<Key>) {
        let keys = self.keys.load();
        let configured = keys.iter().take(usize::from(self.configured)).cloned();
        self.keys
            .store(Arc::new(configured.chain(fetched).collect()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    use serde_json::json;

    const SECRET: &str = "a secret of sixteen bytes or more";

    fn token(alg: Algorithm, key: &EncodingKey, claims: serde_json::Value) -> String {
        jsonwebtoken::encode(&Header::new(alg), &claims, key).unwrap()
    }

    fn hs(claims: serde_json::Value) -> String {
        token(
            Algorithm::HS256,
            &EncodingKey::from_secret(SECRET.as_bytes()),
            claims,
        )
    }

    fn later() -> u64 {
        super::super::unix_now() + 600
    }

    #[test]
    fn settings() {
        assert!(Jwt::new("", "", "").unwrap().is_none());
        assert!(Jwt::new("short", "", "").is_err());
        assert!(Jwt::new(
            "-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----",
            "",
            ""
        )
        .is_err());
        assert!(Jwt::new("", "ftp://x", "").is_err());
        let jwt = Jwt::new("", "http://127.0.0.1:1/jwks", "perms")
            .unwrap()
            .unwrap();
        assert!(jwt.jwks().is_some());
        // No keys until the JWKS is fetched.
        let t = hs(json!({"exp": later(), "perms": [{"action": "read"}]}));
        assert_eq!(
            jwt.check(&t, Action::Read, "a/b"),
            Err(Denial::BadSignature)
        );
    }

    #[test]
    fn a_reload_keeps_the_keys_fetched_from_the_same_jwks() {
        // A configured Ed25519 key, and an HMAC key from the JWKS.
        let pem = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n";
        let url = "http://127.0.0.1:1/jwks";
        let jwks = json!({"keys": [{
            "kty": "oct", "kid": "k1", "alg": "HS256",
            "k": base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(SECRET),
        }]});
        let fetched = || Key::from_jwks(jwks.to_string().as_bytes()).unwrap();
        let old = Jwt::new(pem, url, "").unwrap().unwrap();
        old.take_fetched(fetched());
        old.take_fetched(fetched());
        assert_eq!(
            old.keys.load().len(),
            2,
            "the configured key, then the JWKS's"
        );
        let t = hs(json!({"exp": later(), "sluice": [{"action": "read"}]}));
        assert!(old.check(&t, Action::Read, "a/b").is_ok());

        let same = Jwt::new(pem, url, "").unwrap().unwrap();
        assert_eq!(
            same.check(&t, Action::Read, "a/b"),
            Err(Denial::BadSignature)
        );
        same.keep_fetched(&old);
        assert_eq!(same.keys.load().len(), 2);
        assert!(same.check(&t, Action::Read, "a/b").is_ok());

        let elsewhere = Jwt::new(pem, "http://127.0.0.1:2/jwks", "")
            .unwrap()
            .unwrap();
        elsewhere.keep_fetched(&old);
        assert_eq!(elsewhere.keys.load().len(), 1);
        assert!(elsewhere.check(&t, Action::Read, "a/b").is_err());
    }
}
