//! WHIP's HTTP side (the IETF's WebRTC-HTTP ingestion protocol): `POST
//! /app/stream/whip` with a browser's or encoder's SDP offer is answered `201 Created`
//! with the answer and a `Location`; `DELETE` of it ends the publish (`whep::delete`).
//! Publishing needs the publish permission (`auth`), as for every protocol. The
//! sessions themselves are `webrtc::whip`'s.

use super::access;
use super::reply::Reply;
use super::whep::{answered, sdp_body};
use crate::auth::Action;
use crate::ctx::Ctx;
use crate::webrtc::Registry;
use sluice_http::Request;
use std::net::SocketAddr;
use std::sync::Arc;

/// Answers an offer to publish `key`.
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
    let denied = access::action_denied(ctx, req, Action::Publish, key, "webrtc", client.ip(), 0);
    if let Some(reply) = denied.await {
        return reply;
    }
    answered(crate::webrtc::whip::publish(
        ctx, registry, offer, key, client,
    ))
}
