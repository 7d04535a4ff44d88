//! WHIP (the IETF's WebRTC-HTTP ingestion protocol): `POST /app/stream/whip` with a
//! browser's or encoder's SDP offer is answered `201 Created` with the answer and a
//! `Location`; `DELETE` of it ends the publish. H.264 and Opus are accepted. The
//! stream is published when ICE and DTLS are done, on the worker its datagrams reach.
//! Publishing needs the publish permission (`auth`), as for every protocol.

use super::registry::{Job, Registry, TooManyPending};
use super::whep::{created, new_resource, sdp_body, text};
use crate::auth::{Action, Credentials};
use crate::ctx::Ctx;
use crate::http::hls::Reply;
use sluice_http::Request;
use sluice_webrtc::{Peer, PeerConfig, Role};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

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
    let creds = Credentials::from_http(req.header("authorization"), &req.query);
    let asked = crate::auth::Request {
        action: Action::Publish,
        path: key,
        protocol: "webrtc",
        id: 0,
        credentials: &creds,
        peer: client.ip(),
        query: &req.query,
    };
    if let Err(denial) = ctx.authorize(&asked).await {
        return crate::http::access::denied(denial);
    }
    if ctx.hub.find(key).is_some() && !ctx.hub.config.apps.for_stream(key).takeover {
        return text(409, format!("stream {key} is already being published"));
    }
    let Ok(slot) = ctx.hub.limits.udp_session(client.ip()) else {
        return text(503, "too many UDP sessions");
    };
    let settings = PeerConfig {
        candidates: registry.candidates.clone(),
    };
    let answer = match Peer::answer(offer, Role::Publish, &settings, Instant::now()) {
        Ok(a) => a,
        Err(e) => {
            tracing::info!(stream = %key, "whip: offer refused: {e}");
            return text(400, e.to_string());
        }
    };
    let (video, audio) = answer.peer.receives();
    let (id, resource) = new_resource(ctx);
    let location = format!("/{key}/whip/{resource}");
    let job = Job::Publish {
        key: key.to_owned(),
        ip: client.ip(),
    };
    let parked = registry.park(answer.ufrag, answer.peer, job, id, resource, slot);
    if parked == Err(TooManyPending) {
        return text(503, "too many WebRTC sessions starting");
    }
    tracing::info!(stream = %key, id, video, audio, "whip: answered");
    created(answer.sdp, location)
}
