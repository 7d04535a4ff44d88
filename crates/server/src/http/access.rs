//! Authorization of HTTP requests (HTTP-FLV, WS-FLV, files, HLS) through the one
//! `auth::Auth`: credentials from `Authorization: Basic` or the query; HLS viewers
//! carry a token from their playlist in a cookie (or `?sluice_auth=`).

use super::reply::Reply;
use crate::auth::Action;
use crate::ctx::admit::{Ask, Refusal};
use crate::ctx::Ctx;
use crate::vod::recorded::RecordedError;
use bytes::Bytes;
use sha2::{Digest, Sha256};
use sluice_archive::range::split_key;
use sluice_http::Request;
use std::net::IpAddr;

/// `None` when `req` may do what `route` asks, else the answer that refuses it:
/// playing a stream over HTTP-FLV, WS-FLV, HTTP-TS or HTTP-fMP4 (and WS-fMP4) needs the
/// read permission on its key, downloading or listing files on their path. HLS checks its own way (its viewers'
/// tokens, see `hls::reply`); other routes need nothing.
pub(super) async fn route_denied(
    ctx: &Ctx,
    req: &Request,
    route: &super::router::Route<'_>,
    peer: IpAddr,
    id: u64,
) -> Option<Reply> {
    use super::playback::Playback;
    use super::router::Route;
    use sluice_http::Method;
    let path = match (req.method, route) {
        // A recorded range is read on its stream's key, as its HLS is.
        (Method::Get | Method::Head, Route::Live(key, _)) => {
            split_key(key).map_or(*key, |k| k.0).to_string()
        }
        (Method::Get | Method::Head, Route::Snapshot(key)) => key.to_string(),
        // A download of recordings by range; their HLS checks as live HLS does.
        (Method::Get | Method::Head, Route::Recorded(key, _, Playback::Download)) => {
            key.to_string()
        }
        (Method::Get | Method::Head | Method::Propfind, Route::Files(rest)) => {
            sluice_http::files::relative_path(rest).unwrap_or_default()
        }
        _ => return None,
    };
    read_denied(ctx, req, &path, "http", peer, id).await
}

/// `None` when `req` may read `path`, else the answer that refuses it. `id`: the
/// connection's, or 0 outside one (HLS, HTTP/2).
pub(crate) async fn read_denied(
    ctx: &Ctx,
    req: &Request,
    path: &str,
    protocol: &'static str,
    peer: IpAddr,
    id: u64,
) -> Option<Reply> {
    action_denied(ctx, req, Action::Read, path, protocol, peer, id).await
}

/// `None` when `req` may do `action` on `path`, else the answer that refuses it.
pub(crate) async fn action_denied(
    ctx: &Ctx,
    req: &Request,
    action: Action,
    path: &str,
    protocol: &'static str,
    peer: IpAddr,
    id: u64,
) -> Option<Reply> {
    let ask = Ask::new(protocol, path, id, peer).http(req.header("authorization"), &req.query);
    ctx.check(&ask, action).await.err().map(|r| refused(&r))
}

/// How HTTP answers a refusal: 401 with a Basic challenge when credentials are missing
/// or wrong, 403 when they do not permit it (with the denial's reason), 404 for what
/// is neither live nor a file, 409 for a stream published already, 503 for a limit.
pub(crate) fn refused(refusal: &Refusal) -> Reply {
    let mut headers = vec![("Content-Type", "text/plain".to_string())];
    let status = match refusal {
        Refusal::Unauthorized(_) => {
            headers.push(("WWW-Authenticate", "Basic realm=\"sluice\"".into()));
            401
        }
        Refusal::Forbidden(_) => 403,
        Refusal::NotFound(_) | Refusal::Range(RecordedError::Nothing(_)) => 404,
        Refusal::Range(RecordedError::BadRange(_)) => 400,
        Refusal::InUse(_) => 409,
        Refusal::Limit(_) => 503,
    };
    Reply {
        status,
        headers,
        body: vec![Bytes::from(format!("{refusal}\n"))],
        file: None,
    }
}

/// The cookie that carries an HLS viewer's token for stream `key` (one per stream, so
/// a viewer of two streams keeps both).
pub(crate) fn viewer_cookie(key: &str) -> String {
    let hash = Sha256::digest(key.as_bytes());
    format!(
        "sluice_auth_{:02x}{:02x}{:02x}{:02x}",
        hash[0], hash[1], hash[2], hash[3]
    )
}

/// The viewer token a request shows for `key`: `?sluice_auth=` or its cookie.
pub(crate) fn viewer_token<'a>(req: &'a Request, key: &str) -> Option<&'a str> {
    let from_query = req
        .query
        .split('&')
        .find_map(|p| p.strip_prefix("sluice_auth="));
    if from_query.is_some() {
        return from_query;
    }
    let name = viewer_cookie(key);
    req.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("cookie"))
        .flat_map(|(_, v)| v.split(';'))
        .find_map(|c| {
            let (n, v) = c.trim().split_once('=')?;
            (n == name).then_some(v)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(query: &str, cookie: Option<&str>) -> Request {
        Request {
            method: sluice_http::Method::Get,
            path: "/live/cam.m3u8".into(),
            query: query.into(),
            http11: true,
            headers: cookie
                .map(|c| vec![("Cookie".to_string(), c.to_string())])
                .unwrap_or_default(),
            head_len: 0,
            body: Bytes::new(),
        }
    }

    #[test]
    fn tokens_from_query_or_the_streams_cookie() {
        let name = viewer_cookie("live/cam");
        assert_ne!(name, viewer_cookie("live/other"));
        assert_eq!(
            viewer_token(&req("a=1&sluice_auth=T", None), "live/cam"),
            Some("T")
        );
        let cookie = format!("x=1; {name}=C; y=2");
        assert_eq!(viewer_token(&req("", Some(&cookie)), "live/cam"), Some("C"));
        assert_eq!(viewer_token(&req("", Some(&cookie)), "live/other"), None);
    }
}
