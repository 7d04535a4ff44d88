//! Where an edge pulls a stream from: an origin's URL, and the stream's URL at it.

use std::fmt;

/// How a stream is pulled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Rtmp,
    Rtmps,
    /// HTTP-FLV (`http://`), or over TLS (`https://`).
    Flv {
        tls: bool,
    },
}

/// An origin: `rtmp://HOST[:PORT][/PREFIX]`, `rtmps://...`, `http(s)://...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub scheme: Scheme,
    /// The host as written (a name, an IPv4 address, or an IPv6 address without brackets).
    pub host: String,
    pub port: u16,
    /// Path segments put before the stream's `app/stream`, without slashes at the ends.
    pub prefix: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad origin {url:?}: {why}")]
pub struct OriginError {
    url: String,
    why: &'static str,
}

impl Origin {
    pub fn parse(url: &str) -> Result<Origin, OriginError> {
        let bad = |why| OriginError {
            url: url.to_string(),
            why,
        };
        let (scheme, rest) = url
            .split_once("://")
            .ok_or(bad("no scheme (rtmp://, rtmps://, http://, https://)"))?;
        let (scheme, default_port) = match scheme.to_ascii_lowercase().as_str() {
            "rtmp" => (Scheme::Rtmp, 1935),
            "rtmps" => (Scheme::Rtmps, 443),
            "http" => (Scheme::Flv { tls: false }, 80),
            "https" => (Scheme::Flv { tls: true }, 443),
            _ => return Err(bad("the scheme is not rtmp, rtmps, http or https")),
        };
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        if path.contains(['?', '#']) {
            return Err(bad("an origin has no query: the stream key is appended"));
        }
        if authority.contains('@') {
            return Err(bad("credentials do not go in an origin URL"));
        }
        let (host, port) = match authority.strip_prefix('[') {
            Some(v6) => {
                let (host, rest) = v6.split_once(']').ok_or(bad("unclosed ["))?;
                match rest.strip_prefix(':') {
                    Some(p) => (host, Some(p)),
                    None if rest.is_empty() => (host, None),
                    None => return Err(bad("junk after ]")),
                }
            }
            None => match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            },
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let port = match port {
            Some(p) => p.parse().map_err(|_| bad("bad port"))?,
            None => default_port,
        };
        Ok(Origin {
            scheme,
            host: host.to_string(),
            port,
            prefix: path.trim_matches('/').to_string(),
        })
    }

    /// `host:port`, bracketed for IPv6, for connecting and for `Host:`.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The path of stream `key` (`app/stream`) at this origin, without a leading `/`.
    pub fn path_of(&self, key: &str) -> String {
        if self.prefix.is_empty() {
            key.to_string()
        } else {
            format!("{}/{key}", self.prefix)
        }
    }

    /// The URL stream `key` is pulled from (for logs and the API).
    pub fn url_of(&self, key: &str) -> String {
        let (scheme, suffix) = match self.scheme {
            Scheme::Rtmp => ("rtmp", ""),
            Scheme::Rtmps => ("rtmps", ""),
            Scheme::Flv { tls: false } => ("http", ".flv"),
            Scheme::Flv { tls: true } => ("https", ".flv"),
        };
        format!(
            "{scheme}://{}/{}{suffix}",
            self.authority(),
            self.path_of(key)
        )
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match self.scheme {
            Scheme::Rtmp => "rtmp",
            Scheme::Rtmps => "rtmps",
            Scheme::Flv { tls: false } => "http",
            Scheme::Flv { tls: true } => "https",
        };
        write!(f, "{scheme}://{}", self.authority())?;
        if !self.prefix.is_empty() {
            write!(f, "/{}", self.prefix)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_parse_and_give_stream_urls() {
        let o = Origin::parse("rtmp://10.0.0.1").unwrap();
        assert_eq!((o.scheme, o.port), (Scheme::Rtmp, 1935));
        assert_eq!(o.url_of("live/cam"), "rtmp://10.0.0.1:1935/live/cam");
        let o = Origin::parse("RTMPS://origin.example:8443/").unwrap();
        assert_eq!((o.scheme, o.port), (Scheme::Rtmps, 8443));
        assert_eq!(o.to_string(), "rtmps://origin.example:8443");
        let o = Origin::parse("http://[::1]:8080/edge/a").unwrap();
        assert_eq!(o.scheme, Scheme::Flv { tls: false });
        assert_eq!(o.authority(), "[::1]:8080");
        assert_eq!(
            o.url_of("live/cam"),
            "http://[::1]:8080/edge/a/live/cam.flv"
        );
        assert_eq!(Origin::parse("https://o").unwrap().port, 443);
        for bad in [
            "origin:1935",
            "srt://o:1",
            "rtmp://",
            "rtmp://o:x",
            "rtmp://o:99999",
            "rtmp://u:p@o",
            "http://o/x?y",
            "rtmp://[::1",
        ] {
            assert!(Origin::parse(bad).is_err(), "{bad}");
        }
    }
}
