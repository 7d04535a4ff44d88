//! One authorization for every protocol: [`Auth::authorize`] answers whether a
//! request (an action on a path, by a protocol, with credentials, from an address)
//! may go on, whatever protocol carried it.
//!
//! Backends, tried in order: a signed URL (`expires` and `sign` in the query, an
//! HMAC-SHA256 with `auth.signing_key`); a JWT ([`jwt`]); a static user of `[[users]]`
//! (password as an argon2 PHC string or `sha256:HEX`, permissions per action as stream
//! patterns, allowed address ranges); then the HTTP hook ([`hook`]) for what those did
//! not settle. What is not required (`auth.publish`, `auth.read`, or an `[[apps]]`
//! entry's `auth_publish`, `auth_read`) is allowed without credentials. Every denial
//! is logged with its reason by the caller and counted here.
//!
//! HLS viewers are authorized once, at the playlist: they get a token
//! ([`Auth::viewer_token`], an HMAC of the stream and an expiry with a key made at
//! start) in a cookie, which every segment and part request shows; checking it costs
//! one HMAC, on any worker, with no state. The same token in a query (`sluice_auth=`)
//! lets any protocol read that stream until it expires: the API hands one to the
//! console's player.

pub mod hook;
pub mod jwt;

use crate::keys::Pattern;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use sluice_access::{Action, Credentials, Denial, Grant};

type HmacSha256 = Hmac<Sha256>;

/// One request to authorize.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub action: Action,
    /// The stream key (`app/name`) or file path the action is on.
    pub path: &'a str,
    /// The protocol that carried it (`rtmp`, `rtsp`, `http`, `ws`, `hls`, `api`).
    pub protocol: &'static str,
    /// The connection's id (0 for requests outside a connection's life, such as HLS).
    pub id: u64,
    pub credentials: &'a Credentials,
    pub peer: IpAddr,
    /// The query the request came with (for the hook), without the `?`.
    pub query: &'a str,
}

/// The `[auth]` table. Its keys' defaults, flags and help are in the configuration's
/// settings table (`config.rs`), which also gives it its `Default`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthSettings {
    pub publish: bool,
    pub read: bool,
    pub signing_key: String,
    pub jwt_key: String,
    pub jwt_jwks_url: String,
    pub jwt_claim: String,
    pub hook_url: String,
    pub hook_timeout_ms: u64,
    pub hook_cache_ms: u64,
}

/// One `[[users]]` entry: a user of the authorization (see `[auth]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    pub name: String,
    /// An argon2 PHC string (`$argon2id$...`) or `sha256:HEX`; never the password.
    pub password: String,
    /// Stream patterns the user may publish (`live/*`, `*`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub publish: Vec<String>,
    /// Stream patterns (and file paths) the user may play.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<String>,
    /// Address ranges the user may connect from (`10.0.0.0/8`); empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<String>,
    /// The user may use the HTTP API and `/metrics` (HTTP Basic).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub api: bool,
}

/// What an `[[apps]]` entry says of the authorization of the streams its `name`
/// matches (a pattern as in [`Pattern::app`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppAuthConfig {
    pub name: String,
    /// `auth_publish`: publishing needs authorization, or not.
    pub publish: Option<bool>,
    /// `auth_read`: playing needs authorization, or not.
    pub read: Option<bool>,
    /// `auth_hook`: the hook URL of these streams (empty: none).
    pub hook: Option<String>,
}

/// What the authorization is made of (the configuration assembles it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuthConfig {
    pub settings: AuthSettings,
    pub users: Vec<UserConfig>,
    pub apps: Vec<AppAuthConfig>,
    /// `api.token`: a bearer token for the API and `/metrics`.
    pub api_token: String,
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
    api: bool,
}

