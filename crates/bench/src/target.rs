//! What the bench connects to, from a URL: `rtmp://host[:port]/app/stream[?q]`,
//! `http://host:port/path.flv`, `ws://host:port/path.flv`, `rtsp://host[:port]/app/stream`;
//! `https://` and `wss://` are the HTTP forms over TLS;
//! `srt://host:port?streamid=...&passphrase=...&pbkeylen=16&latency=120` (libsrt's
//! URI options, latency in ms as `srt-live-transmit` reads it).
//!
//! Why here and not a URL crate: the forms are few and fixed, and the pieces the
//! clients need (RTMP app, stream name with its query, tcUrl, HTTP path) are not a
//! general URL's. Host names are resolved once, at start.

use std::net::{SocketAddr, ToSocketAddrs};

/// A parsed URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// `rtmp://host[:port]/app/stream[?query]`.
    Rtmp {
        addr: SocketAddr,
        /// The application (first path segment).
        app: String,
        /// The rest of the path, with the query if any.
        stream: String,
        /// `rtmp://host[:port]/app`, as sent in `connect`.
        tc_url: String,
    },
    /// `http://`, `ws://`, `https://` or `wss://host[:port]/path[?query]`.
    Http {
        addr: SocketAddr,
        /// The `Host` header value.
        host: String,
        /// The request target.
        path: String,
        websocket: bool,
        /// Over TLS (`https://`, `wss://`): the name the server's certificate must
        /// carry, the URL's host without port or brackets.
        tls_name: Option<String>,
    },
    /// `srt://host:port[?streamid=..&passphrase=..&pbkeylen=..&latency=ms]`.
    Srt {
        addr: SocketAddr,
        /// The stream id as given; `{i}` in it becomes the client's index.
        stream_id: Option<String>,
        passphrase: Option<String>,
        key_len: usize,
        latency_ms: u16,
    },
    /// `rtsp://host[:port]/path[?query]`.
    Rtsp {
        addr: SocketAddr,
        /// The URL for DESCRIBE (and PLAY, unless the SDP says otherwise), as given
        /// without a trailing `/`.
        url: String,
    },
}

impl Target {
    /// Parses `url` and resolves its host.
    pub(crate) fn parse(url: &str) -> Result<Target, String> {
        let (scheme, rest) = url.split_once("://").ok_or_else(|| {
            format!("{url}: no scheme (rtmp://, rtsp://, srt://, http(s):// or ws(s)://)")
        })?;
        let scheme = scheme.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "rtmp" => 1935,
            "http" | "ws" => 80,
            "https" | "wss" => 443,
            "rtsp" => 554,
            "srt" => 8890,
            other => return Err(format!("{url}: unsupported scheme {other}")),
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let addr = resolve(authority, default_port).map_err(|e| format!("{url}: {e}"))?;
        if scheme == "srt" {
            srt(addr, path, url)
        } else if scheme == "rtsp" {
            if path.trim_matches('/').is_empty() || authority.contains('@') {
                return Err(format!(
                    "{url}: expected rtsp://host[:port]/path (no credentials)"
                ));
            }
            Ok(Target::Rtsp {
                addr,
                url: format!("rtsp://{authority}{}", path.trim_end_matches('/')),
            })
        } else if scheme == "rtmp" {
            let path = path.strip_prefix('/').unwrap_or(path);
            let (app, stream) = path
                .split_once('/')
                .filter(|(a, s)| !a.is_empty() && !s.is_empty())
                .ok_or_else(|| format!("{url}: expected rtmp://host[:port]/app/stream"))?;
            Ok(Target::Rtmp {
                addr,
                app: app.to_string(),
                stream: stream.to_string(),
                tc_url: format!("rtmp://{authority}/{app}"),
            })
        } else {
            let path = if path.starts_with('/') {
                path.to_string()
            } else {
                format!("/{path}")
            };
            Ok(Target::Http {
                addr,
                host: authority.to_string(),
                path,
                websocket: scheme.starts_with("ws"),
                tls_name: matches!(scheme.as_str(), "https" | "wss").then(|| host_name(authority)),
            })
        }
    }

