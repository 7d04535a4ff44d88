//! WHIP's sessions (the IETF's WebRTC-HTTP ingestion protocol): a browser's or
//! encoder's SDP offer to publish a stream is answered like a player's (`whep`); the
//! stream is published when ICE and DTLS are done, on the worker its datagrams reach.
//! H.264 and Opus are accepted. The HTTP side is `http::whip`.

use super::registry::{Job, Registry};
use super::whep::{answer_and_park, Answered, Refused};
use crate::ctx::Ctx;
use sluice_webrtc::Role;
use std::net::SocketAddr;
use std::sync::Arc;

/// Answers an offer to publish `key` (already authorized).
pub fn publish(
    ctx: &Ctx,
    registry: &Arc<Registry>,
    offer: &str,
    key: &str,
    client: SocketAddr,
) -> Result<Answered, Refused> {
    if ctx.hub().find(key).is_some() && !ctx.hub().config.policy.of(key).takeover {
        return Err(Refused::Published(key.to_string()));
    }
    // Refused here rather than after ICE and DTLS, where the client would only see
    // its session go quiet.
    ctx.hub()
        .limits
        .has_publisher_room(client.ip())
        .map_err(Refused::Limit)?;
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
