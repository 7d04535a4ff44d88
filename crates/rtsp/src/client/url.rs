//! `rtsp://user:password@host:port/path?query` as a client needs it: where to connect,
//! which credentials to answer a challenge with, and the URL to put in requests (which
//! never carries the credentials).
//!
//! Why: cameras are addressed with credentials in the URL (`rtsp://admin:pw@10.0.0.5/`)
//! and a relay is configured with such URLs; the client session must split them before
//! the first request is written.
//!
//! # Invariants
//! - Parsing never panics; a URL that would break a request line (spaces, control
//!   characters) is refused.
//! - User and password are percent-decoded (`p%40ss` is `p@ss`); the request URL keeps
//!   the path and query exactly as given.

use std::fmt;

use crate::error::RtspError;

/// Default port of `rtsp://` (RFC 2326 §3.2).
pub const DEFAULT_RTSP_PORT: u16 = 554;
/// Default port of `rtsps://` (RFC 7826 §4.2).
pub const DEFAULT_RTSPS_PORT: u16 = 322;

/// User and password for Basic or Digest authentication.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// User name.
    pub user: String,
    /// Password.
    pub password: String,
}

impl Credentials {
    /// Credentials of `user` with `password`.
    pub fn new(user: impl Into<String>, password: impl Into<String>) -> Self {
        Credentials {
            user: user.into(),
            password: password.into(),
        }
    }
}

impl fmt::Debug for Credentials {
    /// The password is not shown: configs end up in logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<hidden>")
            .finish()
    }
}

/// A parsed `rtsp://` or `rtsps://` URL. Its `Debug` output leaves the password out.
#[derive(Clone, PartialEq, Eq)]
pub struct RtspUrl {
    /// `rtsp` or `rtsps`, lower case.
    pub scheme: String,
    /// The user of the userinfo, percent-decoded.
    pub user: Option<String>,
    /// The password of the userinfo, percent-decoded.
    pub password: Option<String>,
    /// The host: a name, an IPv4 address, or an IPv6 address without its brackets.
    pub host: String,
    /// The port, when the URL gives one.
    pub port: Option<u16>,
    /// The path as written, from its `/` (empty when the URL has none).
    pub path: String,
    /// The query without `?`, when the URL has one.
    pub query: Option<String>,
}

impl RtspUrl {
    /// Parses `url`. A fragment (`#...`) is dropped; it never goes to a server.
    pub fn parse(url: &str) -> Result<RtspUrl, RtspError> {
        let bad = |what| RtspError::Malformed { what };
        if url
            .bytes()
            .any(|b| b.is_ascii_control() || b == b' ' || b >= 0x80)
        {
            return Err(bad("URL (space, control or non-ASCII character)"));
        }
        let (scheme, rest) = url.split_once("://").ok_or(bad("URL (no scheme)"))?;
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "rtsp" && scheme != "rtsps" {
            return Err(bad("URL (scheme is not rtsp or rtsps)"));
        }
        let rest = rest.split('#').next().unwrap_or("");
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        let (path, query) = match tail.split_once('?') {
            Some((p, q)) => (p, Some(q.to_string())),
            None => (tail, None),
        };
        // Passwords of cameras contain `@` unencoded often enough: the last one ends
        // the userinfo.
        let (userinfo, hostport) = match authority.rfind('@') {
            Some(i) => (authority.get(..i), authority.get(i + 1..).unwrap_or("")),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            None => (None, None),
            Some(info) => {
                let (u, p) = match info.split_once(':') {
                    Some((u, p)) => (u, Some(p)),
                    None => (info, None),
                };
                let u = percent_decode(u).ok_or(bad("URL user (bad percent-encoding)"))?;
                let p = p
                    .map(|p| percent_decode(p).ok_or(bad("URL password (bad percent-encoding)")))
                    .transpose()?;
                (Some(u), p)
            }
        };
        let (host, port) = split_host_port(hostport)?;
        Ok(RtspUrl {
            scheme,
            user,
            password,
            host,
            port,
            path: path.to_string(),
            query,
        })
    }

    /// The scheme's default port (554, or 322 for `rtsps`).
    pub fn default_port(&self) -> u16 {
        if self.scheme == "rtsps" {
            DEFAULT_RTSPS_PORT
        } else {
            DEFAULT_RTSP_PORT
        }
    }

    /// The port to connect to.
    pub fn port_or_default(&self) -> u16 {
        self.port.unwrap_or_else(|| self.default_port())
    }

    /// `host:port` to connect to (IPv6 hosts in brackets).
    pub fn host_port(&self) -> String {
        format!("{}:{}", self.bracketed_host(), self.port_or_default())
    }

    /// The credentials of the userinfo, if it has a user.
    pub fn credentials(&self) -> Option<Credentials> {
        self.user.as_ref().map(|user| Credentials {
            user: user.clone(),
            password: self.password.clone().unwrap_or_default(),
        })
    }

    /// The URL for requests: the same without credentials (what [`fmt::Display`] writes).
    pub fn request_url(&self) -> String {
        self.to_string()
    }

    fn bracketed_host(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        }
    }
}