/// What an `[[apps]]` entry changes of the authorization.
#[derive(Debug)]
struct AppAuth {
    publish: Option<bool>,
    read: Option<bool>,
    /// `Some(None)`: no hook for these streams.
    hook: Option<Option<Arc<hook::Hook>>>,
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
    jwt: Option<Arc<jwt::Jwt>>,
    hook: Option<Arc<hook::Hook>>,
    apps: Vec<(Pattern, AppAuth)>,
    /// `api.token`: a bearer token for the API and `/metrics`.
    api_token: String,
    /// Key of HLS viewer tokens, made at start (tokens do not outlive the server).
    viewer_key: [u8; 32],
    /// argon2 verifications that passed: sha256(user, password) → when.
    verified: Mutex<HashMap<[u8; 32], Instant>>,
    denials: [AtomicU64; 8],
}

/// Why the auth settings cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {why}")]
pub struct AuthConfigError {
    what: String,
    why: String,
}

impl AuthConfigError {
    fn new(what: impl Into<String>, why: impl std::fmt::Display) -> Self {
        AuthConfigError {
            what: what.into(),
            why: why.to_string(),
        }
    }
}

impl Auth {
    /// The authorization the configuration describes.
    pub fn new(config: &AuthConfig) -> Result<Auth, AuthConfigError> {
        let mut users = HashMap::new();
        for u in &config.users {
            users.insert(u.name.clone(), user(u)?);
        }
        let a = &config.settings;
        let make_hook = |url: &str| -> Result<Option<Arc<hook::Hook>>, AuthConfigError> {
            if url.is_empty() {
                return Ok(None);
            }
            hook::Hook::new(
                url,
                Duration::from_millis(a.hook_timeout_ms.max(1)),
                Duration::from_millis(a.hook_cache_ms),
            )
            .map(|h| Some(Arc::new(h)))
            .map_err(|e| AuthConfigError::new("auth hook", e))
        };
        let hook = make_hook(&a.hook_url)?;
        let mut apps = Vec::new();
        for app in &config.apps {
            let pattern = Pattern::app(&app.name)
                .map_err(|e| AuthConfigError::new(format!("app {}", app.name), e))?;
            let hook = match app.hook.as_deref() {
                None => None,
                Some(url) if url == a.hook_url => Some(hook.clone()),
                Some(url) => Some(make_hook(url)?),
            };
            apps.push((
                pattern,
                AppAuth {
                    publish: app.publish,
                    read: app.read,
                    hook,
                },
            ));
        }
        let jwt = jwt::Jwt::new(&a.jwt_key, &a.jwt_jwks_url, &a.jwt_claim)
            .map_err(|e| AuthConfigError::new("jwt", e))?
            .map(Arc::new);
        Ok(Auth {
            publish: a.publish,
            read: a.read,
            users,
            signing_key: a.signing_key.as_bytes().to_vec(),
            jwt,
            hook,
            apps,
            api_token: config.api_token.clone(),
            viewer_key: rand::random(),
            verified: Mutex::new(HashMap::new()),
            denials: Default::default(),
        })
    }

