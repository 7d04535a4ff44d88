//! The one route table of HTTP/1.1 and HTTP/2: a request (its body already read,
//! bounded) goes in, an [`Action`] comes out; the connection's serializer (`mod.rs`
//! for HTTP/1.1, `h2.rs`) turns the action into bytes on its wire.
//!
//! Why one table: HTTP/2 had a table of its own, which lost routes (WHEP, WHIP,
//! WebDAV) and request bodies as HTTP/1.1's grew. Here every route exists once, with
//! its access checks in one order: the API and `/metrics` (their own credentials), the
//! console, then (not on the API's own listener) the media routes, each checked by
//! `access` before it runs.

use super::access;
use super::api;
use super::console;
use super::files::{self, Opened, DAV_HEADERS};
use super::hls::{self, HlsPath};
use super::playback::{self, Playback};
use super::reply::Reply;
use super::Worker;
use crate::core::format::FormatId;
use crate::core::hub::Stream;
use crate::core::protocol::Protocol;
use crate::ctx::admit::Ask;
use crate::ctx::Ctx;
use crate::vod::VodPlay;
use sluice_http::{Method, Request};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

/// Longest stream key (`app/name`) accepted in a path.
const MAX_KEY_LEN: usize = 256;

/// What a request asks of its connection.
pub(crate) enum Action<'r> {
    /// A complete answer.
    Reply(Reply),
    /// `GET /app/name.flv`, `.ts` or `.mp4`: play the live stream (or the file on demand
    /// under `vod/`) as that byte stream; FLV and fMP4 over WebSocket when the request
    /// upgrades and the wire can.
    Live(&'r str, Live),
    /// `HEAD` of a live stream's URL: its headers, without a length.
    StreamHead(Vec<(&'static str, String)>),
    /// A file of the media root, opened: the serializer sends its range (with
    /// `sendfile` where it can).
    File(Opened),
}

/// Which listener a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listener {
    /// The HTTP or HTTPS listener: every route.
    Media,
    /// The API's own listener: the API, `/metrics` and the console only.
    ApiOnly,
}

/// What WHEP's OPTIONS says (CORS preflights ask it too).
const WHEP_OPTIONS: [(&str, &str); 3] = [
    ("Accept-Post", "application/sdp"),
    ("Accept-Patch", "application/trickle-ice-sdpfrag"),
    ("Access-Control-Expose-Headers", "Location"),
];

/// The byte streams a live stream plays as over HTTP, each a registered output
/// format: a new one is a variant here and its format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Live {
    /// `/app/name.flv`: HTTP-FLV (and WebSocket-FLV).
    Flv,
    /// `/app/name.ts`: HTTP-TS, the stream's MPEG-TS (set-top boxes, IPTV middleware).
    Ts,
    /// `/app/name.mp4`: HTTP-fMP4, an init segment then a fragment per frame (MSE
    /// players); WebSocket-fMP4 when the request upgrades.
    Fmp4,
}

impl Live {
    /// The format its players take, and the protocol they count as.
    pub(crate) fn output(self) -> (FormatId, Protocol) {
        match self {
            Live::Flv => (FormatId::FLV, Protocol::Flv),
            Live::Ts => (FormatId::TS, Protocol::HttpTs),
            Live::Fmp4 => (FormatId::FMP4, Protocol::HttpFmp4),
        }
    }

    /// What its players take and count as over WebSocket, when it goes over one.
    pub(crate) fn websocket(self) -> Option<(FormatId, Protocol)> {
        match self {
            Live::Flv => Some((FormatId::WS_FLV, Protocol::WsFlv)),
            Live::Fmp4 => Some((FormatId::WS_FMP4, Protocol::WsFmp4)),
            Live::Ts => None,
        }
    }

    /// The headers of its answer.
    pub(crate) fn headers(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Live::Flv => &FLV_HEADERS,
            Live::Ts => &TS_HEADERS,
            Live::Fmp4 => &FMP4_HEADERS,
        }
    }
}

/// The headers of an HTTP-FLV stream's answer.
pub(crate) const FLV_HEADERS: [(&str, &str); 3] = [
    ("Content-Type", "video/x-flv"),
    ("Cache-Control", "no-cache, no-store"),
    ("Pragma", "no-cache"),
];

/// The headers of an HTTP-TS stream's answer.
const TS_HEADERS: [(&str, &str); 3] = [
    ("Content-Type", "video/mp2t"),
    ("Cache-Control", "no-cache, no-store"),
    ("Pragma", "no-cache"),
];

