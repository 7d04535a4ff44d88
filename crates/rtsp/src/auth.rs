//! RTSP authentication: Basic (RFC 7617) and Digest with MD5 (RFC 2617, qop=auth and
//! the legacy RFC 2069 form without qop), checked against a user table the caller gives.
//!
//! Why: cameras and players (ffmpeg, VLC/live555, GStreamer) authenticate RTSP with
//! these two schemes only. ffmpeg answers `qop=auth`; live555 and GStreamer ignore qop
//! and send the legacy response, so both are accepted whatever the challenge offered.
//!
//! # Invariants
//! - Nonces come from caller randomness and expire at a caller-given time; the
//!   [`Authenticator`] keeps at most [`MAX_NONCES`] of them (one connection's worth).
//! - An expired nonce with a correct response is [`AuthOutcome::Stale`], so the client
//!   retries with a fresh nonce without asking its user again (RFC 2617 §3.2.1).
//! - Responses and passwords are compared in constant time for equal lengths.
//! - Nothing here panics on peer text; the header is bounded by the message head limit.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use base64::Engine as _;
use md5::{Digest as _, Md5};

/// Most outstanding nonces per authenticator (per connection). A client uses one at a
/// time; a few more cover retries, and a peer cannot make us remember more.
pub const MAX_NONCES: usize = 8;

/// Who may log in, and how.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// The realm shown to users and mixed into Digest's HA1.
    pub realm: String,
    /// User name to password.
    pub users: HashMap<String, String>,
    /// Whether Basic is offered and accepted (it sends the password in clear text;
    /// Digest is always offered, and first).
    pub allow_basic: bool,
    /// How long a nonce stays valid after it is issued.
    pub nonce_ttl: Duration,
}

impl AuthConfig {
    /// A config for `realm` with the given users, Basic allowed, nonces valid 5 minutes.
    pub fn new(realm: impl Into<String>, users: HashMap<String, String>) -> Self {
        AuthConfig {
            realm: realm.into(),
            users,
            allow_basic: true,
            nonce_ttl: Duration::from_secs(300),
        }
    }
}

/// Parsed `Authorization: Digest ...` parameters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DigestParams {
    /// `username`.
    pub username: String,
    /// `realm`.
    pub realm: String,
    /// `nonce`.
    pub nonce: String,
    /// `uri` (the digest-uri the client hashed).
    pub uri: String,
    /// `response` (32 hex digits).
    pub response: String,
    /// `algorithm`, if sent.
    pub algorithm: Option<String>,
    /// `qop`, if sent.
    pub qop: Option<String>,
    /// `nc`, if sent.
    pub nc: Option<String>,
    /// `cnonce`, if sent.
    pub cnonce: Option<String>,
}

/// A parsed `Authorization:` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authorization {
    /// `Basic base64(user:password)`.
    Basic {
        /// User name.
        user: String,
        /// Password.
        password: String,
    },
    /// `Digest k=v, ...`.
    Digest(DigestParams),
}

impl Authorization {
    /// Parses an `Authorization:` header value; `None` if the scheme is unknown or the
    /// value is malformed.
    pub fn parse(value: &str) -> Option<Authorization> {
        let value = value.trim();
        let (scheme, rest) = value.split_once([' ', '\t']).unwrap_or((value, ""));
        if scheme.eq_ignore_ascii_case("Basic") {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(rest.trim())
                .ok()?;
            let text = String::from_utf8(raw).ok()?;
            let (user, password) = text.split_once(':')?;
            return Some(Authorization::Basic {
                user: user.to_string(),
                password: password.to_string(),
            });
        }
        if !scheme.eq_ignore_ascii_case("Digest") {
            return None;
        }
        let mut p = DigestParams::default();
        let mut seen: Vec<String> = Vec::new();
        for (name, v) in parse_auth_params(rest)? {
            let name = name.to_ascii_lowercase();
            if seen.contains(&name) {
                return None;
            }
            seen.push(name.clone());
            match name.as_str() {
                "username" => p.username = v,
                "realm" => p.realm = v,
                "nonce" => p.nonce = v,
                "uri" => p.uri = v,
                "response" => p.response = v,
                "algorithm" => p.algorithm = Some(v),
                "qop" => p.qop = Some(v),
                "nc" => p.nc = Some(v),
                "cnonce" => p.cnonce = Some(v),
                _ => {}
            }
        }
        Some(Authorization::Digest(p))
    }
}

