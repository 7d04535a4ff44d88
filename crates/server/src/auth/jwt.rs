//! JWT credentials: a token signed with a configured key (`auth.jwt_key`: an HMAC
//! secret or a PEM public key) or with a key of a JWKS (`auth.jwt_jwks_url`, fetched at
//! start and every few minutes), whose claim `auth.jwt_claim` lists what it permits:
//!
//! ```json
//! { "exp": 1767225600, "sluice": [ { "action": "publish", "path": "live/cam1" },
//!                                  { "action": "read" } ] }
//! ```
//!
//! A permission without a path covers every path; a path is a stream pattern
//! (`live/*`). `exp` is required (a token without one would never expire); `nbf` is
//! checked when present. The algorithm is the key's: `alg: none` and a token claiming
//! an HMAC algorithm against a public key are refused before any signature check.

use super::{Action, Denial, Grant};
use crate::io::http_client::{self, Target};
use crate::keys::Pattern;
use arc_swap::ArcSwap;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the JWKS is fetched again.
pub const JWKS_REFRESH: Duration = Duration::from_secs(300);
/// How long one fetch of the JWKS may take.
const JWKS_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest token looked at.
const MAX_TOKEN: usize = 8 << 10;

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
    Key(String),
    #[error("auth.jwt_jwks_url: {0}")]
    Url(#[from] http_client::FetchError),
}

/// One key a token may be signed with.
#[derive(Clone)]
struct Key {
    /// The JWKS entry's `kid`, which a token's header names.
    kid: Option<String>,
    key: DecodingKey,
    /// From the JWKS rather than `auth.jwt_key`.
    fetched: bool,
}

/// The verifier of JWT credentials.
pub struct Jwt {
    keys: ArcSwap<Vec<Key>>,
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

/// What the permissions claim holds.
#[derive(Debug, Deserialize)]
struct Permission {
    action: String,
    #[serde(default)]
    path: Option<String>,
}

impl Jwt {
    /// The verifier the settings describe; `None` when neither a key nor a JWKS is set.
    pub fn new(key: &str, jwks_url: &str, claim: &str) -> Result<Option<Jwt>, JwtConfigError> {
        if key.is_empty() && jwks_url.is_empty() {
            return Ok(None);
        }
        let mut keys = Vec::new();
        if !key.is_empty() {
            keys.push(Key {
                kid: None,
                key: configured_key(key)?,
                fetched: false,
            });
        }
        let jwks = (!jwks_url.is_empty())
            .then(|| Target::parse(jwks_url))
            .transpose()?;
        Ok(Some(Jwt {
            keys: ArcSwap::from_pointee(keys),
            jwks,
            claim: if claim.is_empty() { "sluice" } else { claim }.to_string(),
            fetched: AtomicU64::new(0),
        }))
    }

    /// Whether `token` permits `action` on `path`.
    pub fn check(&self, token: &str, action: Action, path: &str) -> Result<Grant, Denial> {
        if token.len() > MAX_TOKEN {
            return Err(Denial::BadCredentials);
        }
        // An unknown or `none` algorithm fails here.
        let header = jsonwebtoken::decode_header(token).map_err(|_| Denial::BadCredentials)?;
        let keys = self.keys.load();
        let key = keys
            .iter()
            .filter(|k| header.kid.is_none() || k.kid.is_none() || k.kid == header.kid)
            .find(|k| k.key.family() == header.alg.family())
            .ok_or(Denial::BadSignature)?;
        let mut validation = Validation::new(header.alg);
        validation.algorithms = allowed(&key.key);
        validation.validate_aud = false;
        validation.validate_nbf = true;
        validation.leeway = 5;
        let data = jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(
            token,
            &key.key,
            &validation,
        )
        .map_err(|e| match e.kind() {
            jsonwebtoken::errors::ErrorKind::ExpiredSignature
            | jsonwebtoken::errors::ErrorKind::ImmatureSignature => Denial::Expired,
            jsonwebtoken::errors::ErrorKind::InvalidSignature => Denial::BadSignature,
            _ => Denial::BadCredentials,
        })?;
        let claims = data.claims;
        let permissions: Vec<Permission> = claims
            .get(&self.claim)
            .cloned()
            .map(serde_json::from_value)
            .transpose()
            .map_err(|_| Denial::BadCredentials)?
            .unwrap_or_default();
        let permitted = permissions.iter().any(|p| {
            p.action == action.name()
                && p.path
                    .as_deref()
                    .filter(|p| !p.is_empty())
                    .is_none_or(|p| Pattern::parse(p).is_ok_and(|p| p.matches(path)))
        });
        if !permitted {
            return Err(Denial::NotPermitted);
        }
        let subject = claims
            .get("sub")
            .and_then(|s| s.as_str())
            .unwrap_or("jwt")
            .to_string();
        Ok(Grant::Token(subject))
    }