/// The headers of an HTTP-fMP4 stream's answer.
const FMP4_HEADERS: [(&str, &str); 3] = [
    ("Content-Type", "video/mp4"),
    ("Cache-Control", "no-cache, no-store"),
    ("Pragma", "no-cache"),
];

fn owned(headers: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    headers.iter().map(|(n, v)| (*n, v.to_string())).collect()
}

/// Decides what `req` gets. `id`: the connection's (0 where a request has none of
/// its own, on HTTP/2), for the authorization hook and logs.
pub(crate) async fn handle<'r>(
    worker: &Rc<Worker>,
    req: &'r Request,
    peer: SocketAddr,
    id: u64,
    listener: Listener,
) -> Action<'r> {
    let ctx = &worker.ctx;
    if let (Some(what), false) = (api::route(&req.path), req.method == Method::Options) {
        return Action::Reply(api::reply(ctx, req, peer, what).await);
    }
    if let Some(asset) = console::route(&req.path) {
        return Action::Reply(console::reply(req.method, asset));
    }
    if listener == Listener::ApiOnly {
        return Action::Reply(Reply::text(
            404,
            "the API's listener serves /api/v1, /metrics and /console only\n",
        ));
    }
    let route = route(&req.path);
    if let Some(reply) = elsewhere(ctx, req, &route).await {
        return Action::Reply(reply);
    }
    if let Some(reply) = access::route_denied(ctx, req, &route, peer.ip(), id).await {
        return Action::Reply(reply);
    }
    let reply = match (req.method, route) {
        // A WebDAV client's first question; also a CORS preflight.
        (Method::Options, Route::Files(_)) => Reply::new(200, owned(&DAV_HEADERS), Vec::new()),
        (Method::Propfind, Route::Files(rest)) => {
            let (status, content_type, body) = files::propfind(ctx, req, rest).await;
            let mut headers = owned(&[("Content-Type", content_type)]);
            headers.extend(owned(&DAV_HEADERS));
            Reply::new(status, headers, vec![body])
        }
        (Method::Post, Route::Whep(key)) => match &worker.webrtc {
            Some(registry) => super::whep::post(ctx, registry, req, key, peer).await,
            None => webrtc_off(),
        },
        (Method::Post, Route::Whip(key)) => match &worker.webrtc {
            Some(registry) => super::whip::post(ctx, registry, req, key, peer).await,
            None => webrtc_off(),
        },
        (Method::Delete, Route::WhepSession(resource)) => match &worker.webrtc {
            Some(registry) => super::whep::delete(ctx, registry, resource).await,
            None => webrtc_off(),
        },
        (Method::Patch, Route::WhepSession(resource)) => match &worker.webrtc {
            Some(registry) => super::whep::patch(registry, req, resource),
            None => webrtc_off(),
        },
        (Method::Options, Route::Whep(_) | Route::Whip(_) | Route::WhepSession(_)) => {
            Reply::new(204, owned(&WHEP_OPTIONS), Vec::new())
        }
        (Method::Options, _) => Reply::empty(204),
        (Method::Get | Method::Head, Route::Root) => {
            Reply::text(200, concat!("Sluice ", env!("CARGO_PKG_VERSION"), "\n"))
        }
        (Method::Head, Route::Live(key, live)) => {
            if ctx.exists(key).await {
                return Action::StreamHead(owned(live.headers()));
            }
            Reply::empty(404)
        }
        (Method::Get, Route::Live(key, live)) => return Action::Live(key, live),
        (Method::Get | Method::Head, Route::Snapshot(key)) => {
            super::snapshot::reply(ctx, req, key).await
        }
        (Method::Get | Method::Head, Route::Hls(key, what)) => {
            hls::reply(worker, req, key, what, peer.ip()).await
        }
        (Method::Get | Method::Head, Route::Recorded(key, range, what)) => {
            playback::reply(worker, req, key, range, what, peer.ip()).await
        }
        (Method::Get | Method::Head, Route::Files(rest)) => {
            return match files::answer(ctx, req, rest).await {
                Ok(opened) => Action::File(opened),
                Err((status, body)) => Action::Reply(Reply::text(status, body)),
            };
        }
        (Method::Get | Method::Head, Route::NotFound) => Reply::text(404, "not found\n"),
        _ => Reply::empty(405),
    };
    Action::Reply(reply)
}