    /// This authorization with `other`'s settings and this one's viewer key and
    /// counters, so that a reload keeps HLS viewers' tokens valid.
    pub fn reloaded(&self, mut other: Auth) -> Auth {
        other.viewer_key = self.viewer_key;
        for (mine, theirs) in self.denials.iter().zip(&other.denials) {
            theirs.store(mine.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        if let (Some(old), Some(new)) = (&self.jwt, &other.jwt) {
            new.keep_fetched(old);
        }
        other
    }

    /// The JWT verifier, if one is set (for the JWKS refresh).
    pub fn jwt(&self) -> Option<&Arc<jwt::Jwt>> {
        self.jwt.as_ref()
    }

    fn app(&self, path: &str) -> Option<&AppAuth> {
        self.apps
            .iter()
            .find(|(p, _)| p.matches(path))
            .map(|(_, a)| a)
    }

    /// Whether `action` on `path` needs authorization.
    pub fn required(&self, action: Action, path: &str) -> bool {
        let app = self.app(path);
        match action {
            Action::Publish => app.and_then(|a| a.publish).unwrap_or(self.publish),
            Action::Read => app.and_then(|a| a.read).unwrap_or(self.read),
            Action::Api => self.api_secured(),
        }
    }

    /// Whether the API has a credential (`api.token`, or users with `api`): until then it
    /// answers loopback clients only.
    pub fn api_secured(&self) -> bool {
        !self.api_token.is_empty() || self.users.values().any(|u| u.api)
    }

    /// Whether the request may go on.
    pub async fn authorize(&self, req: &Request<'_>) -> Result<Grant, Denial> {
        if !self.required(req.action, req.path) {
            return Ok(Grant::Open);
        }
        let result = self.decide(req).await;
        if let Err(denial) = result {
            self.denials[denial as usize].fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    async fn decide(&self, req: &Request<'_>) -> Result<Grant, Denial> {
        let creds = req.credentials;
        if let Some((expires, sign)) = &creds.signed {
            return self.check_signed(req.action, req.path, *expires, sign);
        }
        if let (Some(token), Action::Read) = (&creds.viewer, req.action) {
            return self
                .check_viewer_token(req.path, token)
                .map(|()| Grant::Token("viewer".into()));
        }
        if req.action == Action::Api {
            if let Some(token) = creds.token.as_deref() {
                if !self.api_token.is_empty()
                    && constant_eq(token.as_bytes(), self.api_token.as_bytes())
                {
                    return Ok(Grant::Token("api".into()));
                }
            }
        }
        // A JWT: a token, or the password of a user name that is not one of ours (how
        // RTSP and RTMP clients can carry one).
        let unknown_user = creds
            .user
            .as_ref()
            .is_some_and(|u| !self.users.contains_key(u));
        let jwt_password = creds
            .password
            .as_deref()
            .filter(|p| unknown_user && p.matches('.').count() == 2);
        if let (Some(jwt), Some(token)) = (&self.jwt, creds.token.as_deref().or(jwt_password)) {
            return jwt.check(token, req.action, req.path);
        }
        if let (Some(name), Some(password)) = (&creds.user, &creds.password) {
            if let Some(user) = self.users.get(name) {
                return self.check_user(req, name, user, password);
            }
        }
        let hook = match self.app(req.path).and_then(|a| a.hook.as_ref()) {
            Some(app_hook) => app_hook.as_ref(),
            None => self.hook.as_ref(),
        };
        if let Some(hook) = hook {
            // Boxed: an HTTP request's future is large, and every connection's task
            // that may be authorized would otherwise carry its size for its life
            // (about 10 KB per player).
            return Box::pin(hook.check(req)).await;
        }
        if creds.user.is_some() || creds.token.is_some() {
            Err(Denial::BadCredentials)
        } else {
            Err(Denial::NoCredentials)
        }
    }

    fn check_user(
        &self,
        req: &Request<'_>,
        name: &str,
        user: &User,
        password: &str,
    ) -> Result<Grant, Denial> {
        if !self.password_matches(name, &user.password, password) {
            return Err(Denial::BadCredentials);
        }
        if !user.ips.is_empty() && !user.ips.iter().any(|net| net.contains(&req.peer)) {
            return Err(Denial::AddressNotAllowed);
        }
        let permitted = match req.action {
            Action::Publish => user.publish.iter().any(|p| p.matches(req.path)),
            Action::Read => user.read.iter().any(|p| p.matches(req.path)),
            Action::Api => user.api,
        };
        if !permitted {
            return Err(Denial::NotPermitted);
        }
        Ok(Grant::User(name.to_string()))
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
    let bad = |why: String| AuthConfigError::new(format!("user {}", u.name), why);
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
            .map(|p| Pattern::app(p).map_err(|e| bad(format!("pattern {p:?}: {e}"))))
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
        api: u.api,
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
