//! HLS requests: playlists (with Low-Latency blocking reload), segments, parts and
//! init segments, all from the stream's current snapshot (see `crate::hls`).
//!
//! Waits are bounded: a blocking playlist request waits at most three target
//! durations (then 503), a request for the next part or segment waits as long
//! (then 404); a request too far ahead is refused at once (400).
//!
//! Every answer says how long a cache may keep it (`Cache-Control`, see
//! `docs/cdn.md`), by what it is: a segment, part or init segment never changes
//! under its URI (immutable); the answer to a blocking playlist request holds what
//! it waited for whenever it is asked again (six target durations); a plain playlist
//! request changes at each segment (half a target duration, at least a second); a 404
//! may be a moment early (a second); other errors are not stored. A stream that needs
//! authorization to read is answered `private`: a shared cache must not hand it to
//! viewers the origin never saw.
//!
//! Keys of encrypted streams (`/app/name/key/TAG-PERIOD`) are answered only to a
//! request the stream's read authorization admits (a viewer token in the query or the
//! viewer's cookie, or credentials), with `Cache-Control: no-store`; a refusal is 403
//! (never a Basic challenge: players, not people, fetch keys), an unknown or expired
//! key 404. Key bytes go to the socket only, never to a log.

use super::access;
use super::reply::Reply;
use super::Worker;
use crate::hls::{HlsStream, HlsView, VariantView};
use crate::io::memfile::MemFile;
use bytes::Bytes;
use sluice_hls::{parse_blocking_request, Availability, Readiness, Timeline};
use sluice_http::{Method, Request};
use std::sync::Arc;
use std::time::Duration;