/// Splits `a=b, c="d, e"` into pairs, unquoting quoted strings (with `\` escapes).
/// `None` on a syntax error.
pub(crate) fn parse_auth_params(s: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Some(out);
        }
        let mut name = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            name.push(c);
            chars.next();
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.next() != Some('=') || name.is_empty() {
            return None;
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next()? {
                    '"' => break,
                    '\\' => value.push(chars.next()?),
                    c => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                value.push(c);
                chars.next();
            }
            value = value.trim().to_string();
        }
        out.push((name, value));
        if out.len() > 32 {
            return None;
        }
    }
}

fn md5_hex(parts: &[&str]) -> String {
    let mut h = Md5::new();
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            h.update(b":");
        }
        h.update(p.as_bytes());
    }
    let mut s = String::with_capacity(32);
    for b in h.finalize() {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// The Digest `response` for MD5 (RFC 2617 §3.2.2.1): with `qop = Some((nc, cnonce))`
/// the `qop=auth` form, without it the legacy RFC 2069 form.
pub fn digest_response(
    user: &str,
    realm: &str,
    password: &str,
    method: &str,
    uri: &str,
    nonce: &str,
    qop: Option<(&str, &str)>,
) -> String {
    let ha1 = md5_hex(&[user, realm, password]);
    let ha2 = md5_hex(&[method, uri]);
    match qop {
        Some((nc, cnonce)) => md5_hex(&[&ha1, nonce, nc, cnonce, "auth", &ha2]),
        None => md5_hex(&[&ha1, nonce, &ha2]),
    }
}

/// Equality whose time does not depend on where two equal-length inputs differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The result of checking a request's credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthOutcome {
    /// Valid credentials for this user.
    Granted {
        /// The user name.
        user: String,
    },
    /// No `Authorization` header (answer 401 with a challenge).
    Missing,
    /// Wrong user, password, realm or nonce, or an unparsable header (401 again).
    Denied,
    /// A correct Digest response on an expired nonce (401 with `stale=TRUE`).
    Stale,
}

/// One connection's authentication state: the config and the nonces it issued.
#[derive(Debug, Clone)]
pub struct Authenticator {
    config: AuthConfig,
    /// Issued nonces and when each expires, oldest first.
    nonces: VecDeque<(String, Instant)>,
}

impl Authenticator {
    /// An authenticator with no nonces issued yet.
    pub fn new(config: AuthConfig) -> Self {
        Authenticator {
            config,
            nonces: VecDeque::new(),
        }
    }

    /// The config.
    pub fn config(&self) -> &AuthConfig {
        &self.config
    }

    /// Issues a nonce made of `random` (which must come from a CSPRNG), valid until
    /// `now + nonce_ttl`, and returns the `WWW-Authenticate` values to send: Digest
    /// first, then Basic when allowed. `stale` marks a retry after [`AuthOutcome::Stale`].
    pub fn challenge(&mut self, now: Instant, random: [u8; 16], stale: bool) -> Vec<String> {
        let mut nonce = String::with_capacity(32);
        for b in random {
            let _ = write!(nonce, "{b:02x}");
        }
        self.nonces.retain(|(_, expires)| *expires > now);
        while self.nonces.len() >= MAX_NONCES {
            self.nonces.pop_front();
        }
        self.nonces
            .push_back((nonce.clone(), now + self.config.nonce_ttl));
        let realm = quote(&self.config.realm);
        let mut digest =
            format!("Digest realm={realm}, nonce=\"{nonce}\", algorithm=MD5, qop=\"auth\"");
        if stale {
            digest.push_str(", stale=TRUE");
        }
        let mut out = vec![digest];
        if self.config.allow_basic {
            out.push(format!("Basic realm={realm}"));
        }
        out
    }