/// A cluster node that drains or is over its load sends a new session to the least
/// loaded other node: `307 Temporary Redirect` (the method and body kept, so a WHIP or
/// WHEP offer goes as it came) for an HTTP-FLV player, an HLS playlist (its segments
/// then come from there too) and WHEP and WHIP offers. Segments and sessions already
/// here stay.
async fn elsewhere(ctx: &Ctx, req: &Request, route: &Route<'_>) -> Option<Reply> {
    let moves = match (req.method, route) {
        (Method::Get, Route::Live(..)) => true,
        (Method::Get | Method::Head, Route::Hls(_, what)) => {
            matches!(what, HlsPath::TsPlaylist | HlsPath::Fmp4Playlist)
        }
        (Method::Post, Route::Whep(_) | Route::Whip(_)) => true,
        _ => false,
    };
    if !moves {
        return None;
    }
    let connections = ctx.hub().limits.connections();
    let cluster = ctx.relays()?.cluster()?;
    let location = cluster
        .redirect("http", connections, &req.path, &req.query)
        .await?;
    Some(Reply::new(
        307,
        vec![
            ("Location", location),
            ("Access-Control-Expose-Headers", "Location".into()),
        ],
        Vec::new(),
    ))
}

/// What `GET /app/name.flv` plays, its route authorized already: the live stream, or
/// the file on demand under `vod/` from its start (a private stream kept going by the
/// returned [`VodPlay`], which the player holds). The answer to send instead when
/// neither is there, or the player is refused (a limit, a drain).
pub(crate) async fn flv_source(
    ctx: &Ctx,
    key: &str,
    id: u64,
    peer: SocketAddr,
) -> Result<(Arc<Stream>, Option<VodPlay>), Reply> {
    let ask = Ask::new("http", key, id, peer.ip()).checked();
    match ctx.admit_play(&ask, key.strip_prefix("vod/")).await {
        Ok(source) => Ok(source.start(ctx, id)),
        Err(refusal) => Err(access::refused(&refusal)),
    }
}

/// 404 when WebRTC is off (`webrtc.udp = "off"`).
fn webrtc_off() -> Reply {
    Reply::text(404, "WebRTC is off on this server\n")
}

