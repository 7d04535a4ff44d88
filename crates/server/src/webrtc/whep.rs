//! WHEP (the IETF's WebRTC-HTTP egress protocol): `POST /app/stream/whep` with an SDP
//! offer is answered `201 Created` with the SDP answer and a `Location` for the
//! session; `DELETE` of that location ends it. The answer carries every host
//! candidate (ICE-lite), so trickle ICE is not needed: `PATCH` is answered 405, as the
//! spec allows. Reading needs the same permission as every other player (`auth`).

use super::registry::{Job, Registry, TooManyPending};
use crate::core::format::{Format, FormatId};
use crate::core::transcode;
use crate::ctx::Ctx;
use crate::http::reply::Reply;
use bytes::Bytes;
use sluice_http::Request;
use sluice_media::TrackConfig;
use sluice_webrtc::{Offered, Peer, PeerConfig, Role, VideoCodec};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A plain-text answer.
pub(crate) fn text(status: u16, body: impl Into<String>) -> Reply {
    Reply {
        status,
        headers: vec![("Content-Type", "text/plain".into())],
        body: vec![Bytes::from(body.into() + "\n")],
        file: None,
    }
}

/// What the stream has for WebRTC now, and whether its audio is to be transcoded.
fn offered(ctx: &Ctx, stream: &crate::core::hub::Stream) -> (Offered, bool) {
    let [video, audio] = stream.lock().tracks();
    let video = video.and_then(|t| match t.config {
        TrackConfig::H264(_) => Some(VideoCodec::H264),
        TrackConfig::H265(_) => Some(VideoCodec::H265),
        TrackConfig::Av1 { .. } => Some(VideoCodec::Av1),
        TrackConfig::Vp9 { .. } => Some(VideoCodec::Vp9),
        TrackConfig::Vp8 { .. } => Some(VideoCodec::Vp8),
        _ => None,
    });
    let transcode = ctx.config.webrtc.transcode_audio && transcode::AVAILABLE;
    let (opus, transcoded) = match audio.as_deref().map(|t| &t.config) {
        Some(TrackConfig::Opus(_)) => (true, false),
        Some(TrackConfig::Aac(_)) if transcode => (true, true),
        Some(other) => {
            let why = if matches!(other, TrackConfig::Aac(_)) {
                "transcoding is off (webrtc.transcode_audio, or a build without the \
                 `transcode` feature)"
            } else {
                "WebRTC carries Opus, and only AAC is transcoded to it"
            };
            tracing::info!(
                stream = %stream.key,
                codec = ?other,
                "webrtc: playing video only: {why}"
            );
            (false, false)
        }
        None => (false, false),
    };
    (Offered { video, opus }, transcoded)
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

/// A new session's id and the secret part of its resource URL.
fn new_resource(ctx: &Ctx) -> (u64, String) {
    let id = ctx.hub.next_id();
    (id, format!("{id}-{:016x}", rand::random::<u64>()))
}

/// `201 Created` with the SDP answer and the session's `Location`.
fn created(sdp: String, location: String) -> Reply {
    Reply {
        status: 201,
        headers: vec![
            ("Content-Type", "application/sdp".into()),
            ("Location", location),
            ("Access-Control-Expose-Headers", "Location".into()),
        ],
        body: vec![Bytes::from(sdp)],
        file: None,
    }
}

/// Answers an offer to play `key`.
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
    if let Some(denied) =
        crate::http::access::read_denied(ctx, req, key, "webrtc", client.ip(), 0).await
    {
        return denied;
    }
    let Some(stream) = ctx.find_live(key).await else {
        return text(404, format!("stream {key} is not live"));
    };
    let wait = Duration::from_millis(ctx.config.players.wait_ms);
    let deadline = tokio::time::Instant::now() + wait;
    // Its codecs are known from its first keyframe on.
    stream.wait_start(deadline).await;
    let (offered, transcoded) = offered(ctx, &stream);
    if stream.b_frames.load(std::sync::atomic::Ordering::Relaxed) {
        tracing::info!(
            stream = %key,
            "whep: the stream has B-frames, which WebRTC players do not reorder"
        );
    }
    let role = Role::Play(offered);
    answer_and_park(ctx, registry, offer, role, key, "whep", client, |peer| {
        let (video, audio) = peer.sends();
        let opus = (audio && transcoded)
            .then(|| stream.want_transcoded())
            .flatten();
        let format = Format {
            id: FormatId::RTP,
            video,
            audio: audio && !transcoded,
            transcoded: opus.is_some(),
        };
        let job = Job::Play {
            stream,
            format,
            opus,
        };
        (job, video, audio)
    })
}

/// Answers `offer` for `role` and parks the session until its first binding request
/// (see `registry`): `201` with the answer and `Location: /{key}/{kind}/{resource}`,
/// or the error that refuses it. `job` says what the session does, given the answered
/// peer, and whether it carries video and audio.
#[allow(clippy::too_many_arguments)]
pub(super) fn answer_and_park(
    ctx: &Ctx,
    registry: &Registry,
    offer: &str,
    role: Role,
    key: &str,
    kind: &'static str,
    client: SocketAddr,
    job: impl FnOnce(&Peer) -> (Job, bool, bool),
) -> Reply {
    let Ok(slot) = ctx.hub.limits.udp_session(client.ip()) else {
        return text(503, "too many UDP sessions");
    };
    let settings = PeerConfig {
        candidates: registry.candidates.clone(),
        tcp_candidates: registry.tcp_candidates.clone(),
    };
    let answer = match Peer::answer(offer, role, &settings, Instant::now()) {
        Ok(a) => a,
        Err(e) => {
            tracing::info!(stream = %key, "{kind}: offer refused: {e}");
            return text(400, e.to_string());
        }
    };
    let (job, video, audio) = job(&answer.peer);
    let (id, resource) = new_resource(ctx);
    let location = format!("/{key}/{kind}/{resource}");
    let parked = registry.park(answer.ufrag, answer.peer, job, id, resource, slot);
    if parked == Err(TooManyPending) {
        return text(503, "too many WebRTC sessions starting");
    }
    tracing::info!(stream = %key, id, video, audio, "{kind}: answered");
    created(answer.sdp, location)
}

/// Ends the session behind `resource` (WHEP or WHIP).
pub(crate) async fn delete(ctx: &Ctx, registry: &Registry, resource: &str) -> Reply {
    let Some(id) = registry.resource(resource) else {
        return text(404, "no such WHEP session");
    };
    registry.forget(resource);
    // Running on whichever worker its datagrams reach: kicked there.
    ctx.ops.kick(id).await;
    Reply {
        status: 200,
        headers: Vec::new(),
        body: Vec::new(),
        file: None,
    }
}