    /// Checks the `Authorization` header of a request with `method` at `now`.
    ///
    /// The Digest `uri` parameter is hashed as sent; it is not compared with the
    /// Request-URI, because clients disagree on its form (absolute URL or path).
    pub fn verify(&self, method: &str, header: Option<&str>, now: Instant) -> AuthOutcome {
        let Some(header) = header else {
            return AuthOutcome::Missing;
        };
        match Authorization::parse(header) {
            Some(Authorization::Basic { user, password }) if self.config.allow_basic => {
                match self.config.users.get(&user) {
                    Some(expected)
                        if constant_time_eq(expected.as_bytes(), password.as_bytes()) =>
                    {
                        AuthOutcome::Granted { user }
                    }
                    _ => AuthOutcome::Denied,
                }
            }
            Some(Authorization::Digest(p)) => self.verify_digest(method, &p, now),
            _ => AuthOutcome::Denied,
        }
    }

    fn verify_digest(&self, method: &str, p: &DigestParams, now: Instant) -> AuthOutcome {
        if p.realm != self.config.realm
            || p.algorithm
                .as_deref()
                .is_some_and(|a| !a.eq_ignore_ascii_case("MD5"))
        {
            return AuthOutcome::Denied;
        }
        let Some(password) = self.config.users.get(&p.username) else {
            return AuthOutcome::Denied;
        };
        let Some((_, expires)) = self.nonces.iter().find(|(n, _)| *n == p.nonce) else {
            return AuthOutcome::Denied;
        };
        let qop = match (&p.qop, &p.nc, &p.cnonce) {
            (None, _, _) => None,
            (Some(q), Some(nc), Some(cnonce)) if q.eq_ignore_ascii_case("auth") => {
                Some((nc.as_str(), cnonce.as_str()))
            }
            _ => return AuthOutcome::Denied,
        };
        let expected = digest_response(
            &p.username,
            &self.config.realm,
            password,
            method,
            &p.uri,
            &p.nonce,
            qop,
        );
        if !constant_time_eq(
            expected.as_bytes(),
            p.response.to_ascii_lowercase().as_bytes(),
        ) {
            return AuthOutcome::Denied;
        }
        if *expires <= now {
            return AuthOutcome::Stale;
        }
        AuthOutcome::Granted {
            user: p.username.clone(),
        }
    }
}

