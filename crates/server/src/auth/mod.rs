//! One authorization for every protocol: [`Auth::authorize`] answers whether a
//! request (an action on a path, by a protocol, with credentials, from an address)
//! may go on, whatever protocol carried it.
//!
//! Backends, tried in order: a signed URL (`expires` and `sign` in the query, an
//! HMAC-SHA256 with `auth.signing_key`), then a static user of `[[users]]` (password
//! as an argon2 PHC string or `sha256:HEX`, permissions per action as stream patterns,
//! allowed address ranges). What is not required (`auth.publish`, `auth.read`) is
//! allowed without credentials. Every denial is logged with its reason by the caller
//! and counted here.
//!
//! HLS viewers are authorized once, at the playlist: they get a token
//! ([`Auth::viewer_token`], an HMAC of the stream and an expiry with a key made at
//! start) in a cookie, which every segment and part request shows; checking it costs
//! one HMAC, on any worker, with no state.

pub mod credentials;

use crate::config::{Config, UserConfig};
use crate::record::Pattern;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use credentials::Credentials;

type HmacSha256 = Hmac<Sha256>;

/// What a request wants to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    Publish,
    Read,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Publish => "publish",
            Action::Read => "read",
        }
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Denial {
    /// Authorization is required and none was given.
    NoCredentials,
    /// No such user, or a wrong password.
    BadCredentials,
    /// The user may not do this on this path.
    NotPermitted,
    /// The user may not connect from this address.
    AddressNotAllowed,
    /// A signed URL whose signature does not match.
    BadSignature,
    /// A signed URL or viewer token past its expiry.
    Expired,
}

impl Denial {
    pub fn reason(self) -> &'static str {
        match self {
            Denial::NoCredentials => "no_credentials",
            Denial::BadCredentials => "bad_credentials",
            Denial::NotPermitted => "not_permitted",
            Denial::AddressNotAllowed => "address_not_allowed",
            Denial::BadSignature => "bad_signature",
            Denial::Expired => "expired",
        }
    }

    const ALL: [Denial; 6] = [
        Denial::NoCredentials,
        Denial::BadCredentials,
        Denial::NotPermitted,
        Denial::AddressNotAllowed,
        Denial::BadSignature,
        Denial::Expired,
    ];
}

/// Who was allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// Authorization is not required for this action.
    Open,
    /// A signed URL.
    Signed,
    /// A user of `[[users]]`.
    User(String),
}

/// One request to authorize.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub action: Action,
    /// The stream key (`app/name`) or file path the action is on.
    pub path: &'a str,
    pub credentials: &'a Credentials,
    pub peer: IpAddr,
}

/// A password as stored.
#[derive(Debug, Clone)]
enum Password {
    Sha256([u8; 32]),
    /// An argon2 PHC string (`$argon2id$...`).
    Argon2(String),
}

#[derive(Debug)]
struct User {
    password: Password,
    publish: Vec<Pattern>,
    read: Vec<Pattern>,
    ips: Vec<ipnet::IpNet>,
}

/// How long a verified argon2 password is remembered (argon2 costs tens of ms by
/// design; a player reconnecting should not pay it again).
const VERIFIED_FOR: Duration = Duration::from_secs(60);

/// How long an HLS viewer's token lasts; the playlist renews it.
pub const VIEWER_TOKEN_LIFE: Duration = Duration::from_secs(120);

/// The server's authorization, shared by every worker.
#[derive(Debug)]
pub struct Auth {
    publish: bool,
    read: bool,
    users: HashMap<String, User>,
    signing_key: Vec<u8>,
    /// Key of HLS viewer tokens, made at start (tokens do not outlive the server).
    viewer_key: [u8; 32],
    /// argon2 verifications that passed: sha256(user, password) → when.
    verified: Mutex<HashMap<[u8; 32], Instant>>,
    denials: [AtomicU64; 6],
}

/// Why the auth settings cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("user {user}: {why}")]
pub struct AuthConfigError {
    user: String,
    why: String,
}

