//! WHEP's HTTP side (the IETF's WebRTC-HTTP egress protocol): `POST /app/stream/whep`
//! with an SDP offer is answered `201 Created` with the SDP answer and a `Location` for
//! the session; `DELETE` of that location ends it (WHIP's too). `PATCH` with
//! `If-Match: *` restarts the session's ICE (RFC 9725 §4.3.1: new credentials, `200`
//! with the server's new ones); a trickle `PATCH` (candidates, no restart) is answered
//! 422, as RFC 9725 §4.3.1 has a session with restarts but no trickle ICE answer it
//! (501 is for a server without PATCH at all): the answer carries every server
//! candidate, and the server checks none the client names. Reading
//! needs the same permission as every other player (`auth`). The sessions themselves
//! are `webrtc::whep`'s.

use super::access;
use super::reply::Reply;
use crate::ctx::Ctx;
use crate::webrtc::whep::{Answered, Refused};
use crate::webrtc::Registry;
use bytes::Bytes;
use sluice_http::Request;
use std::net::SocketAddr;
use std::sync::Arc;

/// A plain-text answer.
pub(super) fn text(status: u16, body: impl Into<String>) -> Reply {
    Reply::new(
        status,
        vec![("Content-Type", "text/plain".into())],
        vec![Bytes::from(body.into() + "\n")],
    )
}

/// The SDP offer of `req`, or the answer that refuses it.
pub(super) fn sdp_body(req: &Request) -> Result<&str, Reply> {
    let sdp_type = req
        .header("content-type")
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/sdp"));
    if !sdp_type {
        return Err(text(415, "an offer is Content-Type: application/sdp"));
    }
    std::str::from_utf8(&req.body).map_err(|_| text(400, "the offer is not UTF-8"))
}

/// What an offer gets: `201 Created` with the SDP answer and the session's
/// `Location`, or the status that says why not.
pub(super) fn answered(result: Result<Answered, Refused>) -> Reply {
    match result {
        Ok(a) => Reply::new(
            201,
            vec![
                ("Content-Type", "application/sdp".into()),
                ("Location", a.location),
                ("Access-Control-Expose-Headers", "Location".into()),
            ],
            vec![Bytes::from(a.sdp)],
        ),
        Err(refused) => {
            let status = match refused {
                Refused::NotLive(_) => 404,
                Refused::Published(_) => 409,
                Refused::UdpSessions | Refused::Pending | Refused::Limit(_) => 503,
                Refused::Offer(_) => 400,
            };
            text(status, refused.to_string())
        }
    }
}

/// Answers an offer to play `key`.
pub(super) async fn post(
    ctx: &Ctx,
    registry: &Arc<Registry>,
    req: &Request,
    key: &str,
    client: SocketAddr,
) -> Reply {
    let offer = match sdp_body(req) {
        Ok(offer) => offer,
        Err(reply) => return reply,
    };
    if let Some(denied) = access::read_denied(ctx, req, key, "webrtc", client.ip(), 0).await {
        return denied;
    }
    answered(crate::webrtc::whep::play(ctx, registry, offer, key, client).await)
}

/// Restarts the ICE of the session behind `resource` (WHEP or WHIP): `200` with the
/// server's new credentials in an SDP fragment, or the status that says why not.
/// Whichever worker takes the request: the new credentials wait in the registry for
/// the session's first check with them, on the worker that runs it.
pub(super) fn patch(registry: &Registry, req: &Request, resource: &str) -> Reply {
    use sluice_webrtc::restart::{self, FragmentError};
    let frag_type = req.header("content-type").is_some_and(|t| {
        t.trim()
            .eq_ignore_ascii_case("application/trickle-ice-sdpfrag")
    });
    if !frag_type {
        return text(
            415,
            "a PATCH is Content-Type: application/trickle-ice-sdpfrag",
        );
    }
    if registry.resource(resource).is_none() {
        return text(404, "no such WHEP session");
    }
    // An ICE restart is a PATCH with `If-Match: *`; one with an entity tag, or none,
    // trickles candidates.
    if req.header("if-match").map(str::trim) != Some("*") {
        return text(
            422,
            "trickle ICE is not supported (the answer has every candidate)",
        );
    }
    let Ok(fragment) = std::str::from_utf8(&req.body) else {
        return text(400, "the fragment is not UTF-8");
    };
    let theirs = match restart::credentials(fragment) {
        Ok(c) => c,
        Err(FragmentError::TooLarge) => return text(413, FragmentError::TooLarge.to_string()),
        Err(e) => return text(400, e.to_string()),
    };
    let Some(ours) = restart::IceCredentials::random() else {
        return text(500, "no random credentials");
    };
    if !registry.restart(resource, ours.clone(), theirs) {
        return text(404, "no such WHEP session");
    }
    let body = restart::answer(&ours, &registry.candidates);
    Reply::new(
        200,
        vec![
            ("Content-Type", "application/trickle-ice-sdpfrag".into()),
            ("ETag", format!("\"{}\"", ours.ufrag)),
        ],
        vec![Bytes::from(body)],
    )
}

/// Ends the session behind `resource` (WHEP or WHIP).
pub(super) async fn delete(ctx: &Ctx, registry: &Registry, resource: &str) -> Reply {
    match crate::webrtc::whep::end(ctx, registry, resource).await {
        Ok(()) => Reply::empty(200),
        Err(_) => text(404, "no such WHEP session"),
    }
}