/// A quoted-string, escaping `"` and `\`.
pub(crate) fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            q.push('\\');
        }
        q.push(c);
    }
    q.push('"');
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    const RFC_NONCE: &str = "dcd98b7102dd2f0e8b11d0f600bfb0c093";

    #[test]
    fn rfc2617_worked_example() {
        // RFC 2617 §3.5: Mufasa / "Circle Of Life", GET /dir/index.html.
        let r = digest_response(
            "Mufasa",
            "testrealm@host.com",
            "Circle Of Life",
            "GET",
            "/dir/index.html",
            RFC_NONCE,
            Some(("00000001", "0a4f113b")),
        );
        assert_eq!(r, "6629fae49393a05397450978507c4ef1");
    }

    fn mufasa() -> Authenticator {
        let users = HashMap::from([("Mufasa".to_string(), "Circle Of Life".to_string())]);
        let mut a = Authenticator::new(AuthConfig::new("testrealm@host.com", users));
        // Make the RFC's nonce one of ours.
        a.nonces.push_back((
            RFC_NONCE.to_string(),
            Instant::now() + Duration::from_secs(60),
        ));
        a
    }

    #[test]
    fn rfc2617_example_header_verifies() {
        let header = r#"Digest username="Mufasa",
                 realm="testrealm@host.com",
                 nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093",
                 uri="/dir/index.html",
                 qop=auth,
                 nc=00000001,
                 cnonce="0a4f113b",
                 response="6629fae49393a05397450978507c4ef1",
                 opaque="5ccc069c403ebaf9f0171e9517f40e41""#;
        let a = mufasa();
        let now = Instant::now();
        assert_eq!(
            a.verify("GET", Some(header), now),
            AuthOutcome::Granted {
                user: "Mufasa".into()
            }
        );
        assert_eq!(a.verify("PUT", Some(header), now), AuthOutcome::Denied);
        let wrong = header.replace("6629fae4", "6629fae5");
        assert_eq!(a.verify("GET", Some(&wrong), now), AuthOutcome::Denied);
        assert_eq!(a.verify("GET", None, now), AuthOutcome::Missing);
        assert_eq!(
            a.verify("GET", Some(header), now + Duration::from_secs(61)),
            AuthOutcome::Stale
        );
    }

    #[test]
    fn legacy_digest_without_qop() {
        let a = mufasa();
        let resp = digest_response(
            "Mufasa",
            "testrealm@host.com",
            "Circle Of Life",
            "DESCRIBE",
            "rtsp://h/live/s",
            RFC_NONCE,
            None,
        );
        let header = format!(
            "Digest username=\"Mufasa\", realm=\"testrealm@host.com\", nonce=\"{RFC_NONCE}\", uri=\"rtsp://h/live/s\", response=\"{resp}\""
        );
        assert!(matches!(
            a.verify("DESCRIBE", Some(&header), Instant::now()),
            AuthOutcome::Granted { .. }
        ));
        let unknown_nonce = header.replace(RFC_NONCE, "00");
        assert_eq!(
            a.verify("DESCRIBE", Some(&unknown_nonce), Instant::now()),
            AuthOutcome::Denied
        );
    }

    #[test]
    fn basic() {
        let mut a = mufasa();
        let header = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("Mufasa:Circle Of Life")
        );
        let now = Instant::now();
        assert!(matches!(
            a.verify("PLAY", Some(&header), now),
            AuthOutcome::Granted { .. }
        ));
        assert_eq!(
            a.verify("PLAY", Some("Basic !!!"), now),
            AuthOutcome::Denied
        );
        a.config.allow_basic = false;
        assert_eq!(a.verify("PLAY", Some(&header), now), AuthOutcome::Denied);
    }

    #[test]
    fn challenge_offers_both_and_bounds_nonces() {
        let mut a = mufasa();
        let now = Instant::now();
        let c = a.challenge(now, [0xab; 16], false);
        assert_eq!(
            c,
            vec![
                format!(
                    "Digest realm=\"testrealm@host.com\", nonce=\"{}\", algorithm=MD5, qop=\"auth\"",
                    "ab".repeat(16)
                ),
                "Basic realm=\"testrealm@host.com\"".to_string(),
            ]
        );
        for i in 0..100u8 {
            a.challenge(now, [i; 16], true);
        }
        assert_eq!(a.nonces.len(), MAX_NONCES);
    }

    #[test]
    fn auth_param_syntax() {
        assert_eq!(
            parse_auth_params(r##"a="x\"y, z", b=tok , c="""##),
            Some(vec![
                ("a".into(), "x\"y, z".into()),
                ("b".into(), "tok".into()),
                ("c".into(), "".into())
            ])
        );
        assert_eq!(parse_auth_params(r#"a="unterminated"#), None);
        assert_eq!(parse_auth_params("=x"), None);
        assert!(Authorization::parse(r#"Digest username="a", username="b""#).is_none());
        assert!(Authorization::parse("Bearer x").is_none());
    }
}
