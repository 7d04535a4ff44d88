//! WHEP's sessions (the IETF's WebRTC-HTTP egress protocol): an SDP offer to play a
//! stream is answered and its session parked until ICE starts; a session's resource
//! ends it. The answer carries every host candidate, so trickle ICE is not
//! needed. The HTTP side (content type, authorization, status codes) is `http::whep`.

use super::registry::{Job, Registry, TooManyPending};
use crate::core::format::{Format, FormatId};
use crate::ctx::admit::{Ask, Source};
use crate::ctx::Ctx;
use sluice_media::TrackConfig;
use sluice_webrtc::{Offered, Peer, PeerConfig, PeerError, Role, VideoCodec};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An answered offer: the SDP answer, and the session's resource path
/// (`/{key}/{kind}/{resource}`), which ends it.
#[derive(Debug)]
pub struct Answered {
    pub sdp: String,
    pub location: String,
}

/// Why an offer was not answered.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("stream {0} is not live")]
    NotLive(String),
    #[error("stream {0} is already being published")]
    Published(String),
    #[error("too many UDP sessions")]
    UdpSessions,
    #[error("limit reached: {}", .0.name())]
    Limit(crate::core::limits::Limit),
    #[error("too many WebRTC sessions starting")]
    Pending,
    #[error(transparent)]
    Offer(#[from] PeerError),
}

/// No session has the resource a request named.
#[derive(Debug, thiserror::Error)]
#[error("no such WebRTC session")]
pub struct NoSuchSession;

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
    let transcode = ctx.config().webrtc.transcode_audio && stream.derives();
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

/// A new session's id and the secret part of its resource URL.
fn new_resource(ctx: &Ctx) -> (u64, String) {
    let id = ctx.hub().next_id();
    (id, format!("{id}-{:016x}", rand::random::<u64>()))
}

/// Answers an offer to play `key` (already authorized).
pub async fn play(
    ctx: &Ctx,
    registry: &Arc<Registry>,
    offer: &str,
    key: &str,
    client: SocketAddr,
) -> Result<Answered, Refused> {
    // WebRTC plays live streams only (no file on demand, no recorded range).
    let ask = Ask::new("webrtc", key, 0, client.ip()).checked();
    let stream = match ctx.admit_play(&ask, None).await {
        Ok(Source::Live(stream) | Source::Pulled(stream)) => stream,
        Ok(Source::File(_) | Source::Recorded { .. }) | Err(_) => {
            return Err(Refused::NotLive(key.to_string()))
        }
    };
    let wait = Duration::from_millis(ctx.config().players.wait_ms);
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
/// (see `registry`): the answer and the resource path `/{key}/{kind}/{resource}`, or
/// why it is refused. `job` says what the session does, given the answered
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
) -> Result<Answered, Refused> {
    let Ok(slot) = ctx.hub().limits.udp_session(client.ip()) else {
        return Err(Refused::UdpSessions);
    };
    let settings = PeerConfig {
        candidates: registry.candidates.clone(),
        tcp_candidates: registry.tcp_candidates.clone(),
    };
    let answer = match Peer::answer(offer, role, &settings, Instant::now()) {
        Ok(a) => a,
        Err(e) => {
            tracing::info!(stream = %key, "{kind}: offer refused: {e}");
            return Err(e.into());
        }
    };
    let (job, video, audio) = job(&answer.peer);
    let (id, resource) = new_resource(ctx);
    let location = format!("/{key}/{kind}/{resource}");
    let parked = registry.park(answer.ufrag, answer.peer, job, id, resource, slot);
    if parked == Err(TooManyPending) {
        return Err(Refused::Pending);
    }
    tracing::info!(stream = %key, id, video, audio, "{kind}: answered");
    Ok(Answered {
        sdp: answer.sdp,
        location,
    })
}

/// Ends the session behind `resource` (WHEP or WHIP).
pub async fn end(ctx: &Ctx, registry: &Registry, resource: &str) -> Result<(), NoSuchSession> {
    let id = registry.resource(resource).ok_or(NoSuchSession)?;
    registry.forget(resource);
    // Running on whichever worker its datagrams reach: kicked there.
    ctx.ops().kick(id).await;
    Ok(())
}
