//! WHEP's HTTP side (the IETF's WebRTC-HTTP egress protocol): `POST /app/stream/whep`
//! with an SDP offer is answered `201 Created` with the SDP answer and a `Location` for
//! the session; `DELETE` of that location ends it (WHIP's too). `PATCH` (trickle ICE)
//! is answered 405, as the spec allows: the answer carries every candidate. Reading
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
                Refused::UdpSessions | Refused::Pending => 503,
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

/// Ends the session behind `resource` (WHEP or WHIP).
pub(super) async fn delete(ctx: &Ctx, registry: &Registry, resource: &str) -> Reply {
    match crate::webrtc::whep::end(ctx, registry, resource).await {
        Ok(()) => Reply::empty(200),
        Err(_) => text(404, "no such WHEP session"),
    }
}