    /// Takes the keys `old` fetched from the same JWKS URL, so that a reload does not
    /// leave tokens unverifiable until the next fetch.
    pub fn keep_fetched(&self, old: &Jwt) {
        if self.jwks.is_none() || self.jwks != old.jwks {
            return;
        }
        let fetched = old
            .keys
            .load()
            .iter()
            .filter(|k| k.fetched)
            .cloned()
            .collect();
        self.keys
            .store(Arc::new(configured_then(&self.keys.load(), fetched)));
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
        let set: JwkSet = serde_json::from_slice(&got.body)?;
        let keys: Vec<Key> = set
            .keys
            .iter()
            .filter_map(|jwk| {
                Some(Key {
                    kid: jwk.common.key_id.clone(),
                    key: DecodingKey::from_jwk(jwk).ok()?,
                    fetched: true,
                })
            })
            .collect();
        let n = keys.len();
        self.keys
            .store(Arc::new(configured_then(&self.keys.load(), keys)));
        self.fetched.store(super::unix_now(), Ordering::Relaxed);
        Ok(n)
    }
}

/// The configured key of `keys` (if any) first, then `fetched` (a JWKS's).
fn configured_then(keys: &[Key], fetched: Vec<Key>) -> Vec<Key> {
    keys.iter()
        .filter(|k| !k.fetched)
        .cloned()
        .chain(fetched)
        .collect()
}

/// The algorithms a key verifies: its family's, never `none`.
fn allowed(key: &DecodingKey) -> Vec<Algorithm> {
    key.family().algorithms().to_vec()
}

/// `auth.jwt_key`: a PEM public key (RSA, EC or Ed25519) or else an HMAC secret.
fn configured_key(key: &str) -> Result<DecodingKey, JwtConfigError> {
    if !key.trim_start().starts_with("-----BEGIN") {
        if key.len() < 16 {
            return Err(JwtConfigError::Key(
                "an HMAC secret needs at least 16 bytes".into(),
            ));
        }
        return Ok(DecodingKey::from_secret(key.as_bytes()));
    }
    let pem = key.trim().as_bytes();
    DecodingKey::from_rsa_pem(pem)
        .or_else(|_| DecodingKey::from_ec_pem(pem))
        .or_else(|_| DecodingKey::from_ed_pem(pem))
        .map_err(|e| JwtConfigError::Key(format!("not a public key in PEM: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use jsonwebtoken::{EncodingKey, Header};
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

    fn verifier() -> Jwt {
        Jwt::new(SECRET, "", "").unwrap().unwrap()
    }

    #[test]
    fn permissions_by_action_and_path() {
        let jwt = verifier();
        let t = hs(json!({
            "sub": "enc1",
            "exp": later(),
            "sluice": [{"action": "publish", "path": "live/*"}, {"action": "read"}]
        }));
        assert_eq!(
            jwt.check(&t, Action::Publish, "live/cam"),
            Ok(Grant::Token("enc1".into()))
        );
        assert_eq!(
            jwt.check(&t, Action::Publish, "other/cam"),
            Err(Denial::NotPermitted)
        );
        assert!(jwt.check(&t, Action::Read, "anything/at/all").is_ok());
        assert_eq!(jwt.check(&t, Action::Api, "api"), Err(Denial::NotPermitted));
    }

    #[test]
    fn expired_wrong_key_and_forged_tokens_are_refused() {
        let jwt = verifier();
        let perms = json!([{"action": "read"}]);
        let expired = hs(json!({"exp": 1_000_000, "sluice": perms}));
        assert_eq!(
            jwt.check(&expired, Action::Read, "a/b"),
            Err(Denial::Expired)
        );
        let no_exp = hs(json!({"sluice": perms}));
        assert!(jwt.check(&no_exp, Action::Read, "a/b").is_err());
        let wrong = token(
            Algorithm::HS256,
            &EncodingKey::from_secret(b"another secret, also long enough"),
            json!({"exp": later(), "sluice": perms}),
        );
        assert_eq!(
            jwt.check(&wrong, Action::Read, "a/b"),
            Err(Denial::BadSignature)
        );
        // alg: none, with the claims of a valid token and no signature.
        let b64 = |v: serde_json::Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        let none = format!(
            "{}.{}.",
            b64(json!({"alg": "none", "typ": "JWT"})),
            b64(json!({"exp": later(), "sluice": perms}))
        );
        assert!(jwt.check(&none, Action::Read, "a/b").is_err());
        // A valid token with its payload swapped.
        let good = hs(json!({"exp": later(), "sluice": [{"action": "read", "path": "x/y"}]}));
        let mut parts: Vec<&str> = good.split('.').collect();
        let payload = b64(json!({"exp": later(), "sluice": perms}));
        parts[1] = &payload;
        assert_eq!(
            jwt.check(&parts.join("."), Action::Read, "a/b"),
            Err(Denial::BadSignature)
        );
        for garbage in ["", "a.b.c", "....", &"x".repeat(MAX_TOKEN + 1)] {
            assert!(jwt.check(garbage, Action::Read, "a/b").is_err());
        }
    }

    #[test]
    fn a_public_key_refuses_hmac_tokens_signed_with_itself() {
        // The classic confusion: HS256 "signed" with the public key's PEM as secret.
        let pem = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n";
        let jwt = Jwt::new(pem, "", "").unwrap().unwrap();
        let t = token(
            Algorithm::HS256,
            &EncodingKey::from_secret(pem.as_bytes()),
            json!({"exp": later(), "sluice": [{"action": "read"}]}),
        );
        assert!(jwt.check(&t, Action::Read, "a/b").is_err());
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
}