impl Auth {
    /// The authorization the configuration describes.
    pub fn new(config: &Config) -> Result<Auth, AuthConfigError> {
        let mut users = HashMap::new();
        for u in &config.users {
            users.insert(u.name.clone(), user(u)?);
        }
        Ok(Auth {
            publish: config.auth.publish,
            read: config.auth.read,
            users,
            signing_key: config.auth.signing_key.as_bytes().to_vec(),
            viewer_key: rand::random(),
            verified: Mutex::new(HashMap::new()),
            denials: Default::default(),
        })
    }

    /// Whether `action` needs authorization.
    pub fn required(&self, action: Action) -> bool {
        match action {
            Action::Publish => self.publish,
            Action::Read => self.read,
        }
    }

    /// Whether the request may go on.
    pub fn authorize(&self, req: &Request<'_>) -> Result<Grant, Denial> {
        if !self.required(req.action) {
            return Ok(Grant::Open);
        }
        let result = self.decide(req);
        if let Err(denial) = result {
            self.denials[denial as usize].fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    fn decide(&self, req: &Request<'_>) -> Result<Grant, Denial> {
        let creds = req.credentials;
        if let Some((expires, sign)) = &creds.signed {
            return self.check_signed(req.action, req.path, *expires, sign);
        }
        let (Some(name), Some(password)) = (&creds.user, &creds.password) else {
            return Err(Denial::NoCredentials);
        };
        let user = self.users.get(name).ok_or(Denial::BadCredentials)?;
        if !self.password_matches(name, &user.password, password) {
            return Err(Denial::BadCredentials);
        }
        if !user.ips.is_empty() && !user.ips.iter().any(|net| net.contains(&req.peer)) {
            return Err(Denial::AddressNotAllowed);
        }
        let patterns = match req.action {
            Action::Publish => &user.publish,
            Action::Read => &user.read,
        };
        if !patterns.iter().any(|p| p.matches(req.path)) {
            return Err(Denial::NotPermitted);
        }
        Ok(Grant::User(name.clone()))
    }

    fn check_signed(
        &self,
        action: Action,
        path: &str,
        expires: u64,
        sign: &str,
    ) -> Result<Grant, Denial> {
        if self.signing_key.is_empty() {
            return Err(Denial::BadSignature);
        }
        let Some(sign) = unhex(sign) else {
            return Err(Denial::BadSignature);
        };
        let mut mac = HmacSha256::new_from_slice(&self.signing_key).expect("any key length");
        mac.update(signed_message(action, path, expires).as_bytes());
        mac.verify_slice(&sign).map_err(|_| Denial::BadSignature)?;
        if expires < unix_now() {
            return Err(Denial::Expired);
        }
        Ok(Grant::Signed)
    }

    fn password_matches(&self, name: &str, stored: &Password, given: &str) -> bool {
        match stored {
            Password::Sha256(hash) => {
                let got: [u8; 32] = Sha256::digest(given.as_bytes()).into();
                constant_eq(&got, hash)
            }
            Password::Argon2(phc) => {
                let key: [u8; 32] = Sha256::new()
                    .chain_update(name.as_bytes())
                    .chain_update([0])
                    .chain_update(given.as_bytes())
                    .finalize()
                    .into();
                let now = Instant::now();
                {
                    let mut verified = self.verified.lock().unwrap_or_else(|e| e.into_inner());
                    verified.retain(|_, at| now.duration_since(*at) < VERIFIED_FOR);
                    if verified.contains_key(&key) {
                        return true;
                    }
                }
                let ok = argon2::PasswordHash::new(phc).is_ok_and(|hash| {
                    use argon2::PasswordVerifier;
                    argon2::Argon2::default()
                        .verify_password(given.as_bytes(), &hash)
                        .is_ok()
                });
                if ok {
                    self.verified
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(key, now);
                }
                ok
            }
        }
    }

    /// A token that lets an HLS viewer authorized for `key` fetch its segments until
    /// it expires (`VIEWER_TOKEN_LIFE`): `EXPIRES.HEX`.
    pub fn viewer_token(&self, key: &str) -> String {
        let expires = unix_now() + VIEWER_TOKEN_LIFE.as_secs();
        format!("{expires}.{}", hex(&self.viewer_mac(key, expires)))
    }

    /// Whether `token` is a live viewer token for `key`.
    pub fn check_viewer_token(&self, key: &str, token: &str) -> Result<(), Denial> {
        let (expires, sign) = token.split_once('.').ok_or(Denial::BadSignature)?;
        let expires: u64 = expires.parse().map_err(|_| Denial::BadSignature)?;
        let sign = unhex(sign).ok_or(Denial::BadSignature)?;
        let mut mac = HmacSha256::new_from_slice(&self.viewer_key).expect("any key length");
        mac.update(format!("{key}\n{expires}").as_bytes());
        mac.verify_slice(&sign).map_err(|_| Denial::BadSignature)?;
        if expires < unix_now() {
            return Err(Denial::Expired);
        }
        Ok(())
    }

    fn viewer_mac(&self, key: &str, expires: u64) -> Vec<u8> {
        let mut mac = HmacSha256::new_from_slice(&self.viewer_key).expect("any key length");
        mac.update(format!("{key}\n{expires}").as_bytes());
        mac.finalize().into_bytes().to_vec()
    }

    /// Denials so far, by reason.
    pub fn denials(&self) -> Vec<(&'static str, u64)> {
        Denial::ALL
            .iter()
            .map(|d| {
                (
                    d.reason(),
                    self.denials[*d as usize].load(Ordering::Relaxed),
                )
            })
            .collect()
    }
}

/// What a signed URL signs: the action, the path and the expiry.
pub fn signed_message(action: Action, path: &str, expires: u64) -> String {
    format!("{}:{path}:{expires}", action.name())
}

/// The query (`expires=...&sign=...`) that lets `action` on `path` until `expires`
/// (Unix seconds), signed with `key`: what an operator's backend hands out.
#[cfg(test)]
pub fn sign(key: &[u8], action: Action, path: &str, expires: u64) -> String {
    let mut mac = HmacSha256::new_from_slice(key).expect("any key length");
    mac.update(signed_message(action, path, expires).as_bytes());
    format!(
        "expires={expires}&sign={}",
        hex(&mac.finalize().into_bytes())
    )
}

fn user(u: &UserConfig) -> Result<User, AuthConfigError> {
    let bad = |why: String| AuthConfigError {
        user: u.name.clone(),
        why,
    };
    let password = if let Some(h) = u.password.strip_prefix("sha256:") {
        let bytes = unhex(h).filter(|b| b.len() == 32).ok_or_else(|| {
            bad("a sha256: password is 64 hex digits (sha256sum of the password)".into())
        })?;
        let mut hash = [0u8; 32];
        hash.copy_from_slice(&bytes);
        Password::Sha256(hash)
    } else if u.password.starts_with("$argon2") {
        let hash =
            argon2::PasswordHash::new(&u.password).map_err(|e| bad(format!("argon2 hash: {e}")))?;
        if hash.hash.is_none() || hash.salt.is_none() || argon2::Params::try_from(&hash).is_err() {
            return Err(bad("argon2 hash: no salt, hash or parameters".into()));
        }
        Password::Argon2(u.password.clone())
    } else {
        return Err(bad(
            "password must be a hash: \"sha256:HEX\" or an argon2 PHC string ($argon2id$...)"
                .into(),
        ));
    };
    let patterns = |list: &[String]| {
        list.iter()
            .map(|p| crate::config::app_pattern(p).map_err(|e| bad(format!("pattern {p:?}: {e}"))))
            .collect::<Result<Vec<_>, _>>()
    };
    let ips = u
        .ips
        .iter()
        .map(|s| {
            s.parse::<ipnet::IpNet>()
                .or_else(|_| s.parse::<IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| bad(format!("address range {s:?}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(User {
        password,
        publish: patterns(&u.publish)?,
        read: patterns(&u.read)?,
        ips,
    })
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 256 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests;