    /// The server's address.
    #[cfg(test)]
    pub(crate) fn addr(&self) -> SocketAddr {
        match self {
            Target::Rtmp { addr, .. }
            | Target::Http { addr, .. }
            | Target::Rtsp { addr, .. }
            | Target::Srt { addr, .. } => *addr,
        }
    }
}

/// An SRT target from the rest of its URL (`?key=value&...`, percent-encoded).
fn srt(addr: SocketAddr, rest: &str, url: &str) -> Result<Target, String> {
    let query = rest.trim_start_matches('/');
    let query = query.strip_prefix('?').unwrap_or(query);
    let (mut stream_id, mut passphrase, mut key_len, mut latency_ms) = (None, None, 16, 120);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = sluice_http::percent_decode_utf8(v)
            .ok_or_else(|| format!("{url}: bad escape in {k}"))?;
        match k {
            "streamid" => stream_id = Some(v),
            "passphrase" => passphrase = Some(v),
            "pbkeylen" => {
                key_len = v
                    .parse()
                    .ok()
                    .filter(|n| matches!(n, 16 | 24 | 32))
                    .ok_or_else(|| format!("{url}: pbkeylen is 16, 24 or 32"))?
            }
            "latency" => {
                latency_ms = v
                    .parse()
                    .map_err(|_| format!("{url}: latency is in ms (0 to 65535)"))?
            }
            // Options libsrt takes that change nothing here.
            "mode" if v == "caller" => {}
            "transtype" if v == "live" => {}
            other => return Err(format!("{url}: unsupported SRT option {other}")),
        }
    }
    if passphrase
        .as_ref()
        .is_some_and(|p| !(10..=79).contains(&p.len()))
    {
        return Err(format!("{url}: a passphrase has 10 to 79 characters"));
    }
    Ok(Target::Srt {
        addr,
        stream_id,
        passphrase,
        key_len,
        latency_ms,
    })
}

/// The host of `host[:port]` or `[v6][:port]`, without port or brackets.
fn host_name(authority: &str) -> String {
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next().unwrap_or_default().to_string();
    }
    match authority.rsplit_once(':') {
        Some((h, _)) => h.to_string(),
        None => authority.to_string(),
    }
}

