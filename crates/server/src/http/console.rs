//! The web console (`/console`): a single page of plain HTML, CSS and JavaScript over
//! the JSON API, with the vendored players for its stream page. Every file is built
//! into the binary, so a server copied alone still has its console.
//!
//! Everything below `/console/` is the console's: the app name `console` cannot be
//! played over HTTP. The page reads the API from the browser, so it is only as open
//! as the API (loopback only, or the bearer token the page asks for).

use super::reply::Reply;
use bytes::Bytes;
use sluice_http::Method;

/// One file of the console.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Asset {
    pub content_type: &'static str,
    pub body: &'static [u8],
}

macro_rules! web {
    ($path:literal) => {
        include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../web/", $path))
    };
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

static INDEX: Asset = Asset {
    content_type: HTML,
    body: web!("console/index.html"),
};
static SCRIPT: Asset = Asset {
    content_type: JS,
    body: web!("console/console.js"),
};
static STYLE: Asset = Asset {
    content_type: CSS,
    body: web!("console/console.css"),
};
static FMP4_JS: Asset = Asset {
    content_type: JS,
    body: web!("console/fmp4.js"),
};
static HLS_JS: Asset = Asset {
    content_type: JS,
    body: web!("vendor/hls.light.min.js"),
};
static MPEGTS_JS: Asset = Asset {
    content_type: JS,
    body: web!("vendor/mpegts.js"),
};

/// The page may only load what Sluice serves: the players feed `<video>` through
/// Media Source (`blob:`), and hls.js runs its transmuxer in a `blob:` worker.
const CSP: &str = "default-src 'self'; img-src 'self' data:; media-src 'self' blob:; \
                   worker-src 'self' blob:; connect-src 'self' ws: wss:; object-src 'none'; \
                   base-uri 'none'; frame-ancestors 'self'";

/// Whether `path` is the console's, and which file; `Some(None)`: no such file.
pub(crate) fn route(path: &str) -> Option<Option<&'static Asset>> {
    let rest = match path {
        "/console" => "",
        _ => path.strip_prefix("/console/")?,
    };
    Some(match rest {
        "" | "index.html" => Some(&INDEX),
        "console.js" => Some(&SCRIPT),
        "console.css" => Some(&STYLE),
        "fmp4.js" => Some(&FMP4_JS),
        "vendor/hls.light.min.js" => Some(&HLS_JS),
        "vendor/mpegts.js" => Some(&MPEGTS_JS),
        _ => None,
    })
}

/// Answers a request for a console path (see [`route`]).
pub(crate) fn reply(method: Method, asset: Option<&'static Asset>) -> Reply {
    if !matches!(method, Method::Get | Method::Head) {
        let mut r = Reply::text(405, "method not allowed\n");
        r.headers.push(("Allow", "GET, HEAD".into()));
        return r;
    }
    let Some(asset) = asset else {
        return Reply::text(404, "not found\n");
    };
    // no-cache, not no-store: browsers revalidate, so a new binary's console shows at
    // the next load, never a stale mix of old and new files.
    let mut headers = vec![
        ("Content-Type", asset.content_type.to_string()),
        ("Cache-Control", "no-cache".to_string()),
        ("X-Content-Type-Options", "nosniff".to_string()),
    ];
    if asset.content_type == HTML {
        headers.push(("Content-Security-Policy", CSP.to_string()));
        headers.push(("Referrer-Policy", "no-referrer".to_string()));
    }
    Reply {
        status: 200,
        headers,
        body: vec![Bytes::from_static(asset.body)],
        file: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        for index in ["/console", "/console/", "/console/index.html"] {
            assert_eq!(route(index), Some(Some(&INDEX)), "{index}");
        }
        assert_eq!(route("/console/console.js"), Some(Some(&SCRIPT)));
        assert_eq!(route("/console/console.css"), Some(Some(&STYLE)));
        assert_eq!(route("/console/fmp4.js"), Some(Some(&FMP4_JS)));
        assert_eq!(
            route("/console/vendor/hls.light.min.js"),
            Some(Some(&HLS_JS))
        );
        assert_eq!(route("/console/vendor/mpegts.js"), Some(Some(&MPEGTS_JS)));
        // Below /console/ but no file: the console's 404, not a stream.
        for missing in [
            "/console/nope.js",
            "/console/vendor/",
            "/console/vendor/README.md",
            "/console/../console/console.js",
            "/console//console.js",
            "/console/live.flv",
            "/console/cam/index.m3u8",
        ] {
            assert_eq!(route(missing), Some(None), "{missing}");
        }
        // Not the console's at all.
        for other in [
            "/",
            "/consoles",
            "/console.flv",
            "/live/console.flv",
            "/api/v1/server",
        ] {
            assert_eq!(route(other), None, "{other}");
        }
    }

    #[test]
    fn replies() {
        let ok = reply(Method::Get, Some(&SCRIPT));
        assert_eq!(ok.status, 200);
        let header = |r: &Reply, name: &str| {
            r.headers
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(header(&ok, "Content-Type").as_deref(), Some(JS));
        assert_eq!(header(&ok, "Cache-Control").as_deref(), Some("no-cache"));
        assert_eq!(ok.body.concat(), SCRIPT.body);
        let page = reply(Method::Head, Some(&INDEX));
        assert_eq!(page.status, 200);
        assert!(header(&page, "Content-Security-Policy").is_some());
        assert_eq!(reply(Method::Get, None).status, 404);
        let delete = reply(Method::Delete, Some(&INDEX));
        assert_eq!(delete.status, 405);
        assert_eq!(header(&delete, "Allow").as_deref(), Some("GET, HEAD"));
        assert_eq!(reply(Method::Options, None).status, 405);
        assert_eq!(reply(Method::Other, Some(&STYLE)).status, 405);
    }
}
