//! Credentials as each protocol carries them: a query string (RTMP stream names and
//! tcUrls, HTTP URLs: `user` and `pass`, a token (`token` or `jwt`), or a signed URL's
//! `expires` and `sign`) and HTTP's `Authorization` header (Basic or Bearer).
//!
//! Bounded: values longer than [`MAX_VALUE`] are ignored, so a hostile query cannot
//! make us hash megabytes.

use base64::Engine;

/// Longest credential value taken.
const MAX_VALUE: usize = 4096;

/// What a request says about who makes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    /// A user name (`user`, `username`, or HTTP Basic).
    pub user: Option<String>,
    /// The user's password (`pass`, `password`, or HTTP Basic).
    pub password: Option<String>,
    /// A signed URL: its expiry (Unix seconds) and signature (hex).
    pub signed: Option<(u64, String)>,
    /// A bearer token (a JWT, or the API token).
    pub token: Option<String>,
    /// A viewer token (`sluice_auth`): what an HLS viewer's playlist or the console's
    /// API hands out for one stream.
    pub viewer: Option<String>,
}

impl Credentials {
    /// From a query string (without the `?`).
    pub fn from_query(query: &str) -> Credentials {
        let mut c = Credentials::default();
        let mut expires = None;
        let mut sign = None;
        for pair in query.split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let Some(v) = decode(v) else { continue };
            match k {
                "user" | "username" => c.user = Some(v),
                "pass" | "password" => c.password = Some(v),
                "expires" => expires = v.parse().ok(),
                "sign" => sign = Some(v),
                "token" | "jwt" => c.token = Some(v),
                "sluice_auth" => c.viewer = Some(v),
                _ => {}
            }
        }
        c.signed = expires.zip(sign);
        c
    }

    /// From HTTP: an `Authorization` header (Basic or Bearer), else the query.
    pub fn from_http(authorization: Option<&str>, query: &str) -> Credentials {
        let mut c = Credentials::from_query(query);
        if let Some((user, password)) = authorization.and_then(basic) {
            c.user = Some(user);
            c.password = Some(password);
        } else if let Some(token) = authorization.and_then(bearer) {
            c.token = Some(token);
        }
        c
    }

    /// Whether anything was given.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.user.is_none()
            && self.password.is_none()
            && self.signed.is_none()
            && self.token.is_none()
            && self.viewer.is_none()
    }
}

/// `Bearer TOKEN`.
fn bearer(header: &str) -> Option<String> {
    let (scheme, token) = header.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && token.len() <= MAX_VALUE)
        .then(|| token.to_string())
}

/// `Basic BASE64(user:password)`.
fn basic(header: &str) -> Option<(String, String)> {
    let (scheme, value) = header.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") || value.len() > MAX_VALUE {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(value.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// Percent-decodes a query value (`+` is a space); `None` if malformed or too long.
fn decode(v: &str) -> Option<String> {
    if v.len() > MAX_VALUE {
        return None;
    }
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        match byte {
            b'%' => {
                let hex = v.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_a_query() {
        let c = Credentials::from_query("user=al%40ice&pass=s3+cr%3Det&x=1");
        assert_eq!(c.user.as_deref(), Some("al@ice"));
        assert_eq!(c.password.as_deref(), Some("s3 cr=et"));
        assert_eq!(c.signed, None);
        let c = Credentials::from_query("expires=1700000000&sign=abcd");
        assert_eq!(c.signed, Some((1_700_000_000, "abcd".into())));
        assert!(Credentials::from_query("sign=abcd").signed.is_none());
        assert!(Credentials::from_query("user=%zz").user.is_none());
        assert!(Credentials::from_query("").is_empty());
    }

    #[test]
    fn tokens_from_the_query_and_bearer() {
        assert_eq!(
            Credentials::from_query("jwt=a.b.c").token.as_deref(),
            Some("a.b.c")
        );
        assert_eq!(
            Credentials::from_query("token=t1&x=2").token.as_deref(),
            Some("t1")
        );
        let c = Credentials::from_http(Some("Bearer  a.b.c "), "token=other");
        assert_eq!(c.token.as_deref(), Some("a.b.c"));
        assert_eq!(Credentials::from_http(Some("Bearer "), "").token, None);
        let long = format!("Bearer {}", "x".repeat(MAX_VALUE + 1));
        assert_eq!(Credentials::from_http(Some(&long), "").token, None);
    }

    #[test]
    fn from_basic_authorization() {
        // alice:pa:ss
        let c = Credentials::from_http(Some("Basic YWxpY2U6cGE6c3M="), "user=bob");
        assert_eq!(c.user.as_deref(), Some("alice"));
        assert_eq!(c.password.as_deref(), Some("pa:ss"));
        let c = Credentials::from_http(Some("Bearer x"), "");
        assert_eq!(c.user, None);
        assert!(Credentials::from_http(Some("Basic !!!"), "").is_empty());
    }
}