/// What a path names.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Route<'a> {
    /// `/app/stream.flv`, `.ts` or `.mp4`: the live stream `app/stream` as that byte
    /// stream.
    Live(&'a str, Live),
    /// `/app/stream.m3u8`, `/app/stream/index.m3u8` and their segments.
    Hls(&'a str, HlsPath<'a>),
    /// `/files/<path>`: a file of the media root (the path below `/files/`, encoded).
    Files(&'a str),
    /// `/app/stream@FROM..TO` then `/index.m3u8`, `.m3u8`, a segment's name or `.mp4`:
    /// the recordings of `app/stream` in that range (the range still encoded).
    Recorded(&'a str, &'a str, Playback<'a>),
    /// `/app/stream.jpg`: a snapshot of the live stream (`snapshot`).
    Snapshot(&'a str),
    /// `/app/stream/whep`: WebRTC players' offers (WHEP).
    Whep(&'a str),
    /// `/app/stream/whip`: WebRTC publishers' offers (WHIP).
    Whip(&'a str),
    /// `/app/stream/whep/<resource>` or `.../whip/<resource>`: one WebRTC session.
    WhepSession(&'a str),
    Root,
    NotFound,
}

/// A stream key (`app/name`) from a path: at least two segments, none empty, `.` or `..`.
pub(crate) fn stream_key(key: &str) -> Option<&str> {
    let valid = !key.is_empty()
        && key.len() <= MAX_KEY_LEN
        && key.contains('/')
        && key
            .split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != "..");
    valid.then_some(key)
}

/// The media route `path` names (the API's and the console's are theirs: see
/// [`api::route`], [`console::route`]). A stream name with `@` in an HLS or `.mp4`
/// path is a range of its recordings (`sluice_archive::range`): such a name cannot be
/// played live over HLS or HTTP-fMP4 (it can over every other protocol).
pub(crate) fn route(path: &str) -> Route<'_> {
    let route = live_route(path);
    use sluice_archive::range::split_key as recorded;
    match route {
        Route::Hls(key, what) => match recorded(key) {
            Some((key, range)) if stream_key(key).is_some() => {
                Route::Recorded(key, range, Playback::Hls(what))
            }
            Some(_) => Route::NotFound,
            None => route,
        },
        Route::Live(key, Live::Fmp4) => match recorded(key) {
            Some((key, range)) if stream_key(key).is_some() => {
                Route::Recorded(key, range, Playback::Download)
            }
            Some(_) => Route::NotFound,
            None => route,
        },
        route => route,
    }
}

/// [`route`] before ranges.
fn live_route(path: &str) -> Route<'_> {
    if path == "/" {
        return Route::Root;
    }
    if let Some(rest) = path.strip_prefix("/files/") {
        return Route::Files(rest);
    }
    if path == "/files" {
        return Route::Files("");
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Route::NotFound;
    };
    if let Some(key) = rest.strip_suffix(".flv").and_then(stream_key) {
        return Route::Live(key, Live::Flv);
    }
    if let Some(key) = rest.strip_suffix(".jpg").and_then(stream_key) {
        return Route::Snapshot(key);
    }
    if let Some(key) = rest.strip_suffix("/whep").and_then(stream_key) {
        return Route::Whep(key);
    }
    if let Some(key) = rest.strip_suffix("/whip").and_then(stream_key) {
        return Route::Whip(key);
    }
    for marker in ["/whep/", "/whip/"] {
        if let Some((key, resource)) = rest.rsplit_once(marker) {
            if stream_key(key).is_some() && !resource.is_empty() && !resource.contains('/') {
                return Route::WhepSession(resource);
            }
        }
    }
    if let Some(key) = rest.strip_suffix("/index.m3u8").and_then(stream_key) {
        return Route::Hls(key, HlsPath::Fmp4Playlist);
    }
    if let Some(key) = rest.strip_suffix(".m3u8").and_then(stream_key) {
        return Route::Hls(key, HlsPath::TsPlaylist);
    }
    // `/app/name/key/TAG-PERIOD`: a key of an encrypted stream. The id has no `.`, so
    // no segment or file of a stream named `…/key` is taken for one.
    if let Some((dir, id)) = rest.rsplit_once("/key/") {
        if let (Some(key), Some(path)) = (stream_key(dir), HlsPath::key(id)) {
            return Route::Hls(key, path);
        }
    }
    if let Some((dir, file)) = rest.rsplit_once('/') {
        if let (Some(key), Some(file)) = (stream_key(dir), HlsPath::file(file)) {
            return Route::Hls(key, file);
        }
        if stream_key(dir).is_some()
            && (HlsPath::is_ts_shaped(file) || HlsPath::is_init_shaped(file))
        {
            // A segment's name with a number out of range (or an init segment's with
            // a bad variant): not a stream's HTTP-TS or HTTP-fMP4.
            return Route::NotFound;
        }
    }
    // After HLS's segments: `/app/name/TAG-N.ts` is a segment, not a stream.
    if let Some(key) = rest.strip_suffix(".ts").and_then(stream_key) {
        return Route::Live(key, Live::Ts);
    }
    // After HLS's init segments (`/app/name/TAG-init.mp4`). A file on demand plays as
    // `/vod/<path>.mp4.mp4`, as `.mp4.flv` and `.mp4.ts` do.
    if let Some(key) = rest.strip_suffix(".mp4").and_then(stream_key) {
        return Route::Live(key, Live::Fmp4);
    }
    Route::NotFound
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(route("/live/cam.flv"), Route::Live("live/cam", Live::Flv));
        assert_eq!(route("/live/cam.ts"), Route::Live("live/cam", Live::Ts));
        assert_eq!(route("/a/b/c.ts"), Route::Live("a/b/c", Live::Ts));
        assert_eq!(route("/a/b/ab-18446744073709551615.ts"), Route::NotFound);
        assert_eq!(route("/a/b/cam-1.ts"), Route::Live("a/b/cam-1", Live::Ts));
        assert_eq!(route("/a/ab-1.ts"), Route::Live("a/ab-1", Live::Ts));
        assert_eq!(route("/live/cam.mp4"), Route::Live("live/cam", Live::Fmp4));
        assert_eq!(
            route("/vod/dir/clip.mp4.mp4"),
            Route::Live("vod/dir/clip.mp4", Live::Fmp4)
        );
        assert!(matches!(
            route("/live/cam/ab-init.mp4"),
            Route::Hls("live/cam", _)
        ));
        assert_eq!(route("/cam.mp4"), Route::NotFound);
        let range = "2026-11-27T10:00:00Z..2026-11-27T10:15:00Z";
        assert_eq!(
            route(&format!("/live/cam@{range}/index.m3u8")),
            Route::Recorded("live/cam", range, Playback::Hls(HlsPath::Fmp4Playlist))
        );
        assert_eq!(
            route("/live/cam@-15m...m3u8"),
            Route::Recorded("live/cam", "-15m..", Playback::Hls(HlsPath::TsPlaylist))
        );
        assert_eq!(
            route("/live/cam@-15m../1a2b-7.ts"),
            Route::Recorded("live/cam", "-15m..", Playback::Hls(HlsPath::Ts("1a2b", 7)))
        );
        assert_eq!(
            route("/live/cam@..-1h/1a2b-init.mp4"),
            Route::Recorded(
                "live/cam",
                "..-1h",
                Playback::Hls(HlsPath::Init("1a2b", None))
            )
        );
        assert_eq!(
            route(&format!("/live/cam@{range}.mp4")),
            Route::Recorded("live/cam", range, Playback::Download)
        );
        assert_eq!(route("/live/@-1h...mp4"), Route::NotFound);
        // Not HLS or `.mp4`: a live stream's name, as before.
        assert_eq!(
            route("/live/cam@x.flv"),
            Route::Live("live/cam@x", Live::Flv)
        );
        assert_eq!(
            route("/live/cam/init.mp4"),
            Route::Live("live/cam/init", Live::Fmp4)
        );
        assert_eq!(
            route("/live/cam.m3u8"),
            Route::Hls("live/cam", HlsPath::TsPlaylist)
        );
        assert_eq!(
            route("/live/cam/index.m3u8"),
            Route::Hls("live/cam", HlsPath::Fmp4Playlist)
        );
        assert_eq!(
            route("/live/cam/ab-7.ts"),
            Route::Hls("live/cam", HlsPath::Ts("ab", 7))
        );
        assert_eq!(
            route("/live/cam/ab-init.mp4"),
            Route::Hls("live/cam", HlsPath::Init("ab", None))
        );
        assert_eq!(
            route("/live/cam/ab-init-f00d.mp4"),
            Route::Hls("live/cam", HlsPath::Init("ab", Some(0xf00d)))
        );
        assert_eq!(route("/live/cam/ab-init-.mp4"), Route::NotFound);
        assert_eq!(route("/live/cam/ab-init-xyz.mp4"), Route::NotFound);
        assert_eq!(
            route("/live/cam/ab-7.m4s"),
            Route::Hls("live/cam", HlsPath::Segment("ab", 7))
        );
        assert_eq!(
            route("/live/cam/ab-7.3.m4s"),
            Route::Hls("live/cam", HlsPath::Part("ab", 7, 3))
        );
        assert_eq!(route("/live/cam/ab-x.m4s"), Route::NotFound);
        assert_eq!(
            route("/live/cam/key/ab-12"),
            Route::Hls("live/cam", HlsPath::Key("ab", 12))
        );
        assert_eq!(
            route("/a/b/c/key/0-0"),
            Route::Hls("a/b/c", HlsPath::Key("0", 0))
        );
        for not_a_key in [
            "/live/cam/key/ab",
            "/live/cam/key/xy-1",
            "/live/cam/key/ab-1.ts",
        ] {
            assert!(
                !matches!(route(not_a_key), Route::Hls(_, HlsPath::Key(..))),
                "{not_a_key}"
            );
        }
        // A stream named `live/key` keeps its segments.
        assert_eq!(
            route("/live/key/ab-7.ts"),
            Route::Hls("live/key", HlsPath::Ts("ab", 7))
        );
        assert_eq!(route("/live/../cam.m3u8"), Route::NotFound);
        assert_eq!(route("/a/b/c.flv"), Route::Live("a/b/c", Live::Flv));
        assert_eq!(route("/"), Route::Root);
        assert_eq!(route("/files/a/b.flv"), Route::Files("a/b.flv"));
        assert_eq!(route("/files/live/x.m3u8"), Route::Files("live/x.m3u8"));
        assert_eq!(route("/files"), Route::Files(""));
        assert_eq!(route("/filesx/a.flv"), Route::Live("filesx/a", Live::Flv));
        for bad in [
            "/cam.flv",
            "/../x.flv",
            "/live/../x.flv",
            "//x.flv",
            "/live/x",
            "/.flv",
        ] {
            assert_eq!(route(bad), Route::NotFound, "{bad}");
        }
    }
}
