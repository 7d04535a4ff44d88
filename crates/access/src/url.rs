//! The URLs the server sends requests to (auth hooks, a JWKS, HLS pulls):
//! `http://HOST[:PORT]/PATH` or `https://...`, checked once when the configuration is
//! read, so that a request never starts from a URL it cannot send. The request itself
//! is the server's (`io/http_client.rs`).

/// A URL that is not one we can send a request to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad URL {0:?}: expected http://HOST[:PORT]/PATH or https://...")]
pub struct UrlError(pub String);

/// A URL's parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    tls: bool,
    host: String,
    port: u16,
    /// Path and query, starting with `/`.
    path: String,
}

impl Target {
    /// Parses `http://HOST[:PORT]/PATH` or `https://...` (HOST a name, an IPv4
    /// address or a bracketed IPv6 one; no user info).
    pub fn parse(url: &str) -> Result<Target, UrlError> {
        let bad = || UrlError(url.to_string());
        let (tls, rest) = if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else {
            return Err(bad());
        };
        let (authority, path) = rest
            .find('/')
            .and_then(|i| rest.split_at_checked(i))
            .unwrap_or((rest, "/"));
        let default = if tls { 443 } else { 80 };
        let port = |p: &str| p.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(bad);
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6.split_once(']').ok_or_else(bad)?;
            host.parse::<std::net::Ipv6Addr>().map_err(|_| bad())?;
            match after {
                "" => (host, default),
                p => (host, port(p.strip_prefix(':').ok_or_else(bad)?)?),
            }
        } else {
            match authority.split_once(':') {
                Some((host, p)) => (host, port(p)?),
                None => (authority, default),
            }
        };
        let name_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':');
        if host.is_empty() || !host.chars().all(name_char) {
            return Err(bad());
        }
        if http::uri::PathAndQuery::try_from(path).is_err() {
            return Err(bad());
        }
        Ok(Target {
            tls,
            host: host.to_string(),
            port,
            path: path.to_string(),
        })
    }

    /// Whether the scheme is `https`.
    pub fn tls(&self) -> bool {
        self.tls
    }

    /// The host: a name, or an address (IPv6 without its brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port, the scheme's when the URL gives none.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Path and query, starting with `/`.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The `Host` header: the host (IPv6 in brackets), and the port unless it is the
    /// scheme's.
    pub fn host_header(&self) -> String {
        let default = if self.tls { 443 } else { 80 };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}{}", self.host_header(), self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = Target::parse("http://127.0.0.1:8080/auth?x=1").unwrap();
        assert_eq!(
            (t.tls, t.host.as_str(), t.port, t.path.as_str()),
            (false, "127.0.0.1", 8080, "/auth?x=1")
        );
        let t = Target::parse("https://keys.example.com").unwrap();
        assert_eq!((t.tls, t.port, t.path.as_str()), (true, 443, "/"));
        assert_eq!(t.to_string(), "https://keys.example.com/");
        let t = Target::parse("http://[::1]:9000/h").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 9000));
        assert_eq!(t.to_string(), "http://[::1]:9000/h");
        let t = Target::parse("http://[::1]/h").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 80));
        for bad in [
            "ftp://x/",
            "http://",
            "http:///x",
            "http://host:99999/",
            "http://host:x/",
            "http://user:pw@host/",
            "localhost:80",
            // Found by the fuzzer: a bracket that opens no address.
            "https://[:3/jwttp:///Z::",
            "http://[::1/x",
            "http://[nope]/x",
            "http://[::1]x/",
            "http://host:0/",
            "http://ho st/",
            "http://host/a b",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }
}