impl fmt::Debug for RtspUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RtspUrl")
            .field("scheme", &self.scheme)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<hidden>"))
            .field("host", &self.host)
            .field("port", &self.port)
            .field("path", &self.path)
            .field("query", &self.query)
            .finish()
    }
}

impl fmt::Display for RtspUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme, self.bracketed_host())?;
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        f.write_str(&self.path)?;
        if let Some(q) = &self.query {
            write!(f, "?{q}")?;
        }
        Ok(())
    }
}

/// Splits `host[:port]` or `[v6][:port]`.
fn split_host_port(s: &str) -> Result<(String, Option<u16>), RtspError> {
    let bad = |what| RtspError::Malformed { what };
    let (host, port) = if let Some(v6) = s.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or(bad("URL host (unclosed '[')"))?;
        if host.is_empty()
            || !host
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return Err(bad("URL host (bad IPv6 address)"));
        }
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or(bad("URL port"))?),
        };
        (host, port)
    } else {
        match s.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    let host_char = |b: u8| b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=:".contains(&b);
    if host.is_empty() || !host.bytes().all(host_char) {
        return Err(bad("URL host"));
    }
    let port = match port {
        // `rtsp://host:/path` means the default port (RFC 3986 §3.2.3).
        None | Some("") => None,
        Some(p) => {
            let n = crate::message::parse_decimal(p)
                .filter(|_| p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|n| u16::try_from(n).ok())
                .filter(|&n| n != 0)
                .ok_or(bad("URL port"))?;
            Some(n)
        }
    };
    Ok((host.to_string(), port))
}

/// Decodes `%XX` escapes; `None` for a broken escape or a result that is not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hi = char::from(bytes.next()?).to_digit(16)?;
            let lo = char::from(bytes.next()?).to_digit(16)?;
            out.push(u8::try_from(hi * 16 + lo).ok()?);
        } else {
            out.push(b);
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_url() {
        let u = RtspUrl::parse(
            "RTSP://admin:p%40ss:w@rd@cam.local:8554/Streaming/Channels/101?tok=1&x=2#frag",
        )
        .expect("valid");
        assert_eq!(u.scheme, "rtsp");
        assert_eq!(u.user.as_deref(), Some("admin"));
        assert_eq!(u.password.as_deref(), Some("p@ss:w@rd"));
        assert_eq!(u.host, "cam.local");
        assert_eq!(u.port, Some(8554));
        assert_eq!(u.path, "/Streaming/Channels/101");
        assert_eq!(u.query.as_deref(), Some("tok=1&x=2"));
        assert_eq!(
            u.request_url(),
            "rtsp://cam.local:8554/Streaming/Channels/101?tok=1&x=2"
        );
        assert_eq!(u.host_port(), "cam.local:8554");
        assert_eq!(
            u.credentials(),
            Some(Credentials::new("admin", "p@ss:w@rd"))
        );
        assert!(!format!("{:?}", u.credentials()).contains("p@ss"));
        assert!(!format!("{u:?}").contains("p@ss"));
    }

    #[test]
    fn defaults_and_ipv6() {
        let u = RtspUrl::parse("rtsp://10.0.0.5").expect("valid");
        assert_eq!((u.port, u.port_or_default()), (None, 554));
        assert_eq!(u.path, "");
        assert_eq!(u.request_url(), "rtsp://10.0.0.5");
        assert_eq!(u.credentials(), None);
        let u = RtspUrl::parse("rtsps://[::1]:8322/live?a").expect("valid");
        assert_eq!((u.host.as_str(), u.port), ("::1", Some(8322)));
        assert_eq!(u.host_port(), "[::1]:8322");
        assert_eq!(u.request_url(), "rtsps://[::1]:8322/live?a");
        let u = RtspUrl::parse("rtsps://[fe80::1]/x").expect("valid");
        assert_eq!(u.port_or_default(), 322);
        let u = RtspUrl::parse("rtsp://user@h:/p").expect("valid");
        assert_eq!(u.credentials(), Some(Credentials::new("user", "")));
        assert_eq!(u.port, None);
        let u = RtspUrl::parse("rtsp://h?only=query").expect("valid");
        assert_eq!(
            (u.path.as_str(), u.query.as_deref()),
            ("", Some("only=query"))
        );
    }

    #[test]
    fn bad_urls() {
        for bad in [
            "",
            "rtsp:/h/x",
            "http://h/x",
            "rtsp:///x",
            "rtsp://h:0/x",
            "rtsp://h:65536/x",
            "rtsp://h:-1/x",
            "rtsp://h:12a/x",
            "rtsp://[::1/x",
            "rtsp://[zz]/x",
            "rtsp://[::1]8554/x",
            "rtsp://h/a b",
            "rtsp://h/a\r\nX: y",
            "rtsp://u:%zz@h/x",
            "rtsp://u:%ff@h/x",
            "rtsp://u:%4@h/x",
            "rtsp://h\u{e9}/x",
            "rtsp://a@/x",
        ] {
            assert!(RtspUrl::parse(bad).is_err(), "{bad:?}");
        }
    }
}
