//! JWT verification: a token signed with one of the keys it is handed (the configured
//! `auth.jwt_key`, an HMAC secret or a PEM public key, and the keys of a JWKS the
//! server fetches), whose permissions claim lists what it permits:
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

use crate::{Action, Denial, Grant, Pattern};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

/// Longest token looked at.
pub const MAX_TOKEN: usize = 8 << 10;

/// The claim that lists a token's permissions when none is configured.
pub const DEFAULT_CLAIM: &str = "sluice";

/// Why a configured key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// An HMAC secret too short to be one.
    #[error("an HMAC secret needs at least 16 bytes")]
    ShortSecret,
    /// Text that starts as PEM but holds no public key we can use.
    #[error("not a public key in PEM: {0}")]
    Pem(jsonwebtoken::errors::Error),
}

/// One key a token may be signed with.
#[derive(Clone)]
pub struct Key {
    /// The JWKS entry's `kid`, which a token's header names.
    kid: Option<String>,
    key: DecodingKey,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key").field("kid", &self.kid).finish()
    }
}

impl Key {
    /// `auth.jwt_key`: a PEM public key (RSA, EC or Ed25519) or else an HMAC secret.
    pub fn configured(key: &str) -> Result<Key, KeyError> {
        let key = if !key.trim_start().starts_with("-----BEGIN") {
            if key.len() < 16 {
                return Err(KeyError::ShortSecret);
            }
            DecodingKey::from_secret(key.as_bytes())
        } else {
            let pem = key.trim().as_bytes();
            DecodingKey::from_rsa_pem(pem)
                .or_else(|_| DecodingKey::from_ec_pem(pem))
                .or_else(|_| DecodingKey::from_ed_pem(pem))
                .map_err(KeyError::Pem)?
        };
        Ok(Key { kid: None, key })
    }

    /// The keys of a JWKS document (those we cannot use are skipped).
    pub fn from_jwks(json: &[u8]) -> Result<Vec<Key>, serde_json::Error> {
        let set: JwkSet = serde_json::from_slice(json)?;
        Ok(set
            .keys
            .iter()
            .filter_map(|jwk| {
                Some(Key {
                    kid: jwk.common.key_id.clone(),
                    key: DecodingKey::from_jwk(jwk).ok()?,
                })
            })
            .collect())
    }
}

/// What the permissions claim holds.
#[derive(Debug, Deserialize)]
struct Permission {
    action: String,
    #[serde(default)]
    path: Option<String>,
}

/// Whether `token`, signed with one of `keys` (the first that fits its header is
/// tried), permits `action` on `path` by its `claim` (empty: [`DEFAULT_CLAIM`]).
pub fn check(
    keys: &[Key],
    claim: &str,
    token: &str,
    action: Action,
    path: &str,
) -> Result<Grant, Denial> {
    if token.len() > MAX_TOKEN {
        return Err(Denial::BadCredentials);
    }
    // An unknown or `none` algorithm fails here.
    let header = jsonwebtoken::decode_header(token).map_err(|_| Denial::BadCredentials)?;
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
    let claim = if claim.is_empty() {
        DEFAULT_CLAIM
    } else {
        claim
    };
    let permissions: Vec<Permission> = claims
        .get(claim)
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

/// The algorithms a key verifies: its family's, never `none`.
fn allowed(key: &DecodingKey) -> Vec<Algorithm> {
    key.family().algorithms().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::json;

    const SECRET: &str = "a secret of sixteen bytes or more";
    const PEM: &str = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n";

    /// Keys and the default claim, as the server holds them.
    struct Verifier(Vec<Key>);

    impl Verifier {
        fn check(&self, token: &str, action: Action, path: &str) -> Result<Grant, Denial> {
            check(&self.0, "", token, action, path)
        }
    }

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
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        now.as_secs() + 600
    }

    fn verifier() -> Verifier {
        Verifier(vec![Key::configured(SECRET).unwrap()])
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
    fn the_claim_is_the_one_configured() {
        let keys = [Key::configured(SECRET).unwrap()];
        let t = hs(json!({"exp": later(), "perms": [{"action": "read"}]}));
        assert_eq!(
            check(&keys, "perms", &t, Action::Read, "a/b"),
            Ok(Grant::Token("jwt".into()))
        );
        assert_eq!(
            check(&keys, "", &t, Action::Read, "a/b"),
            Err(Denial::NotPermitted)
        );
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
        let jwt = Verifier(vec![Key::configured(PEM).unwrap()]);
        let t = token(
            Algorithm::HS256,
            &EncodingKey::from_secret(PEM.as_bytes()),
            json!({"exp": later(), "sluice": [{"action": "read"}]}),
        );
        assert!(jwt.check(&t, Action::Read, "a/b").is_err());
    }

    #[test]
    fn no_keys_verify_nothing() {
        let t = hs(json!({"exp": later(), "sluice": [{"action": "read"}]}));
        assert_eq!(
            check(&[], "", &t, Action::Read, "a/b"),
            Err(Denial::BadSignature)
        );
    }

    #[test]
    fn configured_keys() {
        assert!(matches!(
            Key::configured("short"),
            Err(KeyError::ShortSecret)
        ));
        assert!(matches!(
            Key::configured("-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----"),
            Err(KeyError::Pem(_))
        ));
        assert!(Key::configured(PEM).is_ok());
    }

    #[test]
    fn the_keys_of_a_jwks() {
        // PEM's Ed25519 key (the last 32 bytes of its DER) as a JWK, beside one we
        // cannot use.
        let der = base64::engine::general_purpose::STANDARD
            .decode("MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=")
            .unwrap();
        let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&der[der.len() - 32..]);
        let jwks = json!({"keys": [
            {"kty": "OKP", "crv": "Ed25519", "kid": "k1", "x": x},
            {"kty": "oct", "kid": "k2", "k": "!!not base64!!"}
        ]});
        let keys = Key::from_jwks(jwks.to_string().as_bytes()).unwrap();
        assert_eq!(
            keys.iter().map(|k| k.kid.as_deref()).collect::<Vec<_>>(),
            [Some("k1")]
        );
        assert!(Key::from_jwks(b"{\"not\": \"a jwks\"}").is_err());
    }
}