/// `host[:port]`, `[v6][:port]`; `localhost` is 127.0.0.1 without asking a resolver.
fn resolve(authority: &str, default_port: u16) -> Result<SocketAddr, String> {
    if authority.is_empty() {
        return Err("no host".into());
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, rest) = v6.split_once(']').ok_or("unclosed [")?;
        let port = match rest.strip_prefix(':') {
            Some(p) => Some(p),
            None if rest.is_empty() => None,
            None => return Err(format!("bad authority {authority}")),
        };
        (host, port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => p.parse::<u16>().map_err(|_| format!("bad port {p}"))?,
        None => default_port,
    };
    if host.eq_ignore_ascii_case("localhost") {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("resolve {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("resolve {host}: no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rtmp_urls() {
        let t = Target::parse("rtmp://127.0.0.1/live/cam1?token=x").unwrap();
        assert_eq!(
            t,
            Target::Rtmp {
                addr: "127.0.0.1:1935".parse().unwrap(),
                app: "live".into(),
                stream: "cam1?token=x".into(),
                tc_url: "rtmp://127.0.0.1/live".into(),
            }
        );
        let t = Target::parse("rtmp://localhost:19350/app/a/b").unwrap();
        match t {
            Target::Rtmp {
                addr, app, stream, ..
            } => {
                assert_eq!(addr, "127.0.0.1:19350".parse().unwrap());
                assert_eq!((app.as_str(), stream.as_str()), ("app", "a/b"));
            }
            other => panic!("{other:?}"),
        }
        assert!(Target::parse("rtmp://127.0.0.1/live").is_err());
        assert!(Target::parse("rtmp://127.0.0.1/live/").is_err());
        assert!(Target::parse("rtmp:///live/x").is_err());
    }

    #[test]
    fn http_and_ws_urls() {
        let t = Target::parse("http://127.0.0.1:8080/live/cam1.flv?a=1").unwrap();
        assert_eq!(
            t,
            Target::Http {
                addr: "127.0.0.1:8080".parse().unwrap(),
                host: "127.0.0.1:8080".into(),
                path: "/live/cam1.flv?a=1".into(),
                websocket: false,
                tls_name: None,
            }
        );
        let t = Target::parse("WS://[::1]:81/x.flv").unwrap();
        assert_eq!(t.addr(), "[::1]:81".parse().unwrap());
        assert!(matches!(
            t,
            Target::Http {
                websocket: true,
                ..
            }
        ));
        let t = Target::parse("http://10.1.2.3").unwrap();
        assert!(matches!(t, Target::Http { ref path, .. } if path == "/"));
        assert_eq!(t.addr(), "10.1.2.3:80".parse().unwrap());
        assert!(Target::parse("http://127.0.0.1:99999/x").is_err());
        assert!(Target::parse("ftp://127.0.0.1/x").is_err());
        assert!(Target::parse("127.0.0.1/x").is_err());
    }

    #[test]
    fn https_and_wss_urls() {
        let t = Target::parse("https://127.0.0.1:8443/live/a.m3u8").unwrap();
        assert_eq!(
            t,
            Target::Http {
                addr: "127.0.0.1:8443".parse().unwrap(),
                host: "127.0.0.1:8443".into(),
                path: "/live/a.m3u8".into(),
                websocket: false,
                tls_name: Some("127.0.0.1".into()),
            }
        );
        let t = Target::parse("WSS://localhost/live/a.flv").unwrap();
        assert_eq!(t.addr(), "127.0.0.1:443".parse().unwrap());
        assert!(matches!(
            t,
            Target::Http { websocket: true, tls_name: Some(ref n), .. } if n == "localhost"
        ));
        let t = Target::parse("https://[::1]:9/x").unwrap();
        assert!(matches!(t, Target::Http { tls_name: Some(ref n), .. } if n == "::1"));
        assert!(matches!(
            Target::parse("ws://127.0.0.1:1/x").unwrap(),
            Target::Http {
                websocket: true,
                tls_name: None,
                ..
            }
        ));
    }

    #[test]
    fn srt_urls() {
        let t = Target::parse(
            "srt://127.0.0.1:9000?streamid=%23!::r=live/a,m=request&passphrase=0123456789&pbkeylen=32&latency=200",
        )
        .unwrap();
        assert_eq!(
            t,
            Target::Srt {
                addr: "127.0.0.1:9000".parse().unwrap(),
                stream_id: Some("#!::r=live/a,m=request".into()),
                passphrase: Some("0123456789".into()),
                key_len: 32,
                latency_ms: 200,
            }
        );
        let t = Target::parse("srt://localhost?streamid=read:live/b").unwrap();
        assert_eq!(t.addr(), "127.0.0.1:8890".parse().unwrap());
        assert!(
            matches!(t, Target::Srt { stream_id: Some(ref s), key_len: 16, .. } if s == "read:live/b")
        );
        assert!(Target::parse("srt://127.0.0.1:1?pbkeylen=20").is_err());
        assert!(Target::parse("srt://127.0.0.1:1?passphrase=short").is_err());
        assert!(Target::parse("srt://127.0.0.1:1?mode=listener").is_err());
        assert!(Target::parse("srt://127.0.0.1:1?streamid=%2").is_err());
    }

    #[test]
    fn rtsp_urls() {
        let t = Target::parse("rtsp://127.0.0.1:8554/live/cam1/").unwrap();
        assert_eq!(
            t,
            Target::Rtsp {
                addr: "127.0.0.1:8554".parse().unwrap(),
                url: "rtsp://127.0.0.1:8554/live/cam1".into(),
            }
        );
        let t = Target::parse("RTSP://localhost/live/a?token=1").unwrap();
        assert_eq!(t.addr(), "127.0.0.1:554".parse().unwrap());
        assert!(
            matches!(t, Target::Rtsp { ref url, .. } if url == "rtsp://localhost/live/a?token=1")
        );
        assert!(Target::parse("rtsp://127.0.0.1:8554").is_err());
        assert!(Target::parse("rtsp://127.0.0.1:8554/").is_err());
        assert!(Target::parse("rtsp://user:pw@127.0.0.1/live/a").is_err());
    }
}
