//! HLS requests: playlists (with Low-Latency blocking reload), segments, parts and
//! init segments, all from the stream's current snapshot (see `crate::hls`).
//!
//! Waits are bounded: a blocking playlist request waits at most three target
//! durations (then 503), a request for the next part or segment waits as long
//! (then 404); a request too far ahead is refused at once (400).

use super::access;
use super::viewers::{session_id, IDLE};
use super::Error;
use super::Worker;
use crate::driver::Conn;
use crate::hls::{HlsStream, HlsView, VariantView};
use crate::io::memfile::MemFile;
use bytes::Bytes;
use sluice_hls::{parse_blocking_request, Availability, Readiness};
use sluice_http::ServerSession;
use sluice_http::{Method, Request};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// The HLS resource a path names, below the stream's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HlsPath<'a> {
    /// `/app/name.m3u8`
    TsPlaylist,
    /// `/app/name/index.m3u8`
    Fmp4Playlist,
    /// `/app/name/TAG-N.ts`
    Ts(&'a str, u64),
    /// `/app/name/TAG-init.mp4`
    Init(&'a str),
    /// `/app/name/TAG-N.m4s`
    Segment(&'a str, u64),
    /// `/app/name/TAG-N.P.m4s`
    Part(&'a str, u64, u32),
}

impl<'a> HlsPath<'a> {
    /// Parses a segment file name.
    pub(crate) fn file(name: &'a str) -> Option<HlsPath<'a>> {
        let (tag, rest) = name.split_once('-')?;
        if tag.is_empty() || !tag.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        if rest == "init.mp4" {
            return Some(HlsPath::Init(tag));
        }
        if let Some(n) = rest.strip_suffix(".ts") {
            return Some(HlsPath::Ts(tag, number(n)?));
        }
        let stem = rest.strip_suffix(".m4s")?;
        match stem.split_once('.') {
            Some((msn, part)) => Some(HlsPath::Part(tag, number(msn)?, number(part)?)),
            None => Some(HlsPath::Segment(tag, number(stem)?)),
        }
    }
}

/// A decimal number without sign or leading `+`, within the type's range.
fn number<T: std::str::FromStr>(s: &str) -> Option<T> {
    if s.is_empty() || s.len() > 19 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

enum Answer {
    Playlist(Bytes),
    Media(&'static str, Found, String),
    NotFound,
    BadRequest(&'static str),
    Unavailable,
}

/// A complete answer to an HLS request, for HTTP/1.1 or HTTP/2.
pub(crate) struct Reply {
    pub status: u16,
    /// Header lines without the ones every response gets (Server, CORS, length).
    pub headers: Vec<(&'static str, String)>,
    /// The body, as shared buffers.
    pub body: Vec<Bytes>,
    /// The same body as an in-memory file, for `sendfile` on plain HTTP.
    pub file: Option<Arc<MemFile>>,
}

impl Reply {
    pub(crate) fn text(status: u16, body: &'static str) -> Reply {
        Reply {
            file: None,
            status,
            headers: vec![("Content-Type", "text/plain".into())],
            body: vec![Bytes::from_static(body.as_bytes())],
        }
    }
}

/// A reply's header lines as the HTTP/1.1 session takes them.
pub(crate) fn header_refs<'a>(
    headers: &'a [(&'static str, String)],
) -> Vec<(&'static str, &'a str)> {
    headers.iter().map(|(n, v)| (*n, v.as_str())).collect()
}

/// Answers an HLS request for the stream `key`.
pub(crate) async fn reply(
    ctx: &Rc<Worker>,
    req: &Request,
    key: &str,
    what: HlsPath<'_>,
    peer: std::net::IpAddr,
) -> Reply {
    let playlist = matches!(what, HlsPath::TsPlaylist | HlsPath::Fmp4Playlist);
    // A viewer is authorized at its playlist and then shows the token it got there.
    let mut auth_cookie = None;
    let auth = ctx.auth.load();
    if auth.required(crate::auth::Action::Read, key) {
        let shown = access::viewer_token(req, key).map(|t| auth.check_viewer_token(key, t));
        let renewed = || {
            format!(
                "{}={}; Path=/; Max-Age={}; HttpOnly; SameSite=Lax",
                access::viewer_cookie(key),
                auth.viewer_token(key),
                crate::auth::VIEWER_TOKEN_LIFE.as_secs()
            )
        };
        match (shown, playlist) {
            (Some(Ok(())), false) => {}
            // A viewer with a good token (its cookie, or the console's `sluice_auth`
            // query) gets it renewed in the cookie its segments then carry.
            (Some(Ok(())), true) => auth_cookie = Some(renewed()),
            // No token, or a stale one: the credentials decide, and renew it.
            (_, true) => {
                if let Some(reply) = access::read_denied(ctx, req, key, "hls", peer, 0).await {
                    return reply;
                }
                auth_cookie = Some(renewed());
            }
            // A segment or part without a good token: credentials sent with every
            // request (a player given a header) still do.
            (_, false) => {
                if let Some(reply) = access::read_denied(ctx, req, key, "hls", peer, 0).await {
                    return reply;
                }
            }
        }
    }
    if let Some(path) = key.strip_prefix("vod/") {
        let mut reply = super::vod::reply(ctx, path, what).await;
        reply.headers.extend(auth_cookie.map(|c| ("Set-Cookie", c)));
        return reply;
    }
    // An edge pulls a stream a playlist asks for (segments name streams it has).
    let found = match ctx.hub.find(key) {
        None if playlist && ctx.relays.is_some() => ctx.find_live(key).await,
        found => found,
    };
    let Some(stream) = found else {
        return Reply::text(404, "not found\n");
    };
    stream.want_hls();
    // Count the viewer: an id from the request, or a new one with the playlist.
    let mut new_id = None;
    let id = session_id(&req.query, req.header("cookie"))
        .or_else(|| playlist.then(|| *new_id.insert(rand::random::<u64>() | 1)));
    if let Some(id) = id {
        ctx.viewers
            .borrow_mut()
            .touch(id, &stream, std::time::Instant::now());
    }
    match answer(&stream.hls, req, what).await {
        Answer::Playlist(body) => {
            let mut headers = vec![
                ("Content-Type", "application/vnd.apple.mpegurl".to_string()),
                ("Cache-Control", "no-cache".to_string()),
            ];
            headers.extend(auth_cookie.map(|c| ("Set-Cookie", c)));
            if let Some(id) = new_id {
                headers.push((
                    "Set-Cookie",
                    format!(
                        "sluice_hls={id:x}; Path=/; Max-Age={}; SameSite=Lax",
                        IDLE.as_secs()
                    ),
                ));
            }
            Reply {
                file: None,
                status: 200,
                headers,
                body: vec![body],
            }
        }
        Answer::Media(kind, Found { bytes: body, file }, etag) => {
            if req.header("if-none-match") == Some(etag.as_str()) {
                return Reply {
                    file: None,
                    status: 304,
                    headers: vec![("ETag", etag)],
                    body: Vec::new(),
                };
            }
            Reply {
                file,
                status: 200,
                headers: vec![
                    ("Content-Type", kind.to_string()),
                    (
                        "Cache-Control",
                        "public, max-age=31536000, immutable".to_string(),
                    ),
                    ("ETag", etag),
                ],
                body,
            }
        }
        Answer::NotFound => Reply::text(404, "not found\n"),
        Answer::BadRequest(why) => Reply::text(400, why),
        Answer::Unavailable => Reply::text(503, "not produced in time\n"),
    }
}

/// Answers an HLS request on an HTTP/1.1 connection.
pub(crate) async fn serve(
    ctx: &Rc<Worker>,
    conn: &mut Conn<ServerSession>,
    req: &Request,
    key: &str,
    what: HlsPath<'_>,
    peer: std::net::IpAddr,
    idle: Duration,
) -> Result<(), Error> {
    let reply = reply(ctx, req, key, what, peer).await;
    let headers = header_refs(&reply.headers);
    let plain = conn.sock.plain_tcp().is_some();
    if let (Some(file), true, Method::Get) = (&reply.file, plain, req.method) {
        // A whole segment on plain HTTP: the kernel sends it from the memfd's pages.
        conn.session.respond_head(200, &headers, Some(file.len()));
        super::files::send_file_body(conn, file.file(), 0, file.len(), idle).await?;
        conn.session.body_sent();
        return Ok(());
    }
    conn.session.respond(reply.status, &headers, reply.body);
    Ok(())
}

fn variant(view: &HlsView, fmp4: bool) -> Option<&VariantView> {
    if fmp4 {
        view.fmp4.as_ref()
    } else {
        view.ts.as_ref()
    }
}

/// A segment, part or init segment found: its bytes, and for whole segments the
/// in-memory file holding them.
pub(crate) struct Found {
    bytes: Vec<Bytes>,
    file: Option<Arc<MemFile>>,
}

/// The bytes of a segment or part if they exist now; whether to wait otherwise.
fn lookup(view: &HlsView, what: HlsPath<'_>) -> Result<Option<Found>, ()> {
    let segment = |v: &VariantView, msn: u64| {
        v.segments.get(&msn).map(|bytes| Found {
            bytes: bytes.clone(),
            file: v.files.get(&msn).cloned(),
        })
    };
    let (state, found) = match what {
        HlsPath::Ts(_, msn) => {
            let v = variant(view, false);
            (
                v.map(|v| v.timeline.segment_state(msn)),
                v.and_then(|v| segment(v, msn)),
            )
        }
        HlsPath::Segment(_, msn) => {
            let v = variant(view, true);
            (
                v.map(|v| v.timeline.segment_state(msn)),
                v.and_then(|v| segment(v, msn)),
            )
        }
        HlsPath::Part(_, msn, part) => {
            let v = variant(view, true);
            (
                v.map(|v| v.timeline.part_state(msn, part)),
                v.and_then(|v| v.parts.get(&(msn, part))).map(|b| Found {
                    bytes: vec![b.clone()],
                    file: None,
                }),
            )
        }
        HlsPath::Init(_) => {
            let init = variant(view, true).and_then(|v| v.init.clone());
            return Ok(init.map(|b| Found {
                bytes: vec![b],
                file: None,
            }));
        }
        HlsPath::TsPlaylist | HlsPath::Fmp4Playlist => return Err(()),
    };
    match (found, state) {
        (Some(bytes), _) => Ok(Some(bytes)),
        (None, Some(Availability::Pending)) => Ok(None),
        _ => Err(()),
    }
}

async fn answer(hls: &HlsStream, req: &Request, what: HlsPath<'_>) -> Answer {
    if let HlsPath::Ts(tag, _)
    | HlsPath::Init(tag)
    | HlsPath::Segment(tag, _)
    | HlsPath::Part(tag, _, _) = what
    {
        if tag != hls.view().tag {
            return Answer::NotFound;
        }
    }
    let limit = |view: &HlsView, fmp4: bool| {
        Duration::from_millis(variant(view, fmp4).map_or(6000, |v| v.timeline.block_limit_ms()))
    };
    match what {
        HlsPath::TsPlaylist => match &hls.view().ts {
            Some(v) => Answer::Playlist(v.playlist.clone()),
            None => Answer::NotFound,
        },
        HlsPath::Fmp4Playlist => {
            let request = match parse_blocking_request(&req.query) {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!("bad blocking request: {e}");
                    return Answer::BadRequest("bad _HLS_msn/_HLS_part\n");
                }
            };
            let wait = limit(&hls.view(), true);
            let result = wait_for(hls, wait, |view| {
                let v = view.fmp4.as_ref()?;
                match request.map(|r| v.timeline.readiness(r)) {
                    None | Some(Readiness::Ready) => Some(Ok(v.playlist.clone())),
                    Some(Readiness::TooFarAhead) => Some(Err(())),
                    Some(Readiness::Wait) => None,
                }
            })
            .await;
            match result {
                Some(Ok(p)) => Answer::Playlist(p),
                Some(Err(())) => Answer::BadRequest("_HLS_msn/_HLS_part too far ahead\n"),
                None if hls.view().fmp4.is_none() => Answer::NotFound,
                None => Answer::Unavailable,
            }
        }
        _ => {
            let (kind, fmp4) = match what {
                HlsPath::Ts(..) => ("video/mp2t", false),
                _ => ("video/mp4", true),
            };
            let etag = match what {
                HlsPath::Ts(t, n) | HlsPath::Segment(t, n) => format!("\"{t}-{n}\""),
                HlsPath::Part(t, n, p) => format!("\"{t}-{n}.{p}\""),
                _ => format!("\"{}-init\"", hls.view().tag),
            };
            let wait = limit(&hls.view(), fmp4);
            let mut gone = false;
            let found = wait_for(hls, wait, |view| match lookup(view, what) {
                Ok(Some(found)) => Some(Some(found)),
                Ok(None) => None,
                Err(()) => {
                    gone = true;
                    Some(None)
                }
            })
            .await;
            match found {
                Some(Some(found)) if !gone => Answer::Media(kind, found, etag),
                _ => Answer::NotFound,
            }
        }
    }
}

/// Checks `view` on every new snapshot until `check` answers or `limit` passes.
async fn wait_for<T>(
    hls: &HlsStream,
    limit: Duration,
    mut check: impl FnMut(&HlsView) -> Option<T>,
) -> Option<T> {
    // Most requests are answered at once: only one that waits subscribes.
    if let Some(answer) = check(&hls.view()) {
        return Some(answer);
    }
    let deadline = tokio::time::Instant::now() + limit;
    let mut changes = hls.subscribe();
    loop {
        changes.borrow_and_update();
        if let Some(answer) = check(&hls.view()) {
            return Some(answer);
        }
        match tokio::time::timeout_at(deadline, changes.changed()).await {
            Ok(Ok(())) => {}
            _ => return None,
        }
    }
}