/// The HLS resource a path names, below the stream's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HlsPath<'a> {
    /// `/app/name.m3u8`
    TsPlaylist,
    /// `/app/name/index.m3u8`
    Fmp4Playlist,
    /// `/app/name/TAG-N.ts`: `N` is the segment's name (live: its start on the
    /// stream's timeline; on demand: its index).
    Ts(&'a str, u64),
    /// `/app/name/TAG-init.mp4` (on demand), `/app/name/TAG-init-HASH.mp4` (live:
    /// HASH names the init segment's bytes).
    Init(&'a str, Option<u64>),
    /// `/app/name/TAG-N.m4s`
    Segment(&'a str, u64),
    /// `/app/name/TAG-N.P.m4s`
    Part(&'a str, u64, u32),
    /// `/app/name/key/TAG-PERIOD`: the AES-128 key of an encrypted stream's segments
    /// of that period (see `crate::hls`).
    Key(&'a str, u64),
}

impl<'a> HlsPath<'a> {
    /// Whether `name` has a TS segment's shape (`TAG-DIGITS.ts`), whatever its number:
    /// such a name is never a live stream's HTTP-TS form.
    pub(crate) fn is_ts_shaped(name: &str) -> bool {
        let Some((tag, rest)) = name.split_once('-') else {
            return false;
        };
        let digits = rest.strip_suffix(".ts").unwrap_or("");
        !tag.is_empty()
            && tag.bytes().all(|b| b.is_ascii_hexdigit())
            && !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
    }

    /// Whether `name` has an init segment's shape (`TAG-init….mp4`), whatever follows
    /// `init`: such a name is never a live stream's HTTP-fMP4 form.
    pub(crate) fn is_init_shaped(name: &str) -> bool {
        let Some((tag, rest)) = name.split_once('-') else {
            return false;
        };
        !tag.is_empty()
            && tag.bytes().all(|b| b.is_ascii_hexdigit())
            && rest.starts_with("init")
            && rest.ends_with(".mp4")
    }

    /// Parses a key id (`TAG-PERIOD`, the part after `/key/`).
    pub(crate) fn key(id: &'a str) -> Option<HlsPath<'a>> {
        let (tag, period) = id.split_once('-')?;
        if tag.is_empty() || tag.len() > 16 || !tag.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        Some(HlsPath::Key(tag, number(period)?))
    }

    /// Parses a segment file name.
    pub(crate) fn file(name: &'a str) -> Option<HlsPath<'a>> {
        let (tag, rest) = name.split_once('-')?;
        if tag.is_empty() || !tag.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        if rest == "init.mp4" {
            return Some(HlsPath::Init(tag, None));
        }
        if let Some(hash) = rest
            .strip_prefix("init-")
            .and_then(|r| r.strip_suffix(".mp4"))
        {
            if hash.is_empty() || hash.len() > 16 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            return u64::from_str_radix(hash, 16)
                .ok()
                .map(|h| HlsPath::Init(tag, Some(h)));
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

/// How long caches may keep an answer; see the module docs and `docs/cdn.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caching {
    /// A segment, part or init segment: its URI never names other bytes.
    Immutable,
    /// A playlist, for this many seconds.
    For(u64),
    /// A 404: the object may exist a moment later (or the stream may start).
    NotFound,
    /// Any other error.
    NoStore,
}

/// How long a cache keeps a segment, part or init segment: a year, the longest
/// `max-age` HTTP caches honour; the URI never names other bytes (`crate::hls`).
pub(crate) const IMMUTABLE_MAX_AGE_S: u64 = 31_536_000;

/// Target durations an answer to a blocking playlist request (`_HLS_msn`) may be
/// cached: it holds what was asked for whenever it is served, so it may be old, but
/// not so old that a player that gets it falls behind the playlist window (six
/// segments by default). Apple's LL-HLS guidance: about six target durations.
pub(crate) const BLOCKING_MAX_AGE_TARGETS: u64 = 6;

/// How long a 404 may be cached: an object asked for a moment early (a stream about
/// to start) must appear soon, while a flood of requests for it still collapses.
pub(crate) const NOT_FOUND_MAX_AGE_S: u64 = 1;

impl Caching {
    /// The `Cache-Control` value; `private` for streams that need authorization.
    /// Built without `format!`: an LL-HLS viewer gets about ten answers a second.
    fn header(self, private: bool) -> String {
        let scope = if private { "private" } else { "public" };
        let (max_age, immutable) = match self {
            Caching::Immutable => (IMMUTABLE_MAX_AGE_S, true),
            Caching::For(s) => (s, false),
            Caching::NotFound => (NOT_FOUND_MAX_AGE_S, false),
            Caching::NoStore => return "no-store".to_string(),
        };
        let mut out = String::with_capacity(48);
        out.push_str(scope);
        out.push_str(", max-age=");
        push_decimal(&mut out, max_age);
        if immutable {
            out.push_str(", immutable");
        }
        out
    }

    /// What a reply of `status` without its own `Cache-Control` gets.
    fn of_status(status: u16) -> Caching {
        match status {
            404 => Caching::NotFound,
            _ => Caching::NoStore,
        }
    }
}

/// Appends `n` in decimal.
fn push_decimal(out: &mut String, n: u64) {
    let mut buf = [0; 20];
    let digits = sluice_http::decimal(n, &mut buf);
    out.extend(digits.iter().map(|&d| char::from(d)));
}

/// Seconds a plain (non-blocking) reload of a playlist may be cached: half a target
/// duration (a new segment comes every target duration), at least one second.
fn playlist_max_age(timeline: &Timeline) -> u64 {
    (timeline.target_duration_secs() / 2).max(1)
}

/// Seconds the answer to a blocking playlist request may be cached.
fn blocking_max_age(timeline: &Timeline) -> u64 {
    timeline
        .target_duration_secs()
        .saturating_mul(BLOCKING_MAX_AGE_TARGETS)
        .max(1)
}

enum Answer {
    /// A playlist and how many seconds it may be cached.
    Playlist(Bytes, u64),
    Media(&'static str, Found, String),
    NotFound,
    BadRequest(&'static str),
    Unavailable,
}

/// Answers an HLS request for the stream `key`, with a `Cache-Control` on every
/// answer (see the module docs).
pub(crate) async fn reply(
    worker: &Worker,
    req: &Request,
    key: &str,
    what: HlsPath<'_>,
    peer: std::net::IpAddr,
) -> Reply {
    let private = worker
        .ctx
        .auth()
        .load()
        .required(crate::auth::Action::Read, key);
    let mut reply = answer_request(worker, req, key, what, peer, private).await;
    if !reply.headers.iter().any(|(n, _)| *n == "Cache-Control") {
        let caching = Caching::of_status(reply.status);
        reply
            .headers
            .push(("Cache-Control", caching.header(private)));
    }
    reply
}

/// Whether an HLS request may read `key` (a live stream, a file on demand, or a
/// stream's recordings by range): `Err` is the refusal; `Ok` carries the cookie to set
/// with the viewer's renewed token (playlists). A viewer is authorized at its playlist
/// by its credentials, then shows the token it got there with each segment.
pub(crate) async fn viewer_authorized(
    ctx: &crate::ctx::Ctx,
    req: &Request,
    key: &str,
    playlist: bool,
    peer: std::net::IpAddr,
) -> Result<Option<String>, Reply> {
    let mut auth_cookie = None;
    // An `Arc`, not arc-swap's guard: this request may wait (blocking reloads, the next
    // part) and a guard held that long takes one of the thread's few fast slots, so
    // with many waiting viewers every other load of the thread took the slow path.
    let auth = ctx.auth().load_full();
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
                    return Err(reply);
                }
                auth_cookie = Some(renewed());
            }
            // A segment or part without a good token: credentials sent with every
            // request (a player given a header) still do.
            (_, false) => {
                if let Some(reply) = access::read_denied(ctx, req, key, "hls", peer, 0).await {
                    return Err(reply);
                }
            }
        }
    }
    Ok(auth_cookie)
}

async fn answer_request(
    worker: &Worker,
    req: &Request,
    key: &str,
    what: HlsPath<'_>,
    peer: std::net::IpAddr,
    private: bool,
) -> Reply {
    let ctx = &worker.ctx;
    let playlist = matches!(what, HlsPath::TsPlaylist | HlsPath::Fmp4Playlist);
    let auth_cookie = match viewer_authorized(ctx, req, key, playlist, peer).await {
        Ok(cookie) => cookie,
        // A refused key is a 403 without a challenge (see `key_refused`).
        Err(reply) if matches!(what, HlsPath::Key(..)) => return key_refused(reply),
        Err(reply) => return reply,
    };
    if let HlsPath::Key(tag, period) = what {
        return key_reply(ctx, key, tag, period);
    }
    if let Some(path) = key.strip_prefix("vod/") {
        let mut reply = super::vod::reply(worker, path, what).await;
        reply.headers.extend(auth_cookie.map(|c| ("Set-Cookie", c)));
        return reply;
    }
    // An edge pulls a stream a playlist asks for (segments name streams it has).
    let found = match ctx.hub().find(key) {
        None if playlist && ctx.relays().is_some_and(|r| r.pulls_here(key)) => {
            ctx.find_live(key).await
        }
        found => found,
    };
    let Some(stream) = found else {
        return Reply::text(404, "not found\n");
    };
    let Some(hls) = crate::hls::want(&stream) else {
        return Reply::text(404, "not found\n");
    };
    match answer(hls, req, what).await {
        Answer::Playlist(body, max_age) => {
            let mut headers = vec![
                ("Content-Type", "application/vnd.apple.mpegurl".to_string()),
                ("Cache-Control", Caching::For(max_age).header(private)),
            ];
            headers.extend(auth_cookie.map(|c| ("Set-Cookie", c)));
            Reply {
                file: None,
                status: 200,
                headers,
                body: vec![body],
            }
        }
        Answer::Media(kind, found, etag) => {
            let cache_control = Caching::Immutable.header(private);
            if req.header("if-none-match") == Some(etag.as_str()) {
                return Reply {
                    file: None,
                    status: 304,
                    headers: vec![("ETag", etag), ("Cache-Control", cache_control)],
                    body: Vec::new(),
                };
            }
            let Found {
                bytes: body,
                file,
                viewer,
            } = found;
            let len: u64 = body.iter().map(|b| b.len() as u64).sum();
            // Ranges as files have them (players that seek or probe, AVPlayer).
            let range = sluice_http::files::requested_range(req, len, &etag, None);
            // A fetch from the start counts a viewer (see `crate::hls::audience`).
            let from_start = range
                .as_ref()
                .is_none_or(|r| r.as_ref().is_some_and(|r| r.start == 0));
            if let (Some((fmp4, msn)), Method::Get, true) = (viewer, req.method, from_start) {
                hls.fetched(fmp4, msn);
            }
            let mut headers = vec![
                ("Content-Type", kind.to_string()),
                ("Cache-Control", cache_control),
                ("ETag", etag),
                ("Accept-Ranges", "bytes".to_string()),
            ];
            match range {
                None => Reply {
                    file: file.map(|f| (f, 0..len)),
                    status: 200,
                    headers,
                    body,
                },
                Some(Some(range)) => {
                    let last = range.end - 1;
                    headers.push((
                        "Content-Range",
                        format!("bytes {}-{last}/{len}", range.start),
                    ));
                    Reply {
                        body: super::reply::slice(&body, range.clone()),
                        file: file.map(|f| (f, range)),
                        status: 206,
                        headers,
                    }
                }
                Some(None) => {
                    headers.push(("Content-Range", format!("bytes */{len}")));
                    Reply {
                        file: None,
                        status: 416,
                        headers,
                        body: Vec::new(),
                    }
                }
            }
        }
        Answer::NotFound => Reply::text(404, "not found\n"),
        Answer::BadRequest(why) => Reply::text(400, why),
        Answer::Unavailable => Reply::text(503, "not produced in time\n"),
    }
}

/// A refused key request: 403, without the Basic challenge of a 401 (a player would
/// not answer it, a browser would prompt the viewer), and not stored.
fn key_refused(mut reply: Reply) -> Reply {
    if reply.status == 401 {
        reply.status = 403;
        reply.headers.retain(|(n, _)| *n != "WWW-Authenticate");
    }
    reply.headers.retain(|(n, _)| *n != "Cache-Control");
    reply
        .headers
        .push(("Cache-Control", Caching::NoStore.header(true)));
    reply
}

/// The key of `period` of the stream `key`, its request authorized already: its 16
/// bytes, or 404 (no such stream, not encrypted, another tag, no kept segment uses
/// it). Never stored by caches.
fn key_reply(ctx: &crate::ctx::Ctx, key: &str, tag: &str, period: u64) -> Reply {
    let found = ctx
        .hub()
        .find(key)
        .and_then(|stream| crate::hls::want(&stream)?.key(tag, period));
    let mut reply = match found {
        Some(bytes) => Reply::new(
            200,
            vec![("Content-Type", "application/octet-stream".to_string())],
            vec![Bytes::copy_from_slice(&bytes)],
        ),
        None => Reply::text(404, "no such key\n"),
    };
    reply
        .headers
        .push(("Cache-Control", Caching::NoStore.header(true)));
    reply
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
    /// A fetch that counts a viewer (see `crate::hls::audience`): a whole segment or
    /// a first part, of the fMP4 variant (`true`) or the TS one, and its msn.
    viewer: Option<(bool, u64)>,
}

/// The bytes of a segment or part if they exist now; whether to wait otherwise. Live
/// segments are asked for by name (their start on the timeline), found by msn.
fn lookup(view: &HlsView, what: HlsPath<'_>) -> Result<Option<Found>, ()> {
    let fmp4 = matches!(what, HlsPath::Segment(..) | HlsPath::Part(..));
    let segment = |v: &VariantView, msn: u64| {
        v.segments.get(&msn).map(|bytes| Found {
            bytes: bytes.clone(),
            file: v.files.get(&msn).cloned(),
            viewer: Some((fmp4, msn)),
        })
    };
    let (state, found) = match what {
        HlsPath::Ts(_, name) | HlsPath::Segment(_, name) => {
            let v = variant(view, fmp4);
            let msn = v.and_then(|v| Some((v, v.timeline.msn_named(name)?)));
            (
                msn.map(|(v, msn)| v.timeline.segment_state(msn)),
                msn.and_then(|(v, msn)| segment(v, msn)),
            )
        }
        HlsPath::Part(_, name, part) => {
            let v = variant(view, true);
            let msn = v.and_then(|v| Some((v, v.timeline.msn_named(name)?)));
            (
                msn.map(|(v, msn)| v.timeline.part_state(msn, part)),
                msn.and_then(|(v, msn)| Some((msn, v.parts.get(&(msn, part))?)))
                    .map(|(msn, b)| Found {
                        bytes: vec![b.clone()],
                        file: None,
                        viewer: (part == 0).then_some((true, msn)),
                    }),
            )
        }
        HlsPath::Init(_, id) => {
            // None yet: it may be on its way. Another one: gone (old tracks) or never.
            return match variant(view, true).and_then(|v| Some((v.init.clone()?, v.init_id))) {
                None => Ok(None),
                Some((bytes, have)) if id == Some(have) => Ok(Some(Found {
                    bytes: vec![bytes],
                    file: None,
                    viewer: None,
                })),
                Some(_) => Err(()),
            };
        }
        HlsPath::TsPlaylist | HlsPath::Fmp4Playlist | HlsPath::Key(..) => return Err(()),
    };
    match (found, state) {
        (Some(bytes), _) => Ok(Some(bytes)),
        (None, Some(Availability::Pending)) => Ok(None),
        _ => Err(()),
    }
}

async fn answer(hls: &HlsStream, req: &Request, what: HlsPath<'_>) -> Answer {
    if let HlsPath::Ts(tag, _)
    | HlsPath::Init(tag, _)
    | HlsPath::Segment(tag, _)
    | HlsPath::Part(tag, _, _) = what
    {
        if !hls.view().accepts(tag) {
            return Answer::NotFound;
        }
    }
    let limit = |view: &HlsView, fmp4: bool| {
        Duration::from_millis(variant(view, fmp4).map_or(6000, |v| v.timeline.block_limit_ms()))
    };
    match what {
        HlsPath::TsPlaylist => match &hls.view().ts {
            Some(v) => Answer::Playlist(v.playlist.clone(), playlist_max_age(&v.timeline)),
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
                let max_age = match request {
                    Some(_) => blocking_max_age(&v.timeline),
                    None => playlist_max_age(&v.timeline),
                };
                match request.map(|r| v.timeline.readiness(r)) {
                    None | Some(Readiness::Ready) => Some(Ok((v.playlist.clone(), max_age))),
                    Some(Readiness::TooFarAhead) => Some(Err(())),
                    Some(Readiness::Wait) => None,
                }
            })
            .await;
            match result {
                Some(Ok((p, max_age))) => Answer::Playlist(p, max_age),
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
            // By this server's tag: the bytes are its own, whichever tag was asked.
            let tag = hls.view().tag.clone();
            let etag = match what {
                HlsPath::Ts(_, n) | HlsPath::Segment(_, n) => format!("\"{tag}-{n}\""),
                HlsPath::Part(_, n, p) => format!("\"{tag}-{n}.{p}\""),
                HlsPath::Init(_, id) => format!("\"{tag}-init-{:x}\"", id.unwrap_or(0)),
                _ => format!("\"{tag}\""),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_ids() {
        assert_eq!(HlsPath::key("ab-3"), Some(HlsPath::Key("ab", 3)));
        for bad in [
            "ab",
            "-3",
            "ab-",
            "xy-3",
            "ab-3.key",
            "ab-+3",
            "12345678901234567-1",
        ] {
            assert_eq!(HlsPath::key(bad), None, "{bad}");
        }
    }

    #[test]
    fn refused_keys_are_403_without_a_challenge_and_not_stored() {
        let mut refused = Reply::text(401, "no\n");
        refused
            .headers
            .push(("WWW-Authenticate", "Basic realm=\"sluice\"".into()));
        let reply = key_refused(refused);
        assert_eq!(reply.status, 403);
        assert!(reply.headers.iter().all(|(n, _)| *n != "WWW-Authenticate"));
        assert!(reply
            .headers
            .contains(&("Cache-Control", "no-store".to_string())));
        assert_eq!(key_refused(Reply::text(403, "no\n")).status, 403);
    }

    #[test]
    fn cache_control_values() {
        assert_eq!(
            Caching::Immutable.header(false),
            format!("public, max-age={IMMUTABLE_MAX_AGE_S}, immutable")
        );
        assert_eq!(
            Caching::Immutable.header(true),
            format!("private, max-age={IMMUTABLE_MAX_AGE_S}, immutable")
        );
        assert_eq!(Caching::For(0).header(false), "public, max-age=0");
        assert_eq!(Caching::For(12).header(true), "private, max-age=12");
        assert_eq!(
            Caching::NotFound.header(false),
            format!("public, max-age={NOT_FOUND_MAX_AGE_S}")
        );
        assert_eq!(Caching::NoStore.header(true), "no-store");
    }
}
