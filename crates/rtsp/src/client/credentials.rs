//! The client's half of RTSP authentication: read a 401's `WWW-Authenticate`
//! challenges, pick one we can answer (Digest with MD5 first, then Basic), and write
//! the `Authorization` header of each later request.
//!
//! Why apart from `crate::auth`: that file checks credentials (the server's side);
//! this one produces them, and keeps what a client must remember between requests (the
//! nonce, `opaque`, and the `nc` count of `qop=auth`).
//!
//! # Invariants
//! - Challenges are peer text: unknown schemes and algorithms are skipped, never
//!   guessed at; nothing here panics.
//! - The password never leaves this file except hashed (Digest) or as the Basic header
//!   the server asked for.

use std::fmt::Write as _;

use base64::Engine as _;

use super::url::Credentials;
use crate::auth::{digest_response, parse_auth_params, quote};

/// A challenge we can answer, and the state of answering it.
#[derive(Debug, Clone)]
pub(crate) enum Answerer {
    /// Digest with MD5 (RFC 2617), with `qop=auth` when the server offers it.
    Digest {
        realm: String,
        nonce: String,
        opaque: Option<String>,
        /// The server named `algorithm=MD5` (echoed back, as RFC 2617 asks).
        algorithm_named: bool,
        /// `Some(cnonce)` when answering with `qop=auth`.
        cnonce: Option<String>,
        /// Requests answered on this nonce (`nc`).
        count: u32,
    },
    /// Basic (RFC 7617).
    Basic,
}

impl Answerer {
    /// The first challenge among `challenges` (the `WWW-Authenticate` values) that we
    /// can answer: Digest with MD5 before Basic. `cnonce_seed` makes the client nonce.
    pub(crate) fn pick<'a>(
        challenges: impl Iterator<Item = &'a str> + Clone,
        cnonce_seed: [u8; 16],
    ) -> Option<Answerer> {
        let digest = challenges.clone().find_map(|c| {
            let (scheme, rest) = split_scheme(c);
            if !scheme.eq_ignore_ascii_case("Digest") {
                return None;
            }
            let params = parse_auth_params(rest)?;
            let get = |name: &str| {
                params
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.as_str())
            };
            let algorithm = get("algorithm");
            if algorithm.is_some_and(|a| !a.eq_ignore_ascii_case("MD5")) {
                return None;
            }
            let nonce = get("nonce")?.to_string();
            let qop_auth = get("qop")
                .is_some_and(|q| q.split(',').any(|o| o.trim().eq_ignore_ascii_case("auth")));
            let cnonce = qop_auth.then(|| {
                let mut s = String::with_capacity(16);
                for b in cnonce_seed.iter().take(8) {
                    let _ = write!(s, "{b:02x}");
                }
                s
            });
            Some(Answerer::Digest {
                realm: get("realm").unwrap_or("").to_string(),
                nonce,
                opaque: get("opaque").map(str::to_string),
                algorithm_named: algorithm.is_some(),
                cnonce,
                count: 0,
            })
        });
        digest.or_else(|| {
            let mut all = challenges;
            all.any(|c| split_scheme(c).0.eq_ignore_ascii_case("Basic"))
                .then_some(Answerer::Basic)
        })
    }

    /// The `Authorization` value for a request with `method` and Request-URI `uri`.
    pub(crate) fn authorization(&mut self, creds: &Credentials, method: &str, uri: &str) -> String {
        match self {
            Answerer::Basic => {
                let raw = format!("{}:{}", creds.user, creds.password);
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(raw)
                )
            }
            Answerer::Digest {
                realm,
                nonce,
                opaque,
                algorithm_named,
                cnonce,
                count,
            } => {
                *count = count.wrapping_add(1);
                let nc = format!("{count:08x}");
                let qop = cnonce.as_deref().map(|c| (nc.as_str(), c));
                let response =
                    digest_response(&creds.user, realm, &creds.password, method, uri, nonce, qop);
                let mut h = format!(
                    "Digest username={}, realm={}, nonce={}, uri={}, response=\"{response}\"",
                    quote(&creds.user),
                    quote(realm),
                    quote(nonce),
                    quote(uri),
                );
                if *algorithm_named {
                    h.push_str(", algorithm=MD5");
                }
                if let Some(o) = opaque {
                    let _ = write!(h, ", opaque={}", quote(o));
                }
                if let Some(c) = cnonce {
                    let _ = write!(h, ", qop=auth, nc={nc}, cnonce={}", quote(c));
                }
                h
            }
        }
    }
}

