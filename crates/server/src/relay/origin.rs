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
    /// MPEG-TS over SRT (`srt://`), as a caller.
    Srt,
    /// RTSP play (a camera's `rtsp://`, credentials allowed): RTP interleaved on the
    /// connection, or over UDP.
    Rtsp {
        udp: bool,
    },
    /// An HLS playlist (`http(s)://.../x.m3u8`, a source's), MPEG-TS segments.
    Hls {
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
    /// Path segments put before the stream's `app/stream`, without slashes at the ends;
    /// for an [`Origin::exact`] source, the whole path.
    pub prefix: String,
    /// The URL names the stream itself (a `pull` entry), not a server holding it.
    pub exact: bool,
    /// `srt://` options (`streamid`, `passphrase`, `pbkeylen`, `latency` in ms).
    pub query: Vec<(String, String)>,
    /// RTSP: the URL as given (credentials and query included), for the client.
    pub raw: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad origin or source URL ({scheme}://...): {why}")]
pub struct OriginError {
    /// The URL's scheme only: the rest may hold credentials.
    scheme: String,
    why: &'static str,
}

impl Origin {
    /// An origin: a server; the stream's `app/stream` goes after its URL.
    pub fn parse(url: &str) -> Result<Origin, OriginError> {
        Origin::parse_as(url, false)
    }

    /// A source: the URL of one stream (`{name}` and `{key}` are replaced per stream,
    /// see [`Origin::for_stream`]).
    pub fn parse_exact(url: &str) -> Result<Origin, OriginError> {
        Origin::parse_as(url, true)
    }

    fn parse_as(url: &str, exact: bool) -> Result<Origin, OriginError> {
        let bad = |why| OriginError {
            scheme: url
                .split("://")
                .next()
                .unwrap_or_default()
                .chars()
                .take(10)
                .collect(),
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
            "srt" => (Scheme::Srt, 8890),
            "rtsp" if exact => (Scheme::Rtsp { udp: false }, 554),
            _ => {
                return Err(bad(
                    "the scheme is not rtmp, rtmps, http, https or srt (or a source's rtsp)",
                ))
            }
        };
        // A camera's credentials stay in its URL (the RTSP client answers Basic and
        // Digest with them); the authority is what follows them.
        let rest = match scheme {
            Scheme::Rtsp { .. } => {
                // Only the authority's: a path or query may hold an `@` too.
                let end = rest.find(['/', '?']).unwrap_or(rest.len());
                match rest[..end].rfind('@') {
                    Some(at) => &rest[at + 1..],
                    None => rest,
                }
            }
            _ => rest,
        };
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) if scheme == Scheme::Srt => (r, q),
            Some(_) if !exact => {
                return Err(bad("an origin has no query: the stream key is appended"))
            }
            _ => (rest, ""),
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], rest[i..].trim_start_matches('/')),
            None => (rest, ""),
        };
        if path.contains('#') {
            return Err(bad("a fragment in the URL"));
        }
        if exact && path.is_empty() && scheme != Scheme::Srt {
            return Err(bad("no stream path"));
        }
        let mut options = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v =
                sluice_http::percent_decode_utf8(v).ok_or(bad("a bad %-escape in the query"))?;
            if !matches!(k, "streamid" | "passphrase" | "pbkeylen" | "latency") {
                return Err(bad(
                    "an SRT option other than streamid, passphrase, pbkeylen, latency",
                ));
            }
            options.push((k.to_string(), v));
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
        // A source's HTTP URL is HTTP-FLV, or HLS when it names a playlist.
        let scheme = match scheme {
            Scheme::Flv { tls }
                if exact && path.split('?').next().unwrap_or("").ends_with(".m3u8") =>
            {
                Scheme::Hls { tls }
            }
            s => s,
        };
        let origin = Origin {
            scheme,
            host: host.to_string(),
            port,
            prefix: if exact {
                path.to_string()
            } else {
                path.trim_matches('/').to_string()
            },
            exact,
            query: options,
            raw: url.to_string(),
        };
        if let Some(p) = origin.option("passphrase") {
            if !(10..=79).contains(&p.len()) {
                return Err(bad("an SRT passphrase has 10 to 79 characters"));
            }
        }
        if let Some(n) = origin.option("pbkeylen") {
            if !matches!(n, "16" | "24" | "32") {
                return Err(bad("pbkeylen is 16, 24 or 32"));
            }
        }
        if origin
            .option("latency")
            .is_some_and(|l| l.parse::<u16>().is_err())
        {
            return Err(bad("latency is in ms, up to 65535"));
        }
        Ok(origin)
    }

    /// An `srt://` option.
    pub fn option(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// This source for stream `key`: `{key}` becomes `app/stream`, `{name}` its name.
    pub fn for_stream(&self, key: &str) -> Origin {
        let name = key.split_once('/').map_or(key, |(_, n)| n);
        // A stream name must not rewrite the URL's query or an SRT stream id.
        let (key, name) = (escape(key), escape(name));
        let fill = |s: &str| s.replace("{key}", &key).replace("{name}", &name);
        Origin {
            prefix: fill(&self.prefix),
            raw: fill(&self.raw),
            query: self
                .query
                .iter()
                .map(|(k, v)| (k.clone(), fill(v)))
                .collect(),
            ..self.clone()
        }
    }

    /// The SRT stream id to ask for `key` with: the URL's, else a standard request.
    pub fn srt_stream_id(&self, key: &str) -> String {
        match self.option("streamid") {
            Some(id) => id.to_string(),
            None => format!("#!::r={},m=request", self.path_of(key)),
        }
    }

    /// `host:port`, bracketed for IPv6, for connecting and for `Host:`.
    pub fn authority(&self) -> String {
        authority(&self.host, self.port)
    }

    /// The path of stream `key` (`app/stream`) at this origin, without a leading `/`.
    pub fn path_of(&self, key: &str) -> String {
        if self.exact {
            self.prefix.clone()
        } else if self.prefix.is_empty() {
            key.to_string()
        } else {
            format!("{}/{key}", self.prefix)
        }
    }

    /// The URL stream `key` is shown as, in logs and the API: without credentials,
    /// query or SRT passphrase.
    pub fn display_of(&self, key: &str) -> String {
        let url = self.url_of(key);
        match self.scheme {
            Scheme::Srt => url,
            _ => url.split('?').next().unwrap_or_default().to_string(),
        }
    }

    /// The URL stream `key` is pulled from (an SRT passphrase is left out).
    pub fn url_of(&self, key: &str) -> String {
        let (scheme, suffix) = match (self.scheme, self.exact) {
            (Scheme::Rtmp, _) => ("rtmp", ""),
            (Scheme::Rtmps, _) => ("rtmps", ""),
            (Scheme::Flv { tls: false }, false) => ("http", ".flv"),
            (Scheme::Flv { tls: true }, false) => ("https", ".flv"),
            (Scheme::Flv { tls: false }, true) => ("http", ""),
            (Scheme::Flv { tls: true }, true) => ("https", ""),
            (Scheme::Srt, _) => {
                return format!(
                    "srt://{}?streamid={}",
                    self.authority(),
                    self.srt_stream_id(key)
                )
            }
            // Without the credentials.
            (Scheme::Rtsp { .. }, _) => ("rtsp", ""),
            (Scheme::Hls { tls: false }, _) => ("http", ""),
            (Scheme::Hls { tls: true }, _) => ("https", ""),
        };
        format!(
            "{scheme}://{}/{}{suffix}",
            self.authority(),
            self.path_of(key)
        )
    }

    /// The request path of an HTTP-FLV pull of `key`, with its leading `/`.
    pub fn flv_path(&self, key: &str) -> String {
        if self.exact {
            format!("/{}", self.prefix)
        } else {
            format!("/{}.flv", self.path_of(key))
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match self.scheme {
            Scheme::Rtmp => "rtmp",
            Scheme::Rtmps => "rtmps",
            Scheme::Flv { tls: false } => "http",
            Scheme::Flv { tls: true } => "https",
            Scheme::Srt => "srt",
            Scheme::Rtsp { .. } => "rtsp",
            Scheme::Hls { tls: false } => "http",
            Scheme::Hls { tls: true } => "https",
        };
        write!(f, "{scheme}://{}", self.authority())?;
        if !self.prefix.is_empty() {
            write!(f, "/{}", self.prefix)?;
        }
        Ok(())
    }
}

/// `host:port`, the host bracketed when it is an IPv6 address.
pub fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `text` with every byte but unreserved ones and `/` %-escaped.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
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
        let o = Origin::parse("srt://10.0.0.2:9000").unwrap();
        assert_eq!(o.srt_stream_id("live/cam"), "#!::r=live/cam,m=request");
        assert_eq!(
            o.url_of("live/cam"),
            "srt://10.0.0.2:9000?streamid=#!::r=live/cam,m=request"
        );
        // Sources: the URL names the stream.
        let s =
            Origin::parse_exact("srt://cam:9000?streamid=read:%7Bname%7D&passphrase=0123456789")
                .unwrap()
                .for_stream("cams/door");
        assert_eq!(s.srt_stream_id("cams/door"), "read:door");
        assert_eq!(s.url_of("cams/door"), "srt://cam:9000?streamid=read:door");
        let s = Origin::parse_exact("http://nvr:8080/feeds/{name}.flv").unwrap();
        assert_eq!(
            s.for_stream("cams/door").flv_path("cams/door"),
            "/feeds/door.flv"
        );
        let s = Origin::parse_exact("rtmp://nvr/live/{name}?token=1").unwrap();
        assert_eq!(
            s.for_stream("cams/door").path_of("cams/door"),
            "live/door?token=1"
        );
        for bad in [
            "srt://o:1?passphrase=short",
            "srt://o:1?mode=listener",
            "srt://o:1?pbkeylen=20",
            "origin:1935",
            "rtmp://",
            "rtmp://o:x",
            "rtmp://o:99999",
            "rtmp://u:p@o",
            "http://o/x?y",
            "rtmp://[::1",
        ] {
            assert!(Origin::parse(bad).is_err(), "{bad}");
        }
        assert!(Origin::parse_exact("rtmp://o").is_err());
        let cam = Origin::parse_exact("rtsp://admin:se@cret@10.0.0.9/Streaming/101?x=1").unwrap();
        assert_eq!(cam.scheme, Scheme::Rtsp { udp: false });
        assert_eq!((cam.host.as_str(), cam.port), ("10.0.0.9", 554));
        assert_eq!(
            cam.url_of("cams/a"),
            "rtsp://10.0.0.9:554/Streaming/101?x=1"
        );
        assert_eq!(cam.raw, "rtsp://admin:se@cret@10.0.0.9/Streaming/101?x=1");
        assert!(Origin::parse("rtsp://cam/x").is_err());
        // An `@` past the authority is not the credentials' end.
        let cam = Origin::parse_exact("rtsp://admin:pw@10.0.0.9/s?owner=ops@example.com").unwrap();
        assert_eq!(cam.host, "10.0.0.9");
        assert_eq!(cam.display_of("a/b"), "rtsp://10.0.0.9:554/s");
        // Names cannot rewrite the query.
        let s = Origin::parse_exact("rtmp://nvr/live/{name}?token=1").unwrap();
        assert_eq!(
            s.for_stream("cams/x?a=b").path_of(""),
            "live/x%3Fa%3Db?token=1"
        );
        let e = Origin::parse_exact("srt://h:1?passphrase=secret")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("secret"), "{e}");
        let hls = Origin::parse_exact("https://cdn/live/{name}/index.m3u8?t=1").unwrap();
        assert_eq!(hls.scheme, Scheme::Hls { tls: true });
        assert_eq!(
            hls.for_stream("tv/one").url_of("tv/one"),
            "https://cdn:443/live/one/index.m3u8?t=1"
        );
    }
}
