//! WHIP (the IETF's WebRTC-HTTP ingestion protocol): `POST /app/stream/whip` with a
//! browser's or encoder's SDP offer is answered `201 Created` with the answer and a
//! `Location`; `DELETE` of it ends the publish. H.264 and Opus are accepted. The
//! stream is published when ICE and DTLS are done, on the worker its datagrams reach.
//! Publishing needs the publish permission (`auth`), as for every protocol.

use super::registry::{Job, Registry};
use super::whep::{answer_and_park, sdp_body, text};
use crate::auth::Action;
use crate::ctx::Ctx;
use crate::http::reply::Reply;
use sluice_http::Request;
use sluice_webrtc::Role;
use std::net::SocketAddr;
use std::sync::Arc;

/// Answers an offer to publish `key`.
pub(crate) async fn post(
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
    let denied = crate::http::access::action_denied(
        ctx,
        req,
        Action::Publish,
        key,
        "webrtc",
        client.ip(),
        0,
    );
    if let Some(reply) = denied.await {
        return reply;
    }
    if ctx.hub.find(key).is_some() && !ctx.hub.config.policy.of(key).takeover {
        return text(409, format!("stream {key} is already being published"));
    }
    answer_and_park(
        ctx,
        registry,
        offer,
        Role::Publish,
        key,
        "whip",
        client,
        |peer| {
            let (video, audio) = peer.receives();
            let job = Job::Publish {
                key: key.to_owned(),
                ip: client.ip(),
            };
            (job, video, audio)
        },
    )
}