/// `Digest realm=...` → (`Digest`, `realm=...`).
fn split_scheme(challenge: &str) -> (&str, &str) {
    let c = challenge.trim();
    c.split_once([' ', '\t']).unwrap_or((c, ""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{AuthConfig, AuthOutcome, Authenticator};
    use std::collections::HashMap;
    use std::time::Instant;

    fn creds() -> Credentials {
        Credentials::new("Mufasa", "Circle Of Life")
    }

    #[test]
    fn answers_our_own_server_with_digest_and_basic() {
        let users = HashMap::from([("Mufasa".to_string(), "Circle Of Life".to_string())]);
        let mut server = Authenticator::new(AuthConfig::new("sluice \"lab\"", users));
        let now = Instant::now();
        let challenges = server.challenge(now, [3; 16], false);
        let mut a = Answerer::pick(challenges.iter().map(String::as_str), [9; 16]).expect("digest");
        assert!(matches!(
            a,
            Answerer::Digest {
                cnonce: Some(_),
                ..
            }
        ));
        for method in ["DESCRIBE", "SETUP", "PLAY"] {
            let h = a.authorization(&creds(), method, "rtsp://h/live/s");
            assert!(h.contains("qop=auth, nc=0000000"), "{h}");
            assert_eq!(
                server.verify(method, Some(&h), now),
                AuthOutcome::Granted {
                    user: "Mufasa".into()
                },
                "{h}"
            );
        }
        let h = a.authorization(&creds(), "PLAY", "rtsp://h/live/s");
        assert_eq!(server.verify("PAUSE", Some(&h), now), AuthOutcome::Denied);

        let basic_only = ["Basic realm=\"x\""];
        let mut b = Answerer::pick(basic_only.iter().copied(), [0; 16]).expect("basic");
        let h = b.authorization(&creds(), "PLAY", "*");
        assert!(matches!(
            server.verify("PLAY", Some(&h), now),
            AuthOutcome::Granted { .. }
        ));
    }

    #[test]
    fn legacy_digest_and_opaque() {
        let c = ["Digest realm=\"r\", nonce=\"n1\", opaque=\"op\""];
        let mut a = Answerer::pick(c.iter().copied(), [0; 16]).expect("digest");
        let h = a.authorization(&creds(), "DESCRIBE", "rtsp://h/x");
        let expected = digest_response(
            "Mufasa",
            "r",
            "Circle Of Life",
            "DESCRIBE",
            "rtsp://h/x",
            "n1",
            None,
        );
        assert_eq!(
            h,
            format!("Digest username=\"Mufasa\", realm=\"r\", nonce=\"n1\", uri=\"rtsp://h/x\", response=\"{expected}\", opaque=\"op\"")
        );
    }

    #[test]
    fn unusable_challenges() {
        let none: [&str; 0] = [];
        assert!(Answerer::pick(none.iter().copied(), [0; 16]).is_none());
        let c = [
            "Bearer realm=\"x\"",
            "Digest realm=\"r\", nonce=\"n\", algorithm=SHA-256",
            "Digest realm=\"r\"",
            "Digest realm=\"unterminated",
        ];
        assert!(Answerer::pick(c.iter().copied(), [0; 16]).is_none());
        // SHA-256 first, MD5 next: the MD5 one is answered.
        let c = [
            "Digest realm=\"r\", nonce=\"a\", algorithm=SHA-256",
            "Digest realm=\"r\", nonce=\"b\", algorithm=md5",
            "Basic realm=\"r\"",
        ];
        let a = Answerer::pick(c.iter().copied(), [0; 16]).expect("md5");
        assert!(matches!(a, Answerer::Digest { ref nonce, .. } if nonce == "b"));
    }
}
